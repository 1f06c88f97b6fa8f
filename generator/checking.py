"""``whatif verify``: check everything a corpus file claims.

File-level: the counts (``n_pairs`` ...) match the index; the ``axes`` attribute is this
toolkit's; ``registry_hash`` is the registry's (the shipped spec files plus the user spec
texts and forms modules the corpus records, ``corpus/provenance.py``); the recorded config
is consistent with the master seed and the index; every stored array is finite; each embedded baseline matches its
recorded per-target hash (values, unit, interval, start); ``baselines_hash`` combines the
recorded per-simulator hashes; the embedded series (and simulator version) equal those of the
given baselines file when it holds the same simulator content. Per target: the stored
relationship description and unit are the registry's. Per pair: the id matches its axes;
offsets are in range; the stored recipe equals the one drawn again from the master seed; the
arrays rebuilt from the recipe equal the stored ones bit for bit; the stored 10 % statistics
and verdict are the recomputed ones; every kept pair passes the rule and its Novel future lies
beyond its history's range for every covariate (``generator/novel_range.py``). Pair ids are unique
(``Corpus`` refuses a file where they are not).

A target is first checked as a whole (``_whole_target``): its stored rows, events, factors and
task arrays against what the writer makes of its rebuilt pairs, a comparison per column and
array. Only a target where something differs is checked pair by pair, which names each
problem; the report is the same either way.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from whatif_bench.corpus import Corpus, draw_recipe
from whatif_bench.corpus.axes import FUTURES, contexts
from whatif_bench.corpus.fileformat import DATA_DATASETS, FORMAT_VERSION, REQUIRED
from whatif_bench.errors import WhatIfError
from whatif_bench.generator.novel_range import novel_reach
from whatif_bench.generator.sweep import build_pair, generate_target
from whatif_bench.generator.types import PairResult
from whatif_bench.generator.writer import OFFSET_COLUMNS, axes_description, target_rows
from whatif_bench.relationships.source import RegistrySource
from whatif_bench.relationships.verification import RULE, THRESHOLD
from whatif_bench.simulators.store import combine_hashes, read_baselines, series_hash

BLOCK = 1 << 20  # values read at a time when scanning a data array


@dataclass
class VerifyReport:
    """Pairs checked and every mismatch found."""

    checked: int = 0
    problems: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def _same_recipe(a, b) -> bool:
    return (
        a.window_start == b.window_start
        and a.layout == b.layout
        and a.replay_source == b.replay_source
        and np.array_equal(a.directions, b.directions)
        and np.array_equal(a.factors, b.factors)
        and np.array_equal(a.replay_factors, b.replay_factors)
        and np.array_equal(a.novel_factors, b.novel_factors)
    )


def _check_counts(corpus: Corpus, registry, report: VerifyReport) -> None:
    """The count attributes equal the index; the format version and axes are this toolkit's."""
    attrs, kept = corpus.attrs, corpus.pairs["kept"].to_numpy(dtype=bool)
    expected = {
        "format_version": FORMAT_VERSION,
        "n_pairs": int(kept.size),
        "n_pairs_kept": int(kept.sum()),
        "n_tasks_generated": int(len(corpus.futures) * kept.size),
        "n_tasks_kept": int(len(corpus.futures) * kept.sum()),
    }
    for name, value in expected.items():
        if attrs.get(name) != value:
            report.problems.append(
                f"attribute {name}: stored {attrs.get(name)!r}, expected {value}"
            )
    stored_axes = attrs.get("axes")
    if stored_axes != json.dumps(axes_description(registry, corpus.futures), sort_keys=True):
        report.problems.append("attribute axes: differs from the axes this toolkit generates with")


def _check_config(corpus: Corpus, report: VerifyReport) -> None:
    """The recorded config is JSON of this toolkit's fields, its seed is the master seed, and
    every simulator or target it names is in the index."""
    text = corpus.attrs.get("config")
    try:
        config = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        config = None
    fields = {"seed", "simulators", "targets"}
    if not isinstance(config, dict) or not fields <= set(config) <= {*fields, "futures"}:
        report.problems.append(f"attribute config: not a recorded generation config: {text!r}")
        return
    if list(corpus.futures) != config.get("futures", list(FUTURES)):
        report.problems.append(
            f"attribute config: futures {config.get('futures')!r} differ from the future types "
            f"of the axes attribute {list(corpus.futures)}"
        )
    if config["seed"] != corpus.attrs.get("master_seed"):
        report.problems.append(
            f"attribute config: seed {config['seed']!r} differs from master_seed "
            f"{corpus.attrs.get('master_seed')!r}"
        )
    index = corpus.pairs[["simulator", "target"]].drop_duplicates()
    simulators = set(index["simulator"])
    names = set(index["target"]) | set(index["simulator"] + "/" + index["target"])
    for name in config["simulators"]:
        if name not in simulators:
            report.problems.append(f"attribute config: simulator {name!r} has no pairs")
    for name in config["targets"]:
        if name not in names:
            report.problems.append(f"attribute config: target {name!r} has no pairs")


