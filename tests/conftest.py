"""Shared fixtures: the shipped registry (loaded once) and seeded random generators."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import numpy as np
import pytest

from whatif_bench.relationships import load_registry


@pytest.fixture(scope="session")
def registry():
    return load_registry()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20261129)


def whatif_executable() -> list[str]:
    """The installed ``whatif`` console script (falls back to ``python -m``)."""
    script = shutil.which("whatif", path=os.path.dirname(sys.executable))
    return [script] if script else [sys.executable, "-m", "whatif_bench.cli"]


def run_whatif(*args: str, check: bool = False) -> subprocess.CompletedProcess:
    """Run the real command line and capture its output."""
    return subprocess.run(
        [*whatif_executable(), *args], capture_output=True, text=True, check=check, timeout=300
    )


def run_main(capsys, *argv: str) -> tuple[object, str, str]:
    """The command line in-process: (exit code, stdout, stderr), with the error-line promises
    checked (no traceback, no ``unexpected`` line)."""
    from whatif_bench.cli import main

    try:
        code: object = main(list(argv))
    except SystemExit as exc:  # argparse usage errors
        code = exc.code
    out, err = capsys.readouterr()
    assert "Traceback" not in err and "unexpected" not in err, err
    return code, out, err


def small_corpus(folder, targets: tuple[str, ...], seed: int = 0):
    """Generate a corpus of ``targets`` from the shipped baselines into ``folder/c.h5`` (one
    process); returns its path."""
    from whatif_bench.generator import GenerationConfig, generate
    from whatif_bench.simulators import shipped_baselines_path

    config = GenerationConfig(
        baselines=str(shipped_baselines_path()),
        out=str(folder / "c.h5"),
        targets=targets,
        seed=seed,
        jobs=1,
    )
    return generate(config, progress=False)


@pytest.fixture(scope="module", autouse=True)
def _forget_user_forms_after_each_module():
    """User forms live in process-wide tables: what a test module registers is forgotten when
    it ends, so a later module may load the same forms module from another path."""
    from whatif_bench.relationships import plugins
    from whatif_bench.relationships.forms import EFFECTS, FORMS

    forms, effects = set(FORMS), set(EFFECTS)
    loaded, origins = set(plugins._loaded), dict(plugins._origins)
    yield
    plugins._forget_new_forms(forms, effects)
    plugins._loaded.intersection_update(loaded)
    for key in set(plugins._origins) - set(origins):
        del plugins._origins[key]


ONE_TARGET = "epanet/pressure_10"  # the target of the one-target corpus below


@pytest.fixture(scope="session")
def one_target_corpus(tmp_path_factory):
    """A corpus of ``ONE_TARGET`` alone, generated once per session for the tests that only
    read it (as an input they check is unchanged)."""
    return small_corpus(tmp_path_factory.mktemp("one-target-corpus"), (ONE_TARGET,))


@pytest.fixture(scope="session")
def one_target_task_id(one_target_corpus) -> str:
    """The first task id of ``one_target_corpus``."""
    from whatif_bench.generator import Corpus

    with Corpus(one_target_corpus) as opened:
        return opened.task_ids()[0]
