"""``whatif_bench.seeding``: the one place random generators are made, and the streams it makes.

(a) no module of the package builds a generator or draws from NumPy's global state outside
``src/whatif_bench/seeding.py`` (an ``ast`` scan of every folder of pyproject.toml's
``package-dir``); (b) each domain's ``rng`` is, bit for bit, the construction it replaced
(written out here as it was), and so are the callers' generators; (c) ``check_seed``'s table of
bad and good seeds; (d) properties: a domain's draws are a function of (seed, key), and two
domains differ (except the two ``plain`` ones, which share ``SeedSequence(seed)`` on purpose).
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import math
import tomllib
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from whatif_bench import seeding
from whatif_bench.seeding import (
    CONVENTIONS,
    DOMAINS,
    MAX_SEED,
    SPAWN,
    SeedError,
    check_seed,
    resolve_seed,
    rng,
    seed_sequence,
    spawn_code,
)

REPO = Path(__file__).resolve().parents[1]
SEEDING = Path("src/whatif_bench/seeding.py")

# ---- (a) no generator is made outside seeding.py -----------------------------------------------
# Calls of these names (bare or as an attribute, whatever the object) build a generator or a seed
# sequence; any call of ``np.random.<name>`` / ``numpy.random.<name>`` does too or draws from
# NumPy's global state (``np.random.normal``, ``np.random.seed``, ...); importing from
# ``numpy.random`` or the standard library's ``random`` would hide either from this scan.
BUILDERS = {"default_rng", "SeedSequence", "RandomState"}
NUMPY_NAMES = {"np", "numpy"}


def package_folders() -> list[Path]:
    """The source folders of pyproject.toml's ``[tool.setuptools] package-dir``."""
    with open(REPO / "pyproject.toml", "rb") as handle:
        package_dir = tomllib.load(handle)["tool"]["setuptools"]["package-dir"]
    return sorted({Path(folder) for folder in package_dir.values()})


def _is_numpy_random(node: ast.expr) -> bool:
    """``np.random`` or ``numpy.random``."""
    return (
        isinstance(node, ast.Attribute)
        and node.attr == "random"
        and isinstance(node.value, ast.Name)
        and node.value.id in NUMPY_NAMES
    )