def _check_finite(
    corpus: Corpus, report: VerifyReport, names: list[str], spans: dict | None = None
) -> None:
    """Every value of the datasets ``names`` (paths under the file's root) is finite, scanned in
    blocks; with ``spans`` (name -> [(start, stop), ...]) only those ranges of each."""
    h5 = corpus._h5
    for name in names:
        dataset = h5[name]
        for first, stop in (spans or {}).get(name, [(0, dataset.shape[0])]):
            if _non_finite(report, name, first, lambda a, b, d=dataset: d[a:b], stop):
                break


def _non_finite(report: VerifyReport, name: str, first: int, read, stop: int) -> bool:
    """Scan ``read(a, b)`` (values ``a`` to ``b`` of dataset ``name``) from ``first`` to
    ``stop`` in blocks; report and return True at the first non-finite value."""
    for start in range(first, stop, BLOCK):
        block = read(start, min(start + BLOCK, stop))
        bad = np.flatnonzero(~np.isfinite(block))
        if bad.size:
            report.problems.append(
                f"/{name}: non-finite value {block[bad[0]]} at index {start + bad[0]}"
            )
            return True
    return False


class _DataScan:
    """The finiteness check of the task arrays, done on the values the pair checks read anyway
    (each value is decompressed once): ``check`` each pair's stored values, then ``finish``
    scans what no pair covered (values between pairs' arrays, in a damaged file)."""

    def __init__(self, report: VerifyReport, positions: dict[int, str] | None = None) -> None:
        self.report = report
        self.covered: dict[str, list[tuple[int, int]]] = {name: [] for name in DATA_DATASETS}
        self.reported: set[str] = set()
        self.positions = positions if positions is not None else {}  # of its reports, by name

    def check(self, name: str, offset: int, values: np.ndarray) -> None:
        self.covered[name].append((offset, offset + values.size))
        if name not in self.reported and not np.isfinite(values).all():
            end = offset + values.size
            self.positions[len(self.report.problems)] = name
            _non_finite(
                self.report,
                f"data/{name}",
                offset,
                lambda a, b: values[a - offset : b - offset],
                end,
            )
            self.reported.add(name)

    def finish(self, corpus: Corpus) -> None:
        spans = {}
        for name, covered in self.covered.items():
            if name in self.reported:
                continue
            gaps, at = [], 0
            for start, stop in sorted(covered):
                if start > at:
                    gaps.append((at, start))
                at = max(at, stop)
            length = corpus._h5[f"data/{name}"].shape[0]
            if at < length:
                gaps.append((at, length))
            spans[f"data/{name}"] = gaps
        _check_finite(corpus, self.report, list(spans), spans)


