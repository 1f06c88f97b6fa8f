"""Where the training stream cuts its windows from: training worlds, and (if asked) the benchmark.

A *world* is one real simulator run on one base setting. The benchmark's worlds are the shipped
baselines; training worlds are runs on other settings (``whatif_bench.simulators.worlds``) that
the benchmark never uses, built once and cached on disk. Every world of a simulator has the same
targets, units and covariate base values, so the registry's relationships apply to all of them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass

from whatif_bench.errors import WhatIfError
from whatif_bench.simulators.base import Baselines


class SourceError(WhatIfError):
    """No world can serve the stream's selection."""


@dataclass(frozen=True)
class WorldSource:
    """One world the stream draws from.

    ``name`` is ``<simulator>-benchmark`` for a shipped baseline, else the training world's name.
    """

    name: str
    simulator: str
    baselines: Baselines
    benchmark: bool


def benchmark_sources(
    simulators: Iterable[str] | None = None, path: str | os.PathLike | None = None
) -> list[WorldSource]:
    """The benchmark's worlds: one per simulator of the shipped (or given) baselines file."""
    from whatif_bench.simulators.store import read_baselines, shipped_baselines_path

    stored = read_baselines(path or shipped_baselines_path())
    wanted = None if simulators is None else set(simulators)
    return [
        WorldSource(f"{name}-benchmark", name, baselines, benchmark=True)
        for name, baselines in sorted(stored.items())
        if wanted is None or name in wanted
    ]


def training_sources(
    simulators: Iterable[str] | None = None,
    cache: str | os.PathLike | None = None,
    worlds: Iterable[str] | None = None,
) -> list[WorldSource]:
    """The training worlds of the selected simulators, run once and then read from ``cache``.

    With neither ``simulators`` nor ``worlds`` given, the worlds of a simulator that cannot run
    here (OpenDC without a JDK, Maven or its trace) and are not in the cache are left out, with
    one warning; a simulator or world asked for by name must run.
    """
    from whatif_bench.simulators.base import SimulatorUnavailable
    from whatif_bench.simulators.worlds import WorldCache, training_worlds

    settings = training_worlds(None if simulators is None else list(simulators))
    if worlds is not None:
        wanted = list(worlds)
        known = {s.name for s in settings}
        unknown = [name for name in wanted if name not in known]
        if unknown:
            raise SourceError(f"unknown training worlds {unknown}; known: {sorted(known)}")
        settings = [s for s in settings if s.name in wanted]
    from tqdm import tqdm

    store = WorldCache(cache)
    sources: list[WorldSource] = []
    unavailable: dict[str, str] = {}
    building = sum(not store.cached(setting) for setting in settings)
    # a bar only when some world must be built (each build also says which, and how long)
    bar = tqdm(
        settings, desc="training worlds", unit="world", file=sys.stderr, disable=not building
    )
    for setting in bar:
        bar.set_postfix_str(setting.name)
        try:
            baselines = store.get(setting)
        except SimulatorUnavailable as exc:
            if simulators is not None or worlds is not None:
                raise SourceError(f"training world {setting.name} cannot run here: {exc}") from None
            unavailable.setdefault(setting.simulator, str(exc))
            continue
        sources.append(WorldSource(setting.name, setting.simulator, baselines, benchmark=False))
    for simulator, reason in unavailable.items():
        print(
            f"warning: the stream leaves out {simulator}'s training worlds: {reason}",
            file=sys.stderr,
        )
    return sources
