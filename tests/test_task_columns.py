"""The task columns (``corpus.columns``): the one definition the Parquet, shard and fev writers
take their columns from."""

from __future__ import annotations

import dataclasses
from operator import attrgetter

import pyarrow as pa
import pytest

from whatif_bench.corpus import Corpus, columns
from whatif_bench.export import fev as fev_export
from whatif_bench.export import parquet as parquet_export
from whatif_bench.stream import h5shard


@pytest.fixture(scope="module")
def tasks(one_target_corpus):
    with Corpus(one_target_corpus) as corpus:
        ids = list(corpus.tasks_frame()["task_id"][:5])
        return [corpus[i] for i in ids]


def _fev_metadata(names: list[str], k: int) -> list[str]:
    """fev's columns after ``id``, ``timestamp``, ``target`` and the K covariates."""
    return names[3 + k :]


def test_every_writer_writes_only_columns_of_the_definition(tasks):
    names = [c.name for c in columns.COLUMNS]
    assert len(set(names)) == len(names)
    # Parquet: the definition's Parquet columns, in order, with the definition's types
    schema = columns.schema()
    assert [f.name for f in schema] == [c.name for c in columns.COLUMNS if c.parquet]
    assert all(f.type == columns.arrow_type(columns.column(f.name)) for f in schema)
    assert parquet_export.schema is columns.schema and parquet_export.table is columns.table
    # HDF5 shards: every dataset is a column of the definition, grouped by its kind
    shard = h5shard.shard_columns(tasks)
    assert {n.removesuffix("_offset") for n in shard} == set(h5shard.SHARD_COLUMNS)
    assert set(h5shard.SHARD_COLUMNS) <= set(names)
    assert all(columns.column(n).kind in columns.TEXT_KINDS for n in h5shard.TEXT_COLUMNS)
    assert all(columns.column(n).kind in columns.ARRAY_KINDS for n in h5shard.ARRAYS)
    # fev: every metadata column maps to a column of the definition, typed by it
    k = tasks[0].k
    fev_schema = fev_export._schema(k, None)
    assert _fev_metadata([f.name for f in fev_schema], k) == list(fev_export.METADATA)
    assert list(fev_export._metadata(tasks[:1], lambda task: {})) == list(fev_export.METADATA)
    assert set(fev_export.METADATA.values()) <= set(names)
    for name, source in fev_export.METADATA.items():
        expected = columns.arrow_type(columns.column(source), lists_as_text=True)
        assert fev_schema.field(name).type == expected


def test_a_column_added_to_the_definition_reaches_the_parquet_table(tasks, monkeypatch):
    extra = columns.Column("world_copy", columns.TEXT, attrgetter("world"), "a test column")
    monkeypatch.setattr(columns, "COLUMNS", (*columns.COLUMNS, extra))
    assert columns.schema().field("world_copy").type == pa.string()
    assert columns.table(tasks).column("world_copy").to_pylist() == [t.world for t in tasks]
    assert "  - name: world_copy\n    dtype: string" in parquet_export.features_yaml()


def test_the_writers_read_the_values_the_definition_reads(tasks, monkeypatch):
    """Change how the definition reads two columns: all three writers follow."""

    def swapped(c: columns.Column) -> columns.Column:
        if c.name == "target":
            return dataclasses.replace(c, read=lambda t: "renamed")
        if c.name == "covariates":
            return dataclasses.replace(c, read=lambda t: [f"x{i}" for i in range(t.k)])
        return c

    monkeypatch.setattr(columns, "COLUMNS", tuple(swapped(c) for c in columns.COLUMNS))
    names = [[f"x{i}" for i in range(t.k)] for t in tasks]
    table = columns.table(tasks)
    assert table.column("target").to_pylist() == ["renamed"] * len(tasks)
    assert table.column("covariates").to_pylist() == names
    shard = h5shard.shard_columns(tasks)
    assert list(shard["target"]) == ["renamed"] * len(tasks)
    assert [columns.as_text(columns.column("covariates"), n) for n in names] == list(
        shard["covariates"]
    )
    k = tasks[0].k
    row = fev_export._table(tasks[:1], fev_export._schema(k, None), lambda task: {})
    assert row.column("target_name").to_pylist() == ["renamed"]
    assert row.column("covariate_names").to_pylist() == [
        columns.as_text(columns.column("covariates"), names[0])
    ]
