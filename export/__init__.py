"""Exporting corpus tasks to other harnesses: Parquet / Hugging Face, fev, LLM prompts, GluonTS.

``whatif export CORPUS --format FORMAT --out DIR`` and ``export_corpus`` write one folder per
export. Each format is one module with a ``write`` function of the same signature (see
``whatif_bench.export.formats``); third-party clients are imported lazily.
"""

from typing import TYPE_CHECKING

from whatif_bench._lazy import lazy_exports

if TYPE_CHECKING:
    from whatif_bench.export.api import ExportError, export_corpus

# Imported on first use (see whatif_bench._lazy): the command line reads this package's
# argument parsing without loading numpy, numba, h5py or pandas.
_EXPORTS = {
    "ExportError": "whatif_bench.export.api",
    "export_corpus": "whatif_bench.export.api",
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

__all__ = ["ExportError", "export_corpus"]
