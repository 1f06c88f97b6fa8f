"""Rule checks of docs/METHOD.md (section 4) on every relationship, shared by the tests and
``relationships check``.

Rules: finite everywhere; the identity when every factor is 1; monotone in each covariate's
declared direction over every factor an event can draw (history pools and Novel ranges),
whatever the other covariates do; targets of ``only_increase`` simulators never fall below the
baseline; windowed (state) targets stay inside their window; multiplicative secondary terms
stay positive.

Alongside the rules, each secondary covariate's imprint (``relationships/imprints.py``; docs/
METHOD.md, "Separable imprints") is measured on every relationship that breaks no rule. A
secondary that cannot reach the 10 % rule on its own is a warning: it does not make the check
fail.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from whatif_bench.relationships.engine import Relationship
from whatif_bench.relationships.imprints import Imprint, below, measure
from whatif_bench.relationships.ranges import factor_bounds, factor_grid, sample_baselines
from whatif_bench.relationships.registry import Registry
from whatif_bench.relationships.verification import RULE, THRESHOLD
from whatif_bench.seeding import rng as seeded_rng

_TOLERANCE = 1e-12  # relative slack for "non-decreasing" comparisons of float results


@dataclass(frozen=True)
class Violation:
    """One broken rule, named for a human and for machines."""

    simulator: str
    target: str
    rule: str
    message: str


@dataclass
class CheckReport:
    """Every violation found, how many relationships were checked, and the imprints measured
    (``None`` when not measured; relationships with a violation are left out of them)."""

    checked: int = 0
    violations: list[Violation] = field(default_factory=list)
    imprints: list[Imprint] | None = None

    @property
    def ok(self) -> bool:
        """The rules hold. Imprints below the threshold are warnings and do not count."""
        return not self.violations

    def weak(self) -> list[Imprint]:
        """The imprints below the threshold (the warnings)."""
        return below(self.imprints or [])

    def as_dict(self, imprints: str = "below") -> dict:
        """The JSON report; ``imprints`` picks the imprint rows listed, as ``--imprints``:
        ``"below"`` the warnings, ``"all"`` every one, ``"none"`` none (and no imprint keys)."""
        out = {
            "checked": self.checked,
            "ok": self.ok,
            "violations": [v.__dict__ for v in self.violations],
        }
        if self.imprints is not None and imprints != "none":
            rows = self.imprints if imprints == "all" else self.weak()
            out["imprint_threshold"] = THRESHOLD
            out["imprints_measured"] = len(self.imprints)
            out["imprints_below"] = len(self.weak())
            out["imprints"] = [_json_row(i) for i in rows]
        return out

    def format(self, imprints: str = "below") -> str:
        """The text report: violations, the imprints ``imprints`` picks (as for ``as_dict``),
        the verdict line and a count of the warnings."""
        lines = [f"{v.simulator}/{v.target}: [{v.rule}] {v.message}" for v in self.violations]
        if self.imprints is not None and imprints == "all":
            lines += imprint_table(self.imprints)
        elif self.imprints is not None and imprints == "below" and self.weak():
            lines += warning_table(self.imprints)
        verdict = "all rules hold" if self.ok else f"{len(self.violations)} violation(s)"
        lines.append(f"checked {self.checked} relationship(s): {verdict}")
        if self.imprints is not None and imprints != "none":
            lines.append(
                f"imprints: {len(self.weak())} of {len(self.imprints)} (secondary covariate, K) "
                f"below the {RULE} on their own (warnings, not violations; docs/METHOD.md, "
                '"Separable imprints")'
            )
        return "\n".join(lines)


def _json_row(imprint: Imprint) -> dict:
    """One imprint as JSON (NaN, which JSON lacks, as null)."""
    return {
        key: (None if isinstance(value, float) and math.isnan(value) else value)
        for key, value in imprint.as_dict().items()
    }


def _percent(value: float, below: bool = False) -> str:
    """``value`` in percent to 0.1 %; one ``below`` the threshold is rounded down where
    rounding to nearest would show the threshold itself (0.09996 is 9.9 %, not 10.0 %)."""
    if math.isnan(value):
        return "-"
    if below and round(100 * value, 1) >= 100 * THRESHOLD:
        return f"{math.floor(1000 * value) / 10:.1f}%"
    return f"{round(100 * value, 1) + 0.0:.1f}%"  # + 0.0: no "-0.0%"


def _cell(imprint: Imprint | None) -> str:
    """A reach for the warnings table: blank when the covariate is not in the task."""
    if imprint is None:
        return ""
    weak = imprint.measurable is False
    return _percent(imprint.reach, weak) + ("*" if weak else "")


def warning_table(imprints: list[Imprint]) -> list[str]:
    """The warnings: one line per (target, secondary covariate) below the threshold at some K,
    with its reach (own effect at the pool's extreme factor, median over the baselines) at
    every K it is part of; ``*`` marks a K below the threshold."""
    weak = {(i.simulator, i.target, i.covariate) for i in below(imprints)}
    ks = sorted({i.k for i in imprints})
    grouped: dict[tuple[str, str], dict[int, Imprint]] = {}
    for i in imprints:
        if (i.simulator, i.target, i.covariate) in weak:
            grouped.setdefault((f"{i.simulator}/{i.target}", i.covariate), {})[i.k] = i
    names = [name for name, _ in grouped] + ["target"]
    covariates = [c for _, c in grouped] + ["covariate"]
    width, cov_width = max(map(len, names)), max(map(len, covariates))
    header = f"{'target':<{width}}  {'covariate':<{cov_width}}" + "".join(
        f"  {f'K={k}':>7}" for k in ks
    )
    lines = [
        *textwrap.wrap(
            "imprint warnings: a secondary covariate's own effect at the pool's extreme factor "
            f"(median over the baselines), * where below the {RULE}",
            100,
        ),
        header,
    ]
    for (name, covariate), by_k in grouped.items():
        cells = "".join(f"  {_cell(by_k.get(k)):>7}" for k in ks)
        lines.append(f"{name:<{width}}  {covariate:<{cov_width}}{cells}".rstrip())
    return lines


IMPRINT_COLUMNS = (
    ("target", "<"),
    ("K", ">"),
    ("covariate", "<"),
    ("s*w", ">"),
    ("share min", ">"),
    ("share med", ">"),
    ("own min", ">"),
    ("own med", ">"),
    ("reach", ">"),
    ("at f", ">"),
    ("", "<"),
)


def imprint_table(imprints: list[Imprint]) -> list[str]:
    """Every imprint, one line per (target, K, secondary covariate); ``BELOW`` flags the
    warnings."""
    rows = [
        [
            f"{i.simulator}/{i.target}",
            str(i.k),
            i.covariate,
            f"{i.weight:.3g}",
            _percent(i.share_min),
            _percent(i.share_median),
            _percent(i.own_min),
            _percent(i.own_median),
            _percent(i.reach, i.measurable is False),
            f"{i.reach_factor:g}",
            {True: "", False: "BELOW", None: "-"}[i.measurable],
        ]
        for i in imprints
    ]
    header = [name for name, _ in IMPRINT_COLUMNS]
    widths = [max(len(r[c]) for r in [header, *rows]) for c in range(len(header))]

    def line(cells) -> str:
        return "  ".join(
            f"{cell:{align}{w}}"
            for cell, (_, align), w in zip(cells, IMPRINT_COLUMNS, widths, strict=True)
        ).rstrip()

    legend = (
        f'imprints (docs/METHOD.md, "Separable imprints"): s*w: the dampened weight; share: '
        "the covariate's exact (Shapley) part of an event's effect; own: its effect alone "
        "(mean |y'-y| / mean |y|) over the factors it can draw and the baselines; reach: the "
        f"largest over the factors of the median over the baselines, BELOW the {RULE}"
    )
    return [*textwrap.wrap(legend, 100), line(header), *(line(r) for r in rows)]


def _contexts(relationship: Relationship, k: int, rng: np.random.Generator) -> np.ndarray:
    """Factor settings (n, K) for the covariates held fixed while one is swept."""
    low, high = factor_bounds(relationship.history_pool)
    signs = np.array([c.sign for c in relationship.covariates[:k]])
    up = np.where(signs > 0, high, low)
    down = np.where(signs > 0, low, high)
    pool = np.asarray(relationship.history_pool)
    rows = [np.ones(k), up, down]
    for _ in range(4):
        rows.append(rng.choice(pool, size=k))
    return np.array(rows)


def check_relationship(relationship: Relationship, seed: int = 0) -> list[Violation]:
    """All rule violations of one relationship, at every K from 1 to its number of covariates."""
    found: list[Violation] = []

    reported: set[tuple[str, str]] = set()

    def report(rule: str, message: str, covariate: str = "") -> None:
        """Record the first instance of each rule per covariate (more would repeat it)."""
        if (rule, covariate) not in reported:
            reported.add((rule, covariate))
            found.append(Violation(relationship.simulator, relationship.target, rule, message))

    rng = seeded_rng("checks", seed)
    y = sample_baselines(relationship)
    grid = factor_grid(relationship.history_pool)
    for k in range(1, relationship.max_k + 1):
        identity = relationship.evaluate(y, np.ones((k, y.size)))
        if not np.array_equal(identity, y):
            worst = int(np.argmax(np.abs(identity - y)))
            report(
                "identity", f"K={k}: y={y[worst]} gives {identity[worst]} with every factor at 1"
            )
        contexts = _contexts(relationship, k, rng)
        for index, info in enumerate(relationship.covariates[:k]):
            # shape (contexts, grid, y): sweep covariate `index` over the grid
            n_ctx, n_grid, n_y = contexts.shape[0], grid.size, y.size
            matrix = np.repeat(contexts[:, :, None, None], n_grid, axis=2)
            matrix = np.repeat(matrix, n_y, axis=3)
            matrix[:, index] = grid[None, :, None]
            flat = np.moveaxis(matrix, 1, 0).reshape(k, -1)
            baseline = np.tile(y, n_ctx * n_grid)
            values = relationship.evaluate(baseline, flat).reshape(n_ctx, n_grid, n_y)
            label = f"K={k}, covariate {info.name!r}"
            if not np.all(np.isfinite(values)):
                report(
                    "finite",
                    f"{label}: non-finite target for factors in [{grid[0]:.3g}, {grid[-1]:.3g}]",
                    info.name,
                )
                continue
            steps = np.diff(values, axis=1) * info.sign
            scale = np.maximum(np.abs(values[:, :-1]), np.abs(values[:, 1:])) + 1e-300
            if np.any(steps < -_TOLERANCE * scale):
                c, g, j = np.argwhere(steps < -_TOLERANCE * scale)[0]
                report(
                    "monotone",
                    f"{label} ({info.direction}): target moves the wrong way between f={grid[g]:.4g} "
                    f"and f={grid[g + 1]:.4g} at y={y[j]:.4g} (others at {contexts[c].round(3).tolist()})",
                    info.name,
                )
            if (
                index == 0
                and k == 1
                and np.all(np.abs(values[0] - values[0, :1]) <= _TOLERANCE * np.abs(values[0]))
            ):
                report("moves", f"the primary covariate {info.name!r} never changes the target")
            if relationship.only_increase:
                rising = grid >= 1.0
                below = values[:, rising, :] < baseline.reshape(n_ctx, n_grid, n_y)[:, rising, :]
                if np.any(below & (contexts.min(axis=1) >= 1.0)[:, None, None]):
                    report(
                        "only_increase",
                        f"{label}: a factor >= 1 lowers the target below its baseline",
                        info.name,
                    )
            if relationship.is_state():
                low, high = relationship.window
                if np.any(values < low) or np.any(values > high):
                    report("window", f"{label}: values leave the window [{low}, {high}]", info.name)
        if relationship.combination == "multiplicative" and k > 1:
            _check_positive_terms(relationship, k, grid, report)
    return found


def _check_positive_terms(relationship: Relationship, k: int, grid: np.ndarray, report) -> None:
    s = relationship.dampening_factor(k)
    for info in relationship.covariates[1:k]:
        r = info.effect.evaluate_reference(grid, params=info.effect.pack(info.effect_params))
        term = 1.0 + info.sign * s * info.weight * r
        if np.any(term <= 0):
            bad = grid[int(np.argmin(term))]
            report(
                "positive_term",
                f"K={k}: secondary {info.name!r} makes its factor 1 + s·w·r <= 0 at f={bad:.4g}",
                info.name,
            )


def _check_user_relationship(relationship: Relationship, seed: int, imprints: bool) -> dict:
    """Probe the user forms (a failure to run is ``{"failure": message}``), then check the
    rules and measure the imprints: ``{"violations": [...], "imprints": [...] or None}``.

    A user form that returns NaN or inf breaks the ``finite`` rule; its message then names the
    module file, the form and the first input that gave the non-finite value.
    """
    from whatif_bench.relationships.plugins import probe_relationship

    failure = probe_relationship(relationship)
    if failure is not None and failure["kind"] == "error":
        return {"failure": failure["message"]}
    found = [v.__dict__ for v in check_relationship(relationship, seed=seed)]
    if failure is not None:
        finite = [v for v in found if v["rule"] == "finite"]
        if finite:
            finite[0]["message"] += f" ({failure['message']})"
        else:
            found.insert(
                0,
                Violation(
                    relationship.simulator, relationship.target, "finite", failure["message"]
                ).__dict__,
            )
    measured = [i.as_dict() for i in measure(relationship)] if imprints and not found else None
    return {"violations": found, "imprints": measured}


def check_registry(
    registry: Registry,
    only: Iterable[tuple[str, str]] | None = None,
    seed: int = 0,
    timeout: float | None = None,
    imprints: bool = True,
) -> CheckReport:
    """Check every relationship (or only the given (simulator, target) pairs), and with
    ``imprints`` measure the imprints of those that break no rule (``report.imprints``).

    Relationships that call user forms are checked in a child process with ``timeout`` seconds
    per relationship (``plugins.USER_CODE_TIMEOUT_S`` by default): a user form that raises,
    returns a non-number or NaN, or never returns is a ``SpecError`` naming module and form.
    """
    from whatif_bench.errors import SpecError
    from whatif_bench.relationships import plugins

    wanted = set(only) if only is not None else None
    chosen = [r for r in registry if wanted is None or (r.simulator, r.target) in wanted]
    user = [r for r in chosen if plugins.uses_user_code(r)]
    user_results = plugins.call_each_with_timeout(
        lambda r: _check_user_relationship(r, seed, imprints),
        user,
        plugins.USER_CODE_TIMEOUT_S if timeout is None else timeout,
        plugins.describe_user_code,
    )
    by_relationship = {id(r): found for r, found in zip(user, user_results, strict=True)}
    report = CheckReport(imprints=[] if imprints else None)
    for relationship in chosen:
        report.checked += 1
        if id(relationship) in by_relationship:
            result = by_relationship[id(relationship)]
            if "failure" in result:
                raise SpecError(result["failure"])
            found = [Violation(**v) for v in result["violations"]]
            measured = [Imprint(**i) for i in result["imprints"] or []]
        else:
            found = check_relationship(relationship, seed=seed)
            measured = measure(relationship) if imprints and not found else []
        report.violations.extend(found)
        if report.imprints is not None:
            report.imprints.extend(measured)
    return report
