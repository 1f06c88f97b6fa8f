"""tests/lazy_modules.py: a heavy library is imported at its first use, not at collection, and
a missing one skips as ``pytest.importorskip`` does."""

from __future__ import annotations

import sys

import pytest

from tests.lazy_modules import LazyModule, importorskip_lazily

STAND_IN = "tests_lazy_stand_in"  # a module made here, so that its import can be watched


@pytest.fixture
def stand_in(tmp_path, monkeypatch):
    (tmp_path / f"{STAND_IN}.py").write_text("IMPORTED = True\nvalue = 42\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, STAND_IN, raising=False)
    yield
    sys.modules.pop(STAND_IN, None)


def test_the_module_is_imported_at_the_first_attribute_not_before(stand_in):
    module = importorskip_lazily(STAND_IN)
    assert isinstance(module, LazyModule) and STAND_IN not in sys.modules
    # what pytest's collection reads off every module-level name imports nothing
    for name in ("__test__", "__wrapped__", "__bases__", "_mock_name"):
        assert not hasattr(module, name)
    assert STAND_IN not in sys.modules
    assert module.value == 42 and STAND_IN in sys.modules
    assert module.IMPORTED is True


def test_a_library_not_installed_skips_the_file():
    with pytest.raises(pytest.skip.Exception, match="No module named 'no_such_library_here'"):
        importorskip_lazily("no_such_library_here.sub")


def test_an_import_that_fails_at_first_use_skips_that_test(tmp_path, monkeypatch):
    (tmp_path / "tests_lazy_broken.py").write_text("import no_such_library_here\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    module = importorskip_lazily("tests_lazy_broken", reason="needs the broken extra")
    with pytest.raises(pytest.skip.Exception, match="needs the broken extra"):
        _ = module.anything
    sys.modules.pop("tests_lazy_broken", None)
