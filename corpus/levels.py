"""The nine quantile levels every forecast is given and scored at (docs/METHOD.md, section 7).

One definition for the scorer, the forecasters, the foundation-model adapters and the fev and
GluonTS exports: a task's quantile forecast has shape (H, 9), column j at ``QUANTILE_LEVELS[j]``.
"""

from __future__ import annotations

QUANTILE_LEVELS = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