def _check_baselines(corpus: Corpus, registry, given, report: VerifyReport) -> None:
    """Embedded baselines against their recorded hashes, the registry and ``given`` baselines.

    ``given``: simulator -> ``Baselines`` read from a baselines file (may be empty).
    """
    group = corpus._h5["baselines"]
    targets = corpus.pairs[["simulator", "target"]].drop_duplicates().itertuples(index=False)
    simulator_hashes = {}
    given_hashes: dict[str, str] = {}  # a given simulator's hash, made once when needed

    def given_hash(simulator: str) -> str:
        if simulator not in given_hashes:
            given_hashes[simulator] = given[simulator].content_hash()
        return given_hashes[simulator]

    for simulator, target in targets:
        sim, where = group[simulator], f"/baselines/{simulator}/{target}"
        dataset = sim[target]
        values = dataset[()]
        unit, interval_s, start = (
            str(dataset.attrs["unit"]),
            int(sim.attrs["interval_s"]),
            str(sim.attrs["start"]),
        )
        simulator_hashes[simulator] = str(sim.attrs.get("content_hash", ""))
        if not np.all(np.isfinite(values)):
            bad = int(np.flatnonzero(~np.isfinite(values))[0])
            report.problems.append(f"{where}: non-finite value {values[bad]} at step {bad}")
        recorded = dataset.attrs.get("content_hash")
        if recorded is None:
            report.warnings.append(f"{where}: no recorded hash (a file from an older toolkit)")
        elif series_hash(simulator, target, unit, interval_s, start, values) != recorded:
            report.problems.append(
                f"{where}: values, unit {unit!r}, interval_s {interval_s} or start {start!r} "
                "differ from what was recorded when the corpus was written"
            )
        try:
            relationship = registry.get(simulator, target)
        except (KeyError, WhatIfError) as exc:
            report.problems.append(f"{where}: not in the relationship registry ({exc})")
            continue
        if unit != relationship.unit:
            report.problems.append(
                f"{where}: unit stored {unit!r}, the registry says {relationship.unit!r}"
            )
        stored = json.loads(dataset.attrs["relationship"])
        expected = json.loads(json.dumps(relationship.summary()))
        for key in sorted(set(stored) | set(expected)):
            if stored.get(key) != expected.get(key):
                report.problems.append(
                    f"{where}: relationship {key} stored {stored.get(key)!r}, the registry says "
                    f"{expected.get(key)!r}"
                )
        item = given.get(simulator)
        if item is None or given_hash(simulator) != simulator_hashes[simulator]:
            continue
        for name, mine, theirs in (
            ("interval_s", interval_s, item.interval_s),
            ("start", start, item.start),
            ("simulator_version", str(sim.attrs.get("simulator_version")), item.simulator_version),
        ):
            if mine != theirs:
                report.problems.append(
                    f"{where}: {name} stored {mine!r}, the baselines have {theirs!r}"
                )
        if not np.array_equal(values, item.series.get(target, np.empty(0))):
            report.problems.append(f"{where}: the series differs from the given baselines")
    combined = combine_hashes(simulator_hashes)
    if corpus.attrs.get("baselines_hash") != combined:
        report.problems.append(
            f"attribute baselines_hash: stored {corpus.attrs.get('baselines_hash')!r}, the "
            f"embedded simulators' hashes combine to {combined!r}"
        )
    others = sorted(s for s, h in simulator_hashes.items() if s in given and given_hash(s) != h)
    if given and others:
        report.warnings.append(
            f"the corpus was built from other {', '.join(others)} baselines than the given file; "
            "their series were checked against the recorded hashes only"
        )


def _offsets_problem(row: dict, sizes: dict[str, int]) -> str | None:
    """Why the offsets of one pair point outside the stored arrays, or None."""
    k, n_events = int(row["k"]), int(row["n_events"])
    context, prediction = int(row["context"]), int(row["prediction"])
    spans = {
        "event_offset": ("events/start", n_events),
        "factor_offset": ("events/factors", n_events * k),
        "kfactor_offset": ("futures/replay_factors", k),
    }
    data = {
        "history_target": context,
        "history_covariates": k * context,
        "future_target": 2 * prediction,
        "future_covariates": 2 * k * prediction,
    }
    for name, size in data.items():
        offset = int(row[f"{name}_offset"])
        if not row["kept"]:
            if offset != -1:
                return f"{name}_offset {offset} of a dropped pair, expected -1"
            continue
        spans[f"{name}_offset"] = (f"data/{name}", size)
    for column, (dataset, size) in spans.items():
        offset = int(row[column])
        if offset < 0 or offset + size > sizes[dataset]:
            return f"{column} {offset} (+{size}) is outside /{dataset} ({sizes[dataset]} values)"
    return None


def _ratio_problems(pair_id: str, row: dict, stored_ratios, rebuilt) -> list[str]:
    """The stored 10 % statistics against the recomputed ones (exact: same float64 code)."""
    problems = []
    if not np.array_equal(stored_ratios, rebuilt.history_ratios, equal_nan=True):
        problems.append(
            f"{pair_id}: stored event ratios {np.round(stored_ratios, 6).tolist()} differ from the "
            f"recomputed {np.round(rebuilt.history_ratios, 6).tolist()}"
        )
    for column, value in (
        ("min_history_ratio", float(rebuilt.history_ratios.min())),
        ("replay_ratio", rebuilt.replay_ratio),
        ("novel_ratio", rebuilt.novel_ratio),
    ):
        if not np.array_equal(row[column], value, equal_nan=True):
            problems.append(f"{pair_id}: {column} stored {row[column]!r}, recomputed {value!r}")
    return problems


