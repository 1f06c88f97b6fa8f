"""The registry: every relationship, loaded from the shipped spec files plus the user's.

``load_registry()`` reads ``relationships/data/*.toml`` (one file per simulator); pass more
files to add targets to a simulator (``extends = true``) or to add new simulators.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from importlib import resources
from pathlib import Path

from whatif_bench.errors import RelationshipError
from whatif_bench.relationships.engine import CovariateInfo, Relationship
from whatif_bench.relationships.forms import EFFECTS, FORMS
from whatif_bench.relationships.spec import (
    SimulatorSpec,
    covariates_for,
    parse_spec,
    parse_toml,
    read_spec_text,
    secondary_weight,
    simulator_name,
)

SIMULATOR_ORDER = ("opendc", "gridlabd", "epanet", "sumo")


def builtin_spec_texts() -> list[tuple[str, str]]:
    """(source name, text) of every shipped spec file, in the canonical simulator order."""
    folder = resources.files("whatif_bench.relationships") / "data"
    files = sorted((p for p in folder.iterdir() if p.name.endswith(".toml")), key=lambda p: p.name)
    rank = {name: i for i, name in enumerate(SIMULATOR_ORDER)}
    files.sort(key=lambda p: (rank.get(p.name[: -len(".toml")], len(rank)), p.name))
    return [(f"relationships/data/{p.name}", p.read_text(encoding="utf-8")) for p in files]


def resolve(spec: SimulatorSpec) -> list[Relationship]:
    """Turn a simulator spec into one ``Relationship`` per target."""
    by_name = {c.name: c for c in spec.covariates}
    order = tuple(c.name for c in spec.covariates)
    relationships = []
    for target in spec.targets:
        target_class = spec.classes[target.target_class]
        infos = []
        for name in covariates_for(target.primary, order):
            covariate = by_name[name]
            infos.append(
                CovariateInfo(
                    name=name,
                    shape=covariate.shape,
                    base_value=covariate.base_value,
                    unit=covariate.unit,
                    direction=target.directions.get(name, target_class.directions.get(name, "")),
                    effect=EFFECTS[covariate.effect],
                    effect_params=dict(covariate.effect_params),
                    weight=secondary_weight(name, target, target_class, covariate) or 0.0,
                    group=covariate.group,
                    description=covariate.description,
                )
            )
        relationships.append(
            Relationship(
                simulator=spec.name,
                target=target.name,
                unit=target.unit,
                target_class=target_class.name,
                combination=target_class.combination,
                form=FORMS[target.form],
                params=dict(target.params),
                covariates=tuple(infos),
                level=target_class.level,
                window=target_class.window,
                typical_range=target_class.typical_range,
                dampening=spec.dampening,
                history_pool=spec.history_pool,
                only_increase=spec.only_increase,
                c4=spec.c4,
                rationale=target.rationale,
                class_rationale=target_class.rationale,
            )
        )
    return relationships


class Registry:
    """All loaded simulators and their relationships, in a stable order."""

    def __init__(self, specs: Iterable[SimulatorSpec]) -> None:
        self.simulators: dict[str, SimulatorSpec] = {}
        self._relationships: dict[tuple[str, str], Relationship] = {}
        for spec in specs:
            self.simulators[spec.name] = spec
            for relationship in resolve(spec):
                self._relationships[(spec.name, relationship.target)] = relationship

    def __len__(self) -> int:
        return len(self._relationships)

    def __iter__(self) -> Iterator[Relationship]:
        return iter(self._relationships.values())

    def relationships(self, simulator: str | None = None) -> list[Relationship]:
        """Every relationship, or those of one simulator (unknown names raise)."""
        if simulator is None:
            return list(self)
        self._check_simulator(simulator)
        return [r for r in self if r.simulator == simulator]

    def get(self, simulator: str, target: str) -> Relationship:
        """The relationship of one target; the error lists the valid names."""
        self._check_simulator(simulator)
        try:
            return self._relationships[(simulator, target)]
        except KeyError:
            valid = [t for (s, t) in self._relationships if s == simulator]
            raise RelationshipError(
                f"simulator {simulator!r} has no target {target!r}; its targets are {valid}"
            ) from None

    def _check_simulator(self, simulator: str) -> None:
        if simulator not in self.simulators:
            raise RelationshipError(
                f"unknown simulator {simulator!r}; known: {list(self.simulators)}"
            )


def load_registry(extra_files: Iterable[str | Path] = (), include_builtin: bool = True) -> Registry:
    """Load the shipped spec files (unless ``include_builtin=False``) and then ``extra_files``.

    A later file that names a loaded simulator must say ``extends = true``; it adds classes and
    targets to it. Any problem raises ``SpecError`` naming file, entry and field.
    """
    extra = [(str(path), read_spec_text(path)) for path in extra_files]
    return registry_from_texts(extra, include_builtin)


def registry_from_texts(extra: Iterable[tuple[str, str]], include_builtin: bool = True) -> Registry:
    """``load_registry`` on texts already read: ``extra`` is (source name, text) pairs."""
    sources = builtin_spec_texts() if include_builtin else []
    sources += list(extra)
    specs: dict[str, SimulatorSpec] = {}
    for source, text in sources:
        document = parse_toml(text, source)
        name = simulator_name(document, source)
        specs[name] = parse_spec(document, source, specs.get(name))
    return Registry(specs.values())
