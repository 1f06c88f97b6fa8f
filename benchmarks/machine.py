"""What a benchmark prints about the machine it ran on, beside its figures.

The benchmark scripts import this from their own folder (``python benchmarks/NAME.py`` puts
that folder first on the path).
"""

from __future__ import annotations

import os


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as ``0.91, 1.05, 1.13``."""
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())
