"""Training worlds: real runs held apart from the benchmark, cached once, and their errors."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import textwrap

import h5py
import numpy as np
import pytest

from tests.conftest import run_cli
from tests.opendc_support import need_jvm
from whatif_bench.simulators import (
    epanet,
    gridlabd,
    opendc,
    read_baselines,
    shipped_baselines_path,
    sumo,
)
from whatif_bench.simulators.base import SimulatorError
from whatif_bench.simulators.worlds import (
    SETTING_INPUT,
    TRAINING_WORLDS,
    WorldCache,
    WorldError,
    WorldSetting,
    get_world,
    run_world,
    training_worlds,
)

# A fast run: fewer steps than the benchmark, still several pump cycles.
SHORT_EPANET = "epanet-demand-summer"


@pytest.fixture(scope="module")
def shipped():
    return read_baselines(shipped_baselines_path())


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """One cache for the module's full-length runs, so each world runs at most once."""
    return WorldCache(tmp_path_factory.mktemp("worlds"))


def _window_digests(values: np.ndarray, width: int, stride: int = 1, busy: bool = False):
    """Digests of the windows of ``values`` of ``width`` steps starting every ``stride`` steps;
    with ``busy`` only windows holding at least 24 distinct values, or a quarter of the steps."""
    windows = np.lib.stride_tricks.sliding_window_view(values, width)[::stride]
    return {
        hashlib.blake2b(w.tobytes(), digest_size=16).digest()
        for w in windows
        if not busy or np.unique(w).size >= min(width / 4, 24)
    }


def shared_window(world: np.ndarray, benchmark: np.ndarray, width: int) -> bool:
    """Whether a busy window of ``width`` steps of ``world`` equals any window of ``benchmark``.

    Any such window contains a window of half the width that starts at a multiple of that
    half, so those are compared with every half-width window of the benchmark. A stretch
    with few distinct values (flat, an on/off indicator, a night of nearly empty roads) can
    coincide between two independent runs and carries no trace of the benchmark; it is not
    compared.
    """
    half = width // 2
    return bool(_window_digests(world, half, half, busy=True) & _window_digests(benchmark, half))


def test_shared_window_finds_a_copied_stretch_at_any_offset(rng):
    benchmark = rng.normal(size=2000)
    world = rng.normal(size=1500)
    assert not shared_window(world, benchmark, 100)
    world[700:800] = benchmark[1234:1334]
    assert shared_window(world, benchmark, 100)
    world[700:800] = 0.0  # a flat stretch is not a trace of the benchmark
    benchmark[1234:1334] = 0.0
    assert not shared_window(world, benchmark, 100)


def assert_held_apart(world, benchmark, width: int) -> None:
    """Same targets, units and covariate base values; every series differs, no shared day."""
    assert list(world.series) == list(benchmark.series)
    assert world.units == benchmark.units
    assert world.covariate_base_values == benchmark.covariate_base_values
    assert world.interval_s == benchmark.interval_s
    assert world.content_hash() != benchmark.content_hash()
    for name, values in world.series.items():
        reference = benchmark.series[name]
        assert not np.array_equal(values, reference[: values.size]), name
        assert not shared_window(values, reference, width), f"{name} repeats the benchmark"


def test_every_simulator_has_at_least_three_worlds():
    assert set(TRAINING_WORLDS) == {"epanet", "gridlabd", "sumo", "opendc"}
    for simulator in ("epanet", "gridlabd", "sumo", "opendc"):
        assert len(TRAINING_WORLDS[simulator]) >= 3
        assert all(w.simulator == simulator for w in TRAINING_WORLDS[simulator])
    names = [w.name for w in training_worlds()]
    assert len(set(names)) == len(names)
    assert len({hash(w) for w in training_worlds()}) == len(names)  # settings are hashable


def test_training_worlds_keep_a_stable_order_whatever_the_order_asked():
    assert training_worlds(["sumo", "epanet"]) == training_worlds(["epanet", "sumo"])
    assert training_worlds("gridlabd") == list(TRAINING_WORLDS["gridlabd"])
    assert training_worlds() == [w for ws in TRAINING_WORLDS.values() for w in ws]
    assert training_worlds(["opendc"]) == list(TRAINING_WORLDS["opendc"])


