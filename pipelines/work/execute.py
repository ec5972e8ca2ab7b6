"""The worker side of a scan: :func:`audit_batch` audits one batch's files and writes their rows; it never raises.

Inside a worker process every batch feeds one shared, bounded thread pool
(``threads`` files in flight, :data:`WORKER_POOLS`), so round trips overlap
and latency does not serialise the run; with two dask threads per worker (the
default), the last slow reads of one batch overlap the next batch's. The pool
is shared rather than made per batch so that a worker process never has more
than ``threads`` files in flight, however many dask threads it runs.

Each file's rows are written as soon as its audit is done, into one Parquet
data file per table for the batch (:mod:`~gguf_audit.pipelines.store.parts`) straight
under the output's table paths, so a worker holds one file's audit and at most
a row group per table, whatever the batch size. The task returns only what the
driver commits and counts: the data files written, one small facts row per
file, the tally and the shard facts. Every file comes back with its rows, an
exception becoming an ``internal.unexpected`` problem; a file whose rows
cannot be built keeps a ``files`` row saying why.
"""

from __future__ import annotations

import functools
import gc
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa

from gguf_audit.audit import AuditConfig, AuditResources, AuditTarget, FileAudit, audit_file
from gguf_audit.checks.shards import ShardFacts, shard_facts
from gguf_audit.codes import Code
from gguf_audit.errors import describe_exception
from gguf_audit.findings import finding
from gguf_audit.format.shard_names import parse_shard_name
from gguf_audit.format.tensor_table import tensor_table_at
from gguf_audit.io.gate import CpuGate
from gguf_audit.io.options import options_for
from gguf_audit.io.source import IOStats
from gguf_audit.io.upstream import UpstreamCache
from gguf_audit.pipelines.store import PartFile, RunParts
from gguf_audit.pipelines.work.batches import Batch
from gguf_audit.pipelines.work.deadline import deadline_message, wait_for_files
from gguf_audit.pipelines.work.tally import Tally, facts_of
from gguf_audit.redact import install_handler_redaction, install_log_redaction, redact_text
from gguf_audit.tables.listed import ListedFile
from gguf_audit.tables.per_file import AuditedFile, AuditTables, audits_to_tables

__all__ = [
    "FILE_TABLES",
    "WORKER_POOLS",
    "AuditPools",
    "BatchResult",
    "TaskOptions",
    "audit_batch",
    "lost_result",
    "write_file_rows",
]

FILE_TABLES: Final = ("files", "problems", "tensors", "metadata", "samples")
"""The tables a batch writes rows of (``problems`` of scope ``file`` only)."""


@dataclass(frozen=True, slots=True)
class TaskOptions:
    """What every task needs besides its files."""

    run_id: str
    storage_options: Mapping[str, Any]
    audit: AuditConfig
    threads: int
    out: str = ""
    """The output URL the task writes its data files under."""
    out_storage_options: Mapping[str, Any] | None = None
    cpu_slots: int = 0
    """Files doing CPU work at once in a worker process (its dask threads); 0 lets every thread run at once."""


@dataclass(frozen=True, slots=True)
class BatchResult:
    """What a task sends back: the data files it wrote and small facts about its files, never their rows."""

    batch_id: str
    parts: tuple[PartFile, ...]
    facts: pa.Table
    """One row per file (:data:`~gguf_audit.pipelines.work.tally.FACT_COLUMNS`)."""
    tally: Tally
    shard_facts: tuple[ShardFacts, ...]
    rows: Mapping[str, int]
    """Rows written per table."""
    failures: tuple[str, ...] = ()
    """Batch-level failures survived (bugs of ours), for the driver's log."""
    tensor_tables: tuple[tuple[str, bytes], ...] = ()
    """``(url as listed, where its tensor infos lie)`` of each GGUF with tensors, packed
    (:meth:`~gguf_audit.format.tensor_table.TensorTableAt.packed`): its comparison reads only those."""

    @property
    def urls(self) -> list[str]:
        return [str(u) for u in self.facts.column("url").to_pylist()]

    @property
    def bytes_read(self) -> int:
        return self.tally.bytes_read


