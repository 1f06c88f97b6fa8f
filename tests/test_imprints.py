"""Separable imprints (docs/METHOD.md, "Separable imprints"; relationships/imprints.py).

A hand-built relationship with one secondary of tiny weight and one of large weight: the tiny
one is below the 10 % rule at every K, the large one is not, with the figures the closed forms
give. The attribution behind the shares is exact (it sums to the event's total effect) and
equals the task descriptions' own. ``relationships check`` and ``relationships diagnose`` show
the figures; a warning leaves the check's exit status alone.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from tests.conftest import run_cli
from whatif_bench.corpus.describe import attribution
from whatif_bench.relationships import load_registry
from whatif_bench.relationships.checks import check_registry
from whatif_bench.relationships.imprints import (
    EVENT_LENGTH,
    attributions,
    below,
    constant_windows,
    event_rows,
    measure,
    series_windows,
)
from whatif_bench.relationships.verification import THRESHOLD

SPEC = """
[simulator]
name = "toyimp"
title = "toy"
history_pool = [0.1, 0.5, 2, 8]
c4 = [2048, 256]

[[covariates]]
name = "a"
shape = "step"
base_value = 1.0
unit = "u"
effect = "ratio"
description = "the primary"

[[covariates]]
name = "weak"
shape = "step"
base_value = 1.0
unit = "u"
effect = "ratio"
description = "a secondary of tiny weight"

[[covariates]]
name = "strong"
shape = "{strong_shape}"
base_value = 1.0
unit = "u"
effect = "ratio"
description = "a secondary of large weight"

[classes.c]
combination = "{combination}"
typical_range = [1.0, {high}]
{window}
directions = {{ a = "direct", weak = "direct", strong = "inverse" }}
weights = {{ weak = 0.01, strong = 0.8 }}
rationale = "toy"

