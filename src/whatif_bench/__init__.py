"""WhatIf-Bench: intervention-aware forecasting tasks built on real simulators.

The package is a set of rooms on floors (docs/ARCHITECTURE.md); a room imports only rooms on
lower floors:

1. core: this folder (errors, outputs, user code, the cluster, seeding, command-line types);
2. ``simulators`` (baseline series from real simulators) and ``relationships`` (exactly known
   covariate -> target effects);
3. ``corpus``: the corpus contract (file format, reader, ``Task``, axes, recipes);
4. ``generator`` (the five-axis sweep that writes verified task pairs) and ``evaluation``
   (scoring forecasters);
5. ``export`` (fev, GluonTS, Hugging Face, LLM prompts) and ``stream`` (training tasks);
6. the ``whatif`` command line (``whatif_bench.cli``).
"""

from whatif_bench._version import __version__
from whatif_bench.errors import WhatIfError

__all__ = ["__version__", "WhatIfError"]
