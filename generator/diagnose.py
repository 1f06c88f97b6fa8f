"""``whatif diagnose`` and ``whatif relationships diagnose``: the diagnostics of
``generator/diagnostics.py`` over a corpus file, or over pairs drawn in memory for a spec.

Both give a ``Diagnostics``: one summary per target (in registry or corpus order), one row per
pair, and every history effect. ``format_table`` prints it, ``as_dict`` is the ``--json``
output, ``write_folder`` writes ``diagnostics.csv``, ``pairs.csv``, ``imprints.csv``, one PNG
per simulator and ``diagnostics.json`` (last) into a folder that appears only once complete.

Each target's secondary covariates' imprints (``relationships/imprints.py``; docs/METHOD.md,
"Separable imprints") are measured on ``IMPRINT_WINDOWS`` windows of the target's own baseline
series: ``imprints.csv``, the ``imprints`` of the JSON and the lines under the printed table
list them (below the 10 % rule's threshold: a warning, the target is not flagged for it).

- From a corpus, the recorded 10 % statistics and verdicts are used as they are; every pair is
  rebuilt from its stored recipe (to count zero-baseline and clipped steps and to replay the
  history events for the Novel margin), which needs the relationship registry the corpus was
  built with (its ``registry_hash``).
- For a spec, each target's pairs are drawn and verified exactly as ``whatif generate`` would
  (the same recipes for the same seed), from a baselines file, without writing anything.
"""

from __future__ import annotations

import json
import math
import os
import textwrap
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from whatif_bench._version import __version__
from whatif_bench.corpus import Recipe
from whatif_bench.errors import WhatIfError
from whatif_bench.generator.diagnostics import (
    MARGIN_THRESHOLD,
    PAIR_COLUMNS,
    diagnose_target,
    summarise_target,
)
from whatif_bench.relationships.engine import Relationship
from whatif_bench.relationships.imprints import COLUMNS as IMPRINT_COLUMNS
from whatif_bench.relationships.imprints import measure, series_windows
from whatif_bench.relationships.verification import RULE, THRESHOLD

MARKER = "diagnostics.json"  # written last: a folder holding it is a finished report
FLAG_RULE = (
    f"flagged when the median Novel margin over the kept pairs is below {MARGIN_THRESHOLD:g}"
)
IMPRINT_WINDOWS = 16  # windows of each baseline series the imprints are measured on
IMPRINT_RULE = (
    f"a secondary covariate is below when its own effect at the history pool's extreme factor "
    f"(median over {IMPRINT_WINDOWS} windows of the baseline) cannot reach the {RULE}"
)
WorkItem = tuple[Relationship, np.ndarray, list[Recipe], list | None]


class DiagnosticsError(WhatIfError):
    """Diagnostics cannot be made: unknown target, missing baseline, another registry."""


@dataclass
class Diagnostics:
    """The report: ``targets`` (one summary dict each), ``pairs`` (one row per pair, columns
    ``diagnostics.PAIR_COLUMNS``), ``history_effects`` ((simulator, target) -> every history
    event's effect), ``source`` (where the pairs came from) and ``imprints`` (one dict per
    (target, K, secondary covariate), keys ``imprints.COLUMNS``)."""

    source: dict
    targets: list[dict] = field(default_factory=list)
    pairs: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(PAIR_COLUMNS)))
    history_effects: dict[tuple[str, str], np.ndarray] = field(default_factory=dict)
    imprints: list[dict] = field(default_factory=list)

    def as_dict(self) -> dict:
        """The JSON report (``--json``, ``diagnostics.json``). JSON has no infinity: an
        infinite number is written as ``null`` (a quantile's ``infinite`` counts its infinite
        values, so a ``null`` quantile with ``n > 0`` is infinite)."""
        return _json_safe(
            {
                "toolkit_version": __version__,
                "source": self.source,
                "threshold": MARGIN_THRESHOLD,
                "flag_rule": FLAG_RULE,
                "targets": self.targets,
                "imprint_threshold": THRESHOLD,
                "imprint_rule": IMPRINT_RULE,
                "imprints": self.imprints,
            }
        )

    def flagged(self) -> list[dict]:
        return [t for t in self.targets if t["flagged"]]

    def weak_imprints(self) -> list[dict]:
        """The imprints below the threshold."""
        return [i for i in self.imprints if i["measurable"] is False]


def _json_safe(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, int | np.integer):
        return int(value)
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(value) else None
    return value


