"""The ``containers`` tier: every image built for real with podman or Docker, ``whatif
--version`` and a short simulation run in each, the content hash equal to the host run's.

Run on request only (``bash dev test -m containers``; ``bash dev images`` prepares a machine
without Docker). It skips, saying why, when no engine works. OpenDC's image is built with the
shared OpenDC 2.0 Maven repository handed in (``$WHATIF_OPENDC_MAVEN_REPO``; ``bash dev test``
points it at ../shared) and checked on the shared Bitbrains trace. Builds reuse the engine's
layer cache, so a second run takes about a minute plus the simulations.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_whatif
from tests.opendc_support import MAVEN_REPO, TRACE_2_0, need_jvm
from whatif_bench._version import __version__
from whatif_bench.simulators import containers
from whatif_bench.simulators.containers import ContainerError
from whatif_bench.simulators.containers_cli import CHECKED
from whatif_bench.simulators.store import read_baselines

pytestmark = pytest.mark.containers

REPO = Path(__file__).resolve().parents[1]
LOCAL_BASE = "localhost/debian-base:bookworm"  # made by docker/build-local.sh
DAYS = 0.5
BUILT = list(containers.IMAGES)
OPENDC_DAYS = 1.0


@pytest.fixture(scope="module")
def engine():
    if "CONTAINERS_CONF" not in os.environ and shutil.which("runc"):
        # podman's settings for machines whose crun cannot set limits (docs/CONTAINERS.md)
        os.environ["CONTAINERS_CONF"] = str(REPO / "docker" / "podman-runc.conf")
    try:
        return containers.find_engine()
    except ContainerError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="module")
def base(engine):
    """The local Debian base when there is one (no registry here), else the Dockerfiles' own."""
    probe = subprocess.run(
        [engine.path, "image", "inspect", LOCAL_BASE], capture_output=True, text=True
    )
    return LOCAL_BASE if probe.returncode == 0 else None


@pytest.fixture(scope="module")
def built(engine, base, tmp_path_factory):
    """Every image, built once for the module: image -> BuiltImage. OpenDC's needs the shared
    Maven repository and, to be checked, the trace and a host JDK; without them it is left out
    and its tests skip, saying why."""
    logs = tmp_path_factory.mktemp("build-logs")
    wanted = [image for image in BUILT if not (image == "opendc" and _opendc_missing())]
    # as `whatif images build` does by default (the first alone, then two at a time)
    built = containers.build_images(engine, wanted, REPO, base, MAVEN_REPO, logs)
    return dict(zip(wanted, built, strict=True))


def _opendc_missing() -> str:
    try:
        need_jvm()
    except pytest.skip.Exception as exc:
        return str(exc)
    return ""


def _image(built, image):
    if image not in built:
        pytest.skip(f"the OpenDC image was not built: {_opendc_missing()}")
    return built[image]


def test_a_maven_repository_that_is_not_one_is_refused(engine, tmp_path):
    with pytest.raises(ContainerError, match=r"whatif-opendc:.* is not a local Maven repository"):
        containers.build_image(engine, "opendc", REPO, maven_repo=tmp_path)


@pytest.mark.parametrize("image", BUILT)
def test_image_is_built_and_runs_as_a_non_root_user(engine, built, image):
    ref = _image(built, image).ref
    assert built[image].size_bytes > 100e6
    assert (
        containers.run_whatif(engine, ref, ["--version"]).strip() == f"whatif-bench {__version__}"
    )
    # the image's own user, not the caller's (run_whatif passes --user)
    result = subprocess.run(
        [engine.path, "run", "--rm", "--pull", "never", "--entrypoint", "id", ref, "-u"],
        capture_output=True,
        text=True,
    )
    assert result.stdout.strip() == "10001", result.stderr


PAIRS = [(image, simulator) for image in BUILT for simulator in CHECKED[image]]


@pytest.mark.parametrize(("image", "simulator"), PAIRS, ids=[f"{i}-{s}" for i, s in PAIRS])
def test_simulation_in_the_image_equals_the_host_run(engine, built, image, simulator):
    _image(built, image)
    if simulator == "opendc":  # a one-day run of the shared trace in the image
        check = containers.check_image(engine, simulator, OPENDC_DAYS, str(TRACE_2_0), image=image)
    else:
        check = containers.check_image(engine, simulator, DAYS, image=image)
    assert check.image_hash == check.host_hash


def test_simulate_container_writes_the_host_runs_file(engine, built, tmp_path):
    host, inside = tmp_path / "host.h5", tmp_path / "inside.h5"
    assert (
        run_whatif(
            "simulate", "--simulator", "sumo", "--days", "0.5", "--out", str(host)
        ).returncode
        == 0
    )
    result = run_whatif(
        "simulate",
        "--simulator",
        "sumo",
        "--days",
        "0.5",
        "--container",
        engine.name,
        "--out",
        str(inside),
    )
    assert result.returncode == 0, result.stderr
    assert (
        read_baselines(inside)["sumo"].content_hash() == read_baselines(host)["sumo"].content_hash()
    )
    assert inside.stat().st_uid == os.getuid()


