"""Where an arm's request records live on disk: an append-only journal while it runs, Parquet after.

A Parquet file is unreadable until its footer is written, so a driver killed mid-run would lose every
record of the arm it was running. While the arm runs, each batch of finished records is therefore
appended to an Arrow IPC *stream* (``<arm>.arrows``) and flushed: a stream can be read up to its last
whole batch however it was cut. When the arm ends (or ``moeperf recover`` finds the journal) the stream
is rewritten as ``<arm>.parquet`` in row groups, batch by batch (memory bounded by one row group),
its SHA-256 and row count go into ``result.json``, and the journal is removed.

The columns are ``RequestRecord``'s fields with Arrow nulls for missing values, so pandas, DuckDB or
Polars read the file as they find it; ``read_columns`` maps nulls to ``RecordColumns``' NaN/-1.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc
import pyarrow.parquet as pq

from workloads.record_columns import NO_INT, RecordColumns
from workloads.records import RequestRecord

JOURNAL_SUFFIX = ".arrows"
PARQUET_SUFFIX = ".parquet"
ROW_GROUP_ROWS = 65_536
"""Rows per Parquet row group: large enough for good compression, small enough to write with little memory."""

RECORDS_VERSION_KEY = b"moeperf.records"
"""The schema metadata key that marks a records file and holds its version."""

_INT = ("index", "round", "client", "prompt_tokens_requested", "output_tokens_requested")
_NULLABLE_INT = ("level", "prompt_tokens", "output_tokens", "http_status")
_FLOAT = ("intended_send_s", "cap_wait_s")
_NULLABLE_FLOAT = ("actual_send_s", "first_token_s", "end_s")

SCHEMA = pa.schema(
    [pa.field("arm", pa.dictionary(pa.int32(), pa.string()), nullable=False)]
    + [pa.field(n, pa.int64(), nullable=False) for n in _INT]
    + [pa.field(n, pa.int64()) for n in _NULLABLE_INT]
    + [pa.field("warmup", pa.bool_(), nullable=False), pa.field("tokens_exact", pa.bool_(), nullable=False)]
    + [pa.field(n, pa.float64(), nullable=False) for n in _FLOAT]
    + [pa.field(n, pa.float64()) for n in _NULLABLE_FLOAT]
    + [pa.field("token_times_s", pa.large_list(pa.float64()), nullable=False)]
    + [pa.field("error_kind", pa.dictionary(pa.int32(), pa.string())), pa.field("error", pa.string())],
    metadata={RECORDS_VERSION_KEY: b"1"},
)
"""Version 1 of the records file (``moeperf.records`` in the schema's metadata)."""


def to_arrow(cols: RecordColumns) -> pa.Table:
    arrays: dict[str, Any] = {}
    for name in _INT:
        arrays[name] = pa.array(getattr(cols, name), pa.int64())
    for name in _NULLABLE_INT:
        v = getattr(cols, name)
        arrays[name] = pa.array(v, pa.int64(), mask=v == NO_INT)
    for name in _FLOAT:
        arrays[name] = pa.array(getattr(cols, name), pa.float64())
    for name in _NULLABLE_FLOAT:
        v = getattr(cols, name)
        arrays[name] = pa.array(v, pa.float64(), mask=np.isnan(v))
    arrays["warmup"] = pa.array(cols.warmup, pa.bool_())
    arrays["tokens_exact"] = pa.array(cols.tokens_exact, pa.bool_())
    arrays["token_times_s"] = pa.LargeListArray.from_arrays(
        pa.array(cols.token_offsets, pa.int64()), pa.array(cols.token_times_s, pa.float64())
    )
    arrays["arm"] = pa.array(cols.arm.tolist(), pa.string()).dictionary_encode()
    arrays["error_kind"] = pa.array(cols.error_kind.tolist(), pa.string()).dictionary_encode()
    arrays["error"] = pa.array(cols.error.tolist(), pa.string())
    return pa.table([arrays[f.name] for f in SCHEMA], schema=SCHEMA)


def _text_column(column: pa.ChunkedArray) -> np.ndarray:
    """A text column as an object array, one Python string per distinct value (an arm's name is one value for
    a million rows): ``to_pylist`` made a string per row and took most of a long run's load time."""
    encoded = pc.dictionary_encode(column.combine_chunks())
    distinct = np.array([*encoded.dictionary.to_pylist(), None], dtype=object)
    return distinct[encoded.indices.fill_null(len(distinct) - 1).to_numpy()]


def _scalar_columns(table: pa.Table) -> dict[str, Any]:
    cols: dict[str, Any] = {}
    for name in _INT:
        cols[name] = table.column(name).to_numpy()
    for name in _NULLABLE_INT:
        cols[name] = table.column(name).fill_null(NO_INT).to_numpy()
    for name in _FLOAT:
        cols[name] = table.column(name).to_numpy()
    for name in _NULLABLE_FLOAT:
        cols[name] = table.column(name).fill_null(np.nan).to_numpy()
    for name in ("warmup", "tokens_exact"):
        cols[name] = table.column(name).to_numpy(zero_copy_only=False)
    for name in ("arm", "error_kind", "error"):
        cols[name] = _text_column(table.column(name))
    return cols


def _token_column(chunks: Iterator[pa.LargeListArray], rows: int, upper: int) -> tuple[np.ndarray, np.ndarray]:
    """Token times and offsets copied chunk by chunk into numpy arrays of their own, so no Arrow buffer the
    size of the column (nor a combined copy of one) is ever held: a long run's token times are most of it."""
    times = np.empty(upper)
    offsets = np.zeros(rows + 1, dtype=np.int64)
    row = used = 0
    for chunk in chunks:
        values = chunk.flatten().to_numpy()
        ends = np.asarray(chunk.offsets, dtype=np.int64)
        times[used : used + values.size] = values
        offsets[row + 1 : row + 1 + len(chunk)] = ends[1:] - ends[0] + used
        row += len(chunk)
        used += values.size
    return (times[:used] if used >= 0.99 * upper else times[:used].copy()), offsets


def from_arrow(table: pa.Table) -> RecordColumns:
    chunks = table.column("token_times_s").chunks
    times, offsets = _token_column(iter(chunks), table.num_rows, sum(len(c.flatten()) for c in chunks))
    return RecordColumns.from_arrays(_scalar_columns(table), times, offsets)


def _read_parquet(path: Path) -> RecordColumns:
    """Scalars in one read, token times row group by row group, Arrow's pool emptied after each: mimalloc
    keeps freed pages, so a million-request arm's Arrow copy would otherwise stay beside numpy's."""
    pool = pa.default_memory_pool()
    pf = pq.ParquetFile(path)
    meta = pf.metadata
    names = [f.name for f in SCHEMA if f.name != "token_times_s"]
    cols = _scalar_columns(pf.read(columns=names))
    pool.release_unused()
    leaf = pf.schema.names.index("element") if meta.num_row_groups else 0  # the list's values
    upper = sum(meta.row_group(g).column(leaf).num_values for g in range(meta.num_row_groups))

    def chunks() -> Iterator[pa.LargeListArray]:
        for g in range(meta.num_row_groups):
            yield from pf.read_row_group(g, columns=["token_times_s"]).column(0).chunks
            pool.release_unused()

    times, offsets = _token_column(chunks(), meta.num_rows, upper)
    return RecordColumns.from_arrays(cols, times, offsets)


class RecordJournal:
    """Append-only journal of one arm's records; every ``append`` is on disk (in the OS) when it returns."""

    def __init__(self, path: Path) -> None:
        if path.suffix != JOURNAL_SUFFIX:
            raise ValueError(f"{path}: a records journal ends in {JOURNAL_SUFFIX}")
        self.path = path
        self.rows = 0
        self._file: BinaryIO | None = None
        self._writer: pa.ipc.RecordBatchStreamWriter | None = None

    def append(self, records: Sequence[RequestRecord]) -> None:
        if records:
            self.append_columns(RecordColumns.from_records(records))

    def append_columns(self, cols: RecordColumns) -> None:
        if not len(cols):
            return
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._file = self.path.open("xb")  # one journal per arm: never append a second stream to one
            self._writer = pa.ipc.new_stream(self._file, SCHEMA)
        assert self._file is not None
        for batch in to_arrow(cols).to_batches():
            self._writer.write_batch(batch)
        self._file.flush()
        self.rows += len(cols)

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        if self._file is not None:
            self._file.close()
        self._writer = self._file = None


def journal_batches(path: Path) -> tuple[list[pa.RecordBatch], bool]:
    """Every whole batch of a journal, and whether its end was cut (the writer was killed mid-batch)."""
    batches: list[pa.RecordBatch] = []
    try:
        with pa.OSFile(str(path), "rb") as f:
            reader = pa.ipc.open_stream(f)
            for batch in _batches(reader):
                batches.append(batch)
    except (pa.ArrowInvalid, OSError, EOFError):
        return batches, True
    return batches, False


def _batches(reader: pa.ipc.RecordBatchStreamReader) -> Iterator[pa.RecordBatch]:
    while True:
        try:
            yield reader.read_next_batch()
        except StopIteration:
            return


_DOUBLE_COLUMNS = (*_FLOAT, *_NULLABLE_FLOAT, "token_times_s.list.element")
PARQUET_ZSTD_LEVEL = 9
"""Within 2% of zstd's smallest (level 19) on token times, at a tenth of its time when an arm is sealed."""


def write_parquet(table: pa.Table, path: Path) -> None:
    """The one layout of a records file.

    Token times are most of a file (8 bytes each, 230,000 in one arm of a claim-1 hold), and as doubles
    their low bytes look random to zstd. Byte-stream split lays each byte position out as its own stream,
    so the sign, exponent and high mantissa bytes, nearly constant within a run, compress away: 40% smaller
    than plain zstd on the H200 runs' records, bit for bit the same values. Dictionary encoding would take
    precedence over the split, so it is kept to the columns that are not doubles.
    """
    pq.write_table(
        table,
        path,
        row_group_size=ROW_GROUP_ROWS,
        compression="zstd",
        compression_level=PARQUET_ZSTD_LEVEL,
        use_dictionary=[n for n in table.column_names if n not in _DOUBLE_COLUMNS and n != "token_times_s"],
        column_encoding=dict.fromkeys(_DOUBLE_COLUMNS, "BYTE_STREAM_SPLIT"),
    )


def sync_into_place(tmp: Path, target: Path) -> None:
    """``tmp``, written in full, synced to disk and renamed over ``target``: a crash leaves the old or the new file."""
    with tmp.open("rb") as f:
        os.fsync(f.fileno())
    tmp.replace(target)


@dataclass(frozen=True)
class SealedRecords:
    path: Path
    rows: int
    sha256: str
    torn_tail: bool = False
    """The journal ended in a cut batch (kept: every whole batch before it)."""


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def seal(journal: Path, sort: bool = True) -> SealedRecords:
    """Rewrite ``journal`` as Parquet beside it (``sort``: in round, level, index order) and remove it.

    An absent or empty journal gives an empty Parquet file, so every arm has one records file.
    """
    target = journal.with_suffix(PARQUET_SUFFIX)
    batches, torn = journal_batches(journal) if journal.exists() else ([], False)
    table = pa.Table.from_batches(batches, schema=SCHEMA) if batches else SCHEMA.empty_table()
    if sort and table.num_rows:
        level_key = pc.fill_null(table.column("level"), -1)
        order = np.lexsort((table.column("index").to_numpy(), level_key.to_numpy(), table.column("round").to_numpy()))
        table = table.take(pa.array(order))
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".parquet.tmp")
    write_parquet(table.combine_chunks(), tmp)
    sync_into_place(tmp, target)
    if journal.exists():
        journal.unlink()
    return SealedRecords(path=target, rows=table.num_rows, sha256=sha256_of(target), torn_tail=torn)


