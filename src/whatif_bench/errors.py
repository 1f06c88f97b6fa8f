"""The toolkit's exception hierarchy: one base class, one subclass per kind of failure."""


class WhatIfError(Exception):
    """Base class of every error the toolkit raises on purpose."""


class SpecError(WhatIfError, ValueError):
    """A relationship spec file is malformed; the message names file, entry and field."""


class RelationshipError(WhatIfError, ValueError):
    """A relationship was asked for something it cannot do (unknown covariate, bad factors)."""