def test_unknown_world_or_simulator_lists_the_valid_names():
    with pytest.raises(WorldError, match="unknown training world 'nope'.*sumo-seed-7"):
        get_world("nope")
    with pytest.raises(WorldError, match=r"unknown simulator\(s\) \['nope'\]"):
        training_worlds(["epanet", "nope"])


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"name": "../escape"}, "not a safe file name"),
        ({"name": ""}, "not a safe file name"),
        ({"simulator": "matlab"}, "has no training worlds"),
        ({"description": "two\nlines"}, "one line"),
        ({"params": (("seeds", 3),)}, r"unknown parameter\(s\) \['seeds'\]"),
        ({"params": (("seed", 3), ("seed", 4))}, "given twice"),
        ({"params": (("seed", [3]),)}, "hashable"),
        ({"params": (("seed", 42),)}, "benchmark's own base setting"),
        ({"params": ()}, "benchmark's own base setting"),
        (
            {"simulator": "gridlabd", "params": (("start", gridlabd.START),)},
            "benchmark's own base setting",
        ),
    ],
)
def test_malformed_world_settings_are_refused_naming_the_field(fields, message):
    values = {"name": "sumo-x", "simulator": "sumo", "description": "x", "params": (("seed", 1),)}
    with pytest.raises(WorldError, match=message):
        WorldSetting(**{**values, **fields})


def test_wrappers_refuse_bad_world_parameters():
    with pytest.raises(SimulatorError, match="demand_pattern must be"):
        epanet.run(days=1, demand_pattern=(1.0, -1.0))
    with pytest.raises(SimulatorError, match="multiple of 300"):
        epanet.run(days=1, demand_pattern=(1.0,), pattern_step_s=100)
    with pytest.raises(SimulatorError, match="unknown weather file"):
        gridlabd.run(days=1, weather_file="nowhere.csv")
    with pytest.raises(SimulatorError, match="not 'YYYY-MM-DD HH:MM:SS'"):
        gridlabd.run(days=1, start="July")
    with pytest.raises(SimulatorError, match="in order within 0-24 h"):
        sumo.run(days=1, profile=((0, 12, 100), (6, 24, 100)))
    with pytest.raises(SimulatorError, match="seed must be"):
        sumo.run(days=1, seed=-1)


@pytest.mark.parametrize("world", TRAINING_WORLDS["epanet"], ids=lambda w: w.name)
@pytest.mark.one_quick  # about 4 s over all its cases
def test_epanet_world_is_a_real_run_held_apart_from_the_benchmark(world, shipped, cache):
    baselines = cache.get(world)
    assert baselines.n_steps == shipped["epanet"].n_steps  # the benchmark's length by default
    assert_held_apart(baselines, shipped["epanet"], width=288)  # one day
    # the wrapper ran EPANET on the changed network: its input file holds the new pattern
    assert baselines.inputs["run.inp"] != shipped["epanet"].inputs["run.inp"]
    assert json.loads(baselines.inputs[SETTING_INPUT])["name"] == world.name
    assert world.name in baselines.notes


def _gridlabd_params():
    fast = {"gridlabd-miami-january", "gridlabd-greensboro-july"}  # TMY2 reader; a moved start
    return [
        pytest.param(w, id=w.name, marks=() if w.name in fast else pytest.mark.slow)
        for w in TRAINING_WORLDS["gridlabd"]
    ]


@pytest.mark.parametrize("world", _gridlabd_params())
@pytest.mark.one_quick  # about 6 s over all its cases
def test_gridlabd_world_is_a_real_run_held_apart_from_the_benchmark(world, shipped, cache):
    baselines = cache.get(world)
    assert baselines.n_steps == shipped["gridlabd"].n_steps
    assert_held_apart(baselines, shipped["gridlabd"], width=1440)  # one day
    inputs = ("model.glm", "weather")  # another period, or another weather file
    assert [baselines.inputs[k] for k in inputs] != [shipped["gridlabd"].inputs[k] for k in inputs]
    assert np.ptp(baselines.series["air_temperature"]) > 0


@pytest.mark.slow  # two full-length GridLAB-D worlds: about 2 s
def test_gridlabd_world_records_where_and_when_it_ran(cache):
    july = cache.get(get_world("gridlabd-greensboro-july"))
    assert july.start == "2000-07-08T00:00:00"
    assert july.series["is_COOL_on"].max() == 2.0  # July in North Carolina needs cooling
    miami = cache.get(get_world("gridlabd-miami-january"))
    assert (
        "12839.tm2" in miami.inputs["weather"]
        and 'tmyfile "weather.tmy2"' in (miami.inputs["model.glm"])
    )


@pytest.mark.parametrize("world", TRAINING_WORLDS["sumo"], ids=lambda w: w.name)
@pytest.mark.slow  # about 3.5 s (a whole day: 8 s)
def test_a_short_sumo_world_is_held_apart_from_the_benchmark(world, shipped, tmp_path):
    # half a day: the night and the morning peak; no six hours of it are the benchmark's
    baselines = run_world(world, days=0.5, workdir=tmp_path)
    assert baselines.n_steps == 144
    assert_held_apart(baselines, shipped["sumo"], width=72)  # six hours


