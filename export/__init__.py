"""Exporting corpus tasks to other harnesses: Parquet / Hugging Face, fev, LLM prompts, GluonTS.

``whatif export CORPUS --format FORMAT --out DIR`` and ``export_corpus`` write one folder per
export. Each format is one module with a ``write`` function of the same signature (see
``whatif_bench.export.formats``); third-party clients are imported lazily.
"""

from whatif_bench.export.api import ExportError, export_corpus

__all__ = ["ExportError", "export_corpus"]