# ---- selecting targets ----------------------------------------------------------------
def select_names(
    available: Sequence[tuple[str, str]], names: Iterable[str], where: str
) -> list[tuple[str, str]]:
    """The (simulator, target) pairs of ``available`` that ``names`` (``NAME`` or
    ``SIMULATOR/NAME``) pick, in ``available``'s order; all of them when ``names`` is empty."""
    names = list(names)
    if not names:
        return list(available)
    wanted = set()
    for name in names:
        matches = [item for item in available if name in (item[1], f"{item[0]}/{item[1]}")]
        if not matches:
            choices = [f"{s}/{t}" for s, t in available]
            raise DiagnosticsError(f"{where} has no target {name!r}; it has {choices}")
        if len(matches) > 1:
            raise DiagnosticsError(
                f"target {name!r} is ambiguous in {where}; write simulator/target"
            )
        wanted.add(matches[0])
    return [item for item in available if item in wanted]


# ---- sources ----------------------------------------------------------------------------
def corpus_work(
    corpus, targets: Iterable[str] = (), forms: Iterable[str | os.PathLike] = ()
) -> tuple[list[WorkItem], dict]:
    """One work item per selected target of an open ``Corpus``, and the source description.

    The relationships are those the corpus was built with: the shipped spec files plus the
    user spec texts it records, with its forms modules given again as ``forms``
    (``corpus.provenance``)."""
    from whatif_bench.corpus import corpus_registry

    attrs = corpus.attrs
    registry, source = corpus_registry(corpus, forms)
    if attrs.get("registry_hash") != source.registry_hash():
        raise DiagnosticsError(
            f"{corpus.path}: built with another relationship registry (registry_hash "
            f"{str(attrs.get('registry_hash'))[:12]}..., these relationships hash to "
            f"{source.registry_hash()[:12]}...); diagnose rebuilds its pairs, so generate it "
            "again with this toolkit"
        )
    pairs = corpus.pairs
    available = list(
        dict.fromkeys(zip(pairs["simulator"].tolist(), pairs["target"].tolist(), strict=True))
    )
    chosen = select_names(available, targets, str(corpus.path))
    events = corpus._read("the recipe arrays /events", lambda: corpus._recipes()[0])
    ratios = events["ratio"]
    items: list[WorkItem] = []
    for simulator, target in chosen:
        rows = pairs[(pairs["simulator"] == simulator) & (pairs["target"] == target)]
        relationship = registry.get(simulator, target)
        recipes, stored = [], []
        for row in rows.to_dict("records"):
            recipe = corpus.recipe(row)
            first = int(row["event_offset"])
            history = np.asarray(ratios[first : first + recipe.n_events], dtype=np.float64)
            if history.size != recipe.n_events:
                raise DiagnosticsError(
                    f"{corpus.path}: damaged corpus, {row['pair_id']} has {history.size} of its "
                    f"{recipe.n_events} event ratios"
                )
            recipes.append(recipe)
            stored.append(
                (
                    history,
                    float(row["replay_ratio"]),
                    float(row["novel_ratio"]),
                    str(row["drop_reason"]),
                )
            )
        items.append((relationship, corpus.baseline(simulator, target), recipes, stored))
    source = {
        "kind": "corpus",
        "path": str(corpus.path),
        "toolkit_version": attrs.get("toolkit_version"),
        "master_seed": attrs.get("master_seed"),
        "baselines_hash": attrs.get("baselines_hash"),
        "registry_hash": attrs.get("registry_hash"),
    }
    return items, source


def sampled_keys(relationship: Relationship, sample: float, seed: int) -> list:
    """The (pair key, context, prediction) a spec diagnosis draws for one target: all of the
    generator's pairs (``sample = 1``), or ``ceil(sample * 200)`` of them picked at random from a
    stream keyed by the seed and the target (the same pick whichever other targets are asked)."""
    from whatif_bench.corpus import pair_rng
    from whatif_bench.generator.sweep import pair_keys

    keys = list(pair_keys(relationship))
    if sample >= 1.0:
        return keys
    count = max(1, math.ceil(sample * len(keys)))
    rng = pair_rng(seed, f"diagnose-sample/{relationship.simulator}/{relationship.target}")
    picked = np.sort(rng.choice(len(keys), size=count, replace=False))
    return [keys[i] for i in picked]


