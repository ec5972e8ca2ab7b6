"""The output store: stage a run's tables, commit them all at once, read committed runs back.

A run becomes visible all at once, or not at all::

    <out>/_staging/<run_id>/<table>/part-00000.parquet   written while the run goes
    <out>/_staging/<run_id>/_COMMITTING                  written when every table is staged
    <out>/<table>/run_id=<run_id>/                       each table moved in, runs last
    <out>/_staging/<run_id>/                             removed

Readers only ever look under ``<out>/<table>/``, so a run that crashes or is
killed while auditing or staging leaves nothing they see. A run is *committed*
when its row is in ``runs``; that row is moved in last. On a local disk each
move is one ``rename`` of the partition directory; on object stores (where a
move is a copy) each table's partition is a single object, which appears
whole. Between the first move and the last, a reader of one table alone may
see the new partition before ``runs`` lists it: queries that must agree across
tables keep to committed runs (``docs/tables.md`` has the one-line filter).
The next scan into the same ``--out`` finds a ``_COMMITTING`` marker without
its ``runs`` row and removes that run's partitions (an interrupted commit is
rolled back), so a killed run can simply be run again. One scan at a time
writes to an ``--out``.

The interface the pipeline uses is narrow, so another commit protocol can take
its place: :meth:`Output.sinks` (write staged tables) and
:meth:`Output.read_staged` (read one back); :meth:`Output.commit`;
:meth:`Output.recover`, :meth:`Output.recover_run` and :meth:`Output.discard`;
:meth:`Output.committed_runs` and :meth:`Output.last_committed_row` (list
committed runs); :meth:`Output.read_partition` (read one run's table).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fsspec.core import url_to_fs

from gguf_audit.tables.schema import PARTITION_COLUMN, SCHEMA_VERSION, TABLE_NAMES, schema_version_of, stored_schema

__all__ = [
    "COMMIT_MARKER",
    "PART_NAME",
    "STAGING_DIR",
    "Output",
    "Recovered",
    "TableSink",
    "new_run_id",
]

log = logging.getLogger(__name__)

STAGING_DIR: Final = "_staging"
COMMIT_MARKER: Final = "_COMMITTING"
PART_NAME: Final = "part-00000.parquet"
STALE_STAGING: Final = timedelta(hours=24)
"""Staging left by a run killed before its commit is removed once this old."""
ROW_GROUP_ROWS: Final = 64 * 1024


def new_run_id(now: datetime | None = None) -> str:
    """``20260101T020304123Z-1a2b3c4d``: sorts by start time (to the millisecond), unique by its random tail."""
    now = now or datetime.now(UTC)
    return f"{now:%Y%m%dT%H%M%S}{now.microsecond // 1000:03d}Z-{secrets.token_hex(4)}"


def _run_started(run_id: str) -> datetime | None:
    stamp = run_id.split("-", 1)[0]
    try:
        return datetime.strptime(stamp[:15], "%Y%m%dT%H%M%S").replace(tzinfo=UTC)
    except ValueError:
        return None


class TableSink:
    """One table's staged Parquet file, written as rows arrive (in row groups of about 64k).

    :meth:`write` any number of times, then :meth:`close` (the file is whole) or
    :meth:`abort` (the run failed; the staging is discarded).
    """

    def __init__(self, fs: fsspec.AbstractFileSystem, path: str, table: str) -> None:
        self.fs = fs
        self.path = path
        self.schema = stored_schema(table)
        self.rows = 0
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._file: Any = None
        self._writer: pq.ParquetWriter | None = None

    def write(self, table: pa.Table) -> None:
        if table.num_rows == 0:
            return
        self._pending.append(table.cast(self.schema) if table.schema != self.schema else table)
        self._pending_rows += table.num_rows
        self.rows += table.num_rows
        if self._pending_rows >= ROW_GROUP_ROWS:
            self._flush()

    def _open(self) -> pq.ParquetWriter:
        if self._writer is None:
            self.fs.makedirs(self.path.rsplit("/", 1)[0], exist_ok=True)
            self._file = self.fs.open(self.path, "wb")
            self._writer = pq.ParquetWriter(self._file, self.schema, compression="zstd")
        return self._writer

    def _flush(self) -> None:
        if not self._pending:
            return
        writer = self._open()
        writer.write_table(pa.concat_tables(self._pending), row_group_size=ROW_GROUP_ROWS)
        self._pending = []
        self._pending_rows = 0

    def close(self) -> None:
        """Write what is pending; a table with no rows still gets its (empty) file."""
        self._flush()
        writer = self._open()
        writer.close()
        self._file.close()

    def abort(self) -> None:
        """Close what is open and let errors go: the staged file is of no use now."""
        with contextlib.suppress(Exception):
            if self._writer is not None:
                self._writer.close()
            if self._file is not None:
                self._file.close()


@dataclass(frozen=True, slots=True)
class Recovered:
    """What :meth:`Output.recover` found and did with one staged run."""

    run_id: str
    action: str
    """``rolled back`` (interrupted commit), ``cleaned`` (committed, staging left), ``removed`` (stale)."""


class Output:
    """The audit tables under one ``--out`` URL, and the commit protocol (see the module docs)."""

    def __init__(self, url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        self.url = url
        fs, path = url_to_fs(url, **(storage_options or {}))
        self.fs: fsspec.AbstractFileSystem = fs
        self.root = path.rstrip("/") or path
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        self.local = protocol in ("file", "local")

    def path(self, *parts: str) -> str:
        return "/".join([self.root, *parts])

    def partition(self, table: str, run_id: str) -> str:
        return self.path(table, f"{PARTITION_COLUMN}={run_id}")

    def staging(self, run_id: str) -> str:
        return self.path(STAGING_DIR, run_id)

    def sinks(self, run_id: str) -> dict[str, TableSink]:
        return {t: TableSink(self.fs, f"{self.staging(run_id)}/{t}/{PART_NAME}", t) for t in TABLE_NAMES}

    # -- reading committed runs

    def committed_runs(self) -> pa.Table:
        """Every committed ``runs`` row (with ``run_id``), or an empty table."""
        base = self.path("runs")
        if not self.fs.exists(base):
            return _with_run_id(stored_schema("runs").empty_table(), "")
        parts = []
        for entry in sorted(self.fs.ls(base, detail=False)):
            name = str(entry).rstrip("/").rsplit("/", 1)[-1]
            if not name.startswith(f"{PARTITION_COLUMN}="):
                continue
            run_id = name.split("=", 1)[1]
            try:
                table = pq.read_table(f"{entry}/{PART_NAME}", filesystem=self.fs)
            except (OSError, pa.ArrowInvalid) as exc:
                log.warning("skipping unreadable runs partition %s: %s", entry, exc)
                continue
            parts.append(_with_run_id(table, run_id))
        if not parts:
            return _with_run_id(stored_schema("runs").empty_table(), "")
        return pa.concat_tables(parts, promote_options="permissive")

    def last_committed_run(self) -> str | None:
        """The last run committed with this schema version, or None."""
        row = self.last_committed_row()
        return None if row is None else str(row["run_id"])

    def last_committed_row(self) -> dict[str, Any] | None:
        """The ``runs`` row of :meth:`last_committed_run`."""
        best: dict[str, Any] | None = None
        for row in self.committed_runs().to_pylist():
            if row["schema_version"] != SCHEMA_VERSION or row["status"] != "committed":
                continue
            if best is None or (row["finished_at"], row["run_id"]) > (best["finished_at"], best["run_id"]):
                best = row
        return best

    def read_partition(self, table: str, run_id: str, urls: Sequence[str] | None = None) -> pa.Table:
        """One run's rows of ``table`` (only those of ``urls`` when given), or an empty table."""
        path = f"{self.partition(table, run_id)}/{PART_NAME}"
        schema = stored_schema(table)
        if not self.fs.exists(path):
            return schema.empty_table()
        data = pq.read_table(path, filesystem=self.fs)
        if schema_version_of(data.schema) != SCHEMA_VERSION:
            return schema.empty_table()
        if urls is not None:
            data = data.filter(pc.is_in(data.column("url"), value_set=pa.array(list(urls), pa.string())))
        return data.cast(schema) if data.schema != schema else data

    def read_staged(self, table: str, run_id: str, columns: Sequence[str] | None = None) -> pa.Table:
        """A staged run's rows of ``table`` (its sink closed), only ``columns`` when given."""
        path = f"{self.staging(run_id)}/{table}/{PART_NAME}"
        return pq.read_table(path, columns=list(columns) if columns is not None else None, filesystem=self.fs)

    # -- commit

    def commit(self, run_id: str) -> None:
        """Make a staged run visible: mark, move every table in (``runs`` last), clean up."""
        staging = self.staging(run_id)
        marker = {"run_id": run_id, "tables": list(TABLE_NAMES), "at": datetime.now(UTC).isoformat()}
        self.fs.pipe_file(f"{staging}/{COMMIT_MARKER}", json.dumps(marker).encode())
        order = [t for t in TABLE_NAMES if t != "runs"] + ["runs"]
        for table in order:
            self._move_in(f"{staging}/{table}", self.partition(table, run_id))
        # Committed. Leftover staging is harmless: the next scan's recover() clears it.
        with contextlib.suppress(OSError):
            self.discard(run_id)

    def _remove_if_empty(self, path: str) -> None:
        with contextlib.suppress(OSError):
            if self.fs.exists(path) and not self.fs.ls(path, detail=False):
                self.fs.rmdir(path)

    def _move_in(self, source: str, target: str) -> None:
        parent = target.rsplit("/", 1)[0]
        self.fs.makedirs(parent, exist_ok=True)
        if self.fs.exists(target):
            # A partition of this run id without its runs row: an earlier interrupted commit.
            self.fs.rm(target, recursive=True)
        if self.local:
            os.rename(source, target)  # one atomic rename of the whole partition directory
            return
        self.fs.mv(f"{source}/{PART_NAME}", f"{target}/{PART_NAME}")

    def recover(self, now: datetime | None = None) -> list[Recovered]:
        """Roll back interrupted commits and clear staging that no run will finish."""
        base = self.path(STAGING_DIR)
        if not self.fs.exists(base):
            return []
        now = now or datetime.now(UTC)
        done = []
        for entry in sorted(self.fs.ls(base, detail=False)):
            run_id = str(entry).rstrip("/").rsplit("/", 1)[-1]
            action = self.recover_run(run_id, now=now, stale_after=STALE_STAGING)
            if action is not None:
                done.append(Recovered(run_id, action))
        self._remove_if_empty(base)
        return done

    def recover_run(
        self, run_id: str, *, now: datetime | None = None, stale_after: timedelta = timedelta(0)
    ) -> str | None:
        """Settle one staged run: what :meth:`recover` did with it, or None when it was left alone."""
        staging = self.staging(run_id)
        if self.fs.exists(f"{self.partition('runs', run_id)}/{PART_NAME}"):
            # Committed: the runs row is in, so every table is. Only the staging is left.
            self.discard(run_id)
            return "cleaned"
        if self.fs.exists(f"{staging}/{COMMIT_MARKER}"):
            for table in TABLE_NAMES:
                target = self.partition(table, run_id)
                if self.fs.exists(target):
                    self.fs.rm(target, recursive=True)
            self.discard(run_id)
            return "rolled back"
        started = _run_started(run_id)
        if started is not None and (now or datetime.now(UTC)) - started > stale_after:
            self.discard(run_id)
            return "removed"
        return None

    def discard(self, run_id: str) -> None:
        """Remove a run's staging (never anything readers see)."""
        staging = self.staging(run_id)
        if self.fs.exists(staging):
            self.fs.rm(staging, recursive=True)
        self._remove_if_empty(self.path(STAGING_DIR))


def _with_run_id(table: pa.Table, run_id: str) -> pa.Table:
    return table.append_column(PARTITION_COLUMN, pa.array([run_id] * table.num_rows, pa.string()))