# A process of its own checks at least this many pairs: starting one (imports, numba, the
# registry, the corpus's index) costs about as much as checking that many in the process that
# runs verify, so small corpora are checked in that process whatever --jobs says.
MIN_PAIRS_PER_PROCESS = 2000
BATCHES_PER_PROCESS = 4  # the pairs go to the processes in this many batches each, in order


def verify_corpus(
    path,
    progress: bool = True,
    limit_problems: int = 50,
    baselines_path=None,
    forms=(),
    reference: bool = False,
    jobs: int | None = 1,
) -> VerifyReport:
    """Check the corpus at ``path`` (see the module doc); ``baselines_path``: a baselines file
    to compare the embedded series with (default: the shipped one).

    The pairs are drawn and rebuilt a target at a time by the generator's kernels
    (``sweep.generate_target``); ``reference=True`` rebuilds each one with the method's
    one-at-a-time functions instead (``draw_recipe`` and ``build_pair``: the same pairs to the
    bit, several times slower). A target the kernels cannot rebuild (a damaged baseline, say)
    is checked pair by pair the reference way, so each pair's problem is named.

    ``jobs`` processes check the pairs (None: one per core), each a batch of whole targets
    at a time, never more than one per ``MIN_PAIRS_PER_PROCESS`` pairs; the report is the one
    a single process makes, problem for problem (``_replay``).

    A corpus built with user spec files is checked against the spec texts it records; one
    built with forms modules needs them in ``forms`` (each hashing to the recorded module, in
    the recorded order; ``provenance.corpus_source``), else a ``CorpusError`` says why."""
    from whatif_bench.corpus import corpus_registry
    from whatif_bench.simulators.store import shipped_baselines_path
    from whatif_bench.workers import default_jobs

    report = VerifyReport()
    given = read_baselines(baselines_path or shipped_baselines_path())
    with Corpus(path) as corpus:
        registry, source = corpus_registry(corpus, forms)
        processes = max(
            1,
            min(
                default_jobs() if jobs is None else jobs, len(corpus.pairs) // MIN_PAIRS_PER_PROCESS
            ),
        )
        # a damaged file can fail anywhere h5py reads: one CorpusError naming the file
        corpus._read(
            "its contents",
            lambda: _verify(
                corpus,
                given,
                report,
                _Checks(progress, limit_problems, reference, processes, tuple(forms)),
                registry,
                source,
            ),
        )
    return report


@dataclass(frozen=True)
class _Checks:
    """How ``_verify`` runs: its progress bar, problem limit, rebuild path and processes."""

    progress: bool
    limit_problems: int
    reference: bool
    processes: int
    forms: tuple


def _verify(
    corpus: Corpus,
    given,
    report: VerifyReport,
    checks: _Checks,
    registry,
    source: RegistrySource,
) -> None:
    """The checks of ``verify_corpus`` on an open corpus; problems go to ``report``."""
    from tqdm import tqdm

    expected_hash = source.registry_hash()
    if corpus.attrs.get("registry_hash") != expected_hash:
        report.problems.append(
            f"attribute registry_hash: stored {corpus.attrs.get('registry_hash')!r}, the "
            f"relationship registry here hashes to {expected_hash!r} (another toolkit "
            "version or edited spec files; the pairs were rebuilt with this registry)"
        )
    _check_counts(corpus, registry, report)
    _check_config(corpus, report)
    _check_finite(
        corpus, report, ["events/factors", *(f"futures/{name}" for name in REQUIRED["futures"])]
    )
    _check_baselines(corpus, registry, given, report)
    batches = _batches(corpus, checks.processes)
    logs: Iterable[_RowLog]
    if checks.processes == 1:
        context = _RowContext.of(corpus, registry, checks)
        logs = (_check_rows(context, batch) for batch in batches)
    else:
        from whatif_bench.cluster import WorkPool

        calls = ((str(corpus.path), checks, batch) for batch in batches)
        logs = WorkPool(checks.processes).ordered(_check_rows_in_worker, calls)
    data_scan = _DataScan(report)  # the task arrays' finiteness, on the pairs' reads
    bar = tqdm(
        total=len(corpus.pairs),
        desc="verifying",
        unit="pair",
        disable=not checks.progress,
    )
    try:
        for log in logs:
            if not _replay(log, report, data_scan, checks.limit_problems, bar):
                return
    finally:
        bar.close()
        with warnings.catch_warnings():  # joblib's, for the batches a stop leaves unread
            warnings.filterwarnings("ignore", "[0-9]+ tasks which were still being processed")
            close = getattr(logs, "close", None)
            if close is not None:
                close()
    data_scan.finish(corpus)


