"""Seconds per task, wall time and peak memory of the foundation-model adapters at full size.

    python benchmarks/bench_foundation.py [--corpus FILE] [--tasks 16] [--seed 0]
                                          [--models naive chronos2 timesfm] [--batch-size 64]
                                          [--passes 1]

No checkpoint is downloaded. Each model is built from its library's real classes at the
architecture of the released checkpoint, with random weights (torch seeded first): inference
does the same computation whatever the weights' values, so the time per task is the real
model's. Chronos-2 is ``Chronos2CoreConfig(**CHRONOS2_CONFIG)`` → ``Chronos2Model`` →
``Chronos2Pipeline`` (the values of ``amazon/chronos-2``'s ``config.json``; its own random
initialisation); TimesFM 2.5 is ``TimesFM_2p5_200M_torch(torch_compile=False)``, the class's own
200M definition, with the library's initialisation except its RMS-norm scales, which it leaves at
zero (they are set to one, so activations are not all zero). Both go through the toolkit's
adapters (``Chronos2Forecaster``, ``TimesFMForecaster``) on the CPU, with torch's default threads.

The tasks are a stratified handful of ``--corpus``: one slot per (simulator, horizon) in turn,
the covariate count K cycling through its values, a task drawn at random (``--seed``) within
each cell. Each model runs in its own process, so its peak RSS is its own: it is built, given
one warm-up ``predict`` call (the first task, not timed), then ``predict`` is called on one task
at a time (``--passes`` times over the tasks; TimesFM's covariate regression is compiled by jax
for each new shape, so a first pass pays that and a second one does not). The reference is the
``naive`` baseline on the same tasks, in the same way. The process's CPU seconds (user +
system) beside its wall seconds, and the CPU seconds the rest of the machine used meanwhile
(Linux's /proc/stat, steal included), show whether another process took the cores; the load
average is printed before and after. Times are printed, never checked.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from machine import cpu_seconds, load_average

DEFAULT_CORPUS = Path(__file__).resolve().parents[1] / "whatif-corpus.h5"
MODELS = ("naive", "chronos2", "timesfm")

# amazon/chronos-2's config.json (architecture and forecasting settings; as mirrored on Hugging
# Face, e.g. CollectionStudio/chronos-2). chronos_pipeline_class, torch_dtype (float32, the
# dtype Chronos2Pipeline.from_pretrained loads it in), transformers_version and the values
# derived from feed_forward_proj (dense_act_fn, is_gated_act) are left out.
CHRONOS2_CONFIG = {
    "d_model": 768,
    "d_kv": 64,
    "d_ff": 3072,
    "num_layers": 12,
    "num_heads": 12,
    "dropout_rate": 0.1,
    "layer_norm_epsilon": 1e-6,
    "initializer_factor": 0.05,
    "feed_forward_proj": "relu",
    "vocab_size": 2,
    "pad_token_id": 0,
    "reg_token_id": 1,
    "rope_theta": 10000.0,
    "chronos_config": {
        "context_length": 8192,
        "input_patch_size": 16,
        "input_patch_stride": 16,
        "output_patch_size": 16,
        "max_output_patches": 64,
        "quantiles": [
            0.01,
            0.05,
            0.1,
            0.15,
            0.2,
            0.25,
            0.3,
            0.35,
            0.4,
            0.45,
            0.5,
            0.55,
            0.6,
            0.65,
            0.7,
            0.75,
            0.8,
            0.85,
            0.9,
            0.95,
            0.99,
        ],
        "time_encoding_scale": 8192,
        "use_arcsinh": True,
        "use_reg_token": True,
    },
}


def pick_tasks(frame, n: int, seed: int) -> list[str]:
    """``n`` task ids spread over the corpus: slot ``i`` is simulator ``i mod S`` at that
    simulator's ``(i div S) mod L``-th horizon (the context goes with it) and K the
    ``i mod len(K)``-th value; one task drawn at random in the cell (any K when the cell is
    used up)."""
    rng = np.random.default_rng(seed)
    simulators = sorted(frame["simulator"].unique())
    ks = sorted(frame["k"].unique())
    chosen: list[str] = []
    for i in range(min(n, len(frame))):
        sim = frame[frame["simulator"] == simulators[i % len(simulators)]]
        horizons = sorted(sim["prediction"].unique())
        cell = sim[sim["prediction"] == horizons[(i // len(simulators)) % len(horizons)]]
        cell = cell[~cell["task_id"].isin(chosen)]
        exact = cell[cell["k"] == ks[i % len(ks)]]
        pool = (
            exact if len(exact) else (cell if len(cell) else frame[~frame["task_id"].isin(chosen)])
        )
        chosen.append(str(rng.choice(pool["task_id"].to_numpy())))
    return chosen


def _build(name: str, seed: int, batch_size: int):
    """The forecaster ``name`` and its parameter count (None for a baseline)."""
    if name == "naive":
        from whatif_bench.evaluation.forecasters import make_forecaster

        return make_forecaster("naive"), None
    import torch

    torch.manual_seed(seed)
    if name == "chronos2":
        from chronos.chronos2 import Chronos2CoreConfig, Chronos2Model, Chronos2Pipeline

        from whatif_bench.evaluation.foundation.chronos2 import Chronos2Forecaster

        network = Chronos2Model(Chronos2CoreConfig(**CHRONOS2_CONFIG))
        model = Chronos2Forecaster(
            Chronos2Pipeline(network), device="cpu", batch_size=batch_size, seed=seed
        )
    else:
        from timesfm.timesfm_2p5.timesfm_2p5_torch import TimesFM_2p5_200M_torch
        from timesfm.torch.normalization import RMSNorm

        from whatif_bench.evaluation.foundation.timesfm import TimesFMForecaster

        wrapper = TimesFM_2p5_200M_torch(torch_compile=False)  # builds; loads nothing
        network = wrapper.model
        with torch.no_grad():
            for module in network.modules():
                if isinstance(module, RMSNorm):
                    module.scale.fill_(1.0)
        model = TimesFMForecaster(wrapper, device="cpu", batch_size=batch_size, seed=seed)
    return model, sum(p.numel() for p in network.parameters())


def _machine_busy_seconds() -> float | None:
    """CPU seconds every process of the machine has used so far, all cores (Linux's
    /proc/stat: user, nice, system, irq, softirq and steal), or None elsewhere."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    user, nice, system, _, _, irq, softirq, steal = (int(v) for v in fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def _phase(args) -> dict:
    from whatif_bench.generator import Corpus

    ids = json.loads(Path(args.ids).read_text())
    with Corpus(args.corpus) as corpus:
        tasks = corpus.task_inputs(ids)
    started = time.perf_counter()
    model, parameters = _build(args.phase, args.seed, args.batch_size)
    build = time.perf_counter() - started
    torch = sys.modules.get("torch")
    started = time.perf_counter()
    model.predict(tasks[:1])  # warm-up: lazy loading, first-call set-up
    warm_up = time.perf_counter() - started
    passes, finite = [], 0
    for _ in range(args.passes):
        cpu_before, busy_before, seconds = cpu_seconds(), _machine_busy_seconds(), []
        started = time.perf_counter()
        for task in tasks:
            one = time.perf_counter()
            (forecast,) = model.predict([task])
            seconds.append(time.perf_counter() - one)
            values = forecast.point if forecast.quantiles is None else forecast.quantiles
            finite += bool(np.isfinite(values).all())
        wall = time.perf_counter() - started
        cpu, busy = cpu_seconds() - cpu_before, _machine_busy_seconds()
        others = None if busy is None else max(0.0, busy - busy_before - cpu)
        passes.append({"seconds": seconds, "wall": wall, "cpu": cpu, "others": others})
    return {
        "passes": passes,
        "build": build,
        "warm_up": warm_up,
        "parameters": parameters,
        "finite": finite,
        "threads": torch.get_num_threads() if torch is not None else None,
        "peak_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,  # KiB -> MiB
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--corpus", default=str(DEFAULT_CORPUS), help="a corpus file")
    parser.add_argument("--tasks", type=int, default=16, help="tasks timed per model")
    parser.add_argument("--seed", type=int, default=0, help="task draw and torch seed")
    parser.add_argument(
        "--models", nargs="+", choices=MODELS, default=list(MODELS), help="naive always runs"
    )
    parser.add_argument("--batch-size", type=int, default=64, help="the adapters' batch_size")
    parser.add_argument(
        "--passes", type=int, default=1, help="timed passes over the tasks (after the warm-up)"
    )
    parser.add_argument("--phase", choices=MODELS, help=argparse.SUPPRESS)
    parser.add_argument("--ids", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.phase:
        print(json.dumps(_phase(args)))
        return
    from whatif_bench.generator import Corpus

    with Corpus(args.corpus) as corpus:
        frame = corpus.tasks_frame()
    ids = pick_tasks(frame, args.tasks, args.seed)
    rows = frame.set_index("task_id").loc[ids]
    folder = tempfile.TemporaryDirectory()
    ids_file = Path(folder.name) / "ids.json"
    ids_file.write_text(json.dumps(ids))
    names = ["naive", *[m for m in args.models if m != "naive"]]  # the reference first
    print(
        f"{len(ids)} tasks of {args.corpus}: simulators {sorted(set(rows['simulator']))}, "
        f"K {sorted(set(rows['k']))}, C {sorted(set(rows['context']))}, "
        f"H {sorted(set(rows['prediction']))}"
    )
    print(f"{os.cpu_count()} CPUs; load average before {load_average()}")
    results = {}
    for name in names:
        command = [sys.executable, __file__, "--phase", name, "--ids", str(ids_file)]
        command += ["--corpus", args.corpus, "--seed", str(args.seed)]
        command += ["--batch-size", str(args.batch_size), "--passes", str(args.passes)]
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            print(f"{name}: failed ({done.returncode}):\n{done.stderr.strip()[-2000:]}")
            continue
        results[name] = json.loads(done.stdout.strip().splitlines()[-1])
    print(f"load average after {load_average()}")
    print(
        f"{'model':<11} {'params':>12} {'threads':>7} {'build s':>8} {'warm-up s':>9} "
        f"{'s/task mean':>11} {'min':>9} {'max':>9} {'tasks/s':>9} {'wall s':>8} "
        f"{'CPU s':>7} {'others CPU s':>12} {'peak RSS MiB':>12}"
    )
    for name, r in results.items():
        label = f"{r['parameters']:,}" if r["parameters"] else "-"
        for number, run in enumerate(r["passes"], 1):
            s = np.asarray(run["seconds"])
            model = name if args.passes == 1 else f"{name} p{number}"
            others = "-" if run["others"] is None else f"{run['others']:.1f}"
            print(
                f"{model:<11} {label:>12} {r['threads'] or '-':>7} {r['build']:>8.2f} "
                f"{r['warm_up']:>9.3f} {s.mean():>11.4g} {s.min():>9.4g} {s.max():>9.4g} "
                f"{len(s) / run['wall']:>9.4g} {run['wall']:>8.2f} {run['cpu']:>7.1f} "
                f"{others:>12} {r['peak_mib']:>12,.0f}"
            )
    for name, r in results.items():
        total = len(ids) * args.passes
        if r["finite"] != total:
            print(f"{name}: {total - r['finite']} of {total} forecasts not finite")
    print("seconds per task (one predict call per task; the last pass):")
    header = f"{'task':<58} {'K':>2} {'C':>5} {'H':>4}"
    print(header + "".join(f" {name:>9}" for name in results))
    for index, task_id in enumerate(ids):
        row = rows.loc[task_id]
        line = f"{task_id:<58} {row['k']:>2} {row['context']:>5} {row['prediction']:>4}"
        cells = (r["passes"][-1]["seconds"][index] for r in results.values())
        print(line + "".join(f" {value:>9.4g}" for value in cells))
    if "naive" in results:
        reference = np.mean(results["naive"]["passes"][0]["seconds"])
        for name, r in results.items():
            if name != "naive":
                ratio = np.mean(r["passes"][0]["seconds"]) / reference
                print(f"{name}: {ratio:,.0f}x the naive s/task (first pass)")
    folder.cleanup()


if __name__ == "__main__":
    main()