def random_calls(source: str) -> list[tuple[int, str]]:
    """(line, code) of every generator construction, global-state draw or hiding import."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
            if name in BUILDERS or (
                isinstance(func, ast.Attribute) and _is_numpy_random(func.value)
            ):
                found.append((node.lineno, ast.unparse(func) + "(...)"))
        elif isinstance(node, ast.ImportFrom) and node.module in {"numpy.random", "random"}:
            found.append((node.lineno, f"from {node.module} import ..."))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in {"numpy.random", "random"}:
                    found.append((node.lineno, f"import {alias.name}"))
    return sorted(found)


def test_the_scan_finds_what_it_looks_for():
    bad = (
        "import numpy as np\nimport random\nfrom numpy.random import default_rng\n"
        "a = np.random.default_rng(0)\nb = numpy.random.normal(size=3)\nnp.random.seed(1)\n"
        "c = np.random.SeedSequence(1, spawn_key=(2,))\nd = np.random.Generator(np.random.PCG64(c))\n"
        "e = default_rng()\nf = np.random.RandomState(3)\ng = SeedSequence(4)\n"
    )
    lines = [line for line, _ in random_calls(bad)]
    assert lines == [2, 3, 4, 5, 6, 7, 8, 8, 9, 10, 11]
    fine = (
        "import numpy as np\n"
        "def f(rng: np.random.Generator) -> np.random.Generator:\n"
        "    assert isinstance(rng, np.random.Generator)\n"
        "    return rng.choice(3), rng.integers(4), rng.random(), rng.permutation(2)\n"
        "from whatif_bench.seeding import rng\nx = rng('subset', 0)\n"
    )
    assert random_calls(fine) == []


def test_no_module_makes_a_generator_outside_seeding():
    folders = package_folders()
    assert Path("src/whatif_bench") in folders and Path("stream") in folders and len(folders) >= 8
    files = [path for folder in folders for path in sorted((REPO / folder).rglob("*.py"))]
    assert REPO / SEEDING in files and REPO / "corpus/random_twin.py" in files
    found = [
        f"{path.relative_to(REPO)}:{line}: {code}"
        for path in files
        if path != REPO / SEEDING
        for line, code in random_calls(path.read_text(encoding="utf-8"))
    ]
    assert found == [], "build generators with whatif_bench.seeding.rng instead:\n" + "\n".join(
        found
    )
    # and seeding.py itself does build them (the scan is not blind to its own targets)
    assert random_calls((REPO / SEEDING).read_text(encoding="utf-8"))


# ---- (b) each domain is the stream it replaced ----------------------------------------------
def old_pair_sequence(seed: int, pair_id: str) -> np.random.SeedSequence:
    """corpus/seeds.py before the seeding table."""
    digest = hashlib.sha256(pair_id.encode("utf-8")).digest()
    key = tuple(int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4))
    return np.random.SeedSequence(entropy=seed, spawn_key=key)


def old_generator(domain: str, seed: int | None, key: tuple) -> np.random.Generator:
    """Each domain's generator as its caller built it before the seeding table."""
    if domain == "pairs":
        return np.random.Generator(np.random.PCG64(old_pair_sequence(seed, *key)))
    if domain == "stream":  # stream/seeding.py: STREAM_DOMAIN = 0x57484946
        sequence = np.random.SeedSequence(entropy=seed, spawn_key=(0x57484946, *key))
        return np.random.Generator(np.random.PCG64(sequence))
    if domain == "shuffle":  # stream/torch_data.py: SHUFFLE_DOMAIN = 0x53485546
        sequence = np.random.SeedSequence(seed, spawn_key=(0x53485546, *key))
        return np.random.Generator(np.random.PCG64(sequence))
    if domain in ("subset", "checks"):  # corpus/selection.py, relationships/checks.py
        return np.random.default_rng(seed)
    if domain == "imprints":  # relationships/imprints.py
        simulator, target, k = key
        return np.random.default_rng(zlib.crc32(f"{simulator}/{target}/{k}".encode()))
    if domain == "tuned":  # evaluation/forecasters.py
        return np.random.default_rng([seed, *key])
    raise AssertionError(f"no old construction for {domain!r}")


EXAMPLES = {
    "pairs": [(0, ("epanet/pressure_10/K1-C1-L32-Efew",)), (2**63 - 1, ("",)), (9, ("ü/x",))],
    "stream": [(5, (0,)), (5, (99,)), (2**63 - 1, (2**40,)), (0, (2**63 - 1,))],
    "shuffle": [(0, (0,)), (7, (3,)), (2**63 - 1, (2**32,))],
    "subset": [(0, ()), (4, ()), (2**63 - 1, ())],
    "checks": [(0, ()), (2, ()), (2**40 + 1, ())],
    "imprints": [(None, ("epanet", "pressure_10", 1)), (None, ("sumo", "queue", 3))],
    "tuned": [(0, (1, 2, 3, 4)), (3, (2**32 - 1, 0, 7, 2**31)), (2**63 - 1, (0, 0, 0, 0))],
}


def test_every_domain_has_examples_and_a_valid_entry():
    assert set(EXAMPLES) == set(DOMAINS)
    for name, domain in DOMAINS.items():
        assert domain.name == name and domain.purpose and domain.convention in CONVENTIONS
        assert (domain.code is not None) == (domain.convention == SPAWN)
        for _, key in EXAMPLES[name]:
            assert len(key) == len(domain.key)
    codes = [d.code for d in DOMAINS.values() if d.code is not None]
    assert len(set(codes)) == len(codes) == 2
    assert (spawn_code("stream"), spawn_code("shuffle")) == (0x57484946, 0x53485546)
    with pytest.raises(SeedError, match="not a spawn domain"):
        spawn_code("subset")


@pytest.mark.parametrize(
    ("domain", "seed", "key"), [(d, s, k) for d, cases in EXAMPLES.items() for s, k in cases]
)
def test_each_domain_is_the_stream_it_replaced(domain, seed, key):
    new, old = rng(domain, seed, *key), old_generator(domain, seed, key)
    assert new.bit_generator.state == old.bit_generator.state
    assert np.array_equal(new.integers(0, 2**63, 16), old.integers(0, 2**63, 16))
    assert np.array_equal(new.random(8), old.random(8))
    assert seed_sequence(domain, seed, *key).generate_state(4).tolist() == (
        old_generator(domain, seed, key).bit_generator.seed_seq.generate_state(4).tolist()
    )