# A SUMO world's month takes minutes of simulation (four of them would take a quarter of an hour
# on two cores), so the whole months are checked on request only: bash dev test -m heavy.
@pytest.mark.heavy
@pytest.mark.parametrize("world", TRAINING_WORLDS["sumo"], ids=lambda w: w.name)
def test_sumo_world_is_a_real_run_held_apart_from_the_benchmark(world, shipped, cache):
    baselines = cache.get(world)
    assert baselines.n_steps == shipped["sumo"].n_steps
    assert_held_apart(baselines, shipped["sumo"], width=288)


@pytest.mark.parametrize("world", TRAINING_WORLDS["opendc"], ids=lambda w: w.name)
@pytest.mark.slow  # about 2 s
def test_opendc_world_is_a_real_run_held_apart_from_the_benchmark(world, shipped, cache):
    """Other VMs of the benchmark's trace in its VM slots: a real OpenDC 2.0 run (the library
    backend, on the shared trace) whose every series differs from the benchmark's."""
    need_jvm()
    baselines = cache.get(world)
    assert baselines.n_steps >= 7488 + 864  # C4 fits
    assert_held_apart(baselines, shipped["opendc"], width=288)  # one day
    setting = json.loads(baselines.inputs["setting.json"])
    assert setting["vms"] == dict(zip(opendc.VM_SLOTS, world.kwargs()["vms"], strict=True))
    assert setting["trace"] == json.loads(shipped["opendc"].inputs["setting.json"])["trace"]
    assert world.name in baselines.notes


def test_worlds_never_share_a_content_hash(tmp_path):
    hashes = [
        run_world(w, days=1, workdir=tmp_path).content_hash() for w in training_worlds("epanet")
    ]
    assert len(set(hashes)) == len(hashes)


def test_second_get_reads_the_cache_without_running_again(tmp_path):
    cache = WorldCache(tmp_path)
    world = get_world(SHORT_EPANET)
    first = cache.get(world, days=1)
    path = cache.path(world, days=1)
    assert cache.runs == 1 and path.is_file() and path.name == f"{SHORT_EPANET}-1d.h5"
    stamp = path.stat().st_mtime_ns
    second = WorldCache(tmp_path).get(world, days=1)
    again = cache.get(world, days=1)
    assert cache.runs == 1 and path.stat().st_mtime_ns == stamp
    for name, values in first.series.items():
        np.testing.assert_array_equal(second.series[name], values)
        np.testing.assert_array_equal(again.series[name], values)
    assert second.content_hash() == first.content_hash()
    cache.get(world, days=1, rebuild=True)
    assert cache.runs == 2


def test_cache_folder_defaults_to_the_environment_then_home(tmp_path, monkeypatch):
    monkeypatch.setenv("WHATIF_WORLDS", str(tmp_path / "env"))
    assert WorldCache().folder == tmp_path / "env"
    monkeypatch.delenv("WHATIF_WORLDS")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert WorldCache().folder == tmp_path / "home" / ".cache" / "whatif-bench" / "worlds"
    world = get_world(SHORT_EPANET)
    assert WorldCache(tmp_path).path(world) == tmp_path / f"{SHORT_EPANET}.h5"


def test_corrupt_cache_file_is_one_clear_error_naming_it_and_the_rebuild(tmp_path):
    cache = WorldCache(tmp_path)
    world = get_world(SHORT_EPANET)
    path = cache.path(world, days=1)
    # a file that is not recognisably a store of ours is never read or replaced, rebuild or not
    path.write_bytes(b"not an HDF5 file")
    for rebuild in (False, True):
        with pytest.raises(WorldError, match="not recognisable as a training-world cache file"):
            cache.get(world, days=1, rebuild=rebuild)
        assert path.read_bytes() == b"not an HDF5 file"
    path.unlink()
    cache.get(world, days=1)
    # a store of ours whose numbers were edited fails the store's hash check; --rebuild fixes it
    with h5py.File(path, "r+") as h5:
        h5["epanet/series/pressure_10"][0] += 1.0
    with pytest.raises(WorldError, match="does not match its recorded hash.*--rebuild") as caught:
        WorldCache(tmp_path).get(world, days=1)
    assert str(path) in str(caught.value) and "--days 1" in str(caught.value)
    rebuilt = WorldCache(tmp_path)
    rebuilt.get(world, days=1, rebuild=True)
    assert rebuilt.runs == 1
    WorldCache(tmp_path).get(world, days=1)  # reads cleanly again


