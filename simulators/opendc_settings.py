"""OpenDC's settings from the environment, kept apart from the ``opendc`` package (which imports
numpy) so that the command line and the container code can read them cheaply."""

from __future__ import annotations

import os
from pathlib import Path

TRACE_ENV = "WHATIF_OPENDC_TRACE"  # the Bitbrains trace folder when --trace is not given
MAVEN_REPO_ENV = "WHATIF_OPENDC_MAVEN_REPO"  # one more Maven repository for the driver's build


def trace_setting(trace: str | os.PathLike | None) -> str | None:
    """The trace folder to use: ``trace``, else ``$WHATIF_OPENDC_TRACE``, else None."""
    if trace:
        return str(trace)
    return os.environ.get(TRACE_ENV) or None


def is_maven_repository(folder: Path) -> bool:
    """Whether ``folder`` looks like a local Maven repository of OpenDC (it has ``org/``)."""
    return (folder / "org").is_dir()