# First 64-bit words of each domain, pinned when the table was written: a change of convention,
# code or key order fails here even if the old construction above were edited along with it.
PINNED = {
    "pairs": (5, ("epanet/pressure_10/K1-C1-L32-Efew",), 7290442524748620357),
    "stream": (5, (3,), 8751384288026276072),
    "shuffle": (5, (3,), 8208570703520089138),
    "subset": (5, (), 7424841456459477716),
    "checks": (5, (), 7424841456459477716),
    "imprints": (None, ("epanet", "pressure_10", 2), 5927946137330560183),
    "tuned": (5, (1, 2, 3, 4), 6758510918028263410),
}


@pytest.mark.parametrize("domain", sorted(PINNED))
def test_the_first_draw_of_each_domain_is_pinned(domain):
    seed, key, word = PINNED[domain]
    assert int(rng(domain, seed, *key).integers(0, 2**63)) == word


def test_the_stream_slot_is_the_spawned_child():
    root = np.random.SeedSequence(11, spawn_key=(0x57484946,))
    children = root.spawn(6)
    for slot in range(6):
        assert seed_sequence("stream", 11, slot).spawn_key == children[slot].spawn_key
        assert (
            rng("stream", 11, slot).bit_generator.state
            == np.random.Generator(np.random.PCG64(children[slot])).bit_generator.state
        )


def test_the_callers_keep_their_streams_and_names():
    from whatif_bench.corpus import pair_rng
    from whatif_bench.corpus.seeds import pair_seed_sequence
    from whatif_bench.stream import SeedError as StreamSeedError
    from whatif_bench.stream import resolve_seed as stream_resolve_seed
    from whatif_bench.stream.seeding import STREAM_DOMAIN, slot_rng
    from whatif_bench.stream.torch_data import SHUFFLE_DOMAIN

    assert (STREAM_DOMAIN, SHUFFLE_DOMAIN) == (0x57484946, 0x53485546)
    assert StreamSeedError is SeedError and stream_resolve_seed is resolve_seed
    old = old_generator("pairs", 3, ("sumo/x/K1-C1-L32-Efew",))
    assert pair_rng(3, "sumo/x/K1-C1-L32-Efew").bit_generator.state == old.bit_generator.state
    assert pair_seed_sequence(3, "a").spawn_key == old_pair_sequence(3, "a").spawn_key
    with pytest.raises(SeedError, match="the master seed must be between 0 and 2"):
        pair_rng(-1, "a")
    for slot in (0, 1, 2**33):
        assert (
            slot_rng(8, slot).bit_generator.state
            == old_generator("stream", 8, (slot,)).bit_generator.state
        )


def old_select_tasks(frame: pd.DataFrame, subset: float, seed: int) -> pd.DataFrame:
    """corpus/selection.py's draw before the seeding table."""
    from whatif_bench.corpus.axes import strata

    generator = np.random.default_rng(seed)
    keep = []
    for _, group in frame.groupby(strata(), sort=True):
        n = math.ceil(subset * len(group))
        keep.extend(
            sorted(generator.choice(group.index.to_numpy(), size=n, replace=False).tolist())
        )
    return frame.loc[sorted(keep)].reset_index(drop=True)


def test_the_subset_draw_is_unchanged():
    from whatif_bench.corpus import select_tasks

    rows = [
        {"simulator": s, "future": f, "k": k, "c_label": c, "event_length": 32, "e_setting": "few"}
        for s in ("epanet", "sumo")
        for f in ("replay", "novel")
        for k in (1, 2)
        for c in ("C1", "C2")
    ]
    frame = pd.DataFrame([{**row, "target": f"t{t}"} for row in rows for t in range(9)])
    frame["task_id"] = [f"task-{i}" for i in range(len(frame))]
    for subset, seed in ((0.3, 4), (0.5, 0), (0.1, 2**63 - 1)):
        new = select_tasks(frame, subset, seed)
        assert new.equals(old_select_tasks(frame, subset, seed))
        assert len(new) == 16 * math.ceil(subset * 9)


