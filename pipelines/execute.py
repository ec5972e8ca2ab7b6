"""The worker side of a scan: :func:`audit_batch` audits one batch's files and returns their rows; it never raises.

Inside a worker process every batch feeds one shared, bounded thread pool
(``threads`` files in flight, :data:`WORKER_POOLS`), so round trips overlap
and latency does not serialise the run; with two dask threads per worker (the
default), the last slow reads of one batch overlap the next batch's. The pool
is shared rather than made per batch so that a worker process never has more
than ``threads`` files in flight, however many dask threads it runs.

Every file comes back with its rows, an exception becoming an
``internal.unexpected`` problem; a file whose rows cannot be built keeps a
``files`` row saying why.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa

from gguf_audit.audit import AuditConfig, FileAudit, audit_file
from gguf_audit.checks.shards import ShardFacts, shard_facts
from gguf_audit.errors import describe_exception
from gguf_audit.findings import finding
from gguf_audit.format.shard_names import parse_shard_name
from gguf_audit.io.source import IOStats
from gguf_audit.pipelines.batches import Batch
from gguf_audit.pipelines.discover import options_for
from gguf_audit.tables.listed import ListedFile
from gguf_audit.tables.per_file import AuditedFile, AuditTables, audits_to_tables

__all__ = ["WORKER_POOLS", "AuditPools", "BatchResult", "TaskOptions", "audit_batch", "lost_result"]


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


class AuditPools:
    """The thread pools a process audits files on: one per ``threads`` setting, made once, shared by every batch.

    Thread-safe: batches running on several dask threads of one worker ask for
    a pool at the same time; the lock makes each pool exactly once.
    """

    def __init__(self, thread_name_prefix: str = "gguf-audit-io") -> None:
        self._lock = threading.Lock()
        self._pools: dict[int, ThreadPoolExecutor] = {}
        self._prefix = thread_name_prefix

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


def lost_result(batch: Batch, run_id: str, code: str, message: str) -> BatchResult:
    """The rows of a batch none of whose files could be audited: each file gets one ``code`` problem."""
    items = [
        AuditedFile(_failed_audit(listed, code, message), listed, model_id)
        for listed, model_id in zip(batch.files, batch.model_ids, strict=True)
    ]
    return BatchResult(batch.batch_id, audits_to_tables(items, run_id=run_id), (), 0, (message,))


def _facts_of(audits: Sequence[FileAudit]) -> list[ShardFacts]:
    facts = []
    for audit in audits:
        try:
            fact = shard_facts(audit)
        except Exception:  # noqa: BLE001 - a shard without facts is judged unreadable
            name = parse_shard_name(audit.url)
            fact = ShardFacts(audit.url, name.shard_index, name.shard_count, False, None) if name else None
        if fact is not None:
            facts.append(fact)
    return facts


def audit_batch(batch: Batch, options: TaskOptions) -> BatchResult:
    """Audit every file of ``batch`` with overlapping reads and return its rows. Never raises."""
    try:
        pool = WORKER_POOLS.pool(options.threads)
        audits = list(pool.map(lambda listed: _audit_one(listed, options), batch.files))
        items = [
            AuditedFile(audit, listed, model_id)
            for audit, listed, model_id in zip(audits, batch.files, batch.model_ids, strict=True)
        ]
        tables = _tables_of(items, options.run_id)
        facts = _facts_of(audits)
        return BatchResult(batch.batch_id, tables, tuple(facts), sum(a.io.bytes_read for a in audits))
    except Exception as exc:  # noqa: BLE001 - the task boundary: every file still gets its row
        return lost_result(batch, options.run_id, "internal.unexpected", f"batch failed: {describe_exception(exc)}")
