"""Every wrapper's ``run`` fits ``SimulatorRun``: keyword-only, ``days`` and ``workdir``, Baselines.

Only signatures are read: no test here starts a simulation (the modules import no engine).
"""

from __future__ import annotations

import importlib
import inspect
import os

import pytest

from whatif_bench.simulators.base import Baselines, SimulatorRun
from whatif_bench.simulators.catalog import SIMULATORS

KEYWORD_KINDS = (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.VAR_KEYWORD)
PROTOCOL_PARAMS = {
    name: parameter
    for name, parameter in inspect.signature(SimulatorRun.__call__).parameters.items()
    if name != "self"
}


def problems(run, default_days: float) -> list[str]:
    """What keeps ``run`` from being a wrapper's ``run`` ([] when nothing does)."""
    found = []
    parameters = inspect.signature(run).parameters
    found += [
        f"{name} is {p.kind.description}"
        for name, p in parameters.items()
        if p.kind not in KEYWORD_KINDS
    ]
    for name, expected in PROTOCOL_PARAMS.items():
        if name not in parameters:
            found.append(f"no {name}")
        elif parameters[name].annotation != expected.annotation:
            found.append(f"{name}: {parameters[name].annotation!r}, not {expected.annotation!r}")
    found += [
        f"{name} has no default"
        for name, p in parameters.items()
        if p.default is p.empty and p.kind is not p.VAR_KEYWORD
    ]
    if "days" in parameters and parameters["days"].default != default_days:
        found.append(f"days defaults to {parameters['days'].default}, not {default_days}")
    if "workdir" in parameters and parameters["workdir"].default is not None:
        found.append("workdir does not default to None")
    if inspect.signature(run).return_annotation not in ("Baselines", Baselines):
        found.append(f"returns {inspect.signature(run).return_annotation!r}")
    if not isinstance(run, SimulatorRun):
        found.append("not a SimulatorRun")
    return found


@pytest.mark.parametrize("name", sorted(SIMULATORS))
def test_every_wrapper_run_is_keyword_only_and_fits_the_protocol(name):
    entry = SIMULATORS[name]
    module = importlib.import_module(entry.module)
    assert entry.runner() is module.run
    assert module.DEFAULT_DAYS == entry.default_days
    assert problems(module.run, entry.default_days) == []


def test_the_check_finds_a_positional_run():
    # the shape the wrappers had before (OpenDC's took every option positionally)
    def old_run(
        days: float = 30, workdir: str | os.PathLike | None = None, trace: str | None = None
    ) -> Baselines:
        raise AssertionError("not to be called")

    def no_workdir(*, days: float = 30) -> Baselines:
        raise AssertionError("not to be called")

    assert problems(old_run, 30) == [
        "days is positional or keyword",
        "workdir is positional or keyword",
        "trace is positional or keyword",
    ]
    assert problems(no_workdir, 30) == ["no workdir"]


def test_a_positional_days_is_a_type_error_before_anything_runs(monkeypatch):
    from whatif_bench.simulators import epanet

    def started():
        raise AssertionError("the EPANET run started")

    monkeypatch.setattr(epanet, "_wntr", started)  # the first thing run() does
    with pytest.raises(TypeError, match="positional argument"):
        epanet.run(1.0)
    with pytest.raises(TypeError, match="positional argument"):
        SIMULATORS["epanet"].runner()(1.0, None)