def _batches(corpus: Corpus, processes: int) -> list[list[int]]:
    """The index's row positions in file order, cut into batches of whole runs of one target:
    a run each in one process (the progress bar moves a target at a time); else
    ``BATCHES_PER_PROCESS`` per process, of about as many pairs each."""
    keys = list(zip(corpus.pairs["simulator"], corpus.pairs["target"], strict=True))
    goal = 1 if processes == 1 else len(keys) / (processes * BATCHES_PER_PROCESS)
    batches: list[list[int]] = [[]]
    for position, key in enumerate(keys):
        run_starts = position == 0 or key != keys[position - 1]
        if run_starts and len(batches[-1]) >= goal:
            batches.append([])
        batches[-1].append(position)
    return batches


@dataclass
class _RowLog:
    """What checking a batch of rows found, in the order found: ``problems``, with
    ``row_ends[i]`` problems up to the end of its i-th row; ``scans`` the positions in
    ``problems`` of non-finite reports of the task arrays (dataset name by position), which a
    single pass would not repeat for a dataset another batch reported first; ``covered`` the
    task arrays' spans the batch read (``_DataScan``)."""

    problems: list[str] = field(default_factory=list)
    row_ends: list[int] = field(default_factory=list)
    scans: dict[int, str] = field(default_factory=dict)
    covered: dict[str, list[tuple[int, int]]] = field(default_factory=dict)


def _replay(log: _RowLog, report: VerifyReport, scan: _DataScan, limit: int, bar) -> bool:
    """Add one batch's rows to ``report`` as a single pass would have, row by row; False when
    the problem limit stopped the check."""
    begin = 0
    for end in log.row_ends:
        report.checked += 1
        for position in range(begin, end):
            name = log.scans.get(position)
            if name is not None:
                if name in scan.reported:
                    continue
                scan.reported.add(name)
            report.problems.append(log.problems[position])
        begin = end
        bar.update()
        if len(report.problems) >= limit:
            report.problems.append(f"stopped after {limit} problems")
            return False
    for name, spans in log.covered.items():
        scan.covered[name].extend(spans)
    return True


@dataclass
class _RowContext:
    """What checking rows needs, read once per process."""

    corpus: Corpus
    registry: Any
    checks: _Checks
    seed: int
    sizes: dict[str, int]
    event_ratios: np.ndarray
    target_rows: dict

    @classmethod
    def of(cls, corpus: Corpus, registry, checks: _Checks) -> _RowContext:
        h5 = corpus._h5
        sizes = {
            name: h5[name].shape[0]
            for name in (
                "events/start",
                "events/direction",
                "events/ratio",
                "events/factors",
                "futures/replay_factors",
                "futures/novel_factors",
                *(f"data/{n}" for n in DATA_DATASETS),
            )
        }
        sizes["events/start"] = min(
            sizes.pop(n) for n in ("events/start", "events/direction", "events/ratio")
        )
        sizes["futures/replay_factors"] = min(
            sizes.pop(n) for n in ("futures/replay_factors", "futures/novel_factors")
        )
        return cls(
            corpus,
            registry,
            checks,
            int(corpus.attrs["master_seed"]),
            sizes,
            h5["events/ratio"][()],
            corpus.pairs.groupby(["simulator", "target"], sort=False).indices,
        )


_WORKER_CONTEXTS: dict[tuple, _RowContext] = {}  # a worker process's open corpus, by file


def _check_rows_in_worker(path: str, checks: _Checks, positions: list[int]) -> _RowLog:
    """``_check_rows`` in a worker process, on the corpus at ``path`` (opened once per
    process and file version; its registry loaded with the same forms)."""
    import os

    from whatif_bench.corpus import corpus_registry

    status = os.stat(path)
    key = (path, status.st_mtime_ns, status.st_size, checks)
    if key not in _WORKER_CONTEXTS:
        for context in _WORKER_CONTEXTS.values():
            context.corpus.close()
        _WORKER_CONTEXTS.clear()
        corpus = Corpus(path)
        registry, _ = corpus_registry(corpus, checks.forms)
        _WORKER_CONTEXTS[key] = corpus._read(
            "its contents", lambda: _RowContext.of(corpus, registry, checks)
        )
    context = _WORKER_CONTEXTS[key]
    return context.corpus._read("its contents", lambda: _check_rows(context, positions))


