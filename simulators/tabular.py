"""Baselines from a table: one simulator (or data source) per CSV or Parquet file.

The layout (docs/BASELINES_FORMAT.md) carries what a ``Baselines`` record needs:

- a ``time`` column of ISO 8601 date-times at one fixed step: ``start`` is its first value,
  ``interval_s`` its step in whole seconds;
- one column per series, headed ``<name> [<unit>]`` (the unit in square brackets is required);
- metadata ``simulator`` (required), ``covariate_base_values`` (required: a JSON object of
  finite numbers by covariate name, the physical values the baseline was made with),
  ``simulator_version`` and ``notes`` (optional text). In a CSV file they are the leading
  ``# key: value`` lines; in a Parquet file they are the file's key-value metadata (keys other
  tools write, such as ``pandas`` or ``ARROW:schema``, are ignored there).

Every problem is a ``TableLayoutError`` naming the file and the line, row, column or key (rows
count from 0 after the header, lines from 1 as an editor shows them).

Metadata and headers are single-line printable text: a control character (Unicode category Cc:
U+0000-U+001F, tab included, U+007F-U+009F) in a metadata value or key, a column header (the
unit) or a covariate name is refused when the file is read, naming the file and the field. NUL
cannot be stored in an HDF5 text attribute at all, and the others would break the one-line
``# key: value`` form or the terminal that ``whatif baselines info`` prints to.
"""

from __future__ import annotations

import csv
import json
import math
import os
import re
from collections.abc import Iterator, Sequence
from datetime import datetime
from pathlib import Path

import numpy as np

from whatif_bench.outputs import is_safe_name
from whatif_bench.simulators.base import MAX_INTERVAL_S, Baselines, BaselinesFileError

CSV_SUFFIXES = (".csv",)
PARQUET_SUFFIXES = (".parquet", ".pq")
TIME_COLUMN = "time"
REQUIRED_KEYS = ("simulator", "covariate_base_values")
OPTIONAL_KEYS = ("simulator_version", "notes")
MAX_METADATA_LINES = 1000
_HEADER = re.compile(r"(?P<name>[^\[\]]*?)\s*\[(?P<unit>[^\[\]]*)\]\s*")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # Unicode category Cc


class TableLayoutError(BaselinesFileError):
    """A CSV or Parquet baselines file does not follow the documented layout."""


def is_tabular(path: str | os.PathLike) -> bool:
    """True for a file the table layout reads (by its suffix)."""
    return Path(path).suffix.lower() in (*CSV_SUFFIXES, *PARQUET_SUFFIXES)


def read_table_baselines(path: str | Path) -> dict[str, Baselines]:
    """``{simulator: Baselines}`` of one CSV or Parquet file in the documented layout."""
    path = Path(path)
    if path.suffix.lower() in CSV_SUFFIXES:
        metadata, columns, times, values = _read_csv(path)
    else:
        metadata, columns, times, values = _read_parquet(path)
    return {metadata["simulator"]: _baselines(path, metadata, columns, times, values)}


# ---- CSV ------------------------------------------------------------------------------------


