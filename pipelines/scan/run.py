"""The scan job: list, audit in batches on dask.distributed (the workers write the rows), commit the night.

Execution
---------
Files are sent to workers in batches (:mod:`~gguf_audit.pipelines.work.batches`,
one task each, at most :data:`BATCHES_IN_FLIGHT_PER_THREAD` per dask thread
on the cluster at once: the next is submitted as one completes), audited
there by :func:`~gguf_audit.pipelines.work.execute.audit_batch`,
which writes each file's rows as Parquet data files under the output's Delta
tables and returns only what the driver commits and counts. A batch whose
worker died is rerun by the scheduler; when dask gives up on it
(``KilledWorker``) the driver splits it in two and resubmits the halves, so a
file that kills workers ends up alone with a ``run.worker_lost`` row while
the rest are audited. Results are keyed by URL on arrival and a batch with a
file that already has rows is left out
(:class:`~gguf_audit.pipelines.scan.collect.Collector`), so no rerun can duplicate
a row; before committing, the driver reads the ``url`` column of this night's
``files`` data files back and checks that every listed file has exactly one
row. The commit is the output's (:mod:`~gguf_audit.pipelines.store.output`); an
incremental night keeps pointing at the rows of unchanged files
(:mod:`~gguf_audit.pipelines.scan.reuse`), the driver's side of it is
:mod:`~gguf_audit.pipelines.scan.night`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import logging
import secrets
import time
from asyncio import CancelledError  # what distributed raises for a future the scheduler lost
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, Final

import pyarrow as pa

from gguf_audit.codes import Code
from gguf_audit.errors import cannot_succeed_on_retry, describe_exception
from gguf_audit.io.options import for_workers, options_for
from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.listing import Listing, discover, rate_limit_waits
from gguf_audit.pipelines.scan.cluster import LazyCluster, check_scheduler, import_distributed, threads_per_worker
from gguf_audit.pipelines.scan.collect import IncompleteModel, ScanResult
from gguf_audit.pipelines.scan.groups import ModelGroups
from gguf_audit.pipelines.scan.hub_known import known_hub_repos
from gguf_audit.pipelines.scan.lineage import compare_options, run_compare
from gguf_audit.pipelines.scan.mirror import check_mirror, check_mirror_config
from gguf_audit.pipelines.scan.night import CommitObserver, Night, RunError
from gguf_audit.pipelines.scan.reuse import base_run, plan_reuse
from gguf_audit.pipelines.spill import driver_phase, map_table, temp_dir_in_memory
from gguf_audit.pipelines.store import Output, OutputError, Recovered, new_run_id
from gguf_audit.pipelines.work import (
    MAX_SPLITS,
    Batch,
    BatchResult,
    TaskOptions,
    audit_batch,
    auto_batch_size,
    iter_batches,
    lost_result,
    split_batch,
)
from gguf_audit.redact import install_handler_redaction, install_log_redaction

__all__ = ["RunError", "ScanObserver", "run_scan"]

log = logging.getLogger(__name__)

CPU_SLOTS_PER_PROCESS: Final = 1
"""Files doing CPU work at once in one worker process (the CPU gate); reads still overlap."""
BATCHES_IN_FLIGHT_PER_THREAD: Final = 2
"""Batches submitted ahead per dask thread: one running, one queued on the worker, the rest wait on the driver."""


class ScanObserver:
    """What a scan tells whoever watches it (the CLI's progress bar). Every method is optional."""

    def listed(self, listing: Listing, n_reused: int) -> None:
        """Called once the collection is listed and the reusable files known."""

    def cluster(self, scheduler: str, dashboard: str | None, n_workers: int) -> None:
        """Called once the cluster is up."""

    def progress(self, done: int, total: int, bytes_read: int) -> None:
        """Called after each batch: files with rows so far, of ``total``, and bytes read so far."""

    def comparing(self, requests: int, bytes_read: int) -> None:
        """Called after each compare task: the compare phase's requests and bytes so far."""

    def committing(self) -> None:
        """Called when every row is written and the commit begins."""

    def committed(self, table: str, version: int) -> None:
        """Called after each table's commit, ``runs`` last."""


SPILL_WARNING_FILES: Final = 50_000
"""Files from which a night warns that its spill files would be memory (a tmpfs ``TMPDIR``)."""


def _run_batches(
    client: Any,
    batches: Iterable[Batch],
    options: TaskOptions,
    on_result: Callable[[BatchResult], Sequence[str]],
    task: Callable[[Batch, TaskOptions], BatchResult] = audit_batch,
    window: int = 0,
) -> None:
    """Submit the batches through a window and hand each result to ``on_result`` as it completes.

    At most ``window`` batches (0: all) are in flight: the next is submitted as one completes, so the
    scheduler, the client and the results waiting to be taken hold a window's worth of the night.

    dask reruns a batch whose worker died; when it gives up (``KilledWorker``
    after ``allowed-failures``) or the result is lost, the batch is split and
    resubmitted, down to single files that get ``run.worker_lost`` rows.
    ``on_result`` returns the files of a result it refused that still need
    rows; they are submitted again as a batch of their own.
    """
    as_completed = import_distributed().as_completed
    pending: dict[str, tuple[Batch, int]] = {}
    redone = 0

    def submit(batch: Batch, splits: int) -> Any:
        key = f"gguf-audit-{options.run_id}-{batch.batch_id}-{secrets.token_hex(3)}"
        future = client.submit(task, batch, options, key=key, pure=False)
        pending[future.key] = (batch, splits)
        return future

    queued = iter(batches)
    first = list(itertools.islice(queued, window)) if window > 0 else list(queued)
    futures = as_completed([submit(b, 0) for b in first])

    def top_up() -> None:  # after the result is read, so a night that must stop submits nothing more
        following = next(queued, None)
        if following is not None:
            futures.add(submit(following, 0))

    for future in futures:
        batch, splits = pending.pop(future.key)
        try:
            result = future.result()
            if not isinstance(result, BatchResult):
                raise TypeError(f"a task returned {type(result).__name__}, not a BatchResult")
        except (Exception, CancelledError) as exc:
            if cannot_succeed_on_retry(exc):
                raise RunError(f"the night stopped: {type(exc).__name__}: {exc} (no retry can succeed)") from exc
            for retry in _retries(batch, splits, exc, options, on_result):
                futures.add(submit(retry, splits + 1))
            top_up()
            continue
        finally:
            future.release()
        top_up()
        again = set(on_result(result))
        if again:
            redone += 1
            files = [(f, m) for f, m in zip(batch.files, batch.model_ids, strict=True) if f.url in again]
            redo = Batch(f"{batch.batch_id}.r{redone}", tuple(f for f, _ in files), tuple(m for _, m in files))
            futures.add(submit(redo, splits))


def _retries(
    batch: Batch, splits: int, exc: BaseException, options: TaskOptions, on_result: Callable[[BatchResult], object]
) -> list[Batch]:
    """A failed batch's halves to resubmit; a single file (or one split too often) gets its ``run.worker_lost``
    rows instead."""
    log.warning("batch %s failed (%s); resubmitting", batch.batch_id, describe_exception(exc))
    halves = split_batch(batch) if splits < MAX_SPLITS else []
    if not halves:
        message = f"the workers auditing this file died ({type(exc).__name__}: {exc})"
        on_result(lost_result(batch, options, Code.RUN_WORKER_LOST, message))
    return halves


def _out_options(config: ScanConfig) -> dict[str, Any]:
    if config.out_storage_options is not None:
        return dict(config.out_storage_options)
    return options_for(config.scan.out, config.storage_options)


def run_scan(
    config: ScanConfig,
    *,
    client: Any = None,
    observer: ScanObserver | None = None,
) -> ScanResult:
    """Run one scan and commit it. Raises RunError, OutputError (and DiscoveryError) when the run itself fails.

    ``client`` is a ``distributed.Client`` the caller owns; without one the
    config's scheduler is used, or a LocalCluster started and closed here.
    The output is checked first (:meth:`Output.preflight`): nothing is listed
    or read when it cannot take the run.
    """
    install_log_redaction()  # every gguf_audit logger's lines show URLs without their credentials
    install_handler_redaction()  # and every handler's, whichever library logged (dask, fsspec, botocore...)
    observer = observer or ScanObserver()
    started = datetime.now(UTC)
    begun = time.perf_counter()
    run_id = new_run_id(started)
    if not config.scan.roots and not config.scan.manifests:
        raise RunError("nothing to scan: give at least one root or manifest")
    check_mirror_config(config)
    if client is None:
        check_scheduler(config.cluster.scheduler)
    try:
        out = Output(config.scan.out, _out_options(config))
    except (OSError, ValueError, ImportError) as exc:
        raise OutputError(f"cannot open the output: {type(exc).__name__}: {exc}. Got {config.scan.out!r}.") from exc
    out.preflight()
    # The lease first: recover() may then roll back only the runs of a writer whose lease expired.
    out.acquire(f"scan {run_id}", wait_s=config.scan.lease_wait_s, expiry_s=config.scan.lease_expiry_s)
    try:
        with _driver_memory_pool():
            return _leased_scan(config, out, run_id, started, begun, client, observer)
    finally:
        out.release()


@contextlib.contextmanager
def _driver_memory_pool() -> Iterator[None]:
    """Arrow's allocations on the system allocator while the driver runs a night (the workers keep theirs).

    The driver's Arrow work is small and comes in bursts (a listing made into
    columns, a chunk of models, the one-row check): Arrow's default mimalloc
    pool kept several times its peak as resident memory after it, the system
    allocator about its peak (``benchmarks/README.md``, ``bench_driver.py``).
    """
    previous = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())
    try:
        yield
    finally:
        pa.set_memory_pool(previous)