def test_a_run_that_differs_from_the_host_is_one_error_line(engine, built, monkeypatch):
    # the host side runs a different length: the image's run no longer matches it
    from whatif_bench.simulators import epanet

    real = epanet.run
    monkeypatch.setattr(epanet, "run", lambda days, **kw: real(days=days * 2, **kw))
    with pytest.raises(
        ContainerError,
        match=r"^image \S*whatif-epanet:\S+: step 'compare with the host run' failed: "
        r"the epanet run of 0.5 days differs from the host's \(content hash \w{12} in the "
        r"image, \w{12} on the host\)$",
    ):
        containers.check_image(engine, "epanet", DAYS)


def test_a_build_that_fails_names_the_image_and_the_step(engine, base, tmp_path):
    (tmp_path / "docker" / "sumo").mkdir(parents=True)
    (tmp_path / "docker" / "sumo" / "Dockerfile").write_text(
        "ARG BASE=python:3.11-slim\nFROM ${BASE}\nRUN echo building && exit 3\n"
    )
    with pytest.raises(ContainerError) as info:
        containers.build_image(engine, "sumo", tmp_path, base)
    message = str(info.value)
    assert message.startswith(
        f"image {engine.image_ref('whatif-sumo:' + __version__)}: build failed"
    )
    assert "step 'RUN echo building && exit 3'" in message and "\n" not in message


def _leftovers(folder: Path, log: Path) -> list[str]:
    """What is beside ``log`` in ``folder`` apart from it and its lock file."""
    return sorted(p.name for p in folder.iterdir() if p.name not in (log.name, f".{log.name}.lock"))


def test_a_build_log_opens_with_the_header_and_replaces_only_a_log_of_whatif(
    engine, base, tmp_path, monkeypatch
):
    """A log is written under a temporary name and renamed when the build ends; a second build
    replaces the first one's log (it opens with the toolkit's header), a failed build's log is
    kept and named, and no temporary is left behind."""
    monkeypatch.setattr(containers, "IMAGES", (*containers.IMAGES, "logprobe"))
    folder = tmp_path / "docker" / "logprobe"
    folder.mkdir(parents=True)
    dockerfile = folder / "Dockerfile"
    logs = tmp_path / "logs"
    log = logs / "logprobe.log"
    probe = engine.image_ref(containers.image_name("logprobe"))
    try:
        for token in ("first", "second"):
            dockerfile.write_text(f"ARG BASE=python:3.11-slim\nFROM ${{BASE}}\nRUN echo {token}\n")
            containers.build_image(engine, "logprobe", tmp_path, base, log=log)
            text = log.read_text()
            assert text.startswith(f"{containers.LOG_HEADER}{probe} built by {engine.name} ")
            assert f"echo {token}" in text and _leftovers(logs, log) == []
        dockerfile.write_text(
            "ARG BASE=python:3.11-slim\nFROM ${BASE}\nRUN echo failing && exit 3\n"
        )
        with pytest.raises(ContainerError) as info:
            containers.build_image(engine, "logprobe", tmp_path, base, log=log)
        assert str(info.value).endswith(f"(full log: {log})") and "\n" not in str(info.value)
        assert "step 'RUN echo failing && exit 3'" in str(info.value)
        text = log.read_text()
        assert text.startswith(containers.LOG_HEADER) and "echo failing" in text
        assert "echo second" not in text and _leftovers(logs, log) == []
    finally:
        subprocess.run([engine.path, "rmi", "-f", probe], capture_output=True)
        containers.remove_superseded(engine, "logprobe")


def test_a_file_of_the_users_named_like_the_log_is_kept(engine, base, tmp_path, monkeypatch):
    # a probe image: were the file not refused, the build would not replace a real image's tag
    monkeypatch.setattr(containers, "IMAGES", (*containers.IMAGES, "logprobe"))
    (tmp_path / "docker" / "logprobe").mkdir(parents=True)
    (tmp_path / "docker" / "logprobe" / "Dockerfile").write_text("FROM scratch\n")
    log = tmp_path / "logs" / "logprobe.log"
    log.parent.mkdir()
    log.write_text("my notes\n")
    probe = engine.image_ref(containers.image_name("logprobe"))
    try:
        with pytest.raises(ContainerError, match=r"logprobe.log: exists and is not a build log"):
            containers.build_image(engine, "logprobe", tmp_path, base, log=log)
    finally:
        subprocess.run([engine.path, "rmi", "-f", probe], capture_output=True)
    assert log.read_text() == "my notes\n" and _leftovers(log.parent, log) == []
    assert not (log.parent / ".logprobe.log.lock").exists()  # refused before anything was made


def _untagged(engine, *filters: str) -> set[str]:
    command = [engine.path, "images", "-a", "-q", "--no-trunc", "--filter", "dangling=true"]
    for item in filters:
        command += ["--filter", item]
    listing = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    return set(listing.split())