def test_a_tuned_baseline_draws_its_old_pairs():
    from whatif_bench.evaluation.forecasters import TaskInput, TunedPairs, draw_pairs, task_key

    series = np.random.default_rng(1).uniform(1, 2, (2, 500))  # test data
    for task_id in ("", "sumo/x/K1-C1-L32-Efew/replay/3"):
        task = TaskInput(series[0, :450], series[:, :450], series[:, 450:], task_id=task_id)
        model = TunedPairs(seed=6, max_rows=300)
        old = draw_pairs(
            450, 50, 300, np.random.default_rng([6, *task_key(task)]), model.first_origin
        )
        new = model.pairs(task)
        assert np.array_equal(new[0], old[0]) and np.array_equal(new[1], old[1])


def test_a_bad_domain_or_key_is_refused():
    with pytest.raises(SeedError, match="no seed domain 'pair'"):
        rng("pair", 0, "x")
    with pytest.raises(SeedError, match=r"takes a key of 1 part\(s\)"):
        rng("stream", 0)
    with pytest.raises(SeedError, match="takes a key of 0 part"):
        rng("subset", 0, 1)
    with pytest.raises(SeedError, match="non-negative integers"):
        rng("stream", 0, -1)
    with pytest.raises(SeedError, match="non-negative integers"):
        rng("tuned", 0, 1, 2, 3, True)
    with pytest.raises(SeedError, match="a pair id"):
        rng("pairs", 0, 7)
    with pytest.raises(SeedError, match="takes no seed"):
        rng("imprints", 0, "a", "b", 1)
    with pytest.raises(SeedError, match="non-negative integer"):
        rng("checks", None)


# ---- (c) the seed check ---------------------------------------------------------------------
TYPE = "the seed must be a non-negative integer, got"
RANGE = r"the seed must be between 0 and 2\*\*63 - 1, got"


@pytest.mark.parametrize(
    ("seed", "message"),
    [
        (True, TYPE),
        (False, TYPE),
        (np.bool_(True), TYPE),
        (-1, RANGE),
        (2**63, RANGE),
        (10**40, RANGE),
        (np.uint64(2**64 - 1), RANGE),
        (np.int64(-5), RANGE),
        (1.5, TYPE),
        (1.0, TYPE),
        (np.float64(2.0), TYPE),
        (float("nan"), TYPE),
        (float("inf"), TYPE),
        ("3", TYPE),
        (None, TYPE),
        ([1], TYPE),
    ],
)
def test_a_bad_seed_is_refused(seed, message):
    with pytest.raises(SeedError, match=message):
        check_seed(seed)
    if seed is not None:  # resolve_seed allows None (fresh entropy), nothing else
        with pytest.raises(SeedError, match=message.replace("integer,", "integer or None,")):
            resolve_seed(seed)


@pytest.mark.parametrize(
    "seed",
    [0, 1, 2**63 - 1, np.int64(7), np.int32(0), np.uint8(255), np.uint64(2**63 - 1), 2**62],
)
def test_a_good_seed_is_an_int(seed):
    for value in (check_seed(seed), resolve_seed(seed)):
        assert type(value) is int and value == int(seed)


def test_the_messages_name_what_is_seeded_and_none_draws_entropy():
    with pytest.raises(
        SeedError, match=r"the master seed must be between 0 and 2\*\*63 - 1, got -1"
    ):
        check_seed(-1, "master seed")
    with pytest.raises(SeedError, match="the epoch seed must be a non-negative integer, got 'x'"):
        check_seed("x", "epoch seed")
    drawn = {resolve_seed(None) for _ in range(4)}
    assert all(type(s) is int and 0 <= s <= MAX_SEED for s in drawn) and len(drawn) > 1
    assert isinstance(SeedError("x"), ValueError)


def test_the_command_line_seed_is_check_seed():
    from whatif_bench.cli_types import MAX_SEED as CLI_MAX_SEED
    from whatif_bench.cli_types import seed_int

    assert CLI_MAX_SEED == MAX_SEED == 2**63 - 1
    assert seed_int("0") == 0 and seed_int(str(2**63 - 1)) == 2**63 - 1 and seed_int(" 7 ") == 7
    for text, message in (
        ("-1", "must be between 0 and 2**63 - 1, got -1"),
        (str(2**63), f"must be between 0 and 2**63 - 1, got {2**63}"),
        ("9" * 50, "must be between 0 and 2**63 - 1, got 99999999999999999999..."),
        ("1.5", "expected an integer, got '1.5'"),
        ("nan", "expected an integer, got 'nan'"),
    ):
        with pytest.raises(argparse.ArgumentTypeError) as raised:
            seed_int(text)
        assert str(raised.value).startswith(message), str(raised.value)