def _leased_scan(
    config: ScanConfig,
    out: Output,
    run_id: str,
    started: datetime,
    begun: float,
    client: Any,
    observer: ScanObserver,
) -> ScanResult:
    """:func:`run_scan` once the output's lease is held: the night's phases, each ending in
    :func:`~gguf_audit.pipelines.spill.driver_phase` (its memory handed back)."""
    recovered = out.recover()
    for r in recovered:
        log.warning("output %s: %s run %s", config.scan.out, r.action, r.run_id)
    base_run_id, reuse_note = base_run(out, config) if config.scan.incremental else (None, None)
    facts = _NightFacts(config.scan.out, reuse_note, tuple(recovered), begun)
    with driver_phase("listing"):
        listing, facts.listing_wait_s = _list(config, out, base_run_id)
    with driver_phase("models"):
        groups = ModelGroups(listing.files.url_column())
    with driver_phase("plan"):
        plan = plan_reuse(out, base_run_id, listing)
        observer.listed(listing, len(plan.reuse))
        night = Night(out, run_id, listing, groups, base_run_id, plan)
    committing = False
    try:
        _audit_and_judge(config, night, client, observer, facts)
        result = _scan_result(night, facts)
        observer.committing()
        committing = True
        with driver_phase("commit"):
            night.commit(config, result, started, on_committed=_committed(observer))
        return result
    except BaseException:
        night.abort()
        if not committing:
            night.discard()
        raise
    finally:
        night.close()


