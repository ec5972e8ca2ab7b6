"""The night's dask cluster: the caller's client, an external scheduler's, or a LocalCluster of its own.

Started only when a phase needs one (:class:`LazyCluster`), with :data:`DASK_SETTINGS` for the night.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import importlib.util
import io
import logging
import os
from collections.abc import Iterator
from typing import Any, Final

from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.scan.night import RunError
from gguf_audit.pipelines.scan.workers import worker_problems

__all__ = ["DASK_SETTINGS", "LazyCluster", "check_scheduler", "dask_settings", "import_distributed", "night_cluster"]

WORKER_WAIT_S: Final = 60.0
"""How long a scan waits for the first worker of an external scheduler."""
SCHEDULER_CONNECT_S: Final = 20.0
"""How long a scan tries to reach an external scheduler."""
DASK_SETTINGS: Final = {"distributed.admin.low-level-log-length": 0, "distributed.admin.system-monitor.log-length": 120}
"""dask settings for the clusters and clients a night starts (and ``benchmarks/bench_driver.py``'s).

distributed keeps the last ``low-level-log-length`` messages (1,000 by default)
of every batched stream for its developers: the client's to the scheduler, the
scheduler's to each worker, and as many transitions and events. A night's
messages are few and large (a batch of up to 1,024 files each), so those logs
would keep every batch the night sent, as Python objects growing with the
files until the night ends (``benchmarks/README.md``, ``bench_driver.py``); a
night keeps none. Events still reach their subscribers (the logs are only what
is kept for later). The system monitor's samples (CPU, memory, I/O, twice a
second) are kept for a minute, not an hour. A scheduler
started apart (``--scheduler``) needs the settings in its own process
(``DASK_DISTRIBUTED__ADMIN__LOW_LEVEL_LOG_LENGTH=0``)."""


def check_scheduler(address: str | None) -> None:
    """Refuse, before anything is listed, a ``--scheduler`` that is no dask scheduler address."""
    if not address:
        return
    try:
        import_distributed().comm.get_address_host_port(address)
    except ValueError as exc:  # 'synchronous', a missing port, an unknown scheme
        raise RunError(
            f"--scheduler takes a dask scheduler's address such as tcp://10.0.0.5:8786 (none: a local cluster); "
            f"{exc}. Got {address!r}."
        ) from exc


@contextlib.contextmanager
def night_cluster(config: ScanConfig, client: Any) -> Iterator[tuple[Any, str, str | None, int]]:
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
    distributed = import_distributed()
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


def import_distributed() -> Any:
    """``distributed``, imported when a scan starts (``gguf_audit`` never imports it)."""
    return importlib.import_module("distributed")


def _dashboard(client: Any) -> str | None:
    try:
        services = client.scheduler_info().get("services", {})
    except Exception:  # noqa: BLE001 - the dashboard is a nicety
        return None
    return str(client.dashboard_link) if "dashboard" in services else None


class LazyCluster:
    """The night's dask client, started when a phase first needs one (none for a night with nothing to do)."""

    def __init__(self, config: ScanConfig, given: Any, stack: contextlib.ExitStack) -> None:
        self._config, self._given, self._stack = config, given, stack
        self._client: Any = None
        self.scheduler: str = "none"
        self.dashboard: str | None = None
        self.n_workers = 0

    def client(self) -> Any:
        if self._client is None:
            started = self._stack.enter_context(night_cluster(self._config, self._given))
            self._client, self.scheduler, self.dashboard, self.n_workers = started
        return self._client


def threads_per_worker(client: Any, config: ScanConfig) -> int:
    try:
        counts = [int(n) for n in client.nthreads().values()]  # every worker (scheduler_info lists a few)
    except Exception:  # noqa: BLE001 - only sizes batches
        return config.cluster.threads_per_worker
    return max(1, round(sum(counts) / len(counts))) if counts else config.cluster.threads_per_worker
