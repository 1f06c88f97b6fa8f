"""What a benchmark prints about the machine it ran on, beside its figures, and the CPU time
its process has used.

The benchmark scripts import this from their own folder (``python benchmarks/NAME.py`` puts
that folder first on the path).
"""

from __future__ import annotations

import os
import resource


def load_average() -> str:
    """The 1, 5 and 15 minute load averages, as ``0.91, 1.05, 1.13``."""
    return ", ".join(f"{value:.2f}" for value in os.getloadavg())


def cpu_seconds() -> float:
    """CPU seconds (user and system) this process has used so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
