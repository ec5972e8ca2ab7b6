"""The scan job: list, audit in batches on dask.distributed, write the audit tables, commit the run.

Execution
---------
Files are sent to workers in batches (:class:`Batch`, one task each). Inside
a worker process every batch feeds one shared, bounded thread pool
(``threads`` files in flight), so round trips overlap and latency does not
serialise the run; with two dask threads per worker (the default), the last
slow reads of one batch overlap the next batch's. :func:`audit_batch` never raises: every file comes back with
its rows, an exception becoming an ``internal.unexpected`` problem. A batch
whose worker died is rerun by the scheduler; when dask gives up on it
(``KilledWorker``) the driver splits it in two and resubmits the halves, so a
file that kills workers ends up alone with a ``run.worker_lost`` row while the
rest are audited. Results are keyed by URL on arrival and a file's second
result is dropped, so no rerun can duplicate a row; before committing, the
driver reads the staged ``files`` table back and checks that every listed file
has exactly one row.

Commit protocol
---------------
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

Incremental runs
----------------
``incremental`` compares the listing with the last committed run's ``files``
(size plus sha256, version id, ETag or mtime, see
:meth:`ListedFile.unchanged_since`) and re-reads only new or changed files,
and files whose last read failed (``io.*``, ``internal.*``, ``run.*``). The
other files' rows in ``files``, ``problems``, ``tensors``, ``metadata`` and
``samples`` are copied from that run, with ``source_run_id`` still naming the
run that read them and ``bytes_read`` 0, so every run is a complete picture.
Shard sets are checked again from the stored facts of unchanged shards.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import json
import logging
import math
import os
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Final

import fsspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fsspec.core import url_to_fs

from gguf_audit import __version__
from gguf_audit.audit import AuditConfig, FileAudit, audit_file
from gguf_audit.checks.shards import ShardFacts, judge_shard_set, shard_facts
from gguf_audit.errors import GGUFAuditError, describe_exception
from gguf_audit.findings import SEVERITY_RANK, Severity, finding
from gguf_audit.format.shard_names import group_models, parse_shard_name
from gguf_audit.io.source import IOStats
from gguf_audit.schema import PARTITION_COLUMN, SCHEMA_VERSION, TABLE_NAMES, schema_version_of, stored_schema
from gguf_audit.tables import (
    MODEL_INPUT_COLUMNS,
    AuditedFile,
    AuditTables,
    ListedFile,
    ModelSummary,
    audits_to_tables,
    model_problems_to_table,
    models_to_table,
    reuse_rows,
    rows_to_table,
    shard_facts_from_tables,
    summarise_model,
)
from pipelines.config import ScanConfig
from pipelines.discover import Listing, discover, options_for

__all__ = [
    "Batch",
    "BatchResult",
    "Output",
    "RunError",
    "ScanObserver",
    "ScanResult",
    "TaskOptions",
    "audit_batch",
    "make_batches",
    "new_run_id",
    "run_scan",
]

log = logging.getLogger(__name__)


STAGING_DIR: Final = "_staging"
COMMIT_MARKER: Final = "_COMMITTING"
PART_NAME: Final = "part-00000.parquet"
STALE_STAGING: Final = timedelta(hours=24)
"""Staging left by a run killed before its commit is removed once this old."""
ROW_GROUP_ROWS: Final = 64 * 1024
MAX_SPLITS: Final = 12
"""Halvings of a batch whose workers keep dying (2**12 files end up alone)."""
WORKER_WAIT_S: Final = 60.0
"""How long a scan waits for the first worker of an external scheduler."""
SCHEDULER_CONNECT_S: Final = 20.0
"""How long a scan tries to reach an external scheduler."""
_RETRY_PREFIXES: Final = ("io.", "internal.", "run.")
"""A file whose last row has one of these is read again even when unchanged."""


class RunError(GGUFAuditError, RuntimeError):
    """The run itself failed (listing, cluster, invariant, commit); nothing was committed."""


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


# ============================================================ worker side


@dataclass(frozen=True, slots=True)
class Batch:
    """Files audited by one task."""

    batch_id: str
    files: tuple[ListedFile, ...]
    model_ids: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TaskOptions:
    """What every task needs besides its files."""

    run_id: str
    storage_options: Mapping[str, Any]
    audit: AuditConfig
    threads: int


@dataclass(frozen=True, slots=True)
class BatchResult:
    """What a task sends back: the batch's rows and the facts of its shards."""

    batch_id: str
    tables: AuditTables
    shard_facts: tuple[ShardFacts, ...]
    bytes_read: int
    failures: tuple[str, ...] = ()
    """Batch-level failures survived (bugs of ours), for the driver's log."""