class AuditPools:
    """The thread pools a process audits files on, and its CPU gates: made once, shared by every batch.

    One pool per ``threads`` setting and one :class:`~gguf_audit.io.gate.CpuGate`
    per slot count, so every batch a worker runs shares the worker's slots.
    Thread-safe: batches running on several dask threads of one worker ask for
    a pool at the same time; the lock makes each pool and gate exactly once.
    """

    def __init__(self, thread_name_prefix: str = "gguf-audit-io") -> None:
        self._lock = threading.Lock()
        self._pools: dict[int, ThreadPoolExecutor] = {}
        self._gates: dict[int, CpuGate] = {}
        self._prefix = thread_name_prefix

    def gate(self, slots: int) -> CpuGate | None:
        """The gate of ``slots`` CPU slots, made on first use; None for 0 (no gate)."""
        if slots <= 0:
            return None
        with self._lock:
            gate = self._gates.get(slots)
            if gate is None:
                gate = CpuGate(slots)
                self._gates[slots] = gate
            return gate

    def pool(self, threads: int) -> ThreadPoolExecutor:
        """The pool of ``threads`` threads, made on first use."""
        with self._lock:
            pool = self._pools.get(threads)
            if pool is None:
                pool = ThreadPoolExecutor(threads, thread_name_prefix=self._prefix)
                self._pools[threads] = pool
            return pool


WORKER_POOLS: Final = AuditPools()
"""The worker process's pools: every batch the process runs shares them."""


def _failed_audit(listed: ListedFile, code: Code, message: str, io_stats: IOStats | None = None) -> FileAudit:
    return FileAudit(
        url=listed.url,
        size=listed.size,
        header=None,
        findings=[finding(code, redact_text(message))],
        io=io_stats or IOStats(),
        seconds=0.0,
        etag=listed.etag,
    )


def _audit_one(listed: ListedFile, options: TaskOptions, resources: AuditResources | None = None) -> FileAudit:
    if listed.error_code is not None:  # the listing already failed for it (an hf:// repository)
        return _failed_audit(listed, listed.error_code, listed.error_message or "the listing failed")
    try:
        return audit_file(
            AuditTarget(
                listed.source_url,
                storage_options=options_for(listed.source_url, options.storage_options),
                size=listed.size,
                etag=listed.etag,
                revision=listed.revision,
                display_url=listed.url,
                hub_gguf=listed.hub_gguf,
            ),
            config=options.audit,
            resources=resources,
        )
    except Exception as exc:  # noqa: BLE001 - audit_file never raises; this guards the guard
        return _failed_audit(listed, Code.INTERNAL_UNEXPECTED, describe_exception(exc))


def _tables_of(item: AuditedFile, run_id: str, gate: CpuGate | None = None) -> AuditTables:
    """One file's tables; a file whose rows cannot be built keeps a files row saying why.

    Built holding a slot of ``gate`` (CPU work, like the audit's).
    """
    with gate.held() if gate is not None else nullcontext():
        return _build_tables(item, run_id)


def _build_tables(item: AuditedFile, run_id: str) -> AuditTables:
    try:
        return audits_to_tables([item], run_id=run_id)
    except Exception as exc:  # noqa: BLE001 - one file's bad rows must not lose the batch
        failed = _failed_audit(item.listed, Code.INTERNAL_UNEXPECTED, describe_exception(exc), item.audit.io)
        return audits_to_tables([AuditedFile(failed, item.listed, item.model_id)], run_id=run_id)


def _fact_of(audit: FileAudit) -> ShardFacts | None:
    try:
        return shard_facts(audit)
    except Exception:  # noqa: BLE001 - a shard without facts is judged unreadable
        name = parse_shard_name(audit.url)
        return ShardFacts(audit.url, name.shard_index, name.shard_count, False, None) if name else None


class _Rows:
    """A batch's rows on their way out: written per file, counted, their facts kept."""

    def __init__(self, parts: RunParts) -> None:
        self.parts = parts
        self.facts: list[pa.Table] = []
        self.tally = Tally()
        self.shard_facts: list[ShardFacts] = []
        self.tensor_tables: list[tuple[str, bytes]] = []

    def add(self, tables: AuditTables, audit: FileAudit | None, url: str | None = None) -> None:
        for name, rows in tables.per_file().items():
            self.parts.write(name, rows)
        self.facts.append(facts_of(tables.files))
        self.tally.merge(Tally.of_rows(tables.files, tables.problems))
        if audit is not None:
            fact = _fact_of(audit)
            if fact is not None:
                self.shard_facts.append(fact)
            table = tensor_table_at(audit.header) if audit.header is not None and url is not None else None
            if table is not None and url is not None:
                self.tensor_tables.append((url, table.packed()))

    def result(self, batch_id: str, failures: Sequence[str] = ()) -> BatchResult:
        parts = self.parts.close()
        # One chunk per column, not one per file: the driver keeps these for the whole night, and a
        # chunk per file costs it Arrow objects per column and file (pickled: 1.1 kB a file more).
        facts = pa.concat_tables(self.facts) if self.facts else facts_of(audits_to_tables([], run_id="").files)
        facts = facts.combine_chunks()
        return BatchResult(
            batch_id,
            parts,
            facts,
            self.tally,
            tuple(self.shard_facts),
            self.parts.rows(),
            tuple(failures),
            tuple(self.tensor_tables),
        )


