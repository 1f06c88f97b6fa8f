"""Fuzz tier: hypothesis-made spec files, baselines files and corpus mutations.

For every generated input the command line must give either a correct result or one clean
``error:`` line -- never a traceback, never a changed input, never a complete-looking bad output
-- and ``whatif verify`` must catch every mutation of a corpus's task data or metadata.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import h5py
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.conftest import small_corpus
from whatif_bench.cli import main
from whatif_bench.generator import Corpus
from whatif_bench.relationships.registry import builtin_spec_texts
from whatif_bench.simulators.base import Baselines
from whatif_bench.simulators.store import read_baselines, write_baselines

FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,  # the same examples on every run: a CI failure can be replayed
)
TARGETS = ("sumo/flow_loop_e_0_near",)


def sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def run_cli(capsys, *args: str) -> tuple[int, str, str]:
    """``whatif ARGS`` in this process: exit code, stdout, stderr."""
    code = main(list(args))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def assert_clean(code: int, err: str) -> None:
    """A correct result, or one ``error:`` line: no traceback, no unexpected exception."""
    assert "Traceback" not in err and "unexpected" not in err, err
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) <= 1, err
    if code != 0 and errors:
        assert code == 1


def mutate_bytes(data: bytes, edits: list[tuple[int, int]]) -> bytes:
    """Replace the byte at each (relative position, value) pair."""
    buffer = bytearray(data)
    for position, value in edits:
        index = position % len(buffer)
        buffer[index] = value if value != buffer[index] else (value + 1) % 256
    return bytes(buffer)


BYTE_EDITS = st.lists(st.tuples(st.integers(0, 2**31), st.integers(0, 255)), min_size=1, max_size=8)


# ---- spec files ---------------------------------------------------------------------------
SHIPPED_SPEC = dict(builtin_spec_texts())
SUMO_SPEC = next(text for source, text in SHIPPED_SPEC.items() if source.endswith("sumo.toml"))


@FUZZ
@given(edits=BYTE_EDITS)
def test_spec_file_with_flipped_bytes_loads_or_fails_cleanly(tmp_path, capsys, edits):
    path = tmp_path / "user.toml"
    path.write_bytes(mutate_bytes(SUMO_SPEC.encode(), edits))
    before = sha256(path)
    code, _, err = run_cli(capsys, "relationships", "check", str(path))
    assert_clean(code, err)
    assert sha256(path) == before


@FUZZ
@given(text=st.text(max_size=400))
def test_spec_file_of_arbitrary_text_loads_or_fails_cleanly(tmp_path, capsys, text):
    path = tmp_path / "user.toml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    code, _, err = run_cli(capsys, "relationships", "list", "--spec", str(path))
    assert_clean(code, err)


LINE_EDITS = st.lists(
    st.tuples(
        st.integers(0, 10_000),
        st.sampled_from(
            [
                "",
                '"../../x"',
                '"/abs"',
                "nan",
                "inf",
                "-1",
                "0",
                "1e400",
                "9" * 400,
                "[[[[1]]]]",
                '"a/b"',
                "true",
                '""',
                "{}",
                "[]",
                '"step"',
                '"bell"',
                '"up"',
                '"down"',
            ],
        ),
    ),
    min_size=1,
    max_size=4,
)


@FUZZ
@given(edits=LINE_EDITS)
@pytest.mark.slow  # about 1 s
def test_spec_file_with_edited_values_loads_or_fails_cleanly(tmp_path, capsys, edits):
    """Replace the value of some ``key = value`` lines of a real spec with hostile values."""
    lines = SUMO_SPEC.splitlines()
    assignments = [i for i, line in enumerate(lines) if " = " in line]
    for position, value in edits:
        index = assignments[position % len(assignments)]
        key = lines[index].split(" = ", 1)[0]
        lines[index] = f"{key} = {value}"
    path = tmp_path / "user.toml"
    path.write_text("\n".join(lines) + "\n")
    code, _, err = run_cli(capsys, "relationships", "check", str(path))
    assert_clean(code, err)


# ---- baselines files ------------------------------------------------------------------------
def small_baselines() -> Baselines:
    rng = np.random.default_rng(7)
    return Baselines(
        simulator="toy",
        simulator_version="toy 1.0",
        interval_s=60,
        start="2000-01-01T00:00:00",
        series={"a": rng.normal(size=64), "b": rng.uniform(1, 2, 64)},
        units={"a": "kW", "b": "degF"},
        covariate_base_values={"x": 1.5},
        inputs={"model.txt": "the exact input"},
    )


@pytest.fixture(scope="module")
def baselines_file(tmp_path_factory) -> Path:
    return write_baselines(tmp_path_factory.mktemp("baselines") / "b.h5", [small_baselines()])


@FUZZ
@given(edits=BYTE_EDITS)
def test_baselines_file_with_flipped_bytes_is_exact_or_refused(
    tmp_path, capsys, baselines_file, edits
):
    path = tmp_path / "b.h5"
    path.write_bytes(mutate_bytes(baselines_file.read_bytes(), edits))
    before = sha256(path)
    code, _, err = run_cli(capsys, "baselines", "info", str(path))
    assert_clean(code, err)
    if code == 0:  # a flip in unused bytes: the content must be exactly the original one
        (item,) = read_baselines(path).values()
        assert item.content_hash() == small_baselines().content_hash()
    assert sha256(path) == before


# ---- corpus mutations --------------------------------------------------------------------------
@pytest.fixture(scope="module")
def corpus_file(tmp_path_factory) -> Path:
    return small_corpus(tmp_path_factory.mktemp("corpus"), TARGETS)


def corpus_content(path: Path) -> list:
    """Everything a user reads from a corpus: the index, provenance and every task's arrays."""
    with Corpus(path) as corpus:
        content: list = [corpus.pairs.to_dict("list"), sorted(corpus.attrs.items())]
        for task in corpus:
            content.append(
                (
                    task.task_id,
                    task.covariates,
                    task.units,
                    task.interval_s,
                    task.history_target.tobytes(),
                    task.history_covariates.tobytes(),
                    task.future_covariates.tobytes(),
                    task.future_target.tobytes(),
                    task.counterfactual_future.tobytes(),
                    repr(task.recipe),
                )
            )
    return content