_POOL_LOCK = threading.Lock()
_POOLS: dict[int, ThreadPoolExecutor] = {}


def _io_pool(threads: int) -> ThreadPoolExecutor:
    """The worker process's pool for file audits, shared by every batch it runs."""
    with _POOL_LOCK:
        pool = _POOLS.get(threads)
        if pool is None:
            pool = ThreadPoolExecutor(threads, thread_name_prefix="gguf-audit-io")
            _POOLS[threads] = pool
        return pool


def _failed_audit(listed: ListedFile, code: str, message: str, io_stats: IOStats | None = None) -> FileAudit:
    return FileAudit(
        url=listed.url,
        size=listed.size,
        header=None,
        findings=[finding(code, message)],
        io=io_stats or IOStats(),
        seconds=0.0,
        etag=listed.etag,
    )


def _audit_one(listed: ListedFile, options: TaskOptions) -> FileAudit:
    try:
        return audit_file(
            listed.url,
            size=listed.size,
            etag=listed.etag,
            storage_options=options_for(listed.url, options.storage_options),
            config=options.audit,
        )
    except Exception as exc:  # noqa: BLE001 - audit_file never raises; this guards the guard
        return _failed_audit(listed, "internal.unexpected", describe_exception(exc))


def _tables_of(items: Sequence[AuditedFile], run_id: str) -> AuditTables:
    """The batch's tables; a file whose rows cannot be built keeps a files row saying why."""
    try:
        return audits_to_tables(items, run_id=run_id)
    except Exception:  # noqa: BLE001 - find the file at fault below
        pass
    parts = []
    for item in items:
        try:
            parts.append(audits_to_tables([item], run_id=run_id))
        except Exception as exc:  # noqa: BLE001 - one file's bad rows must not lose the batch
            failed = _failed_audit(item.listed, "internal.unexpected", describe_exception(exc), item.audit.io)
            parts.append(audits_to_tables([AuditedFile(failed, item.listed, item.model_id)], run_id=run_id))
    return _concat_tables(parts)


def _concat_tables(parts: Sequence[AuditTables]) -> AuditTables:
    if not parts:
        return audits_to_tables([], run_id="")
    return AuditTables(
        files=pa.concat_tables([p.files for p in parts]),
        problems=pa.concat_tables([p.problems for p in parts]),
        tensors=pa.concat_tables([p.tensors for p in parts]),
        metadata=pa.concat_tables([p.metadata for p in parts]),
        samples=pa.concat_tables([p.samples for p in parts]),
    )


def _lost_result(batch: Batch, run_id: str, code: str, message: str) -> BatchResult:
    items = [
        AuditedFile(_failed_audit(listed, code, message), listed, model_id)
        for listed, model_id in zip(batch.files, batch.model_ids, strict=True)
    ]
    return BatchResult(batch.batch_id, audits_to_tables(items, run_id=run_id), (), 0, (message,))


