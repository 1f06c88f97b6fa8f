"""The public relationship API: one resolved ``Relationship`` per target.

A relationship maps a baseline series and covariate factors to the target under intervention:
``y' = combine(g_p(y, f_p), secondaries)`` (docs/METHOD.md, section 4). ``evaluate`` takes factor trajectories or
constants; ``apply_events`` takes an ``EventSchedule`` and touches only the event windows.
Both run numba kernels; ``evaluate_reference`` is the plain-numpy equivalent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

import numpy as np

from whatif_bench.errors import RelationshipError
from whatif_bench.relationships import kernels as k
from whatif_bench.relationships import reference as ref
from whatif_bench.relationships.dispatch import current_kernels
from whatif_bench.relationships.forms import MAX_PARAMS, FormDefinition
from whatif_bench.relationships.shapes import shape_code

_COMBINATION_CODES = {"multiplicative": k.MULTIPLICATIVE, "additive": k.ADDITIVE}


class CovariateArrays(NamedTuple):
    """The first K covariates of a relationship as contiguous kernel arrays."""

    effect_codes: np.ndarray  # (K,) int64: effect code per covariate (row 0, the primary, unused)
    effect_params: np.ndarray  # (K, MAX_PARAMS) float64: packed effect parameters
    weights: np.ndarray  # (K,) float64: signed, dampened weights (0 for the primary)
    shape_codes: np.ndarray  # (K,) int64: STEP or BELL per covariate


@dataclass(frozen=True)
class EventSchedule:
    """Non-overlapping events: ``starts`` (E,), ``lengths`` (E,), ``factors`` (E, K).

    Column ``c`` of ``factors`` belongs to the relationship's ``c``-th covariate (0 = primary).
    """

    starts: np.ndarray
    lengths: np.ndarray
    factors: np.ndarray

    def __post_init__(self) -> None:
        starts = np.ascontiguousarray(self.starts, dtype=np.int64).reshape(-1)
        lengths = np.ascontiguousarray(self.lengths, dtype=np.int64).reshape(-1)
        factors = np.ascontiguousarray(self.factors, dtype=np.float64)
        if factors.ndim == 1:
            factors = factors.reshape(-1, 1)
        if not (starts.shape[0] == lengths.shape[0] == factors.shape[0]):
            raise RelationshipError(
                f"event schedule: {starts.shape[0]} starts, {lengths.shape[0]} lengths and "
                f"{factors.shape[0]} factor rows must match"
            )
        if (lengths < 1).any():
            raise RelationshipError("event schedule: every event length must be >= 1")
        if (starts < 0).any():
            raise RelationshipError("event schedule: event starts must be >= 0")
        if starts.size > 1 and (starts[1:] < starts[:-1] + lengths[:-1]).any():
            raise RelationshipError("event schedule: events must be sorted and must not overlap")
        if not np.isfinite(factors).all() or (factors <= 0).any():
            raise RelationshipError("event schedule: factors must be finite and > 0")
        object.__setattr__(self, "starts", starts)
        object.__setattr__(self, "lengths", lengths)
        object.__setattr__(self, "factors", factors)

    @property
    def n_covariates(self) -> int:
        return int(self.factors.shape[1])

    def end(self) -> int:
        """One past the last step any event touches (0 without events)."""
        return int((self.starts + self.lengths).max()) if self.starts.size else 0


@dataclass(frozen=True)
class CovariateInfo:
    """One covariate as it acts on one target."""

    name: str
    shape: str
    base_value: float
    unit: str
    direction: str
    effect: FormDefinition
    effect_params: Mapping[str, float]
    weight: float  # secondary weight w_c (unused for the primary)
    group: str
    description: str

    @property
    def sign(self) -> float:
        """+1 when the target rises with the factor, -1 when it falls."""
        return 1.0 if self.direction == "direct" else -1.0


@dataclass(frozen=True)
class Relationship:
    """The exact covariate -> target relationship of one target (immutable, picklable)."""

    simulator: str
    target: str
    unit: str
    target_class: str
    combination: str
    form: FormDefinition
    params: Mapping[str, float]
    covariates: tuple[CovariateInfo, ...]
    level: float
    window: tuple[float, float]
    typical_range: tuple[float, float]
    dampening: float
    history_pool: tuple[float, ...]
    only_increase: bool
    c4: tuple[int, int]  # (context, prediction) steps of the C4 axis value, from the spec header
    rationale: str
    class_rationale: str
    _packed: dict[int, CovariateArrays] = field(default_factory=dict, repr=False, compare=False)

    # ---- descriptive ------------------------------------------------------------------
    @property
    def primary(self) -> str:
        return self.covariates[0].name

    @property
    def covariate_names(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.covariates)

    @property
    def max_k(self) -> int:
        return len(self.covariates)

    def covariate(self, name: str) -> CovariateInfo:
        for info in self.covariates:
            if info.name == name:
                return info
        raise RelationshipError(
            f"covariate {name!r} does not act on {self.simulator}/{self.target}; "
            f"its covariates are {list(self.covariate_names)}"
        )

    def dampening_factor(self, k_covariates: int) -> float:
        """Joint dampening ``s(K) = K ** -dampening`` applied to every secondary effect."""
        return float(k_covariates) ** -self.dampening

    def is_state(self) -> bool:
        """True for targets kept inside a finite window (on/off indicators)."""
        return np.isfinite(self.window[0]) and np.isfinite(self.window[1])

    @cached_property
    def primary_params(self) -> np.ndarray:
        return self.form.pack(self.params)

    # ---- kernels' arguments -----------------------------------------------------------
    def _check_k(self, k_covariates: int) -> int:
        k_covariates = int(k_covariates)
        if not 1 <= k_covariates <= self.max_k:
            raise RelationshipError(
                f"{self.simulator}/{self.target}: K must be in 1..{self.max_k}, got {k_covariates}"
            )
        return k_covariates

    def kernel_arguments(self, k_covariates: int) -> CovariateArrays:
        """Contiguous arrays describing the first ``k_covariates`` covariates for the kernels."""
        k_covariates = self._check_k(k_covariates)
        if k_covariates not in self._packed:
            active = self.covariates[:k_covariates]
            codes = np.array([c.effect.code for c in active], dtype=np.int64)
            params = np.zeros((k_covariates, MAX_PARAMS), dtype=np.float64)
            weights = np.zeros(k_covariates, dtype=np.float64)
            s = self.dampening_factor(k_covariates)
            for i, info in enumerate(active):
                params[i] = info.effect.pack(info.effect_params)
                if i > 0:
                    weights[i] = info.sign * s * info.weight
            shapes = np.array([shape_code(c.shape) for c in active], dtype=np.int64)
            self._packed[k_covariates] = CovariateArrays(codes, params, weights, shapes)
        return self._packed[k_covariates]

    def kernel_constants(self, k_covariates: int) -> k.RelationshipConstants:
        """The relationship over its first ``k_covariates`` covariates, as the kernels read it."""
        codes, params, weights, _ = self.kernel_arguments(k_covariates)
        lower, upper = self.window
        return k.RelationshipConstants(
            primary_code=self.form.code,
            primary_params=self.primary_params,
            effect_codes=codes,
            effect_params=params,
            weights=weights,
            combination=_COMBINATION_CODES[self.combination],
            level=float(self.level),
            lower=float(lower),
            upper=float(upper),
        )

    # ---- evaluation -------------------------------------------------------------------
    def factor_matrix(
        self,
        n_steps: int,
        factors: Mapping[str, float | np.ndarray],
        k_covariates: int | None = None,
    ) -> np.ndarray:
        """(K, T) factor trajectories from named constants or arrays; unnamed covariates stay 1.

        ``K`` defaults to the position of the last named covariate (at least 1).
        """
        positions = {name: i for i, name in enumerate(self.covariate_names)}
        for name in factors:
            if name not in positions:
                self.covariate(name)  # raises with the list of valid covariates
        if k_covariates is None:
            k_covariates = max([positions[n] + 1 for n in factors] or [1])
        k_covariates = self._check_k(k_covariates)
        matrix = np.ones((k_covariates, n_steps), dtype=np.float64)
        for name, value in factors.items():
            index = positions[name]
            if index >= k_covariates:
                raise RelationshipError(
                    f"covariate {name!r} is number {index + 1} of {self.target}; K={k_covariates} excludes it"
                )
            matrix[index] = np.broadcast_to(np.asarray(value, dtype=np.float64), (n_steps,))
        if not np.isfinite(matrix).all() or (matrix <= 0).any():
            raise RelationshipError("factors must be finite and > 0")
        return matrix

    def evaluate(
        self,
        y: np.ndarray,
        factors: Mapping[str, float | np.ndarray] | np.ndarray,
        k_covariates: int | None = None,
    ) -> np.ndarray:
        """Target values for baseline ``y`` (T,) under ``factors`` (named, or a (K, T) array)."""
        y = _as_series(y)
        matrix = (
            np.ascontiguousarray(factors, dtype=np.float64)
            if isinstance(factors, np.ndarray)
            else self.factor_matrix(y.shape[0], factors, k_covariates)
        )
        if matrix.ndim != 2 or matrix.shape[1] != y.shape[0]:
            raise RelationshipError(f"factor array must be (K, {y.shape[0]}), got {matrix.shape}")
        out = np.empty_like(y)
        current_kernels().evaluate(y, matrix, self.kernel_constants(matrix.shape[0]), out)
        return out

    def evaluate_coalitions(self, y: np.ndarray, factors: np.ndarray) -> np.ndarray:
        """(2^K, T): row ``m`` is ``evaluate(y, ...)`` with the rows of ``factors`` (K, T) of
        the covariates whose bits are set in ``m`` and 1 for the others, to the bit (one
        kernel makes each step's form values once; ``evaluate_coalitions_reference`` is the
        plain way). K is at most 5 (32 coalitions)."""
        y = _as_series(y)
        matrix = np.ascontiguousarray(factors, dtype=np.float64)
        if matrix.ndim != 2 or matrix.shape[1] != y.shape[0]:
            raise RelationshipError(f"factor array must be (K, {y.shape[0]}), got {matrix.shape}")
        self._check_k(matrix.shape[0])
        out = np.empty((2 ** matrix.shape[0], y.shape[0]))
        current_kernels().coalitions(y, matrix, self.kernel_constants(matrix.shape[0]), out)
        return out

    def evaluate_coalitions_reference(self, y: np.ndarray, factors: np.ndarray) -> np.ndarray:
        """``evaluate_coalitions`` the plain way: one ``evaluate`` of every coalition's rows."""
        matrix = np.asarray(factors, dtype=np.float64)
        k = matrix.shape[0]
        rows = []
        for mask in range(2**k):
            members = np.array([(mask >> c) & 1 for c in range(k)], dtype=bool)
            rows.append(self.evaluate(y, np.where(members[:, None], matrix, 1.0)))
        return np.array(rows)

    def coalition_worths(self, y: np.ndarray, length: int, factors: np.ndarray) -> np.ndarray:
        """(2^K,) float64: entry ``m`` is the sum over the steps of ``y`` (T,) of coalition
        ``m``'s effect (the target minus ``y``, in the target's unit times steps) of one event at
        step 0 of ``length`` steps with ``factors`` (K,), cut at step T; coalition ``m`` moves
        the covariates whose bits are set, the others stay at factor 1. One kernel call, equal
        to the bit to ``coalition_worths_reference`` (the worths a task description
        attributes)."""
        y = _as_series(y)
        factors = np.ascontiguousarray(factors, dtype=np.float64)
        if factors.ndim != 1:
            raise RelationshipError(f"an event's factors are (K,), got shape {factors.shape}")
        k = self._check_k(factors.shape[0])
        if not np.isfinite(factors).all() or (factors <= 0).any():
            raise RelationshipError("factors must be finite and > 0")
        whole = isinstance(length, int | np.integer) and not isinstance(length, bool | np.bool_)
        if not whole or length < 1:
            raise RelationshipError(
                f"an event's length is a whole number of steps >= 1, got {length!r}"
            )
        out = np.empty(2**k)
        current_kernels().worths(
            y,
            int(length),
            factors,
            self.kernel_arguments(k).shape_codes,
            self.kernel_constants(k),
            out,
        )
        return out

    def coalition_worths_reference(
        self, y: np.ndarray, length: int, factors: np.ndarray
    ) -> np.ndarray:
        """``coalition_worths`` the plain way: the event's trajectories over
        ``max(length, T)`` steps cut at T, every coalition evaluated at every step
        (``evaluate_coalitions_reference``), minus ``y``, summed by NumPy per coalition."""
        y = _as_series(y)
        factors = np.asarray(factors, dtype=np.float64)
        schedule = EventSchedule(np.array([0]), np.array([length]), factors[None, :])
        trajectories = self.factor_trajectories(max(int(length), y.shape[0]), schedule)
        values = self.evaluate_coalitions_reference(y, trajectories[:, : y.shape[0]])
        return (values - y[None, :]).sum(axis=1)

    def evaluate_grid(
        self,
        y: np.ndarray,
        factor_lists: Mapping[str, list[float] | np.ndarray],
        n_rows: int,
        k_covariates: int | None = None,
    ) -> np.ndarray:
        """(n_rows, len(y)): row ``i`` holds the target for every ``y`` under the ``i``-th factors."""
        y = _as_series(y)
        columns = {
            name: np.repeat(np.asarray(values, dtype=np.float64), y.shape[0])
            for name, values in factor_lists.items()
        }
        tiled = np.tile(y, n_rows)
        return self.evaluate(tiled, columns, k_covariates).reshape(n_rows, y.shape[0])

    def evaluate_reference(self, y: np.ndarray, matrix: np.ndarray) -> np.ndarray:
        """Plain-numpy equivalent of ``evaluate`` for a (K, T) factor array (tests, benchmarks)."""
        y = np.asarray(y, dtype=np.float64)
        matrix = np.asarray(matrix, dtype=np.float64)
        s = self.dampening_factor(matrix.shape[0])
        g = self.form.evaluate_reference(y, matrix[0], params=self.primary_params)
        terms = []
        for info, row in zip(self.covariates[1 : matrix.shape[0]], matrix[1:], strict=True):
            r = info.effect.evaluate_reference(row, params=info.effect.pack(info.effect_params))
            terms.append(info.sign * s * info.weight * r)
        return ref.combine(self.combination, y, g, terms, self.level, *self.window)

    def apply_events(self, y: np.ndarray, schedule: EventSchedule) -> np.ndarray:
        """Target under the scheduled events; steps outside every event equal ``y`` exactly."""
        y = _as_series(y)
        self._check_schedule(schedule, y.shape[0])
        shapes = self.kernel_arguments(schedule.n_covariates).shape_codes
        out = np.empty_like(y)
        current_kernels().apply_events(
            y,
            schedule.starts,
            schedule.lengths,
            schedule.factors,
            shapes,
            self.kernel_constants(schedule.n_covariates),
            out,
        )
        return out

    def factor_trajectories(self, n_steps: int, schedule: EventSchedule) -> np.ndarray:
        """(K, T) factor trajectories of the scheduled events, shaped per covariate."""
        self._check_schedule(schedule, n_steps)
        shapes = self.kernel_arguments(schedule.n_covariates).shape_codes
        out = np.empty((schedule.n_covariates, n_steps), dtype=np.float64)
        current_kernels().trajectories(
            schedule.starts, schedule.lengths, schedule.factors, shapes, out
        )
        return out

    def covariate_values(self, n_steps: int, schedule: EventSchedule) -> np.ndarray:
        """(K, T) covariates in their physical units: ``base_value * factor(t)``."""
        bases = np.array([c.base_value for c in self.covariates[: schedule.n_covariates]])
        return self.factor_trajectories(n_steps, schedule) * bases[:, None]

    def _check_schedule(self, schedule: EventSchedule, n_steps: int) -> None:
        self._check_k(schedule.n_covariates)
        if schedule.end() > n_steps:
            raise RelationshipError(
                f"event schedule reaches step {schedule.end()} but the series has {n_steps} steps"
            )

    # ---- machine-readable summary ------------------------------------------------------
    def summary(self) -> dict:
        """The stable JSON description used by ``whatif relationships list --json``."""
        return {
            "simulator": self.simulator,
            "target": self.target,
            "primary": self.primary,
            "covariates": list(self.covariate_names),
            "combination": self.combination,
            "direction": {c.name: c.direction for c in self.covariates},
            "shape": {c.name: c.shape for c in self.covariates},
            "base_value": {c.name: c.base_value for c in self.covariates},
        }


def _as_series(y: np.ndarray) -> np.ndarray:
    array = np.ascontiguousarray(y, dtype=np.float64)
    if array.ndim != 1:
        raise RelationshipError(f"baseline must be one-dimensional, got shape {array.shape}")
    if not np.isfinite(array).all():
        bad = int(np.flatnonzero(~np.isfinite(array))[0])
        raise RelationshipError(f"baseline has a non-finite value at step {bad}: {array[bad]}")
    return array
