"""Closed-form covariate -> target relationships: shapes, forms, combination, registry.

Public API::

    from whatif_bench.relationships import load_registry
    registry = load_registry()                       # the 99 shipped targets
    rel = registry.get("opendc", "power_draw_host-0")
    rel.evaluate(y, {"coreSpeed_host-0": 2.0})       # target under constant factors
"""

from typing import TYPE_CHECKING

from whatif_bench._lazy import lazy_exports

if TYPE_CHECKING:
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

# Imported on first use (see whatif_bench._lazy): the command line reads this package's
# argument parsing without loading numpy, numba, h5py or pandas.
_EXPORTS = {
    "EventSchedule": "whatif_bench.relationships.engine",
    "Relationship": "whatif_bench.relationships.engine",
    "EFFECTS": "whatif_bench.relationships.forms",
    "FORMS": "whatif_bench.relationships.forms",
    "FormDefinition": "whatif_bench.relationships.forms",
    "register_effect": "whatif_bench.relationships.forms",
    "register_form": "whatif_bench.relationships.forms",
    "Registry": "whatif_bench.relationships.registry",
    "load_registry": "whatif_bench.relationships.registry",
    "bell_factors": "whatif_bench.relationships.shapes",
    "factor_trajectory": "whatif_bench.relationships.shapes",
    "step_factors": "whatif_bench.relationships.shapes",
}
__getattr__, __dir__ = lazy_exports(globals(), _EXPORTS)

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