def audit_batch(batch: Batch, options: TaskOptions) -> BatchResult:
    """Audit every file of ``batch`` with overlapping reads and return its rows. Never raises."""
    try:
        pool = _io_pool(options.threads)
        audits = list(pool.map(lambda listed: _audit_one(listed, options), batch.files))
        items = [
            AuditedFile(audit, listed, model_id)
            for audit, listed, model_id in zip(audits, batch.files, batch.model_ids, strict=True)
        ]
        tables = _tables_of(items, options.run_id)
        facts = []
        for audit in audits:
            try:
                fact = shard_facts(audit)
            except Exception:  # noqa: BLE001 - a shard without facts is judged unreadable
                name = parse_shard_name(audit.url)
                fact = ShardFacts(audit.url, name.shard_index, name.shard_count, False, None) if name else None
            if fact is not None:
                facts.append(fact)
        return BatchResult(batch.batch_id, tables, tuple(facts), sum(a.io.bytes_read for a in audits))
    except Exception as exc:  # noqa: BLE001 - the task boundary: every file still gets its row
        return _lost_result(batch, options.run_id, "internal.unexpected", f"batch failed: {describe_exception(exc)}")


def make_batches(
    files: Sequence[ListedFile], model_ids: Mapping[str, str], batch_size: int, *, prefix: str = "b"
) -> list[Batch]:
    """Consecutive files in batches of ``batch_size``."""
    size = max(1, batch_size)
    out = []
    for start in range(0, len(files), size):
        chunk = tuple(files[start : start + size])
        out.append(Batch(f"{prefix}{start // size}", chunk, tuple(model_ids[f.url] for f in chunk)))
    return out


def auto_batch_size(n_files: int, slots: int, threads: int, threads_per_worker: int) -> int:
    """Files per task: about four tasks per dask thread, and enough to keep the I/O pool full."""
    per_slot = math.ceil(n_files / max(1, slots * 4))
    floor = math.ceil(threads / max(1, threads_per_worker))
    return max(1, min(1024, max(per_slot, floor)))


# ============================================================ output store


class _TableSink:
    """One table's staged Parquet file, written as rows arrive (in row groups of about 64k)."""

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

    def sinks(self, run_id: str) -> dict[str, _TableSink]:
        return {t: _TableSink(self.fs, f"{self.staging(run_id)}/{t}/{PART_NAME}", t) for t in TABLE_NAMES}

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


# ============================================================ driver


class ScanObserver:
    """What a scan tells whoever watches it (the CLI's progress bar). Every method is optional."""

    def listed(self, listing: Listing, n_reused: int) -> None:
        """Called once the collection is listed and the reusable files known."""

    def cluster(self, scheduler: str, dashboard: str | None, n_workers: int) -> None:
        """Called once the cluster is up."""

    def progress(self, done: int, total: int, bytes_read: int) -> None:
        """Called after each batch: files with rows so far, of ``total``, and bytes read so far."""

    def committing(self) -> None:
        """Called when every row is staged and the commit begins."""


@dataclass(frozen=True, slots=True)
class IncompleteModel:
    model_id: str
    count: int
    missing: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ScanResult:
    """What a committed run found and cost."""

    run_id: str
    out: str
    base_run_id: str | None
    n_files: int
    n_read: int
    n_reused: int
    n_models: int
    statuses: Mapping[str, int]
    problem_codes: Mapping[str, int]
    code_severities: Mapping[str, str]
    """The severity each code was reported with (its worst, should a finding override it)."""
    severities: Mapping[str, int]
    incomplete_models: tuple[IncompleteModel, ...]
    bytes_read: int
    requests: int
    collection_bytes: int
    listing_seconds: float
    audit_seconds: float
    seconds: float
    rows_checked: int
    duplicates_dropped: int
    """Rows of files that already had one (results of batches dask ran twice), not written."""
    reuse_note: str | None
    """Why an incremental run read everything, when it did."""
    scheduler: str
    dashboard: str | None
    n_workers: int
    recovered: tuple[Recovered, ...] = ()

    @property
    def files_per_second(self) -> float:
        """Files read per second of auditing (reused files cost nothing and are not counted)."""
        return self.n_read / self.audit_seconds if self.audit_seconds > 0 else 0.0

    def reaches(self, fail_on: str) -> bool:
        """Whether any problem, of a file or a model, is at least ``fail_on`` severe."""
        if fail_on == "warning":
            return bool(self.severities.get("error", 0) or self.severities.get("warning", 0))
        return bool(self.severities.get("error", 0))


