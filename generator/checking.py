"""``whatif verify``: rebuild every pair from its recipe and compare with what is stored.

Checks, for every pair: the stored recipe equals the one drawn again from the master seed; the
arrays rebuilt from the recipe equal the stored ones bit for bit; the 10 % verdict is the
stored one; and every kept pair passes the 10 % rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from whatif_bench.generator.axes import contexts
from whatif_bench.generator.corpus import Corpus
from whatif_bench.generator.recipe import draw_recipe
from whatif_bench.generator.sweep import build_pair
from whatif_bench.generator.writer import registry_hash
from whatif_bench.relationships.registry import load_registry


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


def verify_corpus(path, progress: bool = True, limit_problems: int = 50) -> VerifyReport:
    """Rebuild and compare every pair of the corpus at ``path``."""
    from tqdm import tqdm

    report = VerifyReport()
    with Corpus(path) as corpus:
        if corpus.attrs.get("registry_hash") != registry_hash():
            report.warnings.append(
                "the relationship registry differs from the one that built this corpus"
            )
        seed = int(corpus.attrs["master_seed"])
        registry = load_registry()
        baselines = {}
        rows = corpus.pairs
        for row in tqdm(
            rows.itertuples(index=False),
            total=len(rows),
            desc="verifying",
            unit="pair",
            disable=not progress,
        ):
            row = row._asdict()
            report.checked += 1
            pair_id = row["pair_id"]
            try:
                relationship = registry.get(row["simulator"], row["target"])
                key = (row["simulator"], row["target"])
                if key not in baselines:
                    baselines[key] = corpus.baseline(*key)
                stored = corpus.recipe(row)
                context, prediction = contexts(row["simulator"])[row["c_label"]]
                drawn = draw_recipe(
                    stored.key, relationship, context, prediction, baselines[key].size, seed
                )
                if not _same_recipe(stored, drawn):
                    report.problems.append(
                        f"{pair_id}: stored recipe differs from the one the seed draws"
                    )
                    continue
                rebuilt = build_pair(stored, relationship, baselines[key])
                if rebuilt.kept != bool(row["kept"]) or rebuilt.drop_reason != row["drop_reason"]:
                    report.problems.append(
                        f"{pair_id}: verdict {rebuilt.drop_reason or 'kept'!r} differs from the stored "
                        f"{row['drop_reason'] or 'kept'!r}"
                    )
                    continue
                if rebuilt.kept:
                    if (
                        min(rebuilt.history_ratios.min(), rebuilt.replay_ratio, rebuilt.novel_ratio)
                        < 0.10
                    ):
                        report.problems.append(f"{pair_id}: a kept pair fails the 10 % rule")
                    for name, values in rebuilt.arrays.items():
                        offset = int(row[f"{name}_offset"])
                        stored_values = corpus._slice(name, offset, values.size)
                        if not np.array_equal(
                            stored_values.view(np.uint32), values.reshape(-1).view(np.uint32)
                        ):
                            report.problems.append(
                                f"{pair_id}: stored {name} differs from the rebuilt one"
                            )
            except (KeyError, ValueError, OSError) as exc:
                report.problems.append(f"{pair_id}: cannot be rebuilt ({exc})")
            if len(report.problems) >= limit_problems:
                report.problems.append(f"stopped after {limit_problems} problems")
                break
    return report
