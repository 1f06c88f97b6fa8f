"""``whatif images {build,check}``: build the container images, check them against the host."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from whatif_bench.cli_types import positive_float
from whatif_bench.errors import WhatIfError

# The simulators a short run checks in each image (the toolkit image has every engine that
# installs from the package index; OpenDC's needs an OpenDC image and a trace).
CHECKED = {
    "epanet": ("epanet",),
    "sumo": ("sumo",),
    "gridlabd": ("gridlabd",),
    "opendc": ("opendc",),
    "toolkit": ("epanet", "sumo", "gridlabd"),
}
CHECK_DAYS = 1.0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from whatif_bench.simulators.containers import ENGINES, IMAGES

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
        command.add_argument(
            "--image",
            action="append",
            choices=IMAGES,
            help="only this image; repeatable (default: every image; opendc only when it can be)",
        )
        command.add_argument(
            "--opendc-image",
            help="image that runs OpenDC, the base of the OpenDC image (default: none, skipped)",
        )
    build.add_argument(
        "--base",
        help="base image of all but the OpenDC image (default: the Dockerfiles' python:3.11-slim)",
    )
    build.add_argument(
        "--repo",
        default=".",
        help="repository root holding docker/ (default: ., the current folder)",
    )
    build.add_argument("--logs", help="folder for one build log per image (default: none kept)")
    build.set_defaults(handler=_build)
    check.add_argument(
        "--days",
        type=positive_float,
        default=CHECK_DAYS,
        help="simulated days of each run (default: %(default)s)",
    )
    check.add_argument("--trace", help="OpenDC: Bitbrains trace folder (default: none)")
    check.set_defaults(handler=_check)


def _images(args: argparse.Namespace) -> list[str]:
    """The images asked for; OpenDC's is left out (with a warning) unless it can be used."""
    from whatif_bench.simulators.containers import IMAGES, OPENDC_NOTE

    if args.image:
        return list(dict.fromkeys(args.image))
    if args.opendc_image:
        return list(IMAGES)
    print(f"warning: skipping opendc: {OPENDC_NOTE}", file=sys.stderr)
    return [image for image in IMAGES if image != "opendc"]


def _build(args: argparse.Namespace) -> int:
    from whatif_bench.simulators.containers import build_image, find_engine

    repo = Path(args.repo)
    if not (repo / "docker").is_dir():
        raise WhatIfError(f"{repo.resolve()} holds no docker/ folder (pass --repo)")
    engine = find_engine(args.engine)
    if args.logs:
        Path(args.logs).mkdir(parents=True, exist_ok=True)
    for image in _images(args):
        log = Path(args.logs) / f"{image}.log" if args.logs else None
        print(f"building {image} with {engine.name} ...", file=sys.stderr)
        built = build_image(engine, image, repo, args.base, args.opendc_image, log)
        print(f"built {built.ref} in {built.seconds:.0f} s, {built.size_bytes / 1e9:.2f} GB")
    return 0


def _check(args: argparse.Namespace) -> int:
    from whatif_bench.simulators.containers import check_image, find_engine

    engine = find_engine(args.engine)
    for image in _images(args):
        for simulator in CHECKED[image]:
            result = check_image(engine, simulator, args.days, args.trace, image=image)
            print(
                f"{result.ref}: {result.version}; {simulator} {args.days:g} d: hash "
                f"{result.image_hash[:12]} in {result.image_seconds:.1f} s = host "
                f"{result.host_hash[:12]} in {result.host_seconds:.1f} s"
            )
    return 0
