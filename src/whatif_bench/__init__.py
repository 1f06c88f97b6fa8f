"""WhatIf-Bench: intervention-aware forecasting tasks built on real simulators.

The package has three parts: ``simulators`` (baseline series from real simulators),
``relationships`` (exactly known covariate -> target effects) and ``generator`` (the
five-axis sweep that writes verified task pairs).
"""

from whatif_bench._version import __version__
from whatif_bench.errors import WhatIfError

__all__ = ["__version__", "WhatIfError"]