def _audit_and_judge(config: ScanConfig, night: Night, client: Any, observer: ScanObserver, facts: _NightFacts) -> None:
    """The phases from the reused rows to the one-row check; what they learn goes to ``facts``."""
    with driver_phase("reuse"):  # the base night's rows streamed: the rest of the night needs none of them
        night.keep_reused()
    observer.progress(night.collector.n_seen, night.n_files, 0)
    with contextlib.ExitStack() as stack:
        cluster = LazyCluster(config, client, stack)
        with driver_phase("audit"):
            facts.audit_seconds = _audit(config, night, cluster, observer) if night.plan.read else 0.0
        with driver_phase("lineage"):
            lineage = night.lineage(config)
        with driver_phase("compare"):  # a night that read nothing may compare: a family lost a member
            run_compare(
                cluster.client() if lineage.compare else None,
                lineage,
                compare_options(config, night.run_id, night.out, night.listing.read_urls),
                night.collector,
                observer.comparing,
                night.stored_tables,
            )
        facts.scheduler, facts.dashboard, facts.n_workers = cluster.scheduler, cluster.dashboard, cluster.n_workers
    with driver_phase("judge"):  # before DuckDB's check and the Delta commit, whose allocators are their own
        facts.n_models, facts.incomplete = night.judge_models(lineage)
        night.close_parts()
        night.record_compare_io()
    with driver_phase("mirror"):
        facts.mirror = _mirror(config, night)
    with driver_phase("one_row"):
        facts.rows_checked = night.check_one_row_per_file()


def _list(config: ScanConfig, out: Output, base_run_id: str | None) -> tuple[Listing, float]:
    """The night's listing, its columns mapped from the driver's disk, and the seconds the Hub made it wait."""
    with rate_limit_waits() as waited:  # the Hub's 429s, waited out: the night records how long
        listing = discover(
            config.scan.roots,
            manifests=config.scan.manifests,
            include=config.scan.include,
            exclude=config.scan.exclude,
            storage_options=config.storage_options,
            known=known_hub_repos(out, base_run_id, config),  # a Hub repository at a listed commit: no tree call
        )
    if not listing.files:
        raise RunError(
            f"no files matched {list(config.scan.include)} under {[*config.scan.roots, *config.scan.manifests]}"
        )
    if len(listing.files) >= SPILL_WARNING_FILES and (memory := temp_dir_in_memory()):
        log.warning(
            "the driver's spill files (listing, ledger, carried models) go to %s, a file system in memory: "
            "set TMPDIR to a directory on a disk to keep them out of the driver's memory",
            memory,
        )
    # the listing's columns in a file on the driver's disk, mapped: read by every phase, held by none
    return dataclasses.replace(listing, files=listing.files.with_table(map_table)), waited.seconds


