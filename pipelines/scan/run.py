"""The scan job: list, audit in batches on dask.distributed (the workers write the rows), commit the night.

Execution
---------
Files are sent to workers in batches (:mod:`~gguf_audit.pipelines.scan.batches`,
one task each, at most :data:`BATCHES_IN_FLIGHT_PER_THREAD` per dask thread
on the cluster at once: the next is submitted as one completes), audited
there by :func:`~gguf_audit.pipelines.scan.execute.audit_batch`,
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

import atexit
import contextlib
import dataclasses
import importlib
import importlib.util
import io
import itertools
import logging
import os
import secrets
import time
from asyncio import CancelledError  # what distributed raises for a future the scheduler lost
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, Final

import pyarrow as pa

from gguf_audit.codes import Code
from gguf_audit.errors import cannot_succeed_on_retry, describe_exception
from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.listing.discover import Listing, discover, for_workers, options_for
from gguf_audit.pipelines.listing.hub import rate_limit_waits
from gguf_audit.pipelines.listing.mapped import (
    give_back_freed_memory,
    map_table,
    temp_dir_in_memory,
)
from gguf_audit.pipelines.scan.batches import MAX_SPLITS, Batch, auto_batch_size, iter_batches, split_batch
from gguf_audit.pipelines.scan.collect import ScanResult
from gguf_audit.pipelines.scan.execute import BatchResult, TaskOptions, audit_batch, lost_result
from gguf_audit.pipelines.scan.groups import ModelGroups
from gguf_audit.pipelines.scan.hub_known import known_hub_repos
from gguf_audit.pipelines.scan.lineage import compare_options, run_compare
from gguf_audit.pipelines.scan.mirror import check_mirror, check_mirror_config
from gguf_audit.pipelines.scan.night import CommitObserver, Night, RunError
from gguf_audit.pipelines.scan.reuse import base_run, plan_reuse
from gguf_audit.pipelines.scan.workers import worker_problems
from gguf_audit.pipelines.store.output import Output, OutputError, new_run_id
from gguf_audit.redact import install_handler_redaction, install_log_redaction

__all__ = ["RunError", "ScanObserver", "run_scan"]

log = logging.getLogger(__name__)

WORKER_WAIT_S: Final = 60.0
"""How long a scan waits for the first worker of an external scheduler."""
SCHEDULER_CONNECT_S: Final = 20.0
"""How long a scan tries to reach an external scheduler."""
CPU_SLOTS_PER_PROCESS: Final = 1
"""Files doing CPU work at once in one worker process (the CPU gate); reads still overlap."""
BATCHES_IN_FLIGHT_PER_THREAD: Final = 2
"""Batches submitted ahead per dask thread: one running, one queued on the worker, the rest wait on the driver."""

DASK_SETTINGS: Final = {"distributed.admin.low-level-log-length": 0, "distributed.admin.system-monitor.log-length": 120}
"""dask settings for the clusters and clients a night starts (and ``benchmarks/bench_driver.py``'s).

distributed keeps the last ``low-level-log-length`` messages (1,000 by default)
of every batched stream for its developers: the client's to the scheduler, the
scheduler's to each worker, and as many transitions and events. A night's
messages are few and large (a batch of up to 1,024 files each), so those logs
kept every batch the night sent, in a LocalCluster's scheduler as Python
objects (five a file: about 560 bytes a file at 30,000 files, growing until the
night ended). Sixteen still kept 16 batches a stream, up to 32,000 files' objects
on two workers (13 MB at 100,000 files); a night keeps none. Events still reach
their subscribers (the logs are only what is kept for later). The system
monitor's samples (CPU, memory, I/O, twice a second) are kept for a minute, not
an hour (7,200 samples: a few MB a night hour in the scheduler). A scheduler
started apart (``--scheduler``) needs the settings in its own process
(``DASK_DISTRIBUTED__ADMIN__LOW_LEVEL_LOG_LENGTH=0``)."""


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


def _check_scheduler(address: str | None) -> None:
    """Refuse, before anything is listed, a ``--scheduler`` that is no dask scheduler address."""
    if not address:
        return
    try:
        _distributed().comm.get_address_host_port(address)
    except ValueError as exc:  # 'synchronous', a missing port, an unknown scheme
        raise RunError(
            f"--scheduler takes a dask scheduler's address such as tcp://10.0.0.5:8786 (none: a local cluster); "
            f"{exc}. Got {address!r}."
        ) from exc


@contextlib.contextmanager
def _cluster(config: ScanConfig, client: Any) -> Iterator[tuple[Any, str, str | None, int]]:
    """A dask client: the caller's, one for ``config.cluster.scheduler``, or a LocalCluster for this run."""
    if client is not None:
        yield client, str(client.scheduler.address), _dashboard(client), len(client.nthreads())
        return
    # For the night, not just the start: a worker joining again gets a new stream.
    with dask_settings():
        yield from _started_cluster(config)


def dask_settings() -> contextlib.AbstractContextManager[Any]:
    """:data:`DASK_SETTINGS` applied until the context ends (make the clusters and clients within it)."""
    return importlib.import_module("dask").config.set(DASK_SETTINGS)  # type: ignore[no-any-return]


def _started_cluster(config: ScanConfig) -> Iterator[tuple[Any, str, str | None, int]]:
    distributed = _distributed()
    Client, LocalCluster = distributed.Client, distributed.LocalCluster
    if config.cluster.scheduler:
        try:
            owned = Client(config.cluster.scheduler, timeout=f"{SCHEDULER_CONNECT_S}s")
        except (OSError, TimeoutError) as exc:
            raise RunError(f"cannot reach the dask scheduler at {config.cluster.scheduler!r}: {exc}") from exc
        with owned:
            try:
                owned.wait_for_workers(1, timeout=WORKER_WAIT_S)
            except TimeoutError as exc:
                raise RunError(
                    f"no dask worker joined the scheduler at {config.cluster.scheduler!r} within {WORKER_WAIT_S:.0f} s"
                ) from exc
            problems = worker_problems(owned)
            if problems:
                more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
                raise RunError(f"{problems[0]}{more}; nothing was submitted")
            yield owned, config.cluster.scheduler, _dashboard(owned), len(owned.nthreads())
        return
    n_workers = config.cluster.workers or max(1, os.cpu_count() or 1)
    try:
        cluster = LocalCluster(
            n_workers=n_workers,
            threads_per_worker=config.cluster.threads_per_worker,
            processes=True,
            host="127.0.0.1",
            # Port 0 always: distributed binds its HTTP endpoint even without a dashboard,
            # and a fixed port clashes with any other cluster on the machine.
            dashboard_address="127.0.0.1:0",
            # The night's own cluster reports through the driver: a failed task or lost worker reaches it as
            # the future's error, and the night names it. What distributed logs itself is its shutdown's
            # races (a worker's heartbeat to a scheduler already closed, on Ctrl-C): tracebacks, not news.
            silence_logs=logging.CRITICAL,
        )
    except (OSError, RuntimeError, TimeoutError) as exc:
        raise RunError(f"cannot start a local dask cluster: {exc}") from exc
    except BaseException:
        _drop_half_started_clusters(distributed)  # Ctrl-C or SIGTERM while it started
        raise
    with cluster, Client(cluster) as owned:
        # The dashboard's pages need bokeh; without it the address serves nothing worth showing.
        shown = config.cluster.dashboard and importlib.util.find_spec("bokeh") is not None
        yield owned, "local", _dashboard(owned) if shown else None, n_workers


SPILL_WARNING_FILES: Final = 50_000
"""Files from which a night warns that its spill files would be memory (a tmpfs ``TMPDIR``): about 5 MB."""


def _drop_half_started_clusters(distributed: Any) -> None:
    """Close, quietly and now, a cluster interrupted while it started, and drop distributed's exit hook for it.

    That hook (``close_clusters``) would close it again at exit, where a worker still starting fails an
    assertion: 30 to 120 lines of traceback after the one line that says the scan was interrupted. The
    ``asyncio`` logger stays silenced: the process is on its way out.
    """
    close = distributed.deploy.spec.close_clusters
    # Its workers' start tasks, abandoned, are logged by asyncio when collected, up to the process's exit:
    # "Task exception was never retrieved" and a traceback. The run is ending; none of that is news.
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    logger = logging.getLogger("distributed")
    level = logger.level
    logger.setLevel(logging.CRITICAL)  # its own handler would print the closing's INFO lines
    try:
        with contextlib.suppress(Exception), contextlib.redirect_stderr(io.StringIO()):
            close()
    finally:
        logger.setLevel(level)
    atexit.unregister(close)


def _distributed() -> Any:
    """``distributed``, imported when a scan starts (``gguf_audit`` never imports it)."""
    return importlib.import_module("distributed")


def _dashboard(client: Any) -> str | None:
    try:
        services = client.scheduler_info().get("services", {})
    except Exception:  # noqa: BLE001 - the dashboard is a nicety
        return None
    return str(client.dashboard_link) if "dashboard" in services else None


def _run_batches(
    client: Any,
    batches: Iterable[Batch],
    options: TaskOptions,
    on_result: Callable[[BatchResult], Sequence[str]],
    task: Callable[[Batch, TaskOptions], BatchResult] = audit_batch,
    window: int = 0,
) -> None:
    """Submit the batches through a window and hand each result to ``on_result`` as it completes.

    At most ``window`` batches (0: all) are in flight: the next is submitted
    as one completes, so the scheduler, the client and the results waiting to
    be taken hold a window's worth of the night, never all of it.

    dask reruns a batch whose worker died; when it gives up (``KilledWorker``
    after ``allowed-failures``) or the result is lost, the batch is split and
    resubmitted, down to single files that get ``run.worker_lost`` rows.
    ``on_result`` returns the files of a result it refused that still need
    rows; they are submitted again as a batch of their own.
    """
    as_completed = _distributed().as_completed
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
            log.warning("batch %s failed (%s); resubmitting", batch.batch_id, describe_exception(exc))
            halves = split_batch(batch) if splits < MAX_SPLITS else []
            if halves:
                for half in halves:
                    futures.add(submit(half, splits + 1))
            else:
                message = f"the workers auditing this file died ({type(exc).__name__}: {exc})"
                on_result(lost_result(batch, options, Code.RUN_WORKER_LOST, message))
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
        _check_scheduler(config.cluster.scheduler)
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
    pool kept about three times its peak as resident memory after it (15 MB
    for 5 MB allocated, making 30,000 listed files into columns), the system
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
    """:func:`run_scan` once the output's lease is held."""
    recovered = out.recover()
    for r in recovered:
        log.warning("output %s: %s run %s", config.scan.out, r.action, r.run_id)

    base_run_id, reuse_note = base_run(out, config) if config.scan.incremental else (None, None)
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
    listing = dataclasses.replace(listing, files=listing.compact.with_table(map_table))
    groups = ModelGroups(listing.compact.url_column())
    give_back_freed_memory()  # the listing's transient: the rest of the night allocates elsewhere too

    plan = plan_reuse(out, base_run_id, listing)
    observer.listed(listing, len(plan.reuse))

    night = Night(out, run_id, listing, groups, base_run_id, plan)
    collector = night.collector
    committing = False
    try:
        night.keep_reused()
        give_back_freed_memory()  # the base night's rows streamed: the rest of the night needs none of them
        done = collector.n_seen
        observer.progress(done, night.n_files, 0)
        audit_seconds = 0.0
        scheduler, dashboard, n_workers = "none", None, 0
        if plan.read:
            with _cluster(config, client) as (dask_client, scheduler, dashboard, n_workers):
                observer.cluster(scheduler, dashboard, n_workers)
                audit_begun = time.perf_counter()
                threads_per_worker = _threads_per_worker(dask_client, config)
                size = config.io.batch_size or auto_batch_size(
                    len(plan.read), max(1, n_workers * threads_per_worker), config.io.threads, threads_per_worker
                )
                batches = iter_batches(plan.read, night.model_ids, size)
                options = TaskOptions(
                    run_id,
                    for_workers(config.storage_options),
                    config.audit_config,
                    config.io.threads,
                    out=out.url,
                    out_storage_options=out.fsspec_options,
                    # One file doing CPU work at a time per worker process: its threads share one GIL,
                    # and on a quiet machine one slot beat two (bench_gate.py: 72 against 85 ms of CPU
                    # per file, 107 ms without a gate, at 64 files in flight).
                    cpu_slots=CPU_SLOTS_PER_PROCESS,
                )
                read_bytes = 0

                def on_result(result: BatchResult) -> list[str]:
                    nonlocal done, read_bytes
                    again = collector.add(result)
                    give_back_freed_memory()  # the listing's pages this batch's files were read from, and its rows
                    if not again:
                        done += len(result.urls)
                        read_bytes += result.bytes_read
                    for failure in result.failures:
                        log.warning("batch %s: %s", result.batch_id, failure)
                    observer.progress(done, night.n_files, read_bytes)
                    return again

                window = BATCHES_IN_FLIGHT_PER_THREAD * max(1, n_workers * threads_per_worker)
                _run_batches(dask_client, batches, options, on_result, window=window)
                audit_seconds = time.perf_counter() - audit_begun
                give_back_freed_memory()
                lineage = night.lineage(config)
                give_back_freed_memory()  # lineage's transient columns, before the compare and judging phases
                run_compare(
                    dask_client,
                    lineage,
                    compare_options(config, run_id, out, listing.read_urls),
                    collector,
                    observer.comparing,
                    night.stored_tables,
                )
        else:
            lineage = night.lineage(config)
            give_back_freed_memory()
            if lineage.compare:  # a model judged again with no file read: its family lost a member (reference, anchor)
                with _cluster(config, client) as (dask_client, scheduler, dashboard, n_workers):
                    run_compare(
                        dask_client,
                        lineage,
                        compare_options(config, run_id, out, listing.read_urls),
                        collector,
                        observer.comparing,
                        night.stored_tables,
                    )

        n_models, incomplete = night.judge_models(lineage)
        give_back_freed_memory()  # before DuckDB's check and the Delta commit, whose allocators are their own
        night.close_parts()
        night.record_compare_io()
        mirror: dict[str, int] = {}
        if config.mirror.source:
            files_parts = list(collector.parts.get("files", []))
            mirror_parts, mirror_cost = check_mirror(config, out, run_id, listing, files_parts, base_run_id)
            collector.add_parts(mirror_parts)
            mirror = dict(mirror_cost.statuses)
        rows_checked = night.check_one_row_per_file()
        tally = collector.tally
        result = ScanResult(
            run_id=run_id,
            out=config.scan.out,
            base_run_id=base_run_id,
            n_files=night.n_files,
            n_read=len(plan.read),
            n_reused=len(plan.reuse),
            n_models=n_models,
            statuses=dict(tally.statuses),
            problem_codes=dict(tally.codes),
            code_severities=dict(tally.code_severities),
            severities=dict(tally.severities),
            incomplete_models=incomplete,
            bytes_read=tally.bytes_read,
            requests=tally.requests,
            collection_bytes=max(listing.total_bytes, tally.size_bytes),
            listing_seconds=listing.seconds,
            listing_requests=listing.requests,
            listing_wait_s=waited.seconds,
            skipped=tuple(str(s) for s in listing.skipped),
            audit_seconds=audit_seconds,
            seconds=time.perf_counter() - begun,
            rows_checked=rows_checked,
            duplicates_dropped=collector.dropped,
            reuse_note=reuse_note,
            scheduler=scheduler,
            dashboard=dashboard,
            n_workers=n_workers,
            recovered=tuple(recovered),
            rows_written=dict(collector.rows),
            n_models_judged=night.summaries_judged,
            n_unloadable=tally.unloadable,
            n_aborts=tally.aborts,
            mirror=mirror,
        )
        observer.committing()
        committing = True
        night.commit(config, result, started, on_committed=_committed(observer))
        return result
    except BaseException:
        night.abort()
        if not committing:
            night.discard()
        raise
    finally:
        night.close()


def _committed(observer: ScanObserver) -> CommitObserver:
    return observer.committed


def _threads_per_worker(client: Any, config: ScanConfig) -> int:
    try:
        counts = [int(n) for n in client.nthreads().values()]  # every worker (scheduler_info lists a few)
    except Exception:  # noqa: BLE001 - only sizes batches
        return config.cluster.threads_per_worker
    return max(1, round(sum(counts) / len(counts))) if counts else config.cluster.threads_per_worker
