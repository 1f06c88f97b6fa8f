"""The generator: sweeps the five axes over every target and writes verified task pairs.

``whatif generate`` builds the corpus; ``Corpus`` reads it::

    from whatif_bench.generator import Corpus
    corpus = Corpus("whatif-corpus.h5").filter(simulator="sumo", future="novel", K=3)
    task = corpus["sumo/flow_loop_e_0_near/K3-C2-L128-Emax/novel"]
"""

from typing import TYPE_CHECKING

from whatif_bench._lazy import lazy_exports

if TYPE_CHECKING:
    from whatif_bench.corpus import Corpus, Task
    from whatif_bench.generator.sweep import generate
    from whatif_bench.generator.types import GenerationConfig

# Imported on first use (see whatif_bench._lazy): the command line reads this package's
# argument parsing without loading numpy, numba, h5py or pandas.
_EXPORTS = {
    "Corpus": "whatif_bench.corpus",
    "Task": "whatif_bench.corpus",
    "GenerationConfig": "whatif_bench.generator.types",
    "generate": "whatif_bench.generator.sweep",
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

__all__ = ["Corpus", "GenerationConfig", "Task", "generate"]
