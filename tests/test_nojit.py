"""The kernels run as plain Python under ``NUMBA_DISABLE_JIT=1`` (to step through them in a
debugger): the engine's tests, and a user form chained into the dispatch kernels, pass that way."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow  # about 3 s
def test_engine_and_user_forms_pass_with_the_jit_disabled():
    env = {**os.environ, "NUMBA_DISABLE_JIT": "1"}
    selected = [
        "tests/test_engine.py",
        "tests/test_generator_kernels.py::test_a_few_pairs_of_each_context_match_the_reference",
        "tests/test_generator_chunks.py::test_the_shuffle_kernel_is_its_numpy_twin",
        "tests/test_slot_blocks.py::test_the_kernel_places_what_its_numpy_twin_places_and_every_cell_of_its_rows",
        "tests/test_authoring.py::test_user_form_kernel_equals_its_python_definition",
        "tests/test_authoring.py::test_user_effect_is_usable_in_a_new_simulator",
    ]
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *selected],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    assert " passed" in result.stdout and "skipped" not in result.stdout
