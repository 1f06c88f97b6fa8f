"""The toolkit's container images: build them, run a simulator inside one, check it against the host.

One image per simulator (``docker/<simulator>/Dockerfile``) plus the toolkit image
(``docker/toolkit/Dockerfile``), each with ``whatif`` as its entry point, built by Docker or by
podman (docs/CONTAINERS.md). ``run_in_image`` runs ``whatif simulate`` inside a simulator's image
and reads back the baselines it wrote; ``check_image`` runs the same simulation on the host and
inside the image and requires equal content hashes. Every failure is one ``ContainerError``
line naming the image and the step (engine look-up, build, ``--version``, simulate, compare).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import os
import re
import shutil
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from whatif_bench._version import __version__
from whatif_bench.errors import WhatIfError
from whatif_bench.outputs import atomic_output, check_output_path, check_regular, make_folder
from whatif_bench.simulators.opendc_settings import MAVEN_REPO_ENV, is_maven_repository

if TYPE_CHECKING:  # the store imports numpy and h5py; the command line reads this module
    from whatif_bench.simulators.base import Baselines

ENGINES = ("docker", "podman")
# in the order `images build` builds them by default: EPANET's, the lightest, alone first (it
# makes the layers all share), then OpenDC's, the longest (a JDK, a Maven build, a JRE), so that
# it does not start last beside nothing
IMAGES = ("epanet", "opendc", "sumo", "gridlabd", "toolkit")
# pip settings a build passes on to the image's pip when the host sets them (PIP_CERT apart: a
# host path, mounted into podman builds, see ``pip_build_options``)
PIP_SETTINGS = ("PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_TRUSTED_HOST", "PIP_DEFAULT_TIMEOUT")
CA_IN_BUILD = "/run/host-ca.crt"
ENGINE_TIMEOUT_S = 60.0
# builds at once (`whatif images build --parallel`), after the first, which builds alone: all
# five images in 340 s here against 474 s one after another (docs/CONTAINERS.md)
DEFAULT_PARALLEL_BUILDS = 2
RLIMIT_HINT = (
    " (podman's runtime cannot set resource limits here: export "
    "CONTAINERS_CONF=docker/podman-runc.conf, see docs/CONTAINERS.md)"
)
# The OpenDC image's build resolves org.opendc:*:2.0 from Maven Central, or also from this
# local Maven repository, handed in as the build context `opendc-maven` (docker/opendc/Dockerfile)
OPENDC_MAVEN_CONTEXT = "opendc-maven"
# Every image (and build stage) the toolkit builds carries this label, naming the image. After a
# successful build the untagged images with the same label (the build's stages, the image it
# replaced) are removed: each is about 1.5 GB, and an engine never removes them itself. Images
# without the label, the user's own, are never touched.
BUILT_BY_LABEL = "org.whatif-bench.image"
# A build log (`whatif images build --logs DIR`: DIR/<image>.log) opens with this line; an
# existing file of that name is replaced only if it does (``check_build_log``), so a file of the
# user's that happens to be named epanet.log is never overwritten. The log is text the engine
# writes as it builds: a header is the one mark it can carry, and the name stays the one the
# user looks for (a fresh name per build would leave a new file behind on every build).
LOG_HEADER = "# whatif images build log: "


class ContainerError(WhatIfError):
    """No usable container engine, or an image that fails to build, to run or to match the host."""


@dataclass(frozen=True)
class Engine:
    """A working container engine: ``docker`` (with an answering daemon) or ``podman``."""

    name: str
    path: str

    def image_ref(self, image: str) -> str:
        """The reference of a locally built ``image`` (podman names them ``localhost/...``)."""
        if self.name == "podman" and "/" not in image.split(":")[0]:
            return f"localhost/{image}"
        return image


@dataclass(frozen=True)
class BuiltImage:
    """One image as built: its reference, build time (s) and size (bytes, as the engine reports)."""

    ref: str
    seconds: float
    size_bytes: int


def image_name(image: str) -> str:
    """The tag an image is built under: ``whatif-<image>:<toolkit version>``."""
    if image not in IMAGES:
        raise ContainerError(f"unknown image {image!r}; expected one of {list(IMAGES)}")
    return f"whatif-{image}:{__version__}"


def find_engine(name: str | None = None) -> Engine:
    """The engine ``name`` (``docker`` or ``podman``), or the first that works, docker first.

    A docker client whose daemon does not answer does not count: ``docker info`` must succeed.
    """
    names = [name] if name else list(ENGINES)
    problems = []
    for candidate in names:
        if candidate not in ENGINES:
            raise ContainerError(
                f"unknown container engine {candidate!r}; expected docker or podman"
            )
        path = shutil.which(candidate)
        if path is None:
            problems.append(f"{candidate} is not installed")
            continue
        try:
            probe = subprocess.run(
                [path, "info"], capture_output=True, text=True, timeout=ENGINE_TIMEOUT_S
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            problems.append(f"`{candidate} info` failed ({exc})")
            continue
        if probe.returncode == 0:
            return Engine(candidate, path)
        problems.append(f"`{candidate} info` failed: {_last_error(probe.stderr)}")
    raise ContainerError(
        "no container engine found: "
        + "; ".join(problems)
        + " (install Docker or podman; docs/CONTAINERS.md)"
    )


def pip_build_options(engine: Engine, environ: dict[str, str] | None = None) -> list[str]:
    """Build options passing the host's pip settings, only those that are set.

    ``PIP_CERT`` names a host file: podman mounts it into the build and points pip at it (a
    proxy's certificate authority); ``docker build`` cannot mount host files, so it is left out.
    """
    environ = dict(os.environ if environ is None else environ)
    options = []
    for key in PIP_SETTINGS:
        if environ.get(key):
            options += ["--build-arg", f"{key}={environ[key]}"]
    cert = environ.get("PIP_CERT")
    if cert and engine.name == "podman" and Path(cert).is_file():
        options += ["-v", f"{cert}:{CA_IN_BUILD}:ro", "--build-arg", f"PIP_CERT={CA_IN_BUILD}"]
    return options


def check_build_log(path: str | os.PathLike) -> Path:
    """``path`` as a build log to write (``outputs.check_output_path``: not a folder, a FIFO, a
    device, a symbolic link loop or under a file; nor a symbolic link, dangling or not, which
    the rename would replace), refusing an existing file that does not open with
    ``LOG_HEADER`` (a file this toolkit did not write); returns it as a Path."""
    path = check_output_path(path)
    if path.is_symlink():  # the words of check_output_path, which refuses it for other outputs
        raise ContainerError(
            f"{path}: is a symbolic link; refusing to replace it: give the file itself or "
            "another name"
        )
    try:
        regular = stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return path  # missing
    if regular:
        try:
            with open(path, "rb") as handle:
                head = handle.read(len(LOG_HEADER))
        except OSError as exc:
            raise ContainerError(f"{path}: cannot read it ({exc.strerror or exc})") from None
        if head != LOG_HEADER.encode():
            raise ContainerError(
                f"{path}: exists and is not a build log whatif wrote (it does not open with "
                f"{LOG_HEADER.strip()!r}); refusing to replace it: delete it by hand or choose "
                "another --logs folder"
            )
    return path


def check_log_folder(folder: str | os.PathLike) -> Path:
    """``folder`` as the folder of the build logs: a folder, or a path one can be made at (not
    a file, a FIFO, a device, a symbolic link loop or a dangling link, nor under a file)."""
    path = check_output_path(folder, folder=True)
    if path.is_symlink() and not path.exists():
        raise ContainerError(
            f"{path}: is a symbolic link to nothing ({os.readlink(path)}); give a folder"
        )
    return path


def build_image(
    engine: Engine,
    image: str,
    repo: str | os.PathLike,
    base: str | None = None,
    maven_repo: str | os.PathLike | None = None,
    log: str | os.PathLike | None = None,
    prune: bool = True,
) -> BuiltImage:
    """Build ``docker/<image>/Dockerfile`` from the repository root ``repo``.

    ``base`` replaces the default base image (``--build-arg BASE``). The OpenDC image's Maven
    build also resolves from ``maven_repo`` (a local Maven repository folder; default
    ``$WHATIF_OPENDC_MAVEN_REPO``, else Maven Central alone), handed in as a build context.
    The build's output goes to ``log`` (default: a temporary file, removed), opening with
    ``LOG_HEADER``, written under a temporary name and renamed when the build ends (a failed
    build's log too); an existing ``log`` is replaced only if it opens with that header
    (``check_build_log``). Every image the build makes is labelled ``BUILT_BY_LABEL=<image>``;
    after a successful build the untagged ones with that label are removed
    (``remove_superseded``), unless ``prune`` is false (``build_images`` removes them once its
    last build is done, so that each build can reuse the layers the earlier ones made).
    """
    repo = check_regular(repo, "repository folder")
    dockerfile = repo / "docker" / image / "Dockerfile"
    ref = engine.image_ref(image_name(image))
    log_path = None if log is None else check_build_log(log)
    if not dockerfile.is_file():
        raise ContainerError(f"image {ref}: no Dockerfile at {dockerfile}")
    command = [engine.path, "build", "--network", "host", "-f", str(dockerfile), "-t", ref]
    command += ["--label", f"{BUILT_BY_LABEL}={image}"]
    command += pip_build_options(engine)
    if base:
        command += ["--build-arg", f"BASE={base}"]
    if image == "opendc":
        folder = maven_repo if maven_repo is not None else os.environ.get(MAVEN_REPO_ENV)
        if folder:
            path = check_regular(Path(folder).expanduser(), "Maven repository").resolve()
            if not is_maven_repository(path):
                raise ContainerError(
                    f"image {ref}: {folder} is not a local Maven repository (no org/ folder)"
                )
            command += ["--build-context", f"{OPENDC_MAVEN_CONTEXT}={path}"]
    command.append(str(repo))
    header = f"{LOG_HEADER}{ref} built by {engine.name} (whatif-bench {__version__})\n"
    with contextlib.ExitStack() as stack:
        if log_path is None:
            scratch = stack.enter_context(tempfile.TemporaryDirectory(prefix="whatif-build-"))
            target = Path(scratch) / "build.log"
        else:  # renamed into place when the block ends, failed or not; removed on Ctrl-C
            make_folder(log_path.parent)
            target = stack.enter_context(atomic_output(log_path))
            check_build_log(log_path)  # again, under the log's lock
        started = time.perf_counter()
        with open(target, "w") as stream:
            stream.write(header)
            stream.flush()
            try:
                result = subprocess.run(command, stdout=stream, stderr=subprocess.STDOUT)
            except OSError as exc:
                raise ContainerError(f"image {ref}: cannot start {engine.name}: {exc}") from None
        seconds = time.perf_counter() - started
        text = target.read_text(errors="replace").removeprefix(header) if result.returncode else ""
    if result.returncode != 0:
        raise ContainerError(
            f"image {ref}: build failed at step {_failed_step(text)!r} "
            f"(exit {result.returncode}): {_last_error(text)}"
            + (f" (full log: {log_path})" if log_path else "")
            + _hint(engine, text)
        )
    if prune:
        remove_superseded(engine, image)
    return BuiltImage(ref, seconds, image_size(engine, ref))


def build_log(logs: str | os.PathLike, image: str) -> Path:
    """The build log of ``image`` in the folder ``logs`` (``whatif images build --logs``)."""
    return Path(logs) / f"{image}.log"


def build_images(
    engine: Engine,
    images: Sequence[str],
    repo: str | os.PathLike,
    base: str | None = None,
    maven_repo: str | os.PathLike | None = None,
    logs: str | os.PathLike | None = None,
    parallel: int = DEFAULT_PARALLEL_BUILDS,
    started: Callable[[str], None] | None = None,
) -> Iterator[BuiltImage]:
    """``build_image`` for each of ``images``, ``parallel`` builds at a time; yields each
    ``BuiltImage`` in the order of ``images``.

    The images share their first layers (Python, its virtual environment and the toolkit's
    dependencies: the engine's layer cache makes them once), and the untagged images each build
    leaves (``remove_superseded``) are removed only after the last build, so that the later
    builds find those layers. With ``parallel`` above 1 the first image builds alone, making
    those shared layers once, and the others then build ``parallel`` at a time: builds at once
    overlap their waits on downloads and on writing layers, but each running build also holds
    its own layers in the engine's temporary storage, so the disk needs room for all of them.
    ``logs`` is a folder for ``<image>.log``; ``started(image)`` is called as each build
    begins. Once any build has failed no other begins; the first failure in the
    order of ``images`` is raised when its turn comes (builds already running finish: an
    engine cannot stop a build cleanly).
    """
    if isinstance(parallel, bool) or not isinstance(parallel, int) or parallel < 1:
        raise ValueError(
            f"the number of builds at once must be a positive integer, got {parallel!r}"
        )
    failed = threading.Event()

    def one(image: str) -> BuiltImage:
        if failed.is_set():
            raise ContainerError(f"image {image}: not built: an earlier build failed")
        if started is not None:
            started(image)
        log = None if logs is None else build_log(logs, image)
        try:
            result = build_image(engine, image, repo, base, maven_repo, log, prune=False)
        except BaseException:
            failed.set()
            raise
        built.append(image)
        return result

    built: list[str] = []  # the images built, whose leftovers are removed at the end
    try:
        if parallel == 1 or len(images) < 2:
            for image in images:
                yield one(image)
            return
        yield one(images[0])  # alone: it makes the layers every image shares
        pool = concurrent.futures.ThreadPoolExecutor(parallel, thread_name_prefix="whatif-build")
        try:
            futures = [pool.submit(one, image) for image in images[1:]]
            for future in futures:
                yield future.result()
        finally:
            failed.set()  # nothing begins after a failure, an interruption or an early stop
            pool.shutdown(wait=True, cancel_futures=True)
    finally:
        for image in built:
            remove_superseded(engine, image)


def remove_superseded(engine: Engine, image: str) -> None:
    """Remove the untagged images this toolkit built for ``image``: its build stages and the
    image a newer build replaced (``<engine> image prune`` filtered by ``BUILT_BY_LABEL``).

    Images in use by a container, tagged images and images without the label are kept. A
    failure to prune only leaves disk space used, so it is not an error.
    """
    command = [engine.path, "image", "prune", "--force"]
    command += ["--filter", f"label={BUILT_BY_LABEL}={image}"]
    try:
        subprocess.run(command, capture_output=True, timeout=ENGINE_TIMEOUT_S * 5)
    except (OSError, subprocess.TimeoutExpired):
        pass


def image_size(engine: Engine, ref: str) -> int:
    """The size of image ``ref`` in bytes, as ``<engine> image inspect`` reports it."""
    result = subprocess.run(
        [engine.path, "image", "inspect", "--format", "{{.Size}}", ref],
        capture_output=True,
        text=True,
    )
    if result.returncode != 0 or not result.stdout.strip().isdigit():
        raise ContainerError(f"image {ref}: not found ({_last_error(result.stderr)})")
    return int(result.stdout.strip())


def run_whatif(
    engine: Engine, ref: str, args: list[str], mounts: Sequence[tuple[str, str, bool]] = ()
) -> str:
    """Run ``whatif ARGS`` in image ``ref`` (never pulled), as the calling user; its stdout.

    ``mounts`` are (host path, container path, read-only) triples. The container has no
    network: nothing a simulation does needs one.
    """
    command = [engine.path, "run", "--rm", "--pull", "never", "--network", "none"]
    if engine.name == "podman" and os.geteuid() != 0:
        command += ["--userns", "keep-id"]  # rootless: the caller's uid inside and out
    else:
        command += ["--user", f"{os.getuid()}:{os.getgid()}", "--env", "HOME=/tmp"]
    for host, inside, read_only in mounts:
        command += ["--volume", f"{host}:{inside}" + (":ro" if read_only else "")]
    command += [ref, *args]
    step = "whatif " + " ".join(args)
    try:
        result = subprocess.run(command, capture_output=True, text=True)
    except OSError as exc:
        raise ContainerError(f"image {ref}: cannot start {engine.name}: {exc}") from None
    if result.returncode != 0:
        raise ContainerError(
            f"image {ref}: step {step!r} failed (exit {result.returncode}): "
            f"{_last_error(result.stderr)}" + _hint(engine, result.stderr)
        )
    return result.stdout


def run_in_image(
    engine: Engine,
    simulator: str,
    days: float | None = None,
    trace: str | None = None,
    image: str | None = None,
) -> Baselines:
    """Run ``whatif simulate`` for ``simulator`` inside its image; the ``Baselines`` it wrote.

    ``image`` overrides the default ``whatif-<simulator>:<version>``. The file is read back
    with the store's checks (every content hash recomputed).
    """
    from whatif_bench.simulators.store import read_baselines

    ref = engine.image_ref(image or image_name(simulator))
    args = ["simulate", "--simulator", simulator, "--out", f"/out/{simulator}.h5"]
    if days is not None:
        args += ["--days", repr(float(days))]
    with tempfile.TemporaryDirectory(prefix="whatif-container-") as tmp:
        mounts = [(tmp, "/out", False)]
        if trace is not None:
            mounts.append((str(Path(trace).resolve()), "/trace", True))
            args += ["--trace", "/trace"]
        run_whatif(engine, ref, args, mounts)
        path = Path(tmp) / f"{simulator}.h5"
        if not path.is_file():
            raise ContainerError(f"image {ref}: step 'whatif simulate' wrote no {path.name}")
        return read_baselines(path)[simulator]


@dataclass(frozen=True)
class Check:
    """One image checked against the host: version line and the two content hashes."""

    ref: str
    simulator: str
    version: str
    host_hash: str
    image_hash: str
    host_seconds: float
    image_seconds: float


def check_image(
    engine: Engine,
    simulator: str,
    days: float,
    trace: str | None = None,
    image: str | None = None,
) -> Check:
    """``whatif --version`` in an image (default: the simulator's own), then the same run of
    ``simulator`` on the host and in the image: their content hashes must be equal."""
    from whatif_bench.simulators.catalog import get_simulator

    image = image or simulator
    ref = engine.image_ref(image_name(image))
    version = run_whatif(engine, ref, ["--version"]).strip()
    if version != f"whatif-bench {__version__}":
        raise ContainerError(
            f"image {ref}: step 'whatif --version' printed {version!r}, "
            f"expected 'whatif-bench {__version__}' (rebuild the image)"
        )
    options: dict = {"days": days}
    if simulator == "opendc":
        if trace is None:
            raise ContainerError(
                f"image {ref}: checking OpenDC needs a Bitbrains trace (--trace or "
                "$WHATIF_OPENDC_TRACE)"
            )
        options["trace"] = trace
    started = time.perf_counter()
    host = get_simulator(simulator).runner()(**options)
    host_seconds = time.perf_counter() - started
    started = time.perf_counter()
    inside = run_in_image(engine, simulator, days, trace, image=image_name(image))
    image_seconds = time.perf_counter() - started
    if inside.content_hash() != host.content_hash():
        raise ContainerError(
            f"image {ref}: step 'compare with the host run' failed: the {simulator} run of "
            f"{days:g} days differs from the host's (content hash {inside.content_hash()[:12]} "
            f"in the image, {host.content_hash()[:12]} on the host)"
        )
    return Check(
        ref,
        simulator,
        version,
        host.content_hash(),
        inside.content_hash(),
        host_seconds,
        image_seconds,
    )


def _hint(engine: Engine, output: str) -> str:
    """What to do about a podman that cannot set resource limits (crun on these machines)."""
    if engine.name == "podman" and "rlimit" in output.lower():
        return RLIMIT_HINT
    return ""


def _last_error(text: str) -> str:
    """The most telling line of an engine's or whatif's output: its last ``error`` line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for line in reversed(lines):
        if re.search(r"\berror\b", line, re.IGNORECASE):
            return line
    return lines[-1] if lines else "no output"


def _failed_step(text: str) -> str:
    """The last build step a build log started (podman's ``STEP n/m:``, BuildKit's ``#n [...]``)."""
    steps = re.findall(r"^(?:\[\d+/\d+\] )?STEP \d+/\d+: (.*)$|^#\d+ \[[^\]]+\] (.*)$", text, re.M)
    if not steps:
        return "start"
    step = next(part for part in steps[-1] if part)
    return step if len(step) <= 120 else step[:117] + "..."
