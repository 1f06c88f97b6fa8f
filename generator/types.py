"""The generator's shared types: what to generate, one generated pair, and the error.

The sweep, the target selection, the writer and the checker all use these; keeping them here
(and not in ``sweep``, which imports the others) leaves the generator's imports without a
cycle (``tests/test_generator_imports.py`` checks that).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from whatif_bench.cli_types import MAX_SEED
from whatif_bench.errors import WhatIfError
from whatif_bench.generator.recipe import Recipe
from whatif_bench.generator.verification import THRESHOLD


class GenerationError(WhatIfError):
    """Generation cannot start or cannot finish (bad selection, bad baselines, bad output path)."""


@dataclass(frozen=True)
class GenerationConfig:
    """What to generate; recorded in the corpus file."""

    baselines: str
    out: str
    seed: int = 0
    simulators: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()
    jobs: int | None = None  # worker processes; None = all cores

    def __post_init__(self) -> None:
        seed, jobs = self.seed, self.jobs
        if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
            raise GenerationError(f"the seed must be an integer, got {seed!r}")
        if not 0 <= int(seed) <= MAX_SEED:
            raise GenerationError(f"the seed must be between 0 and 2**63 - 1, got {seed}")
        if jobs is not None and (
            isinstance(jobs, bool) or not isinstance(jobs, int | np.integer) or jobs < 1
        ):
            raise GenerationError(
                f"jobs must be a positive integer (or None: all cores), got {jobs!r}"
            )

    def recorded(self) -> dict:
        """The parts of the config that determine the content (not paths or worker counts)."""
        return {
            "seed": self.seed,
            "simulators": list(self.simulators),
            "targets": list(self.targets),
        }


@dataclass
class PairResult:
    """One generated pair: its recipe, the verification outcome and (if kept) its arrays."""

    recipe: Recipe
    history_ratios: np.ndarray  # (E,) the statistic of every history event
    replay_ratio: float
    novel_ratio: float
    arrays: dict[str, np.ndarray] = field(default_factory=dict)  # float32, flat per dataset

    @property
    def drop_reason(self) -> str:
        """``""`` when every event passes ``THRESHOLD``, else the first part that does not."""
        if np.any(self.history_ratios < THRESHOLD):
            return "history"
        if self.replay_ratio < THRESHOLD:
            return "replay"
        if self.novel_ratio < THRESHOLD:
            return "novel"
        return ""

    @property
    def kept(self) -> bool:
        return self.drop_reason == ""
