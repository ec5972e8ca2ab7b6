"""Data files of a run: Parquet written straight under ``OUT/<table>/run_id=<run>/``, described for a Delta commit.

A worker (or the driver, for the few rows it writes itself) writes each
table's rows of one batch as one Parquet file, ``part-<batch>-<random>.parquet``,
with the table's explicit stored schema (every column but the ``run_id``
partition, which lives in the commit's partition values, and those a file
written in one piece has no value for). Rows are written as
they are ready and flushed in row groups of about :data:`ROW_GROUP_ROWS`
rows, so a writer holds at most one row group per table whatever the batch
size. The first row group fixes the file's layout (stored columns, row order,
each column's encoding: :mod:`~gguf_audit.pipelines.store.layout`). Closing a
writer gives a :class:`PartFile` per file written (one a table; the driver's
start a new file every so many row groups): its path relative to the table
root, size, rows and modification time, all the driver needs for the table's
add action. Nothing here is visible to a reader until the
driver commits it; a file no commit names is removed by ``gguf-audit tables
--vacuum``.

Files go through fsspec with the output's storage options. On an object
store nothing is created but the object (no ``makedirs``: s3fs would create
a missing bucket); on a local disk the partition directory is made first.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec.core import url_to_fs

from gguf_audit.pipelines.spill import driver_phase
from gguf_audit.pipelines.store.layout import Layout, choose_layout, in_key_order
from gguf_audit.tables.schema import PARTITION_COLUMN, stored_schema

__all__ = ["ROW_GROUP_ROWS", "STATISTICS_COLUMNS", "PartFile", "PartWriter", "RunParts", "is_local_fs", "part_name"]

ROW_GROUP_ROWS: Final = 64 * 1024
"""Rows buffered per table before they are written as one row group."""
ROW_GROUP_BYTES: Final = 16 << 20
"""...or this many bytes of Arrow buffers, whichever comes first (wide rows flush sooner)."""


STATISTICS_COLUMNS: Final = frozenset(
    {"url", "model_id", "source_run_id", "status", "code", "severity", "scope", "key", "tensor", "architecture"}
)
"""The columns whose min and max a data file records (what readers filter and join on).

Every other column's statistics, and the Arrow schema copy pyarrow would add to
each footer, are left out: the table schema is the Delta log's, and a night
that writes a few rows per table would otherwise pay kilobytes of footer per
data file (long strings such as messages and the run config recorded twice).
"""


@dataclass(frozen=True, slots=True)
class PartFile:
    """One written data file of one table: what its add action says."""

    table: str
    path: str
    """Relative to the table root: ``run_id=<run>/part-<batch>-<random>.parquet``."""
    size_bytes: int
    rows: int
    modified_ms: int
    run_id: str


def is_local_fs(fs: fsspec.AbstractFileSystem) -> bool:
    protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
    return protocol in ("file", "local")


def part_name(tag: str) -> str:
    """A data file name no other writer picks: the batch's tag and 16 random hex digits."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in tag)[:80]
    return f"part-{safe}-{secrets.token_hex(8)}.parquet"