@dataclass
class _Collector:
    """The driver's running state: sinks, dedupe, counts, and what the model checks need."""

    sinks: dict[str, _TableSink]
    expected: frozenset[str]
    seen: set[str] = field(default_factory=set)
    statuses: Counter[str] = field(default_factory=Counter)
    codes: Counter[str] = field(default_factory=Counter)
    severities: Counter[str] = field(default_factory=Counter)
    code_severities: dict[str, str] = field(default_factory=dict)
    bytes_read: int = 0
    requests: int = 0
    members: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    facts: dict[str, ShardFacts] = field(default_factory=dict)
    dropped: int = 0

    def add(self, tables: AuditTables, facts: Sequence[ShardFacts]) -> int:
        """Stage one batch's rows, dropping files that already have rows. Returns the files added."""
        files = tables.files
        urls = files.column("url").to_pylist()
        fresh = [u for u in dict.fromkeys(urls) if u in self.expected and u not in self.seen]
        if len(fresh) != len(urls):
            self.dropped += len(urls) - len(fresh)
            keep = pa.array(fresh, pa.string())
            # one row per URL: a file's first row wins
            first = {u: i for i, u in reversed(list(enumerate(urls)))}
            files = files.take(pa.array([first[u] for u in fresh], pa.int64()))

            def only(t: pa.Table) -> pa.Table:
                return t.filter(pc.is_in(t.column("url"), value_set=keep))

            tables = AuditTables(
                files=files,
                problems=only(tables.problems),
                tensors=only(tables.tensors),
                metadata=only(tables.metadata),
                samples=only(tables.samples),
            )
        self.seen.update(fresh)
        for name, table in tables.per_file().items():
            self.sinks[name].write(table)
        self._count(tables)
        fresh_set = set(fresh)
        for fact in facts:
            if fact.url in fresh_set:
                self.facts[fact.url] = fact
        return len(fresh)

    def _count(self, tables: AuditTables) -> None:
        files = tables.files
        self.statuses.update(files.column("status").to_pylist())
        self.bytes_read += int(pc.sum(files.column("bytes_read")).as_py() or 0)
        self.requests += int(pc.sum(files.column("requests")).as_py() or 0)
        self.count_problems(tables.problems)
        for row in files.select([*MODEL_INPUT_COLUMNS, "model_id"]).to_pylist():
            self.members.setdefault(row["model_id"], []).append(row)

    def count_problems(self, problems: pa.Table) -> None:
        self.codes.update(problems.column("code").to_pylist())
        severities = problems.column("severity").to_pylist()
        self.severities.update(severities)
        for code, severity in zip(problems.column("code").to_pylist(), severities, strict=True):
            known = self.code_severities.get(code)
            if known is None or SEVERITY_RANK[Severity(severity)] > SEVERITY_RANK[Severity(known)]:
                self.code_severities[code] = severity


def _plan_reuse(
    out: Output, base_run_id: str | None, listing: Listing
) -> tuple[dict[str, ListedFile], list[ListedFile]]:
    """Which listed files keep their rows from ``base_run_id``, and which are read."""
    if base_run_id is None:
        return {}, list(listing.files)
    previous = out.read_partition("files", base_run_id, [f.url for f in listing.files])
    before: dict[str, tuple[ListedFile, list[str]]] = {}
    for row in previous.select(["url", "size", "etag", "version_id", "mtime", "sha256", "codes"]).to_pylist():
        listed = ListedFile(row["url"], row["size"], row["etag"], row["version_id"], row["mtime"], row["sha256"])
        before[row["url"]] = (listed, list(row["codes"] or ()))
    reuse: dict[str, ListedFile] = {}
    read: list[ListedFile] = []
    for listed in listing.files:
        prior = before.get(listed.url)
        if (
            prior is not None
            and listed.unchanged_since(prior[0])
            and not any(c.startswith(_RETRY_PREFIXES) for c in prior[1])
        ):
            reuse[listed.url] = listed
        else:
            read.append(listed)
    return reuse, read


