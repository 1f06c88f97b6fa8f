"""The error of an evaluation that cannot run (its settings, its output folder, its corpus)."""

from __future__ import annotations

from whatif_bench.errors import WhatIfError


class EvaluationError(WhatIfError):
    """The evaluation cannot run (unknown model, mismatched output folder, bad subset)."""