class PartWriter:
    """One table's data file for one batch, written in row groups as rows arrive.

    Opened on the first non-empty :meth:`write` (a table with no rows gets no
    file); :meth:`close` gives its :class:`PartFile`, :meth:`abort` drops it.
    With ``row_groups_per_file``, a file that has that many row groups is
    closed and the next rows go to a new one: a Parquet writer holds each row
    group's footer metadata until it closes, which for
    the driver's rows of a whole night grew with the collection.
    """

    def __init__(
        self,
        fs: fsspec.AbstractFileSystem,
        root: str,
        table: str,
        run_id: str,
        tag: str,
        *,
        measure: bool = False,
        row_group_rows: int | None = None,
        row_groups_per_file: int | None = None,
    ) -> None:
        self.fs = fs
        self.measure = measure
        self.row_group_rows = row_group_rows  # None: ROW_GROUP_ROWS, read when rows come (tests lower it)
        self.row_groups_per_file = row_groups_per_file  # None: one file, however many row groups
        self.table = table
        self.run_id = run_id
        self.schema = stored_schema(table)
        self._root = root
        self._tag = tag
        self.relative = ""
        self.path = ""
        self._new_path()
        self.rows = 0
        """Rows written, in all of its files."""
        self._file_rows = 0
        self._file_row_groups = 0
        self._closed: list[PartFile] = []
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._pending_bytes = 0
        self._file: Any = None
        self._writer: pq.ParquetWriter | None = None
        self._layout: Layout | None = None

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        if not table.schema.equals(self.schema):
            # rows read back from a table carry its run_id column and reader types: keep the stored ones
            table = table.select(self.schema.names).cast(self.schema)
        self._pending.append(table)
        self._pending_rows += table.num_rows
        self._pending_bytes += table.nbytes
        self.rows += table.num_rows
        self._file_rows += table.num_rows
        if self._pending_rows >= (self.row_group_rows or ROW_GROUP_ROWS) or self._pending_bytes >= ROW_GROUP_BYTES:
            self._flush()

    def _open(self, layout: Layout) -> pq.ParquetWriter:
        if is_local_fs(self.fs):
            self.fs.makedirs(self.path.rsplit("/", 1)[0], exist_ok=True)
        self._file = self.fs.open(self.path, "wb")
        writer = pq.ParquetWriter(
            self._file,
            layout.schema,
            store_schema=False,
            write_statistics=[n for n in layout.schema.names if n in STATISTICS_COLUMNS],
            **layout.writer_options(),
        )
        # The schema's own key-values (table, schema version) still go in, without the Arrow schema copy.
        if self.schema.metadata:
            writer.add_key_value_metadata({k.decode(): v.decode() for k, v in self.schema.metadata.items()})
        return writer

    def _flush(self, *, last: bool = False) -> None:
        """Write the pending rows as one row group; the first one also fixes the file's layout.

        ``last`` says nothing else will come (the file is written in one
        piece), so columns with no value in any row can be left out.
        """
        if not self._pending:
            return
        rows = in_key_order(self.table, pa.concat_tables(self._pending))
        layout = self._layout
        if layout is None:
            # the trial writes' freed buffers (the driver's files) are not held to the night's end
            with driver_phase("parts.layout") if self.measure else contextlib.nullcontext():
                layout = self._layout = choose_layout(self.schema, rows, complete=last, measure=self.measure)
        writer = self._writer
        if writer is None:
            writer = self._writer = self._open(layout)
        if layout.schema.names != rows.schema.names:
            rows = rows.select(layout.schema.names)
        writer.write_table(rows, row_group_size=ROW_GROUP_ROWS)
        self._file_row_groups += -(-rows.num_rows // ROW_GROUP_ROWS)
        self._pending = []
        self._pending_rows = 0
        self._pending_bytes = 0
        if not last and self.row_groups_per_file and self._file_row_groups >= self.row_groups_per_file:
            self._closed.append(self._close_file())

    def _new_path(self) -> None:
        self.relative = f"{PARTITION_COLUMN}={self.run_id}/{part_name(self._tag)}"
        self.path = f"{self._root}/{self.table}/{self.relative}"

    def _close_file(self) -> PartFile:
        """Close the open file and describe it; the next rows go to a file of a new name (same layout)."""
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
        self._file.close()
        info = self.fs.info(self.path)
        part = PartFile(self.table, self.relative, int(info["size"]), self._file_rows, _mtime_ms(info), self.run_id)
        self._new_path()
        self._file_rows = 0
        self._file_row_groups = 0
        return part

    def close(self) -> tuple[PartFile, ...]:
        """Write what is pending and close: the files written (none when the table got no rows)."""
        self._flush(last=True)
        if self._writer is not None:
            self._closed.append(self._close_file())
        return tuple(self._closed)

    def abort(self) -> None:
        """Close what is open and let errors go: the file is of no use now (vacuum removes it)."""
        with contextlib.suppress(Exception):
            if self._writer is not None:
                self._writer.close()
            if self._file is not None:
                self._file.close()
        self._writer = None
        self._pending = []


def _mtime_ms(info: Mapping[str, Any]) -> int:
    """The object's modification time in ms since the epoch (now, when the store does not say)."""
    for key in ("mtime", "LastModified", "last_modified", "created"):
        value = info.get(key)
        if value is None:
            continue
        if hasattr(value, "timestamp"):
            return int(value.timestamp() * 1000)
        if isinstance(value, int | float):
            return int(value * 1000)
    return int(time.time() * 1000)


class RunParts:
    """A :class:`PartWriter` per table for one batch of one run, under the output ``out_url``.

    ``measure_encodings`` for the driver's files (:func:`~gguf_audit.pipelines.store.layout.choose_layout`);
    ``row_group_rows`` flushes sooner than :data:`ROW_GROUP_ROWS` (the driver's, whose rows would
    otherwise wait on it for the whole night); ``row_groups_per_file`` starts a new file after so many
    (the driver's, whose one file a table would otherwise hold the night's footer metadata).
    """

    def __init__(
        self,
        out_url: str,
        storage_options: Mapping[str, Any] | None,
        run_id: str,
        tag: str,
        tables: Sequence[str],
        *,
        measure_encodings: bool = False,
        row_group_rows: int | None = None,
        row_groups_per_file: int | None = None,
    ) -> None:
        fs, root = url_to_fs(out_url, **dict(storage_options or {}))
        self.fs: fsspec.AbstractFileSystem = fs
        root = root.rstrip("/") or root
        self.writers = {
            t: PartWriter(
                fs,
                root,
                t,
                run_id,
                tag,
                measure=measure_encodings,
                row_group_rows=row_group_rows,
                row_groups_per_file=row_groups_per_file,
            )
            for t in tables
        }

    def write(self, table: str, rows: pa.Table) -> None:
        self.writers[table].write(rows)

    def rows(self) -> dict[str, int]:
        return {t: w.rows for t, w in self.writers.items()}

    def close(self) -> tuple[PartFile, ...]:
        """Close every writer; the files written (tables without rows have none)."""
        parts: list[PartFile] = []
        try:
            for writer in self.writers.values():
                parts.extend(writer.close())
        except BaseException:
            self.abort()
            raise
        return tuple(parts)

    def abort(self) -> None:
        for writer in self.writers.values():
            writer.abort()