def _check_rows(context: _RowContext, positions: list[int]) -> _RowLog:
    """The per-pair checks of the index rows at ``positions`` (whole runs of one target, in
    file order), logged for ``_replay``. A run of a target whose stored rows, events, factors
    and arrays equal the rebuilt ones wholesale is checked as a whole (``_whole_target``);
    any other run pair by pair, which names each problem. A batch stops once its own pair
    problems reach the limit: the report, which keeps every one of them, stops there too."""
    corpus, registry, seed, sizes = context.corpus, context.registry, context.seed, context.sizes
    reference, limit = context.checks.reference, context.checks.limit_problems
    log = _RowLog()
    local = VerifyReport(problems=log.problems)
    data_scan = _DataScan(local, log.scans)
    baselines = {}
    expected: dict[str, PairResult] = {}  # the current target's pairs, drawn and rebuilt
    expected_target = None
    stored_arrays: dict[tuple[str, str], np.ndarray] = {}  # a target's kept pairs' arrays
    stored_target = None
    rows = corpus.pairs
    for key, run in _runs(rows, positions):
        if not reference:
            try:
                relationship = registry.get(*key)
                if key not in baselines:
                    baselines[key] = corpus.baseline(*key)
                if key != expected_target:  # (set once made: a failure is the pairs' to name)
                    expected = _target_pairs(relationship, baselines[key], seed)
                    expected_target = key
                if _whole_target(context, key, run, relationship, expected, data_scan):
                    log.row_ends.extend([len(log.problems)] * len(run))
                    continue
            except (KeyError, ValueError, OSError, WhatIfError):
                pass  # checked pair by pair below, which names the problem
        for row in rows.iloc[run].itertuples(index=False):
            row = row._asdict()
            log.row_ends.append(len(log.problems))  # replaced below, once the row's checks ran
            pair_id = row["pair_id"]
            where = _offsets_problem(row, sizes)
            if where is not None:
                local.problems.append(f"{pair_id}: {where}")
            else:
                try:
                    relationship = registry.get(row["simulator"], row["target"])
                    key = (row["simulator"], row["target"])
                    if key not in baselines:
                        baselines[key] = corpus.baseline(*key)
                    if key != expected_target:
                        expected_target = key
                        if not reference:
                            expected = _target_pairs(relationship, baselines[key], seed)
                    if key != stored_target:
                        stored_target = key
                        stored_arrays = _stored_arrays(
                            corpus, rows.iloc[context.target_rows[key]], sizes, data_scan
                        )
                    _check_pair(
                        row,
                        corpus,
                        relationship,
                        baselines[key],
                        seed,
                        expected,
                        stored_arrays,
                        context.event_ratios,
                        local,
                    )
                except (KeyError, ValueError, OSError) as exc:
                    local.problems.append(f"{pair_id}: cannot be rebuilt ({exc})")
            log.row_ends[-1] = len(log.problems)
            if len(log.problems) - len(log.scans) >= limit:
                log.covered = data_scan.covered
                return log
    log.covered = data_scan.covered
    return log


def _runs(rows, positions: list[int]) -> list[tuple[tuple[str, str], list[int]]]:
    """``positions`` cut into runs of consecutive rows of one (simulator, target)."""
    simulators = rows["simulator"].to_numpy()[positions]
    targets = rows["target"].to_numpy()[positions]
    runs: list[tuple[tuple[str, str], list[int]]] = []
    for position, simulator, target in zip(positions, simulators, targets, strict=True):
        key = (str(simulator), str(target))
        if not runs or runs[-1][0] != key:
            runs.append((key, []))
        runs[-1][1].append(position)
    return runs


