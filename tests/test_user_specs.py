"""User spec files and forms modules through the whole pipeline (docs/AUTHORING.md).

A spec adding a SUMO target with a user form, and one overriding a shipped SUMO target with
it, generate with worker processes; the corpus records the exact texts and the forms module's
hash; ``whatif verify`` rebuilds every pair bit for bit from them; ``whatif show`` and
``whatif evaluate`` read it. A changed or missing forms module is refused, and bad input is one
error naming file and field, with nothing written.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
from pathlib import Path

import h5py
import numpy as np
import pandas as pd
import pytest

from tests.conftest import run_cli, run_warm, run_whatif_drawing_one_skill_plot
from whatif_bench.generator import GenerationConfig
from whatif_bench.generator.types import GenerationError
from whatif_bench.relationships.source import RegistrySource
from whatif_bench.simulators import read_baselines, shipped_baselines_path, write_baselines

ROOT = Path(__file__).resolve().parents[1]
EXTRA = ROOT / "examples/extra_sumo_target.toml"
FORMS = ROOT / "examples/custom_forms.py"
OVERRIDE = """[simulator]
name = "sumo"
extends = true

[[targets]]
name = "speed_loop_e_1_near"
overrides = true
class = "saturating_speed"
unit = "m/s"
primary = "maxSpeed"
form = "logistic_saturation"
params = { gain = 0.3, rate = 2.0 }
rationale = "The near loop's speed saturates too."
"""
TARGETS = ("sumo/speed_loop_e_1_near", "sumo/speed_loop_e_0_far")


def clean_failure(result, message: str) -> None:
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert message in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """A baselines file whose SUMO part also records the new target's series, the override
    spec (it uses the example's class, so it is loaded after it) and a copy of the forms."""
    folder = tmp_path_factory.mktemp("user-specs")
    sumo = read_baselines(shipped_baselines_path())["sumo"]
    extra = dataclasses.replace(
        sumo,
        series={**sumo.series, "speed_loop_e_0_far": sumo.series["speed_loop_e_1_near"] * 0.9},
        units={**sumo.units, "speed_loop_e_0_far": "m/s"},
    )
    baselines = write_baselines(folder / "b.h5", [extra])
    override = folder / "override.toml"
    override.write_text(OVERRIDE)
    forms = folder / "forms.py"
    forms.write_bytes(FORMS.read_bytes())
    return {"folder": folder, "baselines": baselines, "override": override, "forms": forms}


def generate_args(inputs, out: Path, jobs: int) -> list[str]:
    return [
        "generate",
        "--baselines",
        str(inputs["baselines"]),
        "--spec",
        str(EXTRA),
        "--spec",
        str(inputs["override"]),
        "--forms",
        str(inputs["forms"]),
        "--targets",
        *TARGETS,
        "--jobs",
        str(jobs),
        "--out",
        str(out),
    ]


@pytest.fixture(scope="module")
def corpus(inputs, warm_whatif):
    """The corpus, made by ``whatif`` in a new process: the one that loads the user forms from
    nothing (numba compiles them in each new process, about 5 s)."""
    out = inputs["folder"] / "c.h5"
    result = run_warm(warm_whatif, *generate_args(inputs, out, jobs=2))
    assert result.returncode == 0, result.stderr
    return out


@pytest.mark.slow  # about 6 s
def test_a_user_corpus_records_exactly_what_it_used(corpus, inputs):
    forms_bytes = inputs["forms"].read_bytes()
    expected = RegistrySource.from_files([EXTRA, inputs["override"]], [inputs["forms"]])
    with h5py.File(corpus, "r") as h5:
        group = h5["user_registry"]
        texts = [group[name][()].decode() for name in sorted(group)]
        names = [str(group[name].attrs["name"]) for name in sorted(group)]
        forms = json.loads(group.attrs["forms"])
        registry_hash = h5.attrs["registry_hash"]
        targets = sorted(set(h5["pairs/target"].asstr()[()]))
    assert texts == [EXTRA.read_text(), OVERRIDE]
    assert names == [str(EXTRA), str(inputs["override"])]
    assert forms == [
        {"path": str(inputs["forms"].resolve()), "sha256": hashlib.sha256(forms_bytes).hexdigest()}
    ]
    assert registry_hash == expected.registry_hash() != RegistrySource().registry_hash()
    assert targets == ["speed_loop_e_0_far", "speed_loop_e_1_near"]


def test_the_override_replaces_the_shipped_target_in_place(inputs):
    """Same position in the registry (so the same task order), the user's form."""
    shipped = RegistrySource().load()
    source = RegistrySource.from_files([EXTRA, inputs["override"]], [inputs["forms"]])
    registry = source.load()
    names = [(r.simulator, r.target) for r in registry]
    assert names[: len(shipped)] == [(r.simulator, r.target) for r in shipped]
    assert names[len(shipped) :] == [("sumo", "speed_loop_e_0_far")]
    near = registry.get("sumo", "speed_loop_e_1_near")
    assert near.form.name == "logistic_saturation"
    assert shipped.get("sumo", "speed_loop_e_1_near").form.name != "logistic_saturation"


# the corpus fixture is a --jobs 2 run of its own (about 5 s): its tests are slow
@pytest.mark.slow
def test_workers_write_the_file_one_process_writes(corpus, inputs):
    """--jobs 2 (two threads, in a new process) and --jobs 1 (one, in this one): the same
    bytes. In this process the forms are compiled once for this module's in-process commands,
    given ``--forms`` each (a new process compiles them again)."""
    out = inputs["folder"] / "one.h5"
    result = run_cli(*generate_args(inputs, out, jobs=1))
    assert result.returncode == 0, result.stderr
    assert out.read_bytes() == corpus.read_bytes()


@pytest.mark.slow
def test_verify_rebuilds_every_pair_given_the_forms(corpus, inputs):
    # in this process (a new one is checked loading the forms from this path in
    # test_show_and_evaluate_read_a_user_corpus, and refusing without them below)
    result = run_cli(
        "verify",
        str(corpus),
        "--baselines",
        str(inputs["baselines"]),
        "--forms",
        str(FORMS),
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "verified 400 pairs: every pair rebuilt bit for bit" in result.stdout


@pytest.mark.slow
def test_verify_and_show_refuse_without_the_forms_or_with_changed_ones(corpus, inputs, warm_whatif):
    clean_failure(run_warm(warm_whatif, "verify", str(corpus)), "pass them with --forms")
    changed = inputs["folder"] / "changed.py"
    changed.write_text(FORMS.read_text().replace("p[0] * (2.0", "p[0] * (2.000001"))
    clean_failure(
        run_warm(warm_whatif, "verify", str(corpus), "--forms", str(changed)),
        "the module changed since",
    )
    task = "sumo/speed_loop_e_0_far/K1-C1-L16-E1/replay"
    clean_failure(
        run_warm(warm_whatif, "show", task, "--corpus", str(corpus)), "pass them with --forms"
    )
    clean_failure(
        run_warm(warm_whatif, "show", task, "--corpus", str(corpus), "--forms", str(changed)),
        "the module changed since",
    )


@pytest.mark.slow  # about 9 s
def test_show_and_evaluate_read_a_user_corpus(corpus, inputs, tmp_path, warm_whatif):
    from whatif_bench.generator import Corpus

    with Corpus(corpus) as opened:
        task_id = next(t for t in opened.task_ids() if "speed_loop_e_0_far" in t)
    png = tmp_path / "task.png"
    shown = run_warm(
        warm_whatif,
        "show",
        task_id,
        "--corpus",
        str(corpus),
        "--forms",
        str(FORMS),
        "--plot",
        str(png),
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith(task_id) and png.stat().st_size > 0
    out = tmp_path / "eval"
    # a process of its own: this one may hold the user forms; one skill plot of the five
    scored = run_whatif_drawing_one_skill_plot(
        "evaluate",
        str(corpus),
        "--models",
        "naive,linear",
        "--subset",
        "0.05",
        "--out",
        str(out),
    )
    assert scored.returncode == 0, scored.stderr
    per_task = pd.read_parquet(out / "per_task.parquet")
    assert set(per_task["target"]) == {"speed_loop_e_1_near", "speed_loop_e_0_far"}
    assert (per_task["failed"] == "").all() and np.isfinite(per_task["wql"]).all()
    board = pd.read_csv(out / "leaderboard.csv")
    assert sorted(board["model"]) == ["linear", "naive"]


@pytest.mark.slow
def test_a_user_corpus_is_described_given_its_forms_and_exports_null_descriptions(
    corpus, tmp_path, warm_whatif
):
    """``show --describe`` loads the user forms when given them; an export, which takes no
    ``--forms``, writes null descriptions rather than running code the corpus names."""
    from whatif_bench.export import export_corpus
    from whatif_bench.generator import Corpus

    with Corpus(corpus) as opened:
        task_id = next(t for t in opened.task_ids() if "speed_loop_e_0_far" in t)
    # given the forms, in this process; without them, in a new one (this one may hold them)
    described = run_cli(
        "show", task_id, "--corpus", str(corpus), "--forms", str(FORMS), "--describe"
    )
    assert described.returncode == 0, described.stderr
    description = json.loads(described.stdout)
    effect = description["effect"]
    assert sum(effect["contributions"].values()) == pytest.approx(effect["total"], rel=1e-9)
    clean_failure(
        run_warm(warm_whatif, "show", task_id, "--corpus", str(corpus), "--describe"), "--forms"
    )
    out = export_corpus(corpus, "parquet", tmp_path / "hf", subset=0.05, progress=False)
    table = pd.read_parquet(next((out / "data").glob("*.parquet")), columns=["description"])
    assert len(table) > 0 and table["description"].isna().all()


def _special_input(kind: str, path: Path) -> str:
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "loop":
        partner = path.with_name("partner" + path.suffix)
        path.symlink_to(partner)
        partner.symlink_to(path)
    elif kind == "folder":
        path.mkdir()
    elif kind == "device":
        return "/dev/null"
    return str(path)


@pytest.mark.parametrize("field", ["specs", "forms"])
@pytest.mark.parametrize(
    ("kind", "message"),
    [
        ("fifo", "is a FIFO (named pipe), not a regular file"),
        ("loop", "is a symbolic link loop, not a regular file"),
        ("device", "is a character device, not a regular file"),
        ("folder", "is a folder, not a file"),
        ("missing", "no such file"),
    ],
)
def test_a_spec_or_forms_path_that_is_not_a_file_names_the_cause(tmp_path, field, kind, message):
    path = _special_input(kind, tmp_path / ("x.toml" if field == "specs" else "x.py"))
    with pytest.raises(GenerationError) as error:
        GenerationConfig(baselines="b.h5", out=str(tmp_path / "c.h5"), **{field: (path,)})
    assert str(error.value) == f"{field}: {path}: {message}"


def test_the_config_validates_itself_when_built(tmp_path):
    base = {"baselines": "b.h5", "out": str(tmp_path / "c.h5")}
    with pytest.raises(GenerationError, match="targets must be a list of names"):
        GenerationConfig(**base, targets="sumo/x")  # type: ignore[arg-type]
    with pytest.raises(GenerationError, match=r"specs: .*missing.toml: no such file"):
        GenerationConfig(**base, specs=(str(tmp_path / "missing.toml"),))
    (tmp_path / "forms.txt").write_text("")
    with pytest.raises(GenerationError, match="not a Python file"):
        GenerationConfig(**base, forms=(str(tmp_path / "forms.txt"),))
    with pytest.raises(GenerationError, match="out: the output path is empty"):
        GenerationConfig(baselines="b.h5", out="")
    with pytest.raises(GenerationError, match="baselines must be a path"):
        GenerationConfig(baselines=None, out="c.h5")  # type: ignore[arg-type]
    config = GenerationConfig(**base, simulators=["sumo"], specs=[str(EXTRA)])
    assert config.simulators == ("sumo",) and config.specs == (str(EXTRA),)


BAD = {
    "no_overrides": (
        OVERRIDE.replace("overrides = true\n", ""),
        "target 'speed_loop_e_1_near': field 'name': simulator 'sumo' already has a target "
        "'speed_loop_e_1_near'",
    ),
    "override_unknown": (
        OVERRIDE.replace('"speed_loop_e_1_near"', '"no_such_target"'),
        "target 'no_such_target': field 'overrides': simulator 'sumo' has no target",
    ),
    "unit_missing": (
        OVERRIDE.replace('unit = "m/s"\n', ""),
        "target 'speed_loop_e_1_near': field 'unit': is required",
    ),
}


# a real process each: every case loads its own copy of the forms module, and the forms a
# process has loaded stay registered in it
@pytest.mark.parametrize("case", [*BAD, "forms_import", "short_baselines"])
@pytest.mark.one_quick  # about 5 s over all its cases
def test_bad_input_is_one_error_naming_file_and_field_and_writes_nothing(
    inputs, tmp_path, case, warm_whatif
):
    override = tmp_path / "override.toml"
    override.write_text(BAD[case][0] if case in BAD else OVERRIDE)
    forms = tmp_path / "forms.py"
    forms.write_text(
        FORMS.read_text() + ("\nraise RuntimeError('boom')\n" * (case == "forms_import"))
    )
    baselines = inputs["baselines"]
    if case == "short_baselines":
        sumo = read_baselines(baselines)["sumo"]
        short = {name: values[:500] for name, values in sumo.series.items()}
        baselines = write_baselines(
            tmp_path / "short.h5", [dataclasses.replace(sumo, series=short)]
        )
    before = sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock"))
    out = tmp_path / "c.h5"
    result = run_warm(
        warm_whatif,
        "generate",
        "--baselines",
        str(baselines),
        "--spec",
        str(EXTRA),
        "--spec",
        str(override),
        "--forms",
        str(forms),
        "--targets",
        *TARGETS,
        "--jobs",
        "1",
        "--out",
        str(out),
    )
    message = {
        "forms_import": f"importing {forms} failed: RuntimeError: boom",
        "short_baselines": f"{baselines}: the sumo baseline has 500 steps",
    }.get(case) or f"{override}: {BAD[case][1]}"
    clean_failure(result, message)
    after = sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock"))
    assert after == before and not out.exists()


def test_the_shipped_registry_hash_is_unchanged_by_the_user_path():
    """A corpus from the shipped files alone keeps the hash every earlier corpus records."""
    from whatif_bench.corpus.provenance import registry_hash
    from whatif_bench.relationships.registry import builtin_spec_texts

    digest = hashlib.sha256()
    for source, text in builtin_spec_texts():
        digest.update(source.encode() + b"\0" + text.encode() + b"\0")
    assert registry_hash() == RegistrySource().registry_hash() == digest.hexdigest()