def _read_csv(path: Path) -> tuple[dict[str, str], list[str], list[str], np.ndarray]:
    """Metadata, series headers, time texts and the values (n_steps, n_series) float64."""
    try:
        with path.open(encoding="utf-8-sig", newline="") as handle:
            lines = enumerate(handle, start=1)
            metadata, header_line, header = _csv_metadata(path, lines)
            columns = _check_header(path, header, f"line {header_line}")
            times: list[str] = []
            rows: list[list[float]] = []
            blank = 0  # the first blank line: only more blank lines may follow it
            # one reader over the rest of the file: a quoted field may span lines, and an
            # unclosed quote is an error (strict) rather than a value
            reader = csv.reader((line for _, line in lines), strict=True)
            while True:
                try:
                    row = next(reader, None)
                except csv.Error as exc:
                    raise _fail(path, f"line {header_line + reader.line_num}", str(exc)) from None
                if row is None:
                    break
                number = header_line + reader.line_num  # the row's (last) line
                if not row or all(cell.strip() == "" for cell in row):
                    blank = blank or number
                    continue
                if blank:
                    raise _fail(path, f"line {blank}", "is empty (rows must follow one another)")
                if len(row) != len(columns) + 1:
                    raise _fail(
                        path,
                        f"line {number}",
                        f"has {len(row)} fields, the header has {len(columns) + 1}",
                    )
                times.append(row[0].strip())
                rows.append(
                    [_number(path, number, columns[i], cell) for i, cell in enumerate(row[1:])]
                )
    except UnicodeDecodeError as exc:
        raise _fail(path, "text", f"is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    except csv.Error as exc:
        raise _fail(path, "CSV", str(exc)) from None
    except OSError as exc:
        raise _fail(path, "file", f"cannot be read ({exc.strerror or exc})") from None
    values = np.array(rows, dtype=np.float64).reshape(len(rows), len(columns))
    return metadata, columns, times, values


def _csv_metadata(
    path: Path, lines: Iterator[tuple[int, str]]
) -> tuple[dict[str, str], int, list[str]]:
    """The leading ``# key: value`` lines, then the header line's number and its fields."""
    raw: dict[str, str] = {}
    while True:
        item = next(lines, None)
        if item is None:
            raise _fail(path, "header", "the file ends before the header line (time,...)")
        number, line = item
        if not line.startswith("#"):
            break
        if number > MAX_METADATA_LINES:
            raise _fail(path, f"line {number}", f"more than {MAX_METADATA_LINES} metadata lines")
        body = line[1:].rstrip("\r\n")
        text = body.strip()
        if not text:
            _check_text(path, f"line {number}", body, offset=1)
            continue
        key, sep, value = text.partition(":")
        key = key.strip()
        where = f"line {number}, metadata key {key!r}" if sep else f"line {number}"
        _check_text(path, where, body, offset=1)  # characters counted in the line, '#' first
        if not sep:
            raise _fail(path, f"line {number}", f"expected '# key: value', got {line.strip()!r}")
        if key in raw:
            raise _fail(path, f"line {number}", f"metadata key {key!r} is given twice")
        if key not in (*REQUIRED_KEYS, *OPTIONAL_KEYS):
            raise _fail(
                path,
                f"line {number}",
                f"unknown metadata key {key!r} (known: {[*REQUIRED_KEYS, *OPTIONAL_KEYS]})",
            )
        raw[key] = value.strip()
    header = next(csv.reader([line]))
    return _check_metadata(path, raw), number, header


def _number(path: Path, line: int, column: str, cell: str) -> float:
    try:
        if "_" in cell:  # Python reads "1_000" as 1000; no CSV writer means that
            raise ValueError(cell)
        value = float(cell)
    except ValueError:
        raise _fail(path, f"line {line}, column {column!r}", f"not a number: {cell!r}") from None
    if not math.isfinite(value):
        raise _fail(path, f"line {line}, column {column!r}", f"non-finite value {cell.strip()}")
    return value


# ---- Parquet --------------------------------------------------------------------------------


def _read_parquet(path: Path) -> tuple[dict[str, str], list[str], list[str], np.ndarray]:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowException) as exc:
        raise _fail(path, "file", f"not a readable Parquet file ({exc})") from None
    raw = {
        key.decode("utf-8", "replace"): value.decode("utf-8", "replace")
        for key, value in (table.schema.metadata or {}).items()
        if key.decode("utf-8", "replace") in (*REQUIRED_KEYS, *OPTIONAL_KEYS)
    }
    for key, value in raw.items():
        _check_text(path, f"metadata key {key!r}", value)
    metadata = _check_metadata(path, raw)
    names = list(table.column_names)
    if "__index_level_0__" in names:  # pandas' index, written by DataFrame.to_parquet
        names.remove("__index_level_0__")
    columns = _check_header(path, names, "schema")
    time = table.column(names[0])  # "time", perhaps with spaces around it
    if pa.types.is_timestamp(time.type):
        if time.type.tz is not None:
            raise _fail(path, f"column {TIME_COLUMN!r}", "must be local time, without a time zone")
        times = [v.isoformat() if v is not None else "" for v in time.to_pylist()]
    elif pa.types.is_string(time.type) or pa.types.is_large_string(time.type):
        times = [v if v is not None else "" for v in time.to_pylist()]
    else:
        raise _fail(
            path, f"column {TIME_COLUMN!r}", f"expected timestamps or ISO texts, got {time.type}"
        )
    values = np.empty((table.num_rows, len(columns)), dtype=np.float64)
    for i, column in enumerate(columns):
        array = table.column(names[i + 1])
        kind = array.type
        if not (pa.types.is_floating(kind) or pa.types.is_integer(kind)):
            raise _fail(path, f"column {column!r}", f"expected numbers, got {kind}")
        if array.null_count:
            row = int(np.flatnonzero(array.is_null().to_numpy(zero_copy_only=False))[0])
            raise _fail(path, f"row {row}, column {column!r}", "is missing (null)")
        values[:, i] = array.to_numpy(zero_copy_only=False).astype(np.float64)
        bad = np.flatnonzero(~np.isfinite(values[:, i]))
        if bad.size:
            raise _fail(
                path,
                f"row {int(bad[0])}, column {column!r}",
                f"non-finite value {values[bad[0], i]}",
            )
    return metadata, columns, times, values


# ---- shared ---------------------------------------------------------------------------------


def _check_metadata(path: Path, raw: dict[str, str]) -> dict[str, str]:
    for key in REQUIRED_KEYS:
        if key not in raw:
            raise _fail(path, f"metadata key {key!r}", "is missing")
    if not is_safe_name(raw["simulator"]) or raw["simulator"].startswith((".", "-")):
        raise _fail(path, "metadata key 'simulator'", f"{raw['simulator']!r} is not a valid name")
    return {"simulator_version": "", "notes": "", **raw}


