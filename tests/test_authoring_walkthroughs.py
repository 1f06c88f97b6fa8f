"""docs/AUTHORING.md's two walk-throughs, run as written: every command of their ``bash`` blocks,
in order, in an empty folder holding a copy of ``examples/`` (real EPANET runs through wntr,
real generate, verify, evaluate and export), then the outputs they promise are checked."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import h5py
import pandas as pd
import pytest

from tests.conftest import WarmWhatif
from whatif_bench.generator import Corpus
from whatif_bench.simulators import read_baselines, shipped_baselines_path

# real EPANET runs, generate, verify, evaluate and export as new processes: about 30 s together
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "AUTHORING.md"


def walkthrough_commands(title_start: str) -> list[str]:
    """The commands of the ``bash`` blocks of the guide's section whose heading starts with
    ``title_start`` (continuation lines joined, comments dropped)."""
    text = GUIDE.read_text(encoding="utf-8")
    sections = re.split(r"^## ", text, flags=re.MULTILINE)
    matching = [s for s in sections if s.startswith(title_start)]
    assert len(matching) == 1, f"{GUIDE} has no single section '## {title_start}...'"
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", matching[0], flags=re.DOTALL):
        for command in block.replace("\\\n", " ").splitlines():
            command = command.split(" #")[0].strip()
            if command:
                commands.append(command)
    assert commands, f"section '{title_start}' has no bash commands"
    return commands


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """An empty folder with a copy of examples/ (both walk-throughs share it; the second one's
    last step combines the first one's baselines)."""
    folder = tmp_path_factory.mktemp("walkthroughs")
    shutil.copytree(ROOT / "examples", folder / "examples")
    return folder


def run_walkthrough(folder: Path, title_start: str, warm: WarmWhatif) -> None:
    """Run the section's commands in ``folder``, ``whatif`` through the warm server
    (tests/warm_cli.py), ``python`` as this environment's."""
    env = warm.env(dict(os.environ))
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    for command in walkthrough_commands(title_start):
        argv = shlex.split(command)
        assert argv[0] in ("whatif", "python"), f"unexpected command in the guide: {command}"
        if argv[0] == "whatif":
            argv = [*warm.argv(), *argv[1:]]
        result = subprocess.run(
            argv, cwd=folder, env=env, capture_output=True, text=True, timeout=600
        )
        assert result.returncode == 0, (command, result.stdout, result.stderr[-3000:])
        assert "Traceback" not in result.stderr, (command, result.stderr)


def test_walkthrough_1_adds_a_target_to_a_shipped_simulator(folder, warm_whatif):
    run_walkthrough(folder, "Walk-through 1", warm_whatif)
    extra = read_baselines(folder / "out" / "epanet-extra.h5")["epanet"]
    shipped = read_baselines(shipped_baselines_path())["epanet"]
    # the extra series come from the same run: every shipped series is bit for bit the same
    assert set(shipped.series) < set(extra.series)
    for name, values in shipped.series.items():
        assert (extra.series[name] == values).all(), name
    chlorine = extra.series["chlorine_22"]
    # Net1's sources (reservoir 9, tank 2) hold 1.0 mg/L; chlorine only decays from there
    assert extra.units["chlorine_22"] == "mg/L" and 0.0 < chlorine.min() < chlorine.max() <= 1.0
    with h5py.File(folder / "out" / "chlorine.h5", "r") as h5:
        assert "user_registry" in h5
    with Corpus(folder / "out" / "chlorine.h5") as corpus:
        assert set(zip(corpus.pairs["simulator"], corpus.pairs["target"], strict=True)) == {
            ("epanet", "chlorine_22")
        }
    assert (folder / "out" / "chlorine-task.png").stat().st_size > 10_000
    board = (folder / "out" / "chlorine-eval" / "leaderboard.md").read_text()
    assert "ridge" in board and "naive" in board


def test_walkthrough_2_adds_a_new_source(folder, warm_whatif):
    run_walkthrough(folder, "Walk-through 2", warm_whatif)
    net3 = read_baselines(folder / "out" / "net3.csv")["net3"]
    assert net3.interval_s == 300 and net3.n_steps == 9216
    assert net3.units == {
        "pressure_15": "psi",
        "pressure_123": "psi",
        "pressure_247": "psi",
        "flowrate_pump_10": "GPM",
        "flowrate_pump_335": "GPM",
    }
    with Corpus(folder / "out" / "net3-tasks.h5") as corpus:
        axes = json.loads(corpus.attrs["axes"])
        targets = set(corpus.pairs["target"])
    assert axes["contexts"]["net3"]["C4"] == [8000, 864]  # the spec header's c4
    assert targets == {"pressure_15", "pressure_123", "flowrate_pump_335"}
    per_task = pd.read_parquet(folder / "out" / "net3-eval" / "per_task.parquet")
    assert set(per_task["simulator"]) == {"net3"} and len(per_task) > 500
    manifest = json.loads((folder / "out" / "net3-parquet" / "manifest.json").read_text())
    assert manifest["corpus"]["registry_hash"]
    combined = read_baselines(folder / "out" / "combined.h5")
    assert set(combined) == {"epanet", "net3"}
    assert combined["net3"].content_hash() == net3.content_hash()
