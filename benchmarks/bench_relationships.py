"""Throughput of the relationship engine against a vectorised numpy reference, same run.

Builds a realistic pattern of events over >= 1e8 timesteps: histories of the four context
lengths, event lengths 32..512, the fewest and the most events, K = 1..5 covariates, step and
bell shapes, factors from the history pools; one relationship per simulator. Each group of
histories sharing a relationship and K is one concatenated series (events never cross a
history's end), applied with one call.

    python benchmarks/bench_relationships.py [--timesteps 1e8] [--seed 0]

Prints wall time, throughput (timesteps per second), the speed-up and peak memory.
"""

from __future__ import annotations

import argparse
import resource
import time
import tracemalloc

import numpy as np

from whatif_bench.relationships import EventSchedule, load_registry

CONTEXTS = (1152, 2304, 4608, 8500)
EVENT_LENGTHS = (32, 64, 128, 256, 512)
GAP = 32
TARGETS = (
    ("opendc", "power_draw_host-0"),  # bell primary, multiplicative
    ("gridlabd", "air_temperature"),  # step primary, additive
    ("epanet", "flowrate_110"),  # sign-aware multiplicative, only increases
    ("sumo", "meanTimeLoss_e2_e_0"),  # asymmetric primary, additive
)


def history_events(context: int, length: int, most: bool) -> np.ndarray:
    """Event starts for one history: 40 % prefix, gaps >= 32, 2 % end buffer, capped at 64."""
    first = int(0.4 * context)
    usable = context - int(0.02 * context) - first
    count = max(1, min(64, usable // (length + GAP))) if most else 1
    return first + np.arange(count) * (length + GAP)


def build_group(relationship, k: int, repeats: int, rng: np.random.Generator):
    """Concatenated baseline and event schedule of ``repeats`` x all (C, l, E) histories."""
    pool = np.asarray(relationship.history_pool)
    series, starts, lengths = [], [], []
    offset = 0
    for _ in range(repeats):
        for context in CONTEXTS:
            for length in EVENT_LENGTHS:
                for most in (False, True):
                    n = max(
                        context, int(0.4 * context) + 2 * (length + GAP) + int(0.02 * context) + 1
                    )
                    t = np.arange(n)
                    low, high = relationship.typical_range
                    level = low + (high - low) * (0.5 + 0.3 * np.sin(2 * np.pi * t / 288.0))
                    series.append(level + (high - low) * 0.02 * rng.standard_normal(n))
                    event_starts = history_events(n, length, most)
                    starts.append(offset + event_starts)
                    lengths.append(np.full(event_starts.size, length))
                    offset += n
    starts_all = np.concatenate(starts)
    signs = np.array([c.sign for c in relationship.covariates[:k]])
    up = (
        rng.random(starts_all.size) < 0.5
        if not relationship.only_increase
        else np.ones(starts_all.size, bool)
    )
    factors = np.empty((starts_all.size, k))
    above, below = pool[pool > 1], pool[pool < 1]
    for c in range(k):
        rises = (signs[c] > 0) == up
        draw_above = rng.choice(above, starts_all.size)
        draw_below = rng.choice(below, starts_all.size) if below.size else draw_above
        factors[:, c] = np.where(rises, draw_above, draw_below)
    y = np.concatenate(series)
    return y, EventSchedule(starts_all, np.concatenate(lengths), factors)


def numpy_trajectories(relationship, n_steps: int, schedule: EventSchedule) -> np.ndarray:
    """Vectorised numpy factor trajectories (K, T): 1 outside events, shaped inside."""
    lengths = schedule.lengths
    event_of_step = np.repeat(np.arange(lengths.size), lengths)
    first = np.cumsum(lengths) - lengths
    within = np.arange(event_of_step.size) - np.repeat(first, lengths)
    positions = schedule.starts[event_of_step] + within
    ell = lengths[event_of_step].astype(np.float64)
    profile = np.exp(-0.5 * ((within - (ell - 1) / 2) / (ell / 6)) ** 2)
    out = np.ones((schedule.n_covariates, n_steps))
    for c, info in enumerate(relationship.covariates[: schedule.n_covariates]):
        f = schedule.factors[event_of_step, c]
        out[c, positions] = 1.0 + (f - 1.0) * profile if info.shape == "bell" else f
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timesteps", type=float, default=1e8, help="at least this many timesteps")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    registry = load_registry()
    rng = np.random.default_rng(args.seed)
    relationships = [registry.get(s, t) for s, t in TARGETS]

    probe_y, probe_schedule = build_group(relationships[0], 5, 1, rng)
    per_repeat = probe_y.size
    groups = len(relationships) * 5
    repeats = int(np.ceil(args.timesteps / (per_repeat * groups)))

    start = time.perf_counter()
    for relationship in relationships:  # first calls compile (or load numba's cache)
        relationship.apply_events(
            probe_y,
            EventSchedule(
                probe_schedule.starts, probe_schedule.lengths, probe_schedule.factors[:, :1]
            ),
        )
    warmup = time.perf_counter() - start

    numba_seconds = numpy_seconds = 0.0
    total = touched = 0
    worst = 0.0
    tracemalloc.start()
    for relationship in relationships:
        for k in range(1, 6):
            y, schedule = build_group(relationship, k, repeats, rng)
            total += y.size
            touched += int(schedule.lengths.sum())
            t0 = time.perf_counter()
            fast = relationship.apply_events(y, schedule)
            numba_seconds += time.perf_counter() - t0
            t0 = time.perf_counter()
            reference = relationship.evaluate_reference(
                y, numpy_trajectories(relationship, y.size, schedule)
            )
            numpy_seconds += time.perf_counter() - t0
            scale = np.maximum(np.abs(reference), 1e-12)
            worst = max(worst, float(np.max(np.abs(fast - reference) / scale)))
            del y, schedule, fast, reference
    _, peak_traced = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    print(f"timesteps             {total:,} ({touched / total:.0%} inside events), {groups} groups")
    print(f"first calls (compile or cache load): {warmup:.2f} s")
    print(
        f"numba engine          {numba_seconds:7.3f} s   {total / numba_seconds / 1e6:8.1f} M timesteps/s"
    )
    print(
        f"numpy reference       {numpy_seconds:7.3f} s   {total / numpy_seconds / 1e6:8.1f} M timesteps/s"
    )
    print(f"speed-up              {numpy_seconds / numba_seconds:7.1f} x")
    print(f"max relative diff     {worst:.2e}")
    print(
        f"peak memory           {peak_traced / 2**20:,.0f} MiB traced (numpy buffers), {peak_rss:,.0f} MiB RSS"
    )


if __name__ == "__main__":
    main()