[[targets]]
name = "t"
class = "c"
unit = "u"
primary = "a"
form = "power"
params = {{ exponent = 0.5 }}
rationale = "toy"
"""


def spec_file(tmp_path, combination="multiplicative", window="", strong_shape="step", high=100):
    path = tmp_path / "toyimp.toml"
    text = SPEC.format(
        combination=combination, window=window, strong_shape=strong_shape, high=float(high)
    )
    path.write_text(text)
    return path


def toy(tmp_path, **options):
    return next(iter(load_registry([spec_file(tmp_path, **options)], include_builtin=False)))


def test_a_tiny_secondary_is_flagged_and_a_large_one_is_not(tmp_path):
    relationship = toy(tmp_path)
    imprints = measure(relationship)
    assert [(i.k, i.covariate) for i in imprints] == [(2, "weak"), (3, "weak"), (3, "strong")]
    # multiplicative step events: covariate c alone moves y by |s(K) w_c r(f)| wherever y is;
    # the ratio effect r(f) = (f - 1) / (f + 1) is largest in size at the pool's 0.1
    for imprint in imprints:
        w = 0.01 if imprint.covariate == "weak" else 0.8
        s = imprint.k**-0.5
        assert imprint.weight == pytest.approx(s * w)
        assert imprint.reach_factor == 0.1
        assert imprint.reach == pytest.approx(s * w * 0.9 / 1.1, rel=1e-12)
        assert imprint.own_min == pytest.approx(s * w * 1 / 3, rel=1e-12)  # f = 2: 1/3
        assert imprint.measurable is (imprint.covariate == "strong")
    assert [i.covariate for i in below(imprints)] == ["weak", "weak"]
    weak, strong = imprints[1], imprints[2]
    assert weak.share_median < 0.05 and strong.share_median > 10 * weak.share_median
    assert 0 < weak.share_min <= weak.share_median and 0 < strong.share_min <= strong.share_median


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"combination": "additive", "strong_shape": "bell"},
        # a clipped target: the attribution stays exact whatever the clipping does
        {
            "combination": "additive",
            "window": "window = [1.0, 30.0]",
            "strong_shape": "bell",
            "high": 30,
        },
    ],
)
def test_the_attribution_is_exact_and_is_the_descriptions_own(tmp_path, options):
    relationship = toy(tmp_path, **options)
    rng = np.random.default_rng(7)
    windows = rng.uniform(1.0, 30.0, size=(4, EVENT_LENGTH))
    rows, drawn = event_rows(relationship, 3)
    assert drawn.any() and not drawn.all()  # drawn events and the corners
    phi, total, unattributed = attributions(relationship, windows, rows)
    assert np.all(unattributed == 0.0)
    np.testing.assert_allclose(phi.sum(axis=0), total, rtol=1e-12, atol=1e-9)
    assert np.all(np.abs(total) > 0)
    for r in (0, len(rows) - 1):
        for w in range(len(windows)):
            theirs = attribution(relationship, windows[w], EVENT_LENGTH, rows[r])
            assert theirs["total"] == pytest.approx(total[r, w], rel=1e-12)
            mine = dict(zip(relationship.covariate_names, phi[:, r, w], strict=True))
            for name, value in theirs["contributions"].items():
                assert value == pytest.approx(mine[name], rel=1e-10, abs=1e-9)


def test_shares_sum_to_one_over_the_covariates(tmp_path):
    relationship = toy(tmp_path, combination="additive", strong_shape="bell")
    windows = constant_windows(relationship)
    rows, _ = event_rows(relationship, 3)
    phi, total, _ = attributions(relationship, windows, rows)
    np.testing.assert_allclose((phi / total[None]).sum(axis=0), 1.0, rtol=1e-12)


def test_only_windows_with_a_size_count(tmp_path):
    relationship = toy(tmp_path)
    series = np.concatenate([np.zeros(400), np.full(400, 5.0)])
    windows = series_windows(series, 8)
    assert windows.shape == (8, EVENT_LENGTH)
    assert windows[0].tolist() == [0.0] * EVENT_LENGTH and windows[-1][0] == 5.0
    # the zero windows are left out: the figures are those of the non-zero ones alone
    assert measure(relationship, windows) == measure(relationship, windows[windows[:, 0] > 0])
    assert all(
        math.isnan(i.reach) and i.measurable is None for i in measure(relationship, windows[:1])
    )


def test_a_warning_does_not_fail_the_check(tmp_path):
    registry = load_registry([spec_file(tmp_path)], include_builtin=False)
    report = check_registry(registry)
    assert report.ok and [i.covariate for i in report.weak()] == ["weak", "weak"]
    assert report.as_dict()["imprints_below"] == 2 and report.as_dict("none").keys() == {
        "checked",
        "ok",
        "violations",
    }
    assert check_registry(registry, imprints=False).imprints is None


def test_check_prints_the_imprints(tmp_path):
    spec = spec_file(tmp_path)
    text = run_cli("relationships", "check", str(spec))
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    (row,) = [line for line in lines if line.startswith("toyimp/t")]
    # reach at K=2 and K=3: s(K) * 0.01 * 0.9 / 1.1, flagged
    assert row.split() == ["toyimp/t", "weak", "0.6%*", "0.5%*"]
    assert "checked 1 relationship(s): all rules hold" in lines
    assert lines[-1].startswith("imprints: 2 of 3 (secondary covariate, K) below the 10 % rule")

    every = run_cli("relationships", "check", str(spec), "--imprints", "all", "--json")
    assert every.returncode == 0, every.stderr
    printed = json.loads(every.stdout)
    assert printed["ok"] and printed["imprint_threshold"] == THRESHOLD
    assert [(i["k"], i["covariate"], i["measurable"]) for i in printed["imprints"]] == [
        (2, "weak", False),
        (3, "weak", False),
        (3, "strong", True),
    ]
    strong = printed["imprints"][2]
    assert strong["reach"] == pytest.approx(3**-0.5 * 0.8 * 0.9 / 1.1)

    none = run_cli("relationships", "check", str(spec), "--imprints", "none")
    assert none.returncode == 0 and none.stdout == "checked 1 relationship(s): all rules hold\n"


@pytest.mark.slow  # about 1 s
def test_relationships_diagnose_writes_the_imprint_table(tmp_path):
    target = "gridlabd/air_temperature"
    out = tmp_path / "diag"
    result = run_cli(
        "relationships", "diagnose", "--target", target, "--sample", "0.01", "--out", str(out)
    )
    assert result.returncode == 0, result.stderr
    table = pd.read_csv(out / "imprints.csv")
    relationship = load_registry().get(*target.split("/"))
    from whatif_bench.simulators import read_baselines, shipped_baselines_path

    series = read_baselines(shipped_baselines_path())["gridlabd"].series["air_temperature"]
    expected = measure(relationship, series_windows(series))
    assert len(table) == len(expected) == 10  # K = 2..5: 1 + 2 + 3 + 4 secondaries
    assert table["covariate"].tolist() == [i.covariate for i in expected]
    assert table["reach"].to_numpy() == pytest.approx([i.reach for i in expected])
    assert table["measurable"].tolist() == [i.measurable for i in expected]
    report = json.loads((out / "diagnostics.json").read_text())
    assert len(report["imprints"]) == 10 and report["imprint_threshold"] == THRESHOLD
    weak = [i for i in expected if i.measurable is False]
    assert weak  # the temperature class's weights of 0.03-0.06 stay below 10 %
    assert f"{target}: " in result.stdout
    assert f"imprints: {len(weak)} of 10 (secondary covariate, K) below" in result.stdout


def test_the_method_lists_the_shipped_registry_as_it_is():
    """docs/METHOD.md, "Separable imprints", states the counts and the table of what is below
    on the shipped registry: they are today's."""
    import collections
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "docs" / "METHOD.md").read_text()
    section = text[text.index("## 11. Separable imprints") :]
    imprints = [i for r in load_registry() for i in measure(r)]
    weak = below(imprints)
    targets = {(i.simulator, i.target) for i in weak}
    assert f"{len(weak)} of the {len(imprints)} (secondary covariate, `K`) pairs" in section
    assert f"on {len(targets)} of the 99" in " ".join(section.split())
    titles = {"EPANET": "epanet", "GridLAB-D": "gridlabd", "OpenDC": "opendc", "SUMO": "sumo"}
    rows = re.findall(r"^\| (\S+) \| `(\w[\w-]*)` \| (\d) \| (\d+) \|", section, re.M)
    listed = {(titles[s], c, int(k)): int(n) for s, c, k, n in rows}
    counted = collections.Counter((i.simulator, i.covariate, i.k) for i in weak)
    assert listed == dict(counted)


def test_the_imprint_event_is_the_shortest_event_of_the_axes():
    """``imprints.EVENT_LENGTH`` is written out (relationships sits below the corpus room): it
    must stay the shortest event length of the axis table."""
    from whatif_bench.corpus.axes import EVENT_LENGTHS
    from whatif_bench.relationships.imprints import EVENT_LENGTH

    assert EVENT_LENGTH == min(EVENT_LENGTHS)