def _whole_target(
    context: _RowContext,
    key: tuple[str, str],
    run: list[int],
    relationship,
    expected: dict[str, PairResult],
    data_scan: _DataScan,
) -> bool:
    """Check one target's run of rows as a whole: True when ``run`` is all of the target's
    rows and they, their events, factors and task arrays equal what the writer makes of the
    rebuilt pairs ``expected`` (``target_rows``, offsets starting where the stored ones do),
    every offset is inside its array, every kept pair passes the rule and leaves the history's
    range, and the arrays are finite. Then no pair check could find a problem; the arrays'
    spans go to ``data_scan``. False (nothing recorded): check the run pair by pair."""
    corpus, sizes = context.corpus, context.sizes
    if not expected or not np.array_equal(context.target_rows[key], run):
        return False
    results = list(expected.values())
    stored = corpus.pairs.iloc[run]
    if len(results) != len(stored):
        return False
    kept = stored["kept"].to_numpy(dtype=bool)
    starts = {
        name: int(stored[f"{name}_offset"].iloc[0]) for name in ("event", "factor", "kfactor")
    }
    for name in DATA_DATASETS:
        offsets = stored[f"{name}_offset"].to_numpy()[kept]
        starts[name] = int(offsets[0]) if offsets.size else 0
    reasons = [result.drop_reason for result in results]  # (from the ratios: once a pair)
    kept_results = [result for result, reason in zip(results, reasons, strict=True) if not reason]
    built = target_rows(results, reasons, starts)
    if not all(_same_column(stored[column], values) for column, values in built.columns.items()):
        return False
    for name, dataset in OFFSET_COLUMNS.items():
        if starts[name] < 0 or starts[name] + built.sizes[name] > sizes[dataset]:
            return False
    if not _same_events(context, starts, built):
        return False
    for result in kept_results:
        if _kept_pair_problems(result.recipe.key.pair_id, result.recipe, result, relationship):
            return False
    arrays = {}
    for name in DATA_DATASETS:
        parts = [result.arrays[name].reshape(-1) for result in kept_results]
        if not parts:
            continue
        rebuilt = np.concatenate(parts)
        values = corpus._slice(name, starts[name], rebuilt.size)
        if not np.array_equal(values.view(np.uint32), rebuilt.view(np.uint32)):
            return False
        if not np.isfinite(values).all():
            return False
        arrays[name] = values
    for name, values in arrays.items():
        data_scan.check(name, starts[name], values)
    return True


def _same_column(stored, values: list) -> bool:
    """A stored ``/pairs`` column (a pandas Series) holds ``values``, compared as the pair
    checks compare them (floats: NaN equals NaN)."""
    if len(stored) != len(values):
        return False
    if values and isinstance(values[0], str):
        return bool(stored.tolist() == values)
    array = stored.to_numpy()
    if array.dtype.kind == "O":
        return bool(stored.tolist() == values)
    return bool(np.array_equal(array, np.asarray(values), equal_nan=array.dtype.kind == "f"))


def _same_events(context: _RowContext, starts: dict[str, int], built) -> bool:
    """The stored events and future factors from ``starts`` on equal those ``built``."""
    events, futures = context.corpus._recipes()
    e0, f0, k0 = starts["event"], starts["factor"], starts["kfactor"]
    n_events, n_factors, k = (built.sizes[name] for name in ("event", "factor", "kfactor"))
    pairs = (
        (events["start"][e0 : e0 + n_events], np.asarray(built.events["start"])),
        (
            events["direction"][e0 : e0 + n_events].astype(np.int8),
            np.asarray(built.events["direction"], dtype=np.int8),
        ),
        (events["factors"][f0 : f0 + n_factors], np.concatenate(built.factors)),
        (futures["replay_factors"][k0 : k0 + k], np.concatenate(built.future_factors["replay"])),
        (futures["novel_factors"][k0 : k0 + k], np.concatenate(built.future_factors["novel"])),
    )
    if not all(np.array_equal(stored, rebuilt) for stored, rebuilt in pairs):  # (shapes too)
        return False
    ratios = context.event_ratios[e0 : e0 + n_events]
    rebuilt = np.asarray(built.events["ratio"], dtype=np.float64)
    return bool(np.array_equal(ratios, rebuilt, equal_nan=True))


