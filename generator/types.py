"""The generator's shared types: what to generate, one generated pair, and the error.

The sweep, the target selection, the writer and the checker all use these; keeping them here
(and not in ``sweep``, which imports the others) leaves the generator's imports without a
cycle (``tests/test_generator_imports.py`` checks that).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from whatif_bench.corpus import Recipe
from whatif_bench.corpus.axes import FUTURES, AxisError, chosen_futures
from whatif_bench.errors import WhatIfError
from whatif_bench.relationships.verification import THRESHOLD
from whatif_bench.seeding import SeedError, check_seed


class GenerationError(WhatIfError):
    """Generation cannot start or cannot finish (bad selection, bad baselines, bad output path)."""


@dataclass(frozen=True)
class GenerationConfig:
    """What to generate; recorded in the corpus file. Validated when built.

    ``specs`` are user spec files loaded after the shipped ones (adding or, with
    ``overrides = true``, replacing targets; docs/AUTHORING.md); ``forms`` are Python files
    registering user forms, executed in this process and in every worker. Lists are taken as
    tuples; a string where a list is expected is refused (it would read as its letters).
    """

    baselines: str
    out: str
    seed: int = 0
    simulators: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()
    jobs: int | None = None  # worker processes; None = all cores
    specs: tuple[str, ...] = ()
    forms: tuple[str, ...] = ()
    # future types: the axis table's (Replay, Novel), plus any optional ones ("restraint")
    futures: tuple[str, ...] = FUTURES

    def __post_init__(self) -> None:
        jobs = self.jobs
        try:
            check_seed(self.seed)
        except SeedError as exc:
            raise GenerationError(str(exc)) from None
        if jobs is not None and (
            isinstance(jobs, bool) or not isinstance(jobs, int | np.integer) or jobs < 1
        ):
            raise GenerationError(
                f"jobs must be a positive integer (or None: all cores), got {jobs!r}"
            )
        for name in ("baselines", "out"):
            value = getattr(self, name)
            if not isinstance(value, str | os.PathLike):
                raise GenerationError(f"{name} must be a path, got {value!r}")
            if os.fspath(value) == "":
                what = "the output path" if name == "out" else "the baselines path"
                raise GenerationError(f"{name}: {what} is empty")
            object.__setattr__(self, name, os.fspath(value))
        for name in ("simulators", "targets", "specs", "forms"):
            object.__setattr__(self, name, _names(name, getattr(self, name)))
        for name in ("specs", "forms"):
            for path in getattr(self, name):
                _check_input_file(name, path)
        for path in self.forms:
            if not path.endswith(".py"):
                raise GenerationError(f"forms: {path}: not a Python file (*.py)")
        try:
            futures = chosen_futures(_names("futures", self.futures))
        except AxisError as exc:
            raise GenerationError(str(exc)) from None
        object.__setattr__(self, "futures", futures)

    def registry_source(self):
        """The user spec texts and forms modules' hashes, read now (``RegistrySource``)."""
        from whatif_bench.relationships.source import RegistrySource

        return RegistrySource.from_files(self.specs, self.forms)

    def recorded(self) -> dict:
        """The parts of the config that determine the content (not paths or worker counts).

        (User spec texts and forms modules are recorded apart: ``/user_registry``.) The future
        types are recorded only when they are not the default, so a default corpus is what it
        was before the option existed."""
        recorded: dict = {
            "seed": self.seed,
            "simulators": list(self.simulators),
            "targets": list(self.targets),
        }
        if self.futures != FUTURES:
            recorded["futures"] = list(self.futures)
        return recorded


def _check_input_file(field: str, path: str) -> None:
    """A spec or forms file of the config must be a regular file: a missing path, a folder, a
    symbolic link loop or a special file (FIFO, device, socket) is a ``GenerationError``
    naming the cause."""
    from whatif_bench.outputs import path_problem

    problem = path_problem(path)
    if problem is not None:
        raise GenerationError(f"{field}: {path}: is {problem}, not a regular file")
    if os.path.isdir(path):
        raise GenerationError(f"{field}: {path}: is a folder, not a file")
    if not os.path.isfile(path):
        raise GenerationError(f"{field}: {path}: no such file")


def _names(field: str, values) -> tuple[str, ...]:
    """``values`` as a tuple of non-empty strings (paths allowed), else a ``GenerationError``."""
    if isinstance(values, str | bytes | os.PathLike) or not isinstance(values, Iterable):
        raise GenerationError(f"{field} must be a list of names, got {values!r}")
    items = tuple(os.fspath(v) if isinstance(v, os.PathLike) else v for v in values)
    for item in items:
        if not isinstance(item, str) or item == "":
            raise GenerationError(f"{field}: expected non-empty strings, got {item!r}")
    return items


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
