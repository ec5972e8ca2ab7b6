"""An external dask cluster for tests and benchmarks: ``dask scheduler`` and ``dask worker`` processes on 127.0.0.1."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

__all__ = ["external_cluster"]

DASK_WORKER: tuple[str, ...] = (sys.executable, "-m", "distributed.cli.dask_worker")


@contextmanager
def external_cluster(
    folder: Path, *, workers: int = 1, worker_command: Sequence[str] = DASK_WORKER, start_s: float = 60.0
) -> Iterator[str]:
    """A scheduler and ``workers`` worker processes (two threads each) started by ``worker_command``, run in
    ``folder`` (their scheduler file lives there); yields the scheduler's address and stops both after."""
    scheduler_file = folder / "scheduler.json"
    scheduler = subprocess.Popen(
        [sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1", "--port", "0",
         "--scheduler-file", str(scheduler_file), "--no-dashboard"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    worker: subprocess.Popen[bytes] | None = None
    try:
        deadline = time.monotonic() + start_s
        while not scheduler_file.exists() or not scheduler_file.read_text().strip():
            if time.monotonic() > deadline or scheduler.poll() is not None:
                raise RuntimeError(f"the dask scheduler did not start within {start_s:.0f} s")
            time.sleep(0.05)
        worker = subprocess.Popen(
            [*worker_command, "--scheduler-file", str(scheduler_file), "--host", "127.0.0.1",
             "--nthreads", "2", "--nworkers", str(workers), "--no-dashboard"],
            cwd=folder, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        yield str(json.loads(scheduler_file.read_text())["address"])
    finally:
        for proc in (worker, scheduler):
            if proc is not None:
                proc.terminate()
                try:
                    proc.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