def spec_work(
    relationships: Sequence[Relationship],
    baselines_path: str | os.PathLike,
    sample: float = 1.0,
    seed: int = 0,
    skip_unsimulated: bool = False,
) -> list[WorkItem]:
    """One work item per relationship: its pairs drawn as ``whatif generate --seed`` draws them,
    on the relationship's series in ``baselines_path``. A relationship whose simulator has no
    baselines there is an error, or left out with ``skip_unsimulated`` (as ``generate`` leaves
    out OpenDC when no OpenDC run is at hand)."""
    from whatif_bench.corpus import draw_recipe
    from whatif_bench.simulators.store import baselines_name, read_baselines

    if not (isinstance(sample, int | float) and not isinstance(sample, bool) and 0 < sample <= 1):
        raise DiagnosticsError(f"the sample must be a fraction in (0, 1], got {sample!r}")
    baselines = read_baselines(baselines_path)
    named = baselines_name(baselines_path)  # "the shipped baselines" for the package's own
    if skip_unsimulated:
        relationships = [r for r in relationships if r.simulator in baselines]
        if not relationships:
            raise DiagnosticsError(
                f"{named}: none of the targets' simulators has baselines here (it has "
                f"{sorted(baselines)})"
            )
    items: list[WorkItem] = []
    for relationship in relationships:
        name = f"{relationship.simulator}/{relationship.target}"
        item = baselines.get(relationship.simulator)
        if item is None:
            raise DiagnosticsError(
                f"{named}: no baselines of simulator {relationship.simulator!r} (it has "
                f"{sorted(baselines)}), so {name} has nothing to act on; give --baselines"
            )
        if relationship.target not in item.series:
            raise DiagnosticsError(
                f"{named}: no baseline series {name}; a target must be one of the "
                f"series its simulator records: {sorted(item.series)}"
            )
        series = item.series[relationship.target]
        recipes = [
            draw_recipe(key, relationship, context, prediction, series.size, seed)
            for key, context, prediction in sampled_keys(relationship, sample, seed)
        ]
        items.append((relationship, series, recipes, None))
    return items


# ---- running ------------------------------------------------------------------------------
def run(items: list[WorkItem], source: dict, jobs: int = 1, progress: bool = True) -> Diagnostics:
    """Diagnose every work item (in ``jobs`` local processes) and summarise each target."""
    from tqdm import tqdm

    from whatif_bench.cluster import open_pool

    report = Diagnostics(source=source)
    frames = []
    total = sum(len(recipes) for _, _, recipes, _ in items)
    with (
        open_pool(jobs) as pool,
        tqdm(total=total, desc="diagnosing", unit="pair", disable=not progress) as bar,
    ):
        results = pool.ordered(diagnose_target, items)
        for (relationship, _, recipes, _), (pairs, effects) in zip(items, results, strict=True):
            frames.append(pairs)
            key = (relationship.simulator, relationship.target)
            report.history_effects[key] = effects
            report.targets.append(summarise_target(relationship, pairs, effects))
            bar.update(len(recipes))
    for relationship, series, _, _ in items:  # a few engine calls per target, here
        windows = series_windows(series, IMPRINT_WINDOWS)
        report.imprints += [i.as_dict() for i in measure(relationship, windows)]
    if frames:
        report.pairs = pd.concat(frames, ignore_index=True)
    return report


def diagnose_corpus(
    path: str | os.PathLike,
    targets: Iterable[str] = (),
    jobs: int = 1,
    progress: bool = True,
    forms: Iterable[str | os.PathLike] = (),
) -> Diagnostics:
    """The diagnostics of a corpus file (``targets``: ``NAME`` or ``SIMULATOR/NAME``; default
    every target in the file). ``forms``: the forms modules a corpus built with ``--forms``
    was made with, given again; their relationships run in this process only (user forms do
    not travel to worker processes), so ``jobs`` is then 1."""
    from whatif_bench.corpus import Corpus

    forms = tuple(forms)
    with Corpus(path) as corpus:
        items, source = corpus_work(corpus, targets, forms)
    return run(items, source, 1 if forms else jobs, progress)


def diagnose_relationships(
    relationships: Sequence[Relationship],
    baselines_path: str | os.PathLike | None = None,
    sample: float = 1.0,
    seed: int = 0,
    progress: bool = True,
    source: dict | None = None,
    skip_unsimulated: bool = False,
) -> Diagnostics:
    """The diagnostics of ``relationships`` on pairs drawn in memory (default baselines: the
    shipped ones; ``skip_unsimulated``: see ``spec_work``). Runs in this process, so user forms
    loaded here are available."""
    from whatif_bench.simulators.store import shipped_baselines_path

    path = baselines_path or shipped_baselines_path()
    items = spec_work(relationships, path, sample, seed, skip_unsimulated)
    described = {
        "kind": "spec",
        "baselines": str(path),
        "seed": seed,
        "sample": sample,
        **(source or {}),
    }
    return run(items, described, jobs=1, progress=progress)