def _base_values(path: Path, text: str) -> dict[str, float]:
    where = "metadata key 'covariate_base_values'"
    try:
        values = json.loads(text)
    except ValueError:
        raise _fail(path, where, f"is not JSON: {text[:80]!r}") from None
    if not isinstance(values, dict):
        raise _fail(path, where, "expected a JSON object of numbers by covariate name")
    for name, value in values.items():
        _check_text(path, f"{where}, entry {name!r}", name)
        try:
            finite = isinstance(value, int | float) and math.isfinite(float(value))
        except OverflowError:  # an integer of hundreds of digits
            finite = False
        if isinstance(value, bool) or not finite:
            raise _fail(
                path,
                f"{where}, entry {name!r}",
                f"expected a finite number, got {_shortened(repr(value))}",
            )
    return {str(k): v for k, v in values.items()}


def _check_header(path: Path, header: Sequence[str], where: str) -> list[str]:
    """The series names of a header whose first field is ``time``; every other field is
    ``<name> [<unit>]``. Returns the full headers of the series columns."""
    for field in header:
        _check_text(path, f"{where}, column {field.strip()!r}", field)
    if not header or header[0].strip() != TIME_COLUMN:
        first = header[0] if header else ""
        raise _fail(path, where, f"the first column must be {TIME_COLUMN!r}, got {first!r}")
    columns = [field.strip() for field in header[1:]]
    if not columns:
        raise _fail(path, where, "has no series column after 'time'")
    seen: set[str] = set()
    for column in columns:
        match = _HEADER.fullmatch(column)
        if match is None or not match["unit"].strip():
            raise _fail(
                path,
                f"{where}, column {column!r}",
                "needs its unit in square brackets, as in 'flow [veh/h]'",
            )
        name = match["name"]
        if not is_safe_name(name) or name.startswith((".", "-")):
            raise _fail(path, f"{where}, column {column!r}", f"{name!r} is not a valid series name")
        if name in seen:
            raise _fail(path, f"{where}, column {column!r}", f"series {name!r} appears twice")
        seen.add(name)
    return columns


def _timing(path: Path, times: list[str]) -> tuple[str, int]:
    """``start`` (ISO text of the first time) and the fixed step in whole seconds."""
    if len(times) < 2:
        raise _fail(path, f"column {TIME_COLUMN!r}", f"needs at least 2 rows, got {len(times)}")
    parsed = []
    for row, text in enumerate(times):
        try:
            value = datetime.fromisoformat(text)
        except ValueError:
            raise _fail(
                path, f"row {row}, column {TIME_COLUMN!r}", f"not an ISO date and time: {text!r}"
            ) from None
        if value.tzinfo is not None:
            raise _fail(
                path,
                f"row {row}, column {TIME_COLUMN!r}",
                "must be local time, without a time zone",
            )
        parsed.append(value)
    step = (parsed[1] - parsed[0]).total_seconds()
    if not 1 <= step <= MAX_INTERVAL_S or step != int(step):
        raise _fail(
            path,
            f"row 1, column {TIME_COLUMN!r}",
            f"the step must be whole seconds in 1..{MAX_INTERVAL_S}, got {step}",
        )
    for row in range(2, len(parsed)):
        if (parsed[row] - parsed[row - 1]).total_seconds() != step:
            raise _fail(
                path,
                f"row {row}, column {TIME_COLUMN!r}",
                f"{times[row]} is not {int(step)} s after the row before (the step must be fixed)",
            )
    return parsed[0].isoformat(), int(step)


def _baselines(
    path: Path, metadata: dict[str, str], columns: list[str], times: list[str], values: np.ndarray
) -> Baselines:
    start, interval = _timing(path, times)
    series, units = {}, {}
    for i, column in enumerate(columns):
        match = _HEADER.fullmatch(column)
        assert match is not None  # checked by _check_header
        series[match["name"]] = np.ascontiguousarray(values[:, i])
        units[match["name"]] = match["unit"].strip()
    return Baselines(
        simulator=metadata["simulator"],
        simulator_version=metadata["simulator_version"],
        interval_s=interval,
        start=start,
        series=series,
        units=units,
        covariate_base_values=_base_values(path, metadata["covariate_base_values"]),
        notes=metadata["notes"],
    )


def _check_text(path: Path, where: str, text: str, offset: int = 0) -> None:
    """Refuse a control character in single-line metadata (module doc), naming the field and
    the character's place (from 1; ``offset`` characters precede ``text`` in its line)."""
    found = _CONTROL.search(text)
    if found is not None:
        raise _fail(
            path,
            where,
            f"contains the control character U+{ord(found.group()):04X} at character "
            f"{found.start() + offset + 1}; metadata and headers must be one line of printable text",
        )


def _shortened(text: str, most: int = 40) -> str:
    return text if len(text) <= most else f"{text[:most]}... ({len(text):,} characters)"


def _fail(path: Path, where: str, message: str) -> TableLayoutError:
    return TableLayoutError(f"{path}: {where}: {message}")
