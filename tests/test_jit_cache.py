"""The first numba compilation says so (whatif_bench.jit_cache): a module's disk-cached kernels
count as compiled once numba has written their index files, and the long jobs print one note
while they are not."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from tests.conftest import ONE_TARGET, run_cli
from whatif_bench import jit_cache

KERNELS = """
import numba

@numba.njit(cache=True)
def doubled(x):
    return 2.0 * x

@numba.njit
def not_cached(x):
    return x + 1.0
"""


@pytest.fixture
def fresh_module(tmp_path, monkeypatch):
    """A module of two kernels, one cached on disk, in a cache folder of its own."""
    (tmp_path / "fresh_kernels.py").write_text(KERNELS)
    spec = importlib.util.spec_from_file_location("fresh_kernels", tmp_path / "fresh_kernels.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "fresh_kernels", module)
    spec.loader.exec_module(module)
    return module


def test_a_kernel_counts_as_compiled_once_numba_wrote_its_index(fresh_module, capsys):
    if not jit_cache._index_paths(fresh_module):
        pytest.skip("numba's JIT is off here (NUMBA_DISABLE_JIT=1): nothing is compiled")
    assert len(jit_cache._index_paths(fresh_module)) == 1  # the uncached kernel has none
    assert not jit_cache.compiled_on_disk(fresh_module)
    assert jit_cache.announce_first_compilation("test kernels", fresh_module)
    assert "compiling the test kernels with numba" in capsys.readouterr().err
    assert fresh_module.doubled(2.0) == 4.0
    assert jit_cache.compiled_on_disk(fresh_module)
    assert not jit_cache.announce_first_compilation("test kernels", fresh_module)
    assert capsys.readouterr().err == ""


def test_no_notice_when_asked_for_no_progress(fresh_module, capsys):
    assert not jit_cache.announce_first_compilation("test kernels", fresh_module, enabled=False)
    assert capsys.readouterr().err == ""


def test_a_module_without_cached_kernels_counts_as_compiled():
    assert jit_cache.compiled_on_disk(jit_cache)


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.one_quick  # about 2 s each
def test_generate_says_when_it_compiles_first(tmp_path, monkeypatch, compiled):
    monkeypatch.setattr(jit_cache, "compiled_on_disk", lambda *modules: compiled)
    done = run_cli("generate", "--targets", ONE_TARGET, "--out", str(tmp_path / "c.h5"))
    assert done.returncode == 0, done.stderr
    said = "note: compiling the relationship and generator kernels with numba" in done.stderr
    assert said is not compiled