def _base_run(out: Output, config: ScanConfig) -> tuple[str | None, str | None]:
    """The run an incremental scan reuses rows from, or None and the reason none is usable.

    Rows are reused only from a run made by the same gguf-audit version with the
    same checks: another version or other checks may judge the same bytes otherwise.
    """
    row = out.last_committed_row()
    if row is None:
        return None, "incremental: no committed run yet, every file is read"
    run_id = str(row["run_id"])
    try:
        recorded = json.loads(row["config"] or "{}")
    except json.JSONDecodeError:
        recorded = {}
    before = {k: recorded.get(k) for k in config.checks()}
    if row["tool_version"] != __version__ or before != config.checks():
        return None, (
            f"incremental: the last run {run_id} was made by gguf-audit {row['tool_version']} with checks "
            f"{before}; this one is {__version__} with {config.checks()}: every file is read"
        )
    return run_id, None


def _set_model_ids(table: pa.Table, model_ids: Mapping[str, str]) -> pa.Table:
    if table.num_rows == 0:
        return table
    ids = pa.array([model_ids[u] for u in table.column("url").to_pylist()], pa.string())
    i = table.schema.get_field_index("model_id")
    return table.set_column(i, table.schema.field(i), ids)


def _stage_reused(
    out: Output, base_run_id: str, reuse: Mapping[str, ListedFile], model_ids: Mapping[str, str], collector: _Collector
) -> None:
    urls = list(reuse)
    files = _set_model_ids(reuse_rows(out.read_partition("files", base_run_id, urls), reuse), model_ids)
    problems = out.read_partition("problems", base_run_id, urls)
    problems = _set_model_ids(problems.filter(pc.equal(problems.column("scope"), "file")), model_ids)
    tensors = _set_model_ids(out.read_partition("tensors", base_run_id, urls), model_ids)
    metadata = _set_model_ids(out.read_partition("metadata", base_run_id, urls), model_ids)
    samples = _set_model_ids(out.read_partition("samples", base_run_id, urls), model_ids)
    shard_urls = [u for u in urls if parse_shard_name(u) is not None]
    facts: list[ShardFacts] = []
    if shard_urls:
        keep = pa.array(shard_urls, pa.string())

        def only(t: pa.Table) -> pa.Table:
            return t.filter(pc.is_in(t.column("url"), value_set=keep))

        facts = shard_facts_from_tables(only(files), only(metadata), only(tensors))
    collector.add(AuditTables(files, problems, tensors, metadata, samples), facts)


@contextlib.contextmanager
def _cluster(config: ScanConfig, client: Any) -> Iterator[tuple[Any, str, str | None, int]]:
    """A dask client: the caller's, one for ``config.scheduler``, or a LocalCluster for this run."""
    distributed = _distributed()
    Client, LocalCluster = distributed.Client, distributed.LocalCluster

    if client is not None:
        yield client, str(client.scheduler.address), _dashboard(client), len(client.nthreads())
        return
    if config.scheduler:
        try:
            owned = Client(config.scheduler, timeout=f"{SCHEDULER_CONNECT_S}s")
        except (OSError, TimeoutError) as exc:
            raise RunError(f"cannot reach the dask scheduler at {config.scheduler!r}: {exc}") from exc
        with owned:
            try:
                owned.wait_for_workers(1, timeout=WORKER_WAIT_S)
            except TimeoutError as exc:
                raise RunError(
                    f"no dask worker joined the scheduler at {config.scheduler!r} within {WORKER_WAIT_S:.0f} s"
                ) from exc
            yield owned, config.scheduler, _dashboard(owned), len(owned.nthreads())
        return
    n_workers = config.workers or max(1, os.cpu_count() or 1)
    try:
        cluster = LocalCluster(
            n_workers=n_workers,
            threads_per_worker=config.threads_per_worker,
            processes=True,
            host="127.0.0.1",
            # Port 0 always: distributed binds its HTTP endpoint even without a dashboard,
            # and a fixed port clashes with any other cluster on the machine.
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.ERROR,
        )
    except (OSError, RuntimeError, TimeoutError) as exc:
        raise RunError(f"cannot start a local dask cluster: {exc}") from exc
    with cluster, Client(cluster) as owned:
        # The dashboard's pages need bokeh; without it the address serves nothing worth showing.
        shown = config.dashboard and importlib.util.find_spec("bokeh") is not None
        yield owned, "local", _dashboard(owned) if shown else None, n_workers