@FUZZ
@given(edits=BYTE_EDITS)
@pytest.mark.slow  # about 8 s
def test_corpus_with_flipped_bytes_verifies_only_if_unchanged(tmp_path, capsys, corpus_file, edits):
    path = tmp_path / "c.h5"
    path.write_bytes(mutate_bytes(corpus_file.read_bytes(), edits))
    before = sha256(path)
    code, out, err = run_cli(capsys, "verify", str(path))
    assert_clean(code, err)
    if code == 0:  # verify passed: then what a user reads must be the original corpus
        assert corpus_content(path) == corpus_content(corpus_file)
    assert sha256(path) == before
    for command in (["info", str(path)], ["show", "--corpus", str(path), "x/y/z/replay"]):
        code, _, err = run_cli(capsys, *command)
        assert_clean(code, err)


def corpus_objects(path: Path) -> list[str]:
    """Every dataset and attribute of a corpus as ``name`` or ``name@attr``."""
    names: list[str] = [f"@{key}" for key in h5py.File(path).attrs]

    def visit(name: str, obj) -> None:
        if isinstance(obj, h5py.Dataset):
            names.append(name)
        names.extend(f"{name}@{key}" for key in obj.attrs)

    with h5py.File(path) as h5:
        h5.visititems(visit)
    return sorted(names)


def edit_value(value):
    """A different value of the same kind (strings stay strings, numbers move)."""
    if isinstance(value, bytes | str):
        text = value.decode() if isinstance(value, bytes) else value
        return text[::-1] + "x" if text else "x"
    array = np.array(value)
    if array.dtype == bool:
        return ~array
    if array.dtype.kind in "iu":
        return array + 1
    if array.dtype.kind == "f":
        return array * 1.5 + 1
    return value


@pytest.fixture(scope="module")
def objects(corpus_file) -> list[str]:
    return corpus_objects(corpus_file)


# Attributes that describe the run rather than claim anything about the content.
NOT_CLAIMS = {"@toolkit_version", "@format_version"}


@FUZZ
@given(data=st.data())
@pytest.mark.slow  # about 10 s
def test_verify_catches_every_edit_of_task_data_or_metadata(
    tmp_path, capsys, corpus_file, objects, data
):
    target = data.draw(st.sampled_from([o for o in objects if o not in NOT_CLAIMS]))
    action = data.draw(st.sampled_from(["edit", "delete"]))
    path = tmp_path / "c.h5"
    shutil.copyfile(corpus_file, path)
    name, _, attr = target.partition("@")
    with h5py.File(path, "r+") as h5:
        owner = h5[name] if name else h5
        if attr:
            if action == "delete":
                del owner.attrs[attr]
            else:
                owner.attrs[attr] = edit_value(owner.attrs[attr])
        elif action == "delete":
            del h5[name]
        else:
            values = owner[()]
            if values.size == 0:
                return
            index = data.draw(st.integers(0, values.size - 1))
            flat = values.reshape(-1).copy()
            flat[index] = edit_value(flat[index])
            owner[...] = flat.reshape(values.shape)
    before = sha256(path)
    code, out, err = run_cli(capsys, "verify", str(path))
    assert_clean(code, err)
    assert code == 1, f"verify missed: {action} {target}\n{out}"
    assert sha256(path) == before
