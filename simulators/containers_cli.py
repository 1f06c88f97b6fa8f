"""``whatif images {build,check}``: build the container images, check them against the host."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from whatif_bench.cli_lists import add_list_option
from whatif_bench.cli_types import MAX_DAYS, days_float, positive_int
from whatif_bench.errors import WhatIfError

# The simulators a short run checks in each image (the toolkit image has every engine that
# installs from the package index; OpenDC's image has a Java runtime and the built driver, and
# its check needs a Bitbrains trace).
CHECKED = {
    "epanet": ("epanet",),
    "sumo": ("sumo",),
    "gridlabd": ("gridlabd",),
    "opendc": ("opendc",),
    "toolkit": ("epanet", "sumo", "gridlabd"),
}
CHECK_DAYS = 1.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from whatif_bench.simulators.containers import DEFAULT_PARALLEL_BUILDS, ENGINES, IMAGES

    sub = parser.add_subparsers(dest="action", required=True)
    build = sub.add_parser("build", help="build the images (docker/<image>/Dockerfile)")
    check = sub.add_parser(
        "check", help="`whatif --version` and a short simulation in each image, against the host"
    )
    for command in (build, check):
        command.add_argument(
            "--engine",
            choices=ENGINES,
            help="container engine (default: docker if its daemon answers, else podman)",
        )
        add_list_option(
            command,
            "--images",
            "--image",
            dest="image",
            allowed=IMAGES,
            metavar="IMAGE",
            help=f"only these images, of {', '.join(IMAGES)} (default: every image)",
        )
    build.add_argument(
        "--base",
        help="base image of every image (default: the Dockerfiles' python:3.11-slim)",
    )
    build.add_argument(
        "--maven-repo",
        metavar="DIR",
        help="OpenDC image: a local Maven repository holding org.opendc:*:2.0, handed to the "
        "build beside Maven Central (default: $WHATIF_OPENDC_MAVEN_REPO, else Central alone)",
    )
    build.add_argument(
        "--repo",
        default=".",
        help="repository root holding docker/ (default: ., the current folder)",
    )
    build.add_argument("--logs", help="folder for one build log per image (default: none kept)")
    build.add_argument(
        "--parallel",
        type=positive_int,
        default=DEFAULT_PARALLEL_BUILDS,
        help="images built at once after the first, which builds alone and makes the layers "
        "they share (threads that wait on the engine, not worker processes like the --jobs of "
        "generate); each running build needs its own temporary disk space, about 1-2 GB; 1 "
        "builds one after another (default: %(default)s)",
    )
    build.set_defaults(handler=_build)
    check.add_argument(
        "--days",
        type=days_float,
        default=CHECK_DAYS,
        help=f"simulated days of each run, at most {MAX_DAYS:g} (default: %(default)s)",
    )
    check.add_argument(
        "--trace",
        help="OpenDC: Bitbrains trace folder; without one the OpenDC image's run is skipped "
        "(default: $WHATIF_OPENDC_TRACE)",
    )
    check.set_defaults(handler=_check)


def _images(args: argparse.Namespace) -> list[str]:
    """The images asked for (default: all)."""
    from whatif_bench.simulators.containers import IMAGES

    return list(dict.fromkeys(args.image)) if args.image else list(IMAGES)


def _build(args: argparse.Namespace) -> int:
    from whatif_bench.outputs import check_regular, make_folder, real_path
    from whatif_bench.simulators.containers import (
        build_images,
        build_log,
        check_build_log,
        check_log_folder,
        find_engine,
    )

    repo = check_regular(args.repo, "repository folder")
    if not (repo / "docker").is_dir():
        raise WhatIfError(f"{real_path(repo)} holds no docker/ folder (pass --repo)")
    # every path is checked before the engine is asked or anything is built or made
    if args.maven_repo:
        check_regular(Path(args.maven_repo).expanduser(), "Maven repository")
    logs = None if args.logs is None else check_log_folder(args.logs)
    images = _images(args)
    for image in images:
        if logs is not None:
            check_build_log(build_log(logs, image))
    engine = find_engine(args.engine)
    if logs is not None:
        make_folder(logs)

    def started(image: str) -> None:
        print(f"building {image} with {engine.name} ...", file=sys.stderr, flush=True)

    for built in build_images(
        engine, images, repo, args.base, args.maven_repo, logs, args.parallel, started
    ):
        print(f"built {built.ref} in {built.seconds:.0f} s, {built.size_bytes / 1e9:.2f} GB")
    return 0


def _check(args: argparse.Namespace) -> int:
    from whatif_bench.simulators.containers import check_image, find_engine
    from whatif_bench.simulators.opendc_settings import trace_setting

    engine = find_engine(args.engine)
    trace = trace_setting(args.trace)
    for image in _images(args):
        for simulator in CHECKED[image]:
            if simulator == "opendc" and trace is None:
                print(
                    "warning: skipping the opendc check: it needs a Bitbrains trace (--trace "
                    "or $WHATIF_OPENDC_TRACE)",
                    file=sys.stderr,
                )
                continue
            result = check_image(engine, simulator, args.days, trace, image=image)
            print(
                f"{result.ref}: {result.version}; {simulator} {args.days:g} d: hash "
                f"{result.image_hash[:12]} in {result.image_seconds:.1f} s = host "
                f"{result.host_hash[:12]} in {result.host_seconds:.1f} s"
            )
    return 0
