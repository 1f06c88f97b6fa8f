"""The covariates' units of a corpus's targets.

The corpus file stores each target's unit but not its covariates' units; those come from the
relationship registry the corpus was built with. Only the shipped registry is known here: for
a corpus built from it (same ``registry_hash``) the units are the registry's, else unknown.
"""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def _registry_units() -> tuple[str, dict[tuple[str, str], dict[str, str]]]:
    """The shipped registry's hash and the covariate units of each (simulator, target)."""
    from whatif_bench.corpus.provenance import registry_hash
    from whatif_bench.relationships import load_registry

    units = {
        (r.simulator, r.target): {c.name: c.unit for c in r.covariates} for r in load_registry()
    }
    return registry_hash(), units


def covariate_units(attrs: dict) -> dict[tuple[str, str], dict[str, str]]:
    """Covariate units by (simulator, target) for a corpus with file attributes ``attrs``: the
    shipped registry's, when the corpus was built from it; else ``{}`` (units unknown)."""
    try:
        digest, units = _registry_units()
    except Exception:  # units are descriptive only: never fail an evaluation or export for them
        return {}
    return units if attrs.get("registry_hash") == digest else {}


def task_units(task, by_target: dict[tuple[str, str], dict[str, str]]) -> dict[str, str]:
    """The unit of ``task``'s target and of each of its covariates, by name ("" where unknown):
    the target's as the corpus stores it, the covariates' from ``by_target`` (what
    ``covariate_units`` gives for the task's corpus). Every export writes these."""
    known = by_target.get((task.simulator, task.target), {})
    units = {name: known.get(name, "") for name in task.covariates}
    units[task.target] = task.units.get(task.target) or ""
    return units