def test_a_cache_file_of_an_older_world_definition_is_rebuilt(tmp_path):
    cache = WorldCache(tmp_path)
    world = get_world(SHORT_EPANET)
    cache.get(world, days=1)
    changed = WorldSetting(world.name, "epanet", "changed", (("demand_pattern", (1.0, 2.0)),))
    rebuilt = cache.get(changed, days=1)
    assert cache.runs == 2
    assert json.loads(rebuilt.inputs[SETTING_INPUT])["params"]["demand_pattern"] == [1.0, 2.0]


@pytest.mark.slow  # about 2 s
def test_two_processes_getting_one_world_run_it_once(tmp_path):
    script = textwrap.dedent(
        f"""
        from whatif_bench.simulators.worlds import WorldCache, get_world
        cache = WorldCache({str(tmp_path)!r})
        baselines = cache.get(get_world({SHORT_EPANET!r}), days=2)
        print(cache.runs, baselines.content_hash())
        """
    )
    processes = [
        subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [p.communicate(timeout=300)[0].split() for p in processes]
    assert all(p.returncode == 0 for p in processes)
    assert sum(int(runs) for runs, _ in outputs) == 1
    assert len({digest for _, digest in outputs}) == 1
    files = sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock"))
    assert files == [f"{SHORT_EPANET}-2d.h5"]  # no partial file left behind
    stored = read_baselines(tmp_path / files[0])["epanet"]
    assert stored.content_hash() == outputs[0][1]


def test_cli_lists_and_builds_worlds(tmp_path):
    listed = run_cli("worlds", "list", "--simulator", "gridlabd", "--json", check=True)
    names = [w["name"] for w in json.loads(listed.stdout)]
    assert names == [w.name for w in TRAINING_WORLDS["gridlabd"]]
    table = run_cli("worlds", "list", check=True).stdout
    assert all(w.name in table for w in training_worlds())
    built = run_cli(
        "worlds", "build", "--world", SHORT_EPANET, "--cache", str(tmp_path), "--days", "1"
    )
    assert built.returncode == 0, built.stderr
    assert "ran in" in built.stderr and (tmp_path / f"{SHORT_EPANET}-1d.h5").is_file()
    again = run_cli(
        "worlds", "build", "--world", SHORT_EPANET, "--cache", str(tmp_path), "--days", "1"
    )
    assert "cached" in again.stderr


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["--world", "nope"], 1, "error: unknown training world 'nope'"),
        (
            ["--simulator", "opendc", "--world", SHORT_EPANET],
            1,
            "no training world matches the --simulator and --world options",
        ),
        (["--days", "0"], 2, "expected a finite number > 0"),
        (["--simulator", "nope"], 2, "invalid choice"),
    ],
)
def test_cli_bad_input_is_one_error_line(tmp_path, args, code, message):
    result = run_cli("worlds", "build", "--cache", str(tmp_path), *args)
    assert result.returncode == code
    assert message in result.stderr
    if code == 1:
        assert result.stderr.count("error:") == 1 and "Traceback" not in result.stderr


def test_cli_help_states_every_default():
    text = run_cli("worlds", "build", "--help", check=True).stdout
    for option in ("--simulator", "--world", "--cache", "--days", "--rebuild"):
        assert option in text
    assert text.count("default") >= 5


def test_a_build_says_which_world_what_runs_it_how_long_and_where(tmp_path, capsys):
    from whatif_bench.simulators.worlds import WorldCache, build_note

    world = TRAINING_WORLDS["epanet"][0]
    cache = WorldCache(tmp_path / "worlds")
    cache.get(world, days=1)
    note = capsys.readouterr().err
    path = cache.path(world, 1)
    assert note == build_note(world, 1, path) + "\n"
    assert note.startswith(f"note: building training world {world.name}: EPANET Net1, 1 ")
    assert "about 1 s on two cores" in note and str(path) in note
    cache.get(world, days=1)  # cached: nothing to say
    assert capsys.readouterr().err == ""
    WorldCache(tmp_path / "quiet", announce=False).get(world, days=1)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize(
    ("simulator", "days", "says"),
    [("sumo", 30, "about 2 min"), ("epanet", 32, "about 2 s"), ("opendc", 30, "about 24 s")],
)
def test_the_rough_time_is_per_simulated_day(simulator, days, says, tmp_path):
    from whatif_bench.simulators.worlds import build_note

    world = TRAINING_WORLDS[simulator][0]
    assert f"{says} on two cores" in build_note(world, days, tmp_path / "w.h5")
