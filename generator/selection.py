"""Which targets to generate: the registry's targets whose simulator has baselines."""

from __future__ import annotations

import math

import numpy as np

from whatif_bench.corpus.axes import axis, contexts, layout
from whatif_bench.generator.types import GenerationError
from whatif_bench.relationships.engine import Relationship
from whatif_bench.relationships.source import RegistrySource
from whatif_bench.simulators.base import Baselines
from whatif_bench.simulators.store import SHIPPED_NAME, baselines_name, read_baselines


def select_targets(
    config, source: RegistrySource | None = None
) -> list[tuple[Relationship, Baselines]]:
    """(relationship, baselines) for every selected target, in registry order.

    ``config.simulators`` and ``config.targets`` narrow the selection; targets may be given
    as ``target`` or ``simulator/target``. Unknown names and empty selections raise.
    ``source``: the registry to select from (default: ``config.registry_source()``, the shipped
    spec files plus the config's ``specs`` and ``forms``).
    """
    baselines = read_baselines(config.baselines)
    named = baselines_name(config.baselines)  # errors say "the shipped baselines" for those
    registry = (source or config.registry_source()).load()
    for simulator in config.simulators:
        if simulator not in registry.simulators:
            raise GenerationError(
                f"unknown simulator {simulator!r}; known: {list(registry.simulators)}"
            )
        if simulator not in baselines:
            raise GenerationError(
                f"{named} has no baselines for {simulator!r} (it has {sorted(baselines)})"
            )
    available = [
        rel
        for rel in registry
        if rel.simulator in baselines
        and (not config.simulators or rel.simulator in config.simulators)
    ]
    if config.targets:
        wanted = set()
        for name in config.targets:
            matches = [r for r in available if name in (r.target, f"{r.simulator}/{r.target}")]
            if not matches:
                raise GenerationError(
                    f"unknown target {name!r}; choose from "
                    f"{sorted(f'{r.simulator}/{r.target}' for r in available)}"
                )
            if len(matches) > 1:
                raise GenerationError(f"target {name!r} is ambiguous; write simulator/target")
            wanted.add((matches[0].simulator, matches[0].target))
        available = [r for r in available if (r.simulator, r.target) in wanted]
    if not available:
        undeclared = sorted(set(baselines) - set(registry.simulators))
        hint = (
            f"; no spec file declares {undeclared} of {named} (pass it with --spec)"
            if undeclared
            else ""
        )
        raise GenerationError(
            f"the selection is empty: no target has baselines to build tasks from{hint}"
        )
    selection = []
    for rel in available:
        item = baselines[rel.simulator]
        if rel.target not in item.series:
            raise GenerationError(
                f"{named}: no baseline series for {rel.simulator}/{rel.target}"
                + _where_to_get(named, rel.simulator)
            )
        _check_fits_float32(named, rel.simulator, rel.target, item.series[rel.target])
        _check_matches_spec(named, rel, item, registry.simulators[rel.simulator].source)
        selection.append((rel, item))
    for simulator in dict.fromkeys(rel.simulator for rel, _ in selection):
        _check_long_enough(named, baselines[simulator], registry.simulators[simulator].c4)
    return selection


def longest_window(c4: tuple[int, int]) -> int:
    """Steps of the longest task window (context + horizon) of a simulator whose C4 pair is
    ``c4`` (``Relationship.c4``)."""
    return max(
        layout(context, prediction, length, setting).window
        for context, prediction in contexts(c4).values()
        for length in axis("ell").values
        for setting in axis("E").values
    )


def _where_to_get(named: str, simulator: str) -> str:
    """How to get a series the baselines lack: the shipped ones hold the shipped targets' only."""
    from whatif_bench.simulators.catalog import SIMULATORS

    if named != SHIPPED_NAME:
        return ""
    entry = SIMULATORS.get(simulator)
    extra = (
        f"; `whatif simulate --simulator {simulator} --extra-series --out FILE.h5` records "
        f"{entry.extra_series}, then pass --baselines FILE.h5"
        if entry is not None and entry.extra_series
        else "; give --baselines a file that records it (docs/BASELINES_FORMAT.md)"
    )
    return f" (they hold the shipped targets' series only){extra}"


def _check_long_enough(source, baselines: Baselines, c4: tuple[int, int]) -> None:
    """Every axis setting must fit: say how many steps and days a baseline needs."""
    needed = longest_window(c4)
    if baselines.n_steps >= needed:
        return
    day = 86400 / baselines.interval_s
    raise GenerationError(
        f"{source}: the {baselines.simulator} baseline has {baselines.n_steps:,} steps "
        f"({baselines.n_steps / day:.2f} days at {baselines.interval_s:g} s a step); the axes need "
        f"windows of up to {needed:,} steps, so simulate at least {math.ceil(needed / day)} days "
        f"(whatif simulate --days {math.ceil(needed / day)})"
    )


def _check_matches_spec(
    source, relationship: Relationship, baselines: Baselines, spec: str
) -> None:
    """The baseline was made in the setting the spec describes: the target's unit and every
    covariate's base value (the physical value at factor 1) are the ones the baselines file
    records, so covariate values in tasks are what the simulator ran with."""
    where = f"{source}: {relationship.simulator}/{relationship.target}"
    unit = baselines.units[relationship.target]
    if unit != relationship.unit:
        raise GenerationError(
            f"{where}: unit {unit!r} in the baselines, {relationship.unit!r} in the spec ({spec})"
        )
    recorded = baselines.covariate_base_values
    for covariate in relationship.covariates:
        if covariate.name not in recorded:
            raise GenerationError(
                f"{source}: {relationship.simulator}: covariate_base_values has no "
                f"{covariate.name!r} (a covariate of {relationship.target} in {spec}); record "
                "the value the baseline was made with"
            )
        if float(recorded[covariate.name]) != float(covariate.base_value):
            raise GenerationError(
                f"{source}: {relationship.simulator}: covariate {covariate.name!r}: base value "
                f"{recorded[covariate.name]!r} in the baselines, {covariate.base_value!r} in the "
                f"spec ({spec}); the spec's base_value must be the one the baseline was made with"
            )


FLOAT32_MAX = float(np.finfo(np.float32).max)


def _check_fits_float32(source, simulator: str, target: str, values: np.ndarray) -> None:
    """Task arrays are stored as float32: a baseline value beyond its range would become inf."""
    bad = np.flatnonzero(np.abs(values) > FLOAT32_MAX)
    if bad.size:
        raise GenerationError(
            f"{source}: {simulator}/{target}: value {values[bad[0]]:g} at step {bad[0]} is "
            f"beyond the float32 range of the corpus (|x| <= {FLOAT32_MAX:.4g})"
        )