def _distributed() -> Any:
    """``distributed``, imported when a scan starts (``gguf_audit`` never imports it)."""
    return importlib.import_module("distributed")


def _dashboard(client: Any) -> str | None:
    try:
        services = client.scheduler_info().get("services", {})
    except Exception:  # noqa: BLE001 - the dashboard is a nicety
        return None
    return str(client.dashboard_link) if "dashboard" in services else None


def _split(batch: Batch) -> list[Batch]:
    if len(batch.files) <= 1:
        return []
    mid = len(batch.files) // 2
    return [
        Batch(f"{batch.batch_id}.0", batch.files[:mid], batch.model_ids[:mid]),
        Batch(f"{batch.batch_id}.1", batch.files[mid:], batch.model_ids[mid:]),
    ]


def _run_batches(
    client: Any,
    batches: Sequence[Batch],
    options: TaskOptions,
    on_result: Callable[[BatchResult], None],
    task: Callable[[Batch, TaskOptions], BatchResult] = audit_batch,
) -> None:
    """Submit every batch and hand each result to ``on_result`` as it completes.

    dask reruns a batch whose worker died; when it gives up (``KilledWorker``
    after ``allowed-failures``) or the result is lost, the batch is split and
    resubmitted, down to single files that get ``run.worker_lost`` rows.
    """
    as_completed = _distributed().as_completed
    from asyncio import CancelledError  # what distributed raises for a future the scheduler lost

    pending: dict[str, tuple[Batch, int]] = {}

    def submit(batch: Batch, splits: int) -> Any:
        key = f"gguf-audit-{options.run_id}-{batch.batch_id}-{secrets.token_hex(3)}"
        future = client.submit(task, batch, options, key=key, pure=False)
        pending[future.key] = (batch, splits)
        return future

    futures = as_completed([submit(b, 0) for b in batches])
    for future in futures:
        batch, splits = pending.pop(future.key)
        try:
            result = future.result()
            if not isinstance(result, BatchResult):
                raise TypeError(f"a task returned {type(result).__name__}, not a BatchResult")
        except (Exception, CancelledError) as exc:  # noqa: BLE001 - a lost batch is rerun, never fatal
            log.warning("batch %s failed (%s); resubmitting", batch.batch_id, describe_exception(exc))
            halves = _split(batch) if splits < MAX_SPLITS else []
            if halves:
                for half in halves:
                    futures.add(submit(half, splits + 1))
            else:
                message = f"the workers auditing this file died ({type(exc).__name__}: {exc})"
                on_result(_lost_result(batch, options.run_id, "run.worker_lost", message))
            continue
        finally:
            future.release()
        on_result(result)


def _check_one_row_per_file(out: Output, run_id: str, expected: frozenset[str]) -> int:
    """Read the staged ``files`` table back: every listed file exactly once, nothing else."""
    path = f"{out.staging(run_id)}/files/{PART_NAME}"
    urls = pq.read_table(path, columns=["url"], filesystem=out.fs).column("url").to_pylist()
    counts = Counter(urls)
    duplicated = sorted(u for u, n in counts.items() if n > 1)
    missing = sorted(expected - counts.keys())
    unexpected = sorted(counts.keys() - expected)
    if duplicated or missing or unexpected:
        raise RunError(
            f"the files table does not hold exactly one row per listed file: {len(missing)} missing "
            f"{missing[:3]}, {len(duplicated)} duplicated {duplicated[:3]}, {len(unexpected)} unexpected "
            f"{unexpected[:3]}; nothing was committed"
        )
    return len(urls)