def test_a_build_removes_the_untagged_images_it_left_and_only_those(
    engine, base, tmp_path, monkeypatch
):
    """Two builds of a two-stage image: afterwards no untagged image with the toolkit's label
    for it is left (its stages, the image the second build replaced), while an untagged image
    of the user's, without the label, is kept."""
    monkeypatch.setattr(containers, "IMAGES", (*containers.IMAGES, "pruneprobe"))
    folder = tmp_path / "docker" / "pruneprobe"
    folder.mkdir(parents=True)
    (folder / "Dockerfile").write_text(
        "ARG BASE=python:3.11-slim\nFROM ${BASE} AS stage\nCOPY token /token\n"
        "FROM ${BASE}\nCOPY --from=stage /token /copied\n"
    )
    users = tmp_path / "users"
    users.mkdir()
    (users / "Dockerfile").write_text(
        f"FROM {base or 'python:3.11-slim'}\nRUN echo {tmp_path.name} > /mine\n"
    )
    built = subprocess.run(
        [engine.path, "build", "-q", str(users)], capture_output=True, text=True, check=True
    )
    user_image = built.stdout.split()[-1]
    label = f"label={containers.BUILT_BY_LABEL}=pruneprobe"
    try:
        for token in ("first", "second"):
            (tmp_path / "token").write_text(token)
            containers.build_image(engine, "pruneprobe", tmp_path, base)
        assert _untagged(engine, label) == set()
        assert any(user_image in known for known in _untagged(engine))
    finally:
        probe = engine.image_ref(containers.image_name("pruneprobe"))
        subprocess.run([engine.path, "rmi", "-f", probe], capture_output=True)
        containers.remove_superseded(engine, "pruneprobe")
        subprocess.run([engine.path, "rmi", "-f", user_image], capture_output=True)


def test_images_built_together_share_their_common_layers_and_leave_nothing(
    engine, base, tmp_path, monkeypatch
):
    """Two images whose build stages begin with the same step, built by one ``build_images``:
    the second build reuses the first's layer (the step's random token is the same in both
    images), and afterwards neither leaves an untagged image with the toolkit's label."""
    probes = ("shareprobe-a", "shareprobe-b")
    monkeypatch.setattr(containers, "IMAGES", (*containers.IMAGES, *probes))
    for probe in probes:
        folder = tmp_path / "docker" / probe
        folder.mkdir(parents=True)
        (folder / "Dockerfile").write_text(
            "ARG BASE=python:3.11-slim\nFROM ${BASE} AS build\n"
            f"RUN echo {tmp_path.name}-$(od -An -N8 -tx8 /dev/urandom | tr -d ' ') > /shared\n"
            f"RUN echo {probe} > /own\n"
            "FROM ${BASE}\nCOPY --from=build /shared /shared\nCOPY --from=build /own /own\n"
        )
    refs = [engine.image_ref(containers.image_name(probe)) for probe in probes]
    try:
        list(containers.build_images(engine, list(probes), tmp_path, base))
        shared = [
            subprocess.run(
                [engine.path, "run", "--rm", ref, "cat", "/shared", "/own"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.split()
            for ref in refs
        ]
        assert shared[0][0] == shared[1][0] and shared[0][0].startswith(tmp_path.name)
        assert [own for _, own in shared] == list(probes)
        for probe in probes:
            assert _untagged(engine, f"label={containers.BUILT_BY_LABEL}={probe}") == set()
    finally:
        for ref in refs:
            subprocess.run([engine.path, "rmi", "-f", ref], capture_output=True)
        for probe in probes:
            containers.remove_superseded(engine, probe)


def test_a_missing_image_is_one_error_line(engine, tmp_path):
    with pytest.raises(
        ContainerError, match=r"^image \S*whatif-nothing:1: step 'whatif --version' failed"
    ):
        containers.run_whatif(engine, engine.image_ref("whatif-nothing:1"), ["--version"])


def test_the_toolkit_images_numba_cache_is_warm(engine, built):
    # a one-target corpus again: every kernel loads from the cache, no cache file is written
    listing = "find /opt/numba-cache -type f -printf '%p %s %T@\\n' | sort"
    script = (
        f"{listing} > /tmp/before && "
        "whatif generate --simulators epanet --targets epanet/pressure_10 --jobs 1 "
        "--out /tmp/c.h5 >/dev/null 2>&1 && "
        f"{listing} > /tmp/after && grep -c '[.]nbc ' /tmp/before && cmp /tmp/before /tmp/after"
    )
    result = subprocess.run(
        [
            engine.path,
            "run",
            "--rm",
            "--pull",
            "never",
            "--entrypoint",
            "sh",
            built["toolkit"].ref,
            "-c",
            script,
        ],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert int(result.stdout.split()[0]) >= 9  # the cached kernels of relationships/kernels.py