def test_the_generation_config_checks_its_seed():
    from whatif_bench.generator.types import GenerationConfig, GenerationError

    for seed, message in ((True, TYPE), (-1, RANGE), (1.5, TYPE), (2**63, RANGE)):
        with pytest.raises(GenerationError, match=message):
            GenerationConfig(baselines="b.h5", out="c.h5", seed=seed)
    assert GenerationConfig(baselines="b.h5", out="c.h5", seed=np.int64(4)).seed == 4


# ---- (d) properties --------------------------------------------------------------------------
SEEDS = st.integers(0, MAX_SEED)
KEYS = {
    "pairs": st.tuples(st.text(max_size=40)),
    "stream": st.tuples(st.integers(0, 2**63 - 1)),
    "shuffle": st.tuples(st.integers(0, 2**63 - 1)),
    "subset": st.just(()),
    "checks": st.just(()),
    "imprints": st.tuples(st.text(max_size=12), st.text(max_size=12), st.integers(1, 5)),
    "tuned": st.tuples(*[st.integers(0, 2**32 - 1)] * 4),
}
PLAIN_PAIR = {"subset", "checks"}  # both SeedSequence(seed), kept so (module doc)


def draws(domain: str, seed: int, key: tuple) -> list[int]:
    given_seed = None if domain == "imprints" else seed
    return rng(domain, given_seed, *key).integers(0, 2**63, 4).tolist()


@settings(max_examples=150, deadline=None)
@given(domain=st.sampled_from(sorted(DOMAINS)), seed=SEEDS, data=st.data())
def test_draws_are_a_function_of_seed_and_key(domain, seed, data):
    key = data.draw(KEYS[domain])
    assert draws(domain, seed, key) == draws(domain, seed, key)
    assert (
        draws(domain, seed, key)
        == old_generator(domain, None if domain == "imprints" else seed, key)
        .integers(0, 2**63, 4)
        .tolist()
    )


@settings(max_examples=150, deadline=None)
@given(seed=SEEDS, data=st.data())
def test_different_domains_draw_differently(seed, data):
    keys = {domain: data.draw(strategy, label=domain) for domain, strategy in KEYS.items()}
    imprint_entropy = zlib.crc32("/".join(map(str, keys["imprints"])).encode())
    assume(imprint_entropy != seed)  # the plain domains' entropy would be the imprints' then
    made = {domain: draws(domain, seed, key) for domain, key in keys.items()}
    assert made["subset"] == made["checks"]  # the one shared stream, on purpose
    distinct = {domain: words for domain, words in made.items() if domain != "checks"}
    seen = {tuple(words) for words in distinct.values()}
    assert len(seen) == len(distinct), made


@settings(max_examples=80, deadline=None)
@given(seed=SEEDS, other=SEEDS, slot=st.integers(0, 2**40))
def test_different_seeds_or_keys_draw_differently(seed, other, slot):
    assume(seed != other)
    for domain, key in (("stream", (slot,)), ("shuffle", (slot,)), ("subset", ())):
        assert draws(domain, seed, key) != draws(domain, other, key)
    assert draws("stream", seed, (slot,)) != draws("stream", seed, (slot + 1,))


def test_the_module_imports_only_numpy_and_core():
    tree = ast.parse((REPO / SEEDING).read_text(encoding="utf-8"))
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            imported.add(node.module)
    rooms = {"simulators", "relationships", "corpus", "generator", "evaluation", "export", "stream"}
    assert not {m for m in imported if m.split(".")[:2][-1] in rooms and m.startswith("whatif")}
    standard = {"__future__", "hashlib", "numbers", "zlib", "dataclasses", "typing"}
    third_party = {m.split(".")[0] for m in imported} - standard - {"whatif_bench"}
    assert third_party == {"numpy"}, third_party
    assert seeding.__doc__ and all(d.convention in seeding.__doc__ for d in DOMAINS.values())