def _out_options(config: ScanConfig) -> dict[str, Any]:
    if config.out_storage_options is not None:
        return dict(config.out_storage_options)
    return options_for(config.out, config.storage_options)


def run_scan(
    config: ScanConfig,
    *,
    client: Any = None,
    observer: ScanObserver | None = None,
) -> ScanResult:
    """Run one scan and commit it. Raises RunError (and DiscoveryError) when the run itself fails.

    ``client`` is a ``distributed.Client`` the caller owns; without one the
    config's scheduler is used, or a LocalCluster started and closed here.
    """
    observer = observer or ScanObserver()
    started = datetime.now(UTC)
    begun = time.perf_counter()
    run_id = new_run_id(started)
    if not config.roots and not config.manifests:
        raise RunError("nothing to scan: give at least one root or manifest")
    try:
        out = Output(config.out, _out_options(config))
        recovered = out.recover()
    except (OSError, ValueError, ImportError) as exc:
        raise RunError(f"cannot open the output {config.out!r}: {type(exc).__name__}: {exc}") from exc
    for r in recovered:
        log.warning("output %s: %s run %s", config.out, r.action, r.run_id)

    listing = discover(
        config.roots,
        manifests=config.manifests,
        include=config.include,
        exclude=config.exclude,
        storage_options=config.storage_options,
    )
    if not listing.files:
        raise RunError(f"no files matched {list(config.include)} under {list(config.roots) + list(config.manifests)}")
    urls = [f.url for f in listing.files]
    groups = group_models(urls)
    model_ids = {u: mid for mid, members in groups.items() for u in members}

    base_run_id, reuse_note = _base_run(out, config) if config.incremental else (None, None)
    reuse, to_read = _plan_reuse(out, base_run_id, listing)
    observer.listed(listing, len(reuse))

    sinks = out.sinks(run_id)
    collector = _Collector(sinks, frozenset(urls))
    committing = False
    try:
        if base_run_id is not None and reuse:
            _stage_reused(out, base_run_id, reuse, model_ids, collector)
        done = len(collector.seen)
        observer.progress(done, len(urls), 0)
        audit_seconds = 0.0
        scheduler, dashboard, n_workers = "none", None, 0
        if to_read:
            with _cluster(config, client) as (dask_client, scheduler, dashboard, n_workers):
                observer.cluster(scheduler, dashboard, n_workers)
                audit_begun = time.perf_counter()
                threads_per_worker = _threads_per_worker(dask_client, config)
                size = config.batch_size or auto_batch_size(
                    len(to_read), max(1, n_workers * threads_per_worker), config.threads, threads_per_worker
                )
                batches = make_batches(to_read, model_ids, size)
                options = TaskOptions(run_id, dict(config.storage_options), config.audit_config, config.threads)
                read_bytes = 0

                def on_result(result: BatchResult) -> None:
                    nonlocal done, read_bytes
                    done += collector.add(result.tables, result.shard_facts)
                    read_bytes += result.bytes_read
                    for failure in result.failures:
                        log.warning("batch %s: %s", result.batch_id, failure)
                    observer.progress(done, len(urls), read_bytes)

                _run_batches(dask_client, batches, options, on_result)
                audit_seconds = time.perf_counter() - audit_begun

        summaries = _models(groups, collector)
        sinks["models"].write(models_to_table(summaries))
        model_problems = model_problems_to_table(summaries, run_id=run_id)
        sinks["problems"].write(model_problems)
        collector.count_problems(model_problems)

        for table in TABLE_NAMES:
            if table != "runs":
                sinks[table].close()
        rows_checked = _check_one_row_per_file(out, run_id, collector.expected)
        incomplete = tuple(
            IncompleteModel(str(m.row["model_id"]), int(m.row["shard_count"]), tuple(m.row["shards_missing"] or ()))
            for m in summaries
            if not m.row["complete"]
        )
        result = ScanResult(
            run_id=run_id,
            out=config.out,
            base_run_id=base_run_id,
            n_files=len(urls),
            n_read=len(to_read),
            n_reused=len(reuse),
            n_models=len(summaries),
            statuses=dict(collector.statuses),
            problem_codes=dict(collector.codes),
            code_severities=dict(collector.code_severities),
            severities=dict(collector.severities),
            incomplete_models=incomplete,
            bytes_read=collector.bytes_read,
            requests=collector.requests,
            collection_bytes=listing.total_bytes,
            listing_seconds=listing.seconds,
            audit_seconds=audit_seconds,
            seconds=time.perf_counter() - begun,
            rows_checked=rows_checked,
            duplicates_dropped=collector.dropped,
            reuse_note=reuse_note,
            scheduler=scheduler,
            dashboard=dashboard,
            n_workers=n_workers,
            recovered=tuple(recovered),
        )
        sinks["runs"].write(rows_to_table("runs", [_runs_row(config, result, started)]))
        sinks["runs"].close()
        observer.committing()
        committing = True
        out.commit(run_id)
        return result
    except BaseException:
        for sink in sinks.values():
            sink.abort()
        with contextlib.suppress(Exception):
            if committing:
                # Some tables may be in place: roll them back now (or, if the runs row made it, keep the run).
                out.recover_run(run_id)
            else:
                # Nothing of the run was visible; its staging is of no use to anyone either.
                out.discard(run_id)
        raise


