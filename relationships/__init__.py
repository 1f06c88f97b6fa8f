"""Closed-form covariate -> target relationships: shapes, forms, combination, registry.

Public API::

    from whatif_bench.relationships import load_registry
    registry = load_registry()                       # the 99 shipped targets
    rel = registry.get("opendc", "power_draw_host-0")
    rel.evaluate(y, {"coreSpeed_host-0": 2.0})       # target under constant factors
"""

from whatif_bench.relationships.engine import EventSchedule, Relationship
from whatif_bench.relationships.forms import (
    EFFECTS,
    FORMS,
    FormDefinition,
    register_effect,
    register_form,
)
from whatif_bench.relationships.registry import Registry, load_registry
from whatif_bench.relationships.shapes import bell_factors, factor_trajectory, step_factors

__all__ = [
    "EFFECTS",
    "FORMS",
    "EventSchedule",
    "FormDefinition",
    "Registry",
    "Relationship",
    "bell_factors",
    "factor_trajectory",
    "load_registry",
    "register_effect",
    "register_form",
    "step_factors",
]
