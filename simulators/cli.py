"""``whatif simulate`` and ``whatif baselines {info,plot,combine}``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

from whatif_bench.cli_lists import add_list_option
from whatif_bench.cli_types import MAX_DAYS, days_float
from whatif_bench.errors import WhatIfError


def add_simulate_arguments(parser: argparse.ArgumentParser) -> None:
    from whatif_bench.simulators.catalog import SIMULATORS

    parser.add_argument(
        "--simulator",
        required=True,
        choices=[*SIMULATORS, "all"],
        help="simulator to run, or all (required)",
    )
    parser.add_argument("--out", required=True, help="baselines HDF5 file to write (required)")
    parser.add_argument(
        "--days",
        type=days_float,
        help=f"simulated days, a number > 0 and at most {MAX_DAYS:g} (ten years) "
        "(default: each simulator's base run)",
    )
    parser.add_argument(
        "--trace",
        help="OpenDC: a Bitbrains trace folder: OpenDC 2.0's meta.parquet + trace.parquet, the "
        "newer OpenDC's tasks.parquet + fragments.parquet, or GWA-T-12 <vm>.csv files "
        "(default: $WHATIF_OPENDC_TRACE)",
    )
    parser.add_argument(
        "--backend",
        choices=["auto", "library", "cli", "container"],
        default="auto",
        help="OpenDC: library = OpenDC 2.0's libraries through the toolkit's JVM driver (needs "
        "java and mvn); cli = the newer OpenDC's `opendc` command ($OPENDC_BIN or PATH); "
        "container = that command in the Docker image --image; auto = the first that can run, "
        "in that order (default: %(default)s)",
    )
    parser.add_argument(
        "--maven-repo",
        metavar="DIR",
        help="OpenDC library backend: one more Maven repository (a folder or URL) holding "
        "org.opendc:*:2.0, beside Maven Central (default: $WHATIF_OPENDC_MAVEN_REPO, else none)",
    )
    parser.add_argument(
        "--image",
        help="OpenDC container backend: a Docker image running the newer OpenDC's `opendc` "
        "command (default: none)",
    )
    parser.add_argument(
        "--extra-series",
        action="store_true",
        help="also record series no shipped target uses, for authoring new targets (EPANET: "
        "chlorine_<node> [mg/L]; SUMO: the far loop's occupancy [%%] and speed [m/s]; the "
        "others have none and refuse) (default: off)",
    )
    parser.add_argument(
        "--container",
        nargs="?",
        const="auto",
        choices=["auto", "docker", "podman"],
        help="run each simulator inside its image (whatif-SIM:VERSION, see `whatif images`) "
        "with this engine; without a value docker if its daemon answers, else podman "
        "(default: off, run on this machine)",
    )
    parser.set_defaults(handler=_simulate)


def add_baselines_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    info = sub.add_parser("info", help="summarise a baselines file")
    info.add_argument("file", nargs="?", help="baselines file (default: the shipped one)")
    info.set_defaults(handler=_info)
    plot = sub.add_parser("plot", help="one PNG overview per simulator")
    plot.add_argument("file", nargs="?", help="baselines file (default: the shipped one)")
    plot.add_argument("--out", required=True, help="folder for the PNG files (required)")
    plot.set_defaults(handler=_plot)
    combine = sub.add_parser(
        "combine",
        help="one baselines store from several files (stores, CSV or Parquet tables), "
        "each simulator once",
    )
    combine.add_argument(
        "files", nargs="+", metavar="FILE", help="baselines files, in any layout (one or more)"
    )
    combine.add_argument("--out", required=True, help="baselines HDF5 file to write (required)")
    combine.set_defaults(handler=_combine)


def _simulate(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from whatif_bench.outputs import check_output_path, output_lock, remove_stale_temporaries
    from whatif_bench.simulators.base import SimulatorUnavailable
    from whatif_bench.simulators.catalog import SIMULATORS
    from whatif_bench.simulators.store import check_store_path, write_baselines

    # Refuse an unusable output before the (slow) simulations: an existing folder, a path
    # under a file, or one of the inputs (the OpenDC trace folder and every file in it).
    inputs = _trace_inputs(args.trace) if args.simulator in ("opendc", "all") else []
    check_output_path(args.out, inputs)
    check_store_path(args.out)
    names = list(SIMULATORS) if args.simulator == "all" else [args.simulator]
    if args.container and args.image:
        raise WhatIfError("--image (OpenDC on this machine) cannot be combined with --container")
    if args.extra_series:
        without = [n for n in names if not SIMULATORS[n].extra_series]
        if without:
            raise WhatIfError(
                f"--extra-series: {', '.join(without)} records no extra series (only "
                f"{[n for n in SIMULATORS if SIMULATORS[n].extra_series]} do)"
            )
        if args.container:
            raise WhatIfError("--extra-series runs on this machine only; drop --container")
    # The output's lock is held from before the first simulation to the write, as `generate`
    # holds its corpus's: a second run on the same --out fails at once, not after its work.
    with output_lock(args.out):
        check_store_path(args.out)  # again under the lock: another run may have written it
        remove_stale_temporaries(Path(args.out))
        engine = None
        if args.container:
            from whatif_bench.simulators.containers import find_engine

            engine = find_engine(None if args.container == "auto" else args.container)
        results, skipped = [], []
        progress = tqdm(names, desc="simulating", unit="simulator", file=sys.stderr)
        for name in progress:
            entry = SIMULATORS[name]
            progress.set_description(f"running {name}")
            options: dict[str, Any] = {
                "days": entry.default_days if args.days is None else args.days
            }
            if name == "opendc":
                options.update(
                    trace=args.trace,
                    image=args.image,
                    backend=args.backend,
                    maven_repo=args.maven_repo,
                )
            if args.extra_series:
                options["extra_series"] = True
            started = time.perf_counter()
            try:
                if engine is None:
                    baselines = entry.runner()(**options)
                else:
                    baselines = _run_in_container(
                        engine, name, options, all_=args.simulator == "all"
                    )
            except SimulatorUnavailable as exc:
                if args.simulator != "all":
                    raise
                skipped.append(name)
                progress.write(f"warning: skipping {name}: {exc}", file=sys.stderr)
                continue
            progress.write(
                f"{name}: {len(baselines.series)} series x {baselines.n_steps} steps in "
                f"{time.perf_counter() - started:.1f} s (hash {baselines.content_hash()[:12]})",
                file=sys.stderr,
            )
            results.append(baselines)
        if not results:
            raise WhatIfError("no simulator could run; nothing written")
        path = write_baselines(args.out, results, inputs=inputs, lock=False)
    print(
        f"wrote {path} ({', '.join(b.simulator for b in results)})"
        + (f"; skipped {', '.join(skipped)}" if skipped else "")
    )
    return 0


def _trace_inputs(trace: str | None) -> list[str]:
    """The OpenDC trace folder (``--trace``, else ``$WHATIF_OPENDC_TRACE``) and its files:
    paths an output must not replace."""
    from whatif_bench.simulators.opendc_settings import trace_setting

    folder = trace_setting(trace)
    if folder is None:
        return []
    path = Path(folder)
    try:
        files = [str(p) for p in path.iterdir()] if path.is_dir() else []
    except OSError:
        files = []
    return [folder, *files]


def _run_in_container(engine, name: str, options: dict, all_: bool):
    """One simulator inside its image; with ``--simulator all`` an image that was never built
    (or OpenDC's, which needs an OpenDC image) is skipped like a simulator that cannot run."""
    from whatif_bench.simulators.base import SimulatorUnavailable
    from whatif_bench.simulators.containers import image_name, image_size, run_in_image

    if all_:
        try:
            image_size(engine, engine.image_ref(image_name(name)))
        except WhatIfError as exc:
            raise SimulatorUnavailable(str(exc)) from None
    from whatif_bench.simulators.opendc_settings import trace_setting

    trace = trace_setting(options.get("trace")) if name == "opendc" else None
    return run_in_image(engine, name, options["days"], trace)


def _path(args: argparse.Namespace) -> Path:
    from whatif_bench.outputs import refuse_empty
    from whatif_bench.simulators.store import shipped_baselines_path

    if args.file is None:
        return shipped_baselines_path()
    return Path(refuse_empty(args.file, "baselines file"))  # "" is not "the shipped one"


def _info(args: argparse.Namespace) -> int:
    from whatif_bench.simulators.store import read_baselines

    path = _path(args)
    for name, item in read_baselines(path).items():
        print(
            f"{name:<9} {len(item.series):>3} series x {item.n_steps:>6} steps of {item.interval_s:>4} s  "
            f"{item.simulator_version}  hash {item.content_hash()[:12]}"
        )
        if item.notes:
            print(f"          {item.notes}")
    return 0


def _plot(args: argparse.Namespace) -> int:
    from whatif_bench.outputs import check_output_path, make_folder, safe_name
    from whatif_bench.simulators.plot import plot_overview
    from whatif_bench.simulators.store import read_baselines

    out = check_output_path(args.out, folder=True)
    baselines = read_baselines(_path(args))
    make_folder(out)
    for name, item in baselines.items():
        path = out / f"{safe_name(name, 'simulator name')}.png"
        print(f"wrote {plot_overview(item, path)}")
    return 0


def _combine(args: argparse.Namespace) -> int:
    from whatif_bench.outputs import check_output_path
    from whatif_bench.simulators.store import check_store_path, read_baselines, write_baselines

    check_output_path(args.out, args.files)
    check_store_path(args.out)
    combined: dict = {}
    origin: dict[str, str] = {}
    for file in args.files:
        for name, item in read_baselines(file).items():
            if name in combined:
                raise WhatIfError(
                    f"{file}: simulator {name!r} is also in {origin[name]}; each may appear once"
                )
            combined[name], origin[name] = item, file
    path = write_baselines(args.out, combined.values(), inputs=args.files)
    print(f"wrote {path} ({', '.join(sorted(combined))})")
    return 0


def add_worlds_arguments(parser: argparse.ArgumentParser) -> None:
    # the worlds module imports the wrappers (numpy and more): only name cheap constants here
    from whatif_bench.simulators.catalog import SIMULATORS
    from whatif_bench.simulators.world_defaults import CACHE_ENV, DEFAULT_CACHE

    sims = sorted(SIMULATORS)
    sub = parser.add_subparsers(dest="action", required=True)
    listing = sub.add_parser("list", help="list the training worlds")
    listing.add_argument(
        "--simulator",
        choices=sims,
        help="only this simulator's worlds (default: every simulator)",
    )
    listing.add_argument(
        "--json", action="store_true", help="print JSON, one object per world (default: a table)"
    )
    listing.set_defaults(handler=_worlds_list)
    build = sub.add_parser(
        "build", help="run training worlds into the cache (each only once unless --rebuild)"
    )
    add_list_option(
        build,
        "--simulators",
        "--simulator",
        dest="simulator",
        allowed=sims,
        metavar="SIM",
        help=f"only these simulators' worlds, of {', '.join(sims)} (default: every simulator)",
    )
    add_list_option(
        build,
        "--worlds",
        "--world",
        dest="world",
        metavar="NAME",
        help="only these worlds (see 'whatif worlds list') (default: all)",
    )
    build.add_argument(
        "--cache",
        help=f"cache folder (default: ${CACHE_ENV}, else {DEFAULT_CACHE})",
    )
    build.add_argument(
        "--days",
        type=days_float,
        help=f"simulated days, a number > 0 and at most {MAX_DAYS:g} (ten years) "
        "(default: each simulator's benchmark run)",
    )
    build.add_argument(
        "--rebuild",
        action="store_true",
        help="run the worlds again and replace their cache files (default: off)",
    )
    build.set_defaults(
        handler=_worlds_build, interrupt_note="worlds already built are kept in the cache"
    )


def _worlds_list(args: argparse.Namespace) -> int:
    import json

    from whatif_bench.simulators.worlds import training_worlds

    worlds = training_worlds(None if args.simulator is None else [args.simulator])
    if args.json:
        print(json.dumps([world.to_dict() for world in worlds], indent=2))
        return 0
    width = max((len(world.name) for world in worlds), default=0)
    for world in worlds:
        print(f"{world.name:<{width}}  {world.simulator:<8}  {world.description}")
    return 0


def _worlds_build(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from whatif_bench.simulators.worlds import (
        TRAINING_WORLDS,
        WorldCache,
        get_world,
        training_worlds,
    )

    if args.world:
        worlds = [get_world(name) for name in dict.fromkeys(args.world)]
        if args.simulator:
            worlds = [world for world in worlds if world.simulator in args.simulator]
    else:
        worlds = training_worlds(args.simulator or None)
    if not worlds:
        empty = [sim for sim in args.simulator or () if not TRAINING_WORLDS[sim]]
        raise WhatIfError(
            "no training world matches the --simulator and --world options"
            + (
                f" ({', '.join(empty)} has no training worlds: no backend runs here)"
                if empty
                else ""
            )
        )
    cache = WorldCache(args.cache)
    progress = tqdm(worlds, desc="building", unit="world", file=sys.stderr)
    for world in progress:
        progress.set_description(f"running {world.name}")
        started = time.perf_counter()
        runs = cache.runs
        baselines = cache.get(world, args.days, rebuild=args.rebuild)
        how = f"ran in {time.perf_counter() - started:.1f} s" if cache.runs > runs else "cached"
        progress.write(
            f"{world.name}: {len(baselines.series)} series x {baselines.n_steps} steps, {how} "
            f"(hash {baselines.content_hash()[:12]})",
            file=sys.stderr,
        )
    print(f"{len(worlds)} training world(s) in {cache.folder}")
    return 0