def _threads_per_worker(client: Any, config: ScanConfig) -> int:
    try:
        counts = [int(n) for n in client.nthreads().values()]  # every worker (scheduler_info lists a few)
    except Exception:  # noqa: BLE001 - only sizes batches
        return config.threads_per_worker
    return max(1, round(sum(counts) / len(counts))) if counts else config.threads_per_worker


def _models(groups: Mapping[str, Sequence[str]], collector: _Collector) -> list[ModelSummary]:
    summaries = []
    for model_id, members in groups.items():
        rows = collector.members.get(model_id, [])
        verdict = None
        if parse_shard_name(members[0]) is not None:
            facts = [collector.facts[u] for u in members if u in collector.facts]
            facts += [_unknown_facts(u) for u in members if u not in collector.facts]
            verdict = judge_shard_set(model_id, facts)
        summaries.append(summarise_model(model_id, rows, verdict))
    return summaries


def _unknown_facts(url: str) -> ShardFacts:
    name = parse_shard_name(url)
    if name is None:  # pragma: no cover - callers pass shard URLs
        raise ValueError(f"not a shard name. Got {url!r}.")
    return ShardFacts(url, name.shard_index, name.shard_count, readable=False, loadable=None)


def _runs_row(config: ScanConfig, result: ScanResult, started: datetime) -> dict[str, Any]:
    statuses = result.statuses
    return {
        "schema_version": SCHEMA_VERSION,
        "tool_version": __version__,
        "status": "committed",
        "started_at": started,
        "finished_at": datetime.now(UTC),
        "roots": list(config.roots),
        "manifests": list(config.manifests),
        "include": list(config.include),
        "exclude": list(config.exclude),
        "incremental": config.incremental,
        "base_run_id": result.base_run_id,
        "scheduler": result.scheduler,
        "n_workers": result.n_workers,
        "n_files": result.n_files,
        "n_read": result.n_read,
        "n_reused": result.n_reused,
        "n_models": result.n_models,
        "n_incomplete_models": len(result.incomplete_models),
        "n_ok": statuses.get("ok", 0),
        "n_warning": statuses.get("warning", 0),
        "n_error": statuses.get("error", 0),
        "n_unreadable": statuses.get("unreadable", 0),
        "n_problems": sum(result.problem_codes.values()),
        "requests": result.requests,
        "bytes_read": result.bytes_read,
        "collection_bytes": result.collection_bytes,
        "listing_seconds": result.listing_seconds,
        "seconds": result.seconds,
        "files_per_second": result.files_per_second,
        "config": config.public_json(),
    }