def write_sealed(journal: Path, cols: RecordColumns) -> SealedRecords:
    """Records already in memory (pooled, or a subset of an arm's) as a sealed Parquet file, through a journal
    at ``journal`` like any arm's, so they are sorted and checksummed the same way."""
    writer = RecordJournal(journal)
    writer.append_columns(cols)
    writer.close()
    return seal(journal)


class RecordsChecksumError(ValueError):
    pass


def read_columns(path: Path, sha256: str | None = None) -> RecordColumns:
    """An arm's records from its Parquet file (checked against ``sha256`` when given), or from a journal
    that was never sealed (an interrupted run), or from a JSON Lines file of schema 2 and before."""
    if path.suffix == PARQUET_SUFFIX:
        if sha256 is not None and (actual := sha256_of(path)) != sha256:
            raise RecordsChecksumError(f"{path}: SHA-256 {actual} is not the {sha256} result.json recorded")
        return _read_parquet(path)
    if path.suffix == JOURNAL_SUFFIX:
        batches, _ = journal_batches(path)
        return from_arrow(pa.Table.from_batches(batches, schema=SCHEMA))
    lines = path.read_text().splitlines() if path.exists() else []
    return RecordColumns.from_records(RequestRecord.model_validate_json(line) for line in lines if line.strip())