def _audit(config: ScanConfig, night: Night, cluster: LazyCluster, observer: ScanObserver) -> float:
    """Audit the files the night reads, in batches on the cluster: the phase's seconds."""
    client = cluster.client()
    observer.cluster(cluster.scheduler, cluster.dashboard, cluster.n_workers)
    begun = time.perf_counter()
    per_worker = threads_per_worker(client, config)
    slots = max(1, cluster.n_workers * per_worker)
    read = night.plan.read
    size = config.io.batch_size or auto_batch_size(len(read), slots, config.io.threads, per_worker)
    options = TaskOptions(
        night.run_id,
        for_workers(config.storage_options),
        config.audit_config,
        config.io.threads,
        out=night.out.url,
        out_storage_options=night.out.fsspec_options,
        # One file doing CPU work at a time per worker process: its threads share one GIL, and on a quiet
        # machine one slot beat two (benchmarks/bench_gate.py).
        cpu_slots=CPU_SLOTS_PER_PROCESS,
    )
    progress = _Progress(night, observer)
    batches = iter_batches(read, night.model_ids, size)
    _run_batches(client, batches, options, progress.on_result, window=BATCHES_IN_FLIGHT_PER_THREAD * slots)
    return time.perf_counter() - begun


class _Progress:
    """The audit's results taken as they come: each batch's rows to the collector, the files done to the bar."""

    def __init__(self, night: Night, observer: ScanObserver) -> None:
        self._night, self._observer = night, observer
        self.done = night.collector.n_seen
        self.read_bytes = 0

    def on_result(self, result: BatchResult) -> list[str]:
        with driver_phase("audit.batch"):  # the listing's pages this batch's files were read from, and its rows
            again = self._night.collector.add(result)
        if not again:
            self.done += len(result.urls)
            self.read_bytes += result.bytes_read
        for failure in result.failures:
            log.warning("batch %s: %s", result.batch_id, failure)
        self._observer.progress(self.done, self._night.n_files, self.read_bytes)
        return again


def _mirror(config: ScanConfig, night: Night) -> dict[str, int]:
    """With a mirror to check: its rows to the night's parts, and its paths by status."""
    if not config.mirror.source:
        return {}
    files_parts = list(night.collector.parts.get("files", []))
    parts, cost = check_mirror(config, night.out, night.run_id, night.listing, files_parts, night.base_run_id)
    night.collector.add_parts(parts)
    return dict(cost.statuses)


@dataclasses.dataclass(slots=True)
class _NightFacts:
    """What the phases learn beside the night's collector and listing, filled in as they run."""

    out: str
    reuse_note: str | None
    recovered: tuple[Recovered, ...]
    begun: float
    """When the run began (``time.perf_counter``)."""
    listing_wait_s: float = 0.0
    audit_seconds: float = 0.0
    scheduler: str = "none"
    dashboard: str | None = None
    n_workers: int = 0
    n_models: int = 0
    incomplete: tuple[IncompleteModel, ...] = ()
    mirror: dict[str, int] = dataclasses.field(default_factory=dict)
    rows_checked: int = 0


def _scan_result(night: Night, facts: _NightFacts) -> ScanResult:
    """The night's :class:`ScanResult`: its counts from the collector's tally, the listing and the phases."""
    tally, collector, listing = night.collector.tally, night.collector, night.listing
    return ScanResult(
        run_id=night.run_id,
        out=facts.out,
        base_run_id=night.base_run_id,
        n_files=night.n_files,
        n_read=len(night.plan.read),
        n_reused=len(night.plan.reuse),
        n_models=facts.n_models,
        statuses=dict(tally.statuses),
        problem_codes=dict(tally.codes),
        code_severities=dict(tally.code_severities),
        severities=dict(tally.severities),
        incomplete_models=facts.incomplete,
        bytes_read=tally.bytes_read,
        requests=tally.requests,
        collection_bytes=max(listing.total_bytes, tally.size_bytes),
        listing_seconds=listing.seconds,
        listing_requests=listing.requests,
        listing_wait_s=facts.listing_wait_s,
        skipped=tuple(str(s) for s in listing.skipped),
        audit_seconds=facts.audit_seconds,
        seconds=time.perf_counter() - facts.begun,
        rows_checked=facts.rows_checked,
        duplicates_dropped=collector.dropped,
        reuse_note=facts.reuse_note,
        scheduler=facts.scheduler,
        dashboard=facts.dashboard,
        n_workers=facts.n_workers,
        recovered=facts.recovered,
        rows_written=dict(collector.rows),
        n_models_judged=night.summaries_judged,
        n_unloadable=tally.unloadable,
        n_aborts=tally.aborts,
        mirror=facts.mirror,
    )


def _committed(observer: ScanObserver) -> CommitObserver:
    return observer.committed