def _check_pair(
    row: dict,
    corpus: Corpus,
    relationship,
    baseline: np.ndarray,
    seed: int,
    expected: dict[str, PairResult],
    stored_arrays: dict,
    event_ratios: np.ndarray,
    report: VerifyReport,
) -> None:
    """One pair's checks: its id, recipe, statistics, verdict and, if kept, the rule, the
    Novel range and its arrays bit for bit; problems go to ``report``."""
    pair_id = row["pair_id"]
    stored = corpus.recipe(row)
    if pair_id != stored.key.pair_id:
        report.problems.append(
            f"{pair_id}: the pair id does not match its axes ({stored.key.pair_id})"
        )
        return
    rebuilt = expected.get(pair_id)
    if rebuilt is not None:
        drawn = rebuilt.recipe
    else:
        context, prediction = contexts(relationship.c4)[row["c_label"]]
        drawn = draw_recipe(stored.key, relationship, context, prediction, baseline.size, seed)
    if not _same_recipe(stored, drawn):
        report.problems.append(f"{pair_id}: stored recipe differs from the one the seed draws")
        return
    if rebuilt is None:
        rebuilt = build_pair(stored, relationship, baseline)
    e0 = int(row["event_offset"])
    report.problems.extend(
        _ratio_problems(pair_id, row, event_ratios[e0 : e0 + int(row["n_events"])], rebuilt)
    )
    if rebuilt.kept != bool(row["kept"]) or rebuilt.drop_reason != row["drop_reason"]:
        report.problems.append(
            f"{pair_id}: verdict {rebuilt.drop_reason or 'kept'!r} differs from the stored "
            f"{row['drop_reason'] or 'kept'!r}"
        )
        return
    if not rebuilt.kept:
        return
    report.problems.extend(_kept_pair_problems(pair_id, stored, rebuilt, relationship))
    for name, values in rebuilt.arrays.items():
        stored_values = stored_arrays.get((pair_id, name))
        if stored_values is None or stored_values.size != values.size:
            offset = int(row[f"{name}_offset"])
            stored_values = corpus._slice(name, offset, values.size)
        if not np.array_equal(stored_values.view(np.uint32), values.reshape(-1).view(np.uint32)):
            report.problems.append(f"{pair_id}: stored {name} differs from the rebuilt one")


def _kept_pair_problems(pair_id: str, recipe, rebuilt: PairResult, relationship) -> list[str]:
    """What is wrong with a kept pair itself (``recipe`` its stored recipe, ``rebuilt`` its
    statistics): it fails the rule, or its Novel future stays inside the history's range for
    some covariate."""
    problems = []
    if min(rebuilt.history_ratios.min(), rebuilt.replay_ratio, rebuilt.novel_ratio) < THRESHOLD:
        problems.append(f"{pair_id}: a kept pair fails the {RULE}")
    inside = novel_reach(recipe, relationship).inside(relationship.covariate_names[: recipe.key.k])
    if inside:
        problems.append(
            f"{pair_id}: the Novel future does not leave the history's range for "
            f"{', '.join(inside)}"
        )
    return problems


def _target_pairs(relationship, baseline: np.ndarray, seed: int) -> dict[str, PairResult]:
    """Every pair of one target as the generator makes it, by pair id; empty when the kernels
    cannot make them (the caller then checks pair by pair, naming each pair's problem)."""
    try:
        return {r.recipe.key.pair_id: r for r in generate_target(relationship, baseline, seed)}
    except (WhatIfError, ValueError, ArithmeticError):
        return {}


def _stored_arrays(corpus: Corpus, target_rows, sizes: dict[str, int], scan: _DataScan) -> dict:
    """The stored arrays of one target's kept pairs whose offsets are in range, keyed by
    (pair id, dataset name): one read per dataset where the pairs lie together
    (``Corpus._slices``), pair by pair otherwise; each is checked for finiteness (``scan``)."""
    valid = [
        row
        for row in target_rows.to_dict("records")
        if row["kept"] and _offsets_problem(row, sizes) is None
    ]
    arrays = {}
    for name in DATA_DATASETS:
        lengths = [_stored_size(name, row) for row in valid]
        offsets = [int(row[f"{name}_offset"]) for row in valid]
        for row, offset, values in zip(
            valid, offsets, corpus._slices(name, offsets, lengths), strict=True
        ):
            scan.check(name, offset, values)
            arrays[row["pair_id"], name] = values
    return arrays


def _stored_size(name: str, row: dict) -> int:
    """Values pair ``row`` keeps in data array ``name``."""
    k, context, prediction = int(row["k"]), int(row["context"]), int(row["prediction"])
    return {
        "history_target": context,
        "history_covariates": k * context,
        "future_target": 2 * prediction,
        "future_covariates": 2 * k * prediction,
    }[name]
