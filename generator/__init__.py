"""The generator: sweeps the five axes over every target and writes verified task pairs.

``whatif generate`` builds the corpus; ``Corpus`` reads it::

    from whatif_bench.generator import Corpus
    corpus = Corpus("whatif-corpus.h5").filter(simulator="sumo", future="novel", K=3)
    task = corpus["sumo/flow_loop_e_0_near/K3-C2-L128-Emax/novel"]
"""

from whatif_bench.generator.corpus import Corpus, Task
from whatif_bench.generator.sweep import GenerationConfig, generate

__all__ = ["Corpus", "GenerationConfig", "Task", "generate"]