# ---- text ---------------------------------------------------------------------------------
def _number(value, digits: int = 2) -> str:
    if value is None:
        return "-"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return f"{value:.{digits}f}"


def _share(value) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


TABLE_COLUMNS = (
    ("target", "<", 40),
    ("pairs", ">", 5),
    ("pass", ">", 5),
    ("drop h/r/n", ">", 11),
    ("hist", ">", 6),
    ("replay", ">", 6),
    ("novel", ">", 6),
    ("amp", ">", 5),
    ("margin", ">", 6),
    ("<0.1", ">", 5),
    ("beyond", ">", 6),
    ("cover", ">", 5),
    ("y=0", ">", 5),
    ("bound", ">", 5),
    ("flag", "<", 4),
)


def table_rows(report: Diagnostics) -> list[list[str]]:
    """The cells of the printed table, one list per target (see ``format_table``)."""
    rows = []
    for t in report.targets:
        dropped = t["dropped"]
        rows.append(
            [
                f"{t['simulator']}/{t['target']}",
                str(t["pairs"]),
                _share(t["pass_rate"]),
                f"{dropped['history']}/{dropped['replay']}/{dropped['novel']}",
                _number(t["history_effect"]["p50"]),
                _number(t["replay_effect"]["p50"]),
                _number(t["novel_effect"]["p50"]),
                _number(t["novel_amplification"]["p50"]),
                _number(t["novel_margin"]["p50"], 3),
                _share(t["margin_below_threshold"]),
                _number(t["novel_beyond"]["p10"]),
                _share(t["coverage"]),
                _share(t["zero_baseline_share"]),
                _share(t["at_bound_share"]),
                {True: "FLAG", False: "", None: "-"}[t["flagged"]],
            ]
        )
    return rows


def format_table(report: Diagnostics) -> str:
    """The per-target table, a legend and the flagged targets, as printed by the commands."""
    rows = table_rows(report)
    widths = [
        max([width, len(name), *(len(row[i]) for row in rows)])
        for i, (name, _, width) in enumerate(TABLE_COLUMNS)
    ]

    def line(cells) -> str:
        return "  ".join(
            f"{cell:{align}{width}}"
            for cell, (_, align, _), width in zip(cells, TABLE_COLUMNS, widths, strict=True)
        ).rstrip()

    lines = [line([name for name, _, _ in TABLE_COLUMNS])]
    lines += [line(row) for row in rows]
    flagged = report.flagged()
    legend = (
        "pass: kept pairs; drop h/r/n: pairs dropped by a history, Replay or Novel event; "
        "hist, replay, novel: median effect (mean |y'-y| / mean |y| over the event); amp: "
        "median Novel effect / largest history effect (kept pairs); margin: median distance of "
        "the Novel future from the nearest history response, over mean |y| (kept pairs); <0.1: "
        f"kept pairs whose margin is below {MARGIN_THRESHOLD:g}; beyond: 10th percentile over "
        "kept pairs of how far the Novel covariates go beyond the history's range (the least "
        "of the K; above 1: beyond); cover: the future event's mean "
        "share of the prediction window; y=0, bound: event steps with a zero baseline, with the "
        "target at a clip bound (-: no clip window). docs/DIAGNOSTICS.md defines each."
    )
    summary = f"{len(flagged)} of {len(report.targets)} targets flagged ({FLAG_RULE})"
    if flagged:
        summary += ": " + ", ".join(f"{t['simulator']}/{t['target']}" for t in flagged)
    lines += ["", *textwrap.wrap(legend, 100), *textwrap.wrap(summary, 100)]
    return "\n".join([*lines, *imprint_lines(report)])


def _k_ranges(ks: list[int]) -> str:
    """``[2, 3, 4, 5]`` -> ``"K2-5"``; ``[2, 4]`` -> ``"K2,4"``."""
    runs: list[list[int]] = []
    for k in sorted(ks):
        if runs and k == runs[-1][-1] + 1:
            runs[-1].append(k)
        else:
            runs.append([k])
    return "K" + ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else f"{r[0]}" for r in runs)