def write_file_rows(
    batch: Batch, options: TaskOptions, audits: Sequence[FileAudit], failures: Sequence[str] = ()
) -> BatchResult:
    """Write the rows of audits already made (the driver's lost files) as one batch's data files."""
    rows = _Rows(RunParts(options.out, options.out_storage_options, options.run_id, batch.batch_id, FILE_TABLES))
    try:
        for audit, listed, model_id in zip(audits, batch.files, batch.model_ids, strict=True):
            rows.add(_tables_of(AuditedFile(audit, listed, model_id), options.run_id), audit, listed.url)
        return rows.result(batch.batch_id, failures)
    except BaseException:
        rows.parts.abort()
        raise


def lost_result(batch: Batch, options: TaskOptions, code: Code, message: str) -> BatchResult:
    """The rows of a batch none of whose files could be audited: each file gets one ``code`` problem."""
    message = redact_text(message)
    audits = [_failed_audit(listed, code, message) for listed in batch.files]
    return write_file_rows(batch, options, audits, (message,))


def _audit_and_write(batch: Batch, options: TaskOptions, rows: _Rows) -> None:
    """Audit the batch's files on the shared pool, writing each file's rows as soon as its audit is done."""
    pool = WORKER_POOLS.pool(options.threads)
    gate = WORKER_POOLS.gate(options.cpu_slots)
    # What the worker lends each file: its CPU gate, and an upstream cache so a batch reads each directory's once.
    resources = AuditResources(gate=gate, upstream_cache=UpstreamCache())
    pending: dict[Future[FileAudit], int] = {}
    started: dict[Future[FileAudit], float] = {}
    files = list(enumerate(batch.files))
    next_file = 0
    # At most ``threads`` files of this batch in flight: audits wait to be written only while others run.
    while next_file < len(files) or pending:
        while next_file < len(files) and len(pending) < options.threads:
            i, listed = files[next_file]
            future_of = pool.submit(_audit_one, listed, options, resources)
            pending[future_of], started[future_of] = i, time.monotonic()
            next_file += 1
        done, expired = wait_for_files(started)
        for future in done | expired:
            i = pending.pop(future)
            del started[future]
            # A file past the per-file deadline gets its row now; its audit is left running.
            audit = (
                future.result()
                if future in done
                else _failed_audit(batch.files[i], Code.RUN_FILE_DEADLINE, deadline_message())
            )
            item = AuditedFile(audit, batch.files[i], batch.model_ids[i])
            rows.add(_tables_of(item, options.run_id, gate), audit, item.listed.url)


@functools.cache
def _settle_worker() -> None:
    """Once per worker process: its log lines, ours and the libraries', show URLs without their credentials;
    and what the process holds by now (modules, tables, caches) leaves the cyclic collector's generations, so
    the full collections that a file's many short-lived objects set off walk only what the audits made."""
    install_log_redaction()
    install_handler_redaction()
    gc.freeze()


def audit_batch(batch: Batch, options: TaskOptions) -> BatchResult:
    """Audit every file of ``batch`` with overlapping reads, write its rows, return what was written.

    Never raises for a file's sake; a batch whose data files cannot be
    written at all raises (the driver reruns it, then splits it).
    """
    _settle_worker()
    rows = _Rows(RunParts(options.out, options.out_storage_options, options.run_id, batch.batch_id, FILE_TABLES))
    try:
        _audit_and_write(batch, options, rows)
        return rows.result(batch.batch_id)
    except OSError:
        rows.parts.abort()
        raise  # the output cannot be written: the driver decides
    except Exception as exc:  # noqa: BLE001 - the task boundary: every file still gets its row
        rows.parts.abort()
        return lost_result(batch, options, Code.INTERNAL_UNEXPECTED, f"batch failed: {describe_exception(exc)}")