def imprint_lines(report: Diagnostics) -> list[str]:
    """The imprint warnings under the table: how many (secondary covariate, K) are below the
    threshold and, per target with any, its covariates and the Ks where they are."""
    if not report.imprints:
        return []
    weak = report.weak_imprints()
    lines = [
        "",
        *textwrap.wrap(
            f"imprints: {len(weak)} of {len(report.imprints)} (secondary covariate, K) below "
            f'({IMPRINT_RULE}; imprints.csv has every figure; docs/METHOD.md, "Separable '
            'imprints")' + (":" if weak else ""),
            100,
        ),
    ]
    by_target: dict[str, dict[str, list[int]]] = {}
    for imprint in weak:
        name = f"{imprint['simulator']}/{imprint['target']}"
        by_target.setdefault(name, {}).setdefault(imprint["covariate"], []).append(imprint["k"])
    for name, covariates in by_target.items():
        text = ", ".join(f"{c} {_k_ranges(ks)}" for c, ks in covariates.items())
        lines += textwrap.wrap(f"{name}: {text}", 100, subsequent_indent="    ")
    return lines


def imprints_frame(report: Diagnostics) -> pd.DataFrame:
    """``imprints.csv``: one row per (target, K, secondary covariate), columns
    ``imprints.COLUMNS`` (ratios: 0.05 is 5 %); a missing figure is an empty cell."""
    return pd.DataFrame(report.imprints, columns=list(IMPRINT_COLUMNS))


def targets_frame(report: Diagnostics) -> pd.DataFrame:
    """``diagnostics.csv``: one row per target, nested values flattened (``history_effect_p50``);
    an infinite number is ``inf``, a missing one an empty cell."""
    rows = []
    for summary in report.targets:
        row: dict = {}
        for key, value in summary.items():
            if isinstance(value, dict):
                row.update({f"{key}_{inner}": v for inner, v in value.items()})
            elif isinstance(value, list):
                row[key] = " ".join(f"{v:g}" for v in value)
            else:
                row[key] = value
        rows.append(row)
    return pd.DataFrame(rows)


# ---- the output folder --------------------------------------------------------------------
KIND = "diagnostics"  # the kind of the folder's identity record (outputs.IDENTITY)


def check_out_folder(out: str | os.PathLike, inputs: Iterable[str | os.PathLike] = ()) -> Path:
    """The absolute ``--out`` folder, refused before any work when unusable: an existing file,
    a symbolic link (or loop), a special file, the root, a folder that is or holds one of
    ``inputs``, or a non-empty folder that is not an earlier diagnostics report of this toolkit
    (its identity record, ``outputs.check_folder_output``), which is never replaced."""
    from whatif_bench.outputs import OutputError, check_folder_output, check_output_path

    inputs = list(inputs)
    path = Path(os.path.abspath(check_output_path(out, inputs=inputs, folder=True)))
    if path.parent == path:
        raise OutputError(f"{path}: cannot write to the root folder; give a folder inside it")
    check_folder_output(path, True, "whatif diagnose", KIND, inputs)
    return path


def write_folder(
    report: Diagnostics, out: str | os.PathLike, inputs: Iterable[str | os.PathLike] = ()
) -> Path:
    """Write the report's folder under a temporary name and rename it into place when complete
    (an earlier report there is replaced only then): ``diagnostics.csv``, ``pairs.csv``,
    ``imprints.csv``, ``plots/<simulator>.png``, ``plots/overview.png`` and, last,
    ``diagnostics.json``."""
    from whatif_bench.generator.diagnostics_plot import plot_overview, plot_simulator
    from whatif_bench.outputs import atomic_folder

    inputs = list(inputs)
    path = check_out_folder(out, inputs)
    with atomic_folder(path, lambda: check_out_folder(out, inputs), KIND) as tmp:
        (tmp / "plots").mkdir()
        targets_frame(report).to_csv(tmp / "diagnostics.csv", index=False)
        report.pairs.to_csv(tmp / "pairs.csv", index=False)
        imprints_frame(report).to_csv(tmp / "imprints.csv", index=False)
        for simulator in dict.fromkeys(t["simulator"] for t in report.targets):
            plot_simulator(report, simulator, tmp / "plots" / f"{simulator}.png")
        if report.targets:
            plot_overview(report, tmp / "plots" / "overview.png")
        text = json.dumps(report.as_dict(), indent=1, allow_nan=False) + "\n"
        with open(tmp / MARKER, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
    return path
