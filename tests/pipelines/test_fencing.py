"""Fencing: a writer paused inside its commit past its lease's expiry records nothing (issue 34, item 1).

A real writer process (an :class:`Output` commit, or the real ``gguf-audit scan``)
stops itself with SIGSTOP at one step of its commit, right after a lease check
passed: between two tables, inside a table's commit once its snapshot is read,
and between the last check and the ``runs`` commit (where a lease alone let a
"ghost night" through: the night listed, its rows rolled back). While it is
stopped its lease expires; a second writer takes the lease over, recovers and
commits a night of its own. Then the first is continued: it must record
nothing, exit non-zero with one line saying why, and readers must see no night
without its rows, on a local disk and on moto's S3.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from pipeline_helpers import file_row, s3_options

from gguf_audit.pipelines.store.delta import FENCE_APP_ID
from gguf_audit.pipelines.store.output import COMMIT_ORDER, Output
from gguf_audit.pipelines.store.parts import PartFile, RunParts
from gguf_audit.tables.schema import SCHEMAS, TABLE_NAMES, rows_to_table
from gguf_audit.testing.s3 import MotoS3Server

EXPIRY_S = 1.0

# The paused writer. STEP names where it stops itself:
#   "checked:<table>"  inside <table>'s commit: its snapshot read, the lease check passed, the commit next;
#   "rows-checked"     after the last checks (lease and rows), before the runs table is even opened.
_WRITER = textwrap.dedent(
    """
    import os, signal, sys
    sys.path.insert(0, sys.argv[4])
    from test_fencing import commit_one_night
    from gguf_audit.pipelines.store import delta, output

    url, options, step = sys.argv[1], sys.argv[2], sys.argv[3]

    def stop(out):
        # Stopped between requests (the heartbeat holds this lock while it writes): moto's dispatcher holds a
        # global lock while it reads a request, so a client stopped mid-request would stall it for everyone.
        with out.lease._lock:
            print("stopping at", step, flush=True)
            os.kill(os.getpid(), signal.SIGSTOP)

    commit = delta.DeltaTables.commit
    def paused_commit(self, table, parts, run_id, *, fence=None):
        def check_then_stop():
            fence.check()
            if step == f"checked:{table}":
                stop(fence.check.__self__)
        paused = None if fence is None else delta.Fence(check_then_stop, fence.token)
        return commit(self, table, parts, run_id, fence=paused)
    delta.DeltaTables.commit = paused_commit

    check_rows = output.Output.check_rows
    def paused_check_rows(self, run_id, parts):
        check_rows(self, run_id, parts)
        if step == "rows-checked":
            stop(self)
    output.Output.check_rows = paused_check_rows

    try:
        commit_one_night(url, options, "r1", expiry_s=float(sys.argv[5]))
    except Exception as exc:
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(3)
    print("committed")
    """
)


def _write(out: Output, run_id: str, table: str, rows: list[dict[str, object]]) -> PartFile:
    parts = RunParts(out.url, out.fsspec_options, run_id, "t", (table,))
    parts.write(table, rows_to_table(table, rows))
    [part] = parts.close()
    return part


def _runs_row() -> dict[str, object]:
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    return {
        "schema_version": 1, "tool_version": "t", "status": "committed", "started_at": now, "finished_at": now,
        "incremental": False, **{k: 0 for k in SCHEMAS["runs"].names if k.startswith("n_")},
        "requests": 0, "bytes_read": 0, "collection_bytes": 0, "listing_seconds": 0.0, "seconds": 0.0,
        "files_per_second": 0.0,
    }  # fmt: skip


def commit_one_night(url: str, options: str, run_id: str, *, expiry_s: float) -> dict[str, int]:
    """Take the lease, recover, commit a night with two files and a problem-free `problems` table, release."""
    import json

    out = Output(url, json.loads(options))
    out.preflight()
    out.acquire(f"scan {run_id}", expiry_s=expiry_s)
    try:
        out.recover()
        parts = {
            "files": [_write(out, run_id, "files", [file_row(f"{run_id}-a", run_id), file_row(f"{run_id}-b", run_id)])],
            "models": [],
        }
        return out.commit(run_id, parts, lambda versions: _write(out, run_id, "runs", [_runs_row()]))
    finally:
        out.release()


@pytest.fixture(params=["local", "s3"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, dict[str, Any]]]:
    if request.param == "local":
        yield str(tmp_path / "out"), {}
        return
    moto: MotoS3Server = request.getfixturevalue("moto")
    bucket = f"fence-{uuid.uuid4().hex[:10]}"
    moto.make_bucket(bucket)
    yield f"s3://{bucket}/out", s3_options(moto)


def _wait_stopped(proc: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while psutil.Process(proc.pid).status() != psutil.STATUS_STOPPED:
        if proc.poll() is not None or time.monotonic() > deadline:
            out, err = proc.communicate()
            pytest.fail(f"the writer never stopped: {out[-1000:]} {err[-2000:]}")
        time.sleep(0.02)


def _check_nights(out: Output, listed: list[str], gone: list[str]) -> None:
    """Exactly ``listed`` are nights, each with its rows; nothing of ``gone`` is left in any table."""
    runs = sorted(out.committed_runs().column("run_id").to_pylist())
    assert runs == sorted(listed)
    for run in listed:
        assert out.read("files", [run]).num_rows == 2, f"night {run} is listed without its files rows"
    for run in gone:
        for table in TABLE_NAMES:
            assert out.read(table, [run]).num_rows == 0, f"{table} still holds rows of the lost run {run}"


STEPS = [*(f"checked:{t}" for t in ("files", "runs")), "rows-checked"]


def _recover_only(url: str, options: str) -> None:
    """A writer that takes the lease, recovers and commits nothing (a vacuum, or a scan that then failed)."""
    import json

    out = Output(url, json.loads(options))
    out.acquire("vacuum", expiry_s=30.0)
    try:
        out.recover()
    finally:
        out.release()


@pytest.mark.slow
@pytest.mark.parametrize("taker", ["scan", "vacuum"])
@pytest.mark.parametrize("step", STEPS)
def test_a_writer_paused_past_its_expiry_records_nothing(
    step: str, taker: str, target: tuple[str, dict[str, Any]], tmp_path: Path
) -> None:
    import json

    url, options = target
    argv = [sys.executable, "-c", _WRITER, url, json.dumps(options), step, str(Path(__file__).parent), str(EXPIRY_S)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path)
    try:
        _wait_stopped(proc)
        time.sleep(EXPIRY_S * 1.5)  # its heartbeat stopped with it: the lease expires
        if taker == "scan":  # takes over, recovers, commits a night of its own
            commit_one_night(url, json.dumps(options), "r2", expiry_s=30.0)
        else:
            _recover_only(url, json.dumps(options))
    finally:
        proc.send_signal(signal.SIGCONT)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 3 and "committed" not in stdout, (stdout, stderr)
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("LeaseLost: this writer's lease on the output expired"), stderr
    assert last.endswith("nothing was recorded") and "Traceback" not in stderr
    out = Output(url, options)
    listed = ["r2"] if taker == "scan" else []
    _check_nights(out, listed, ["r1"])
    _recover_only(url, json.dumps(options))  # the paused writer's marker, if left, is settled by the next writer
    assert out.pending() == []
    _check_nights(out, listed, ["r1"])


def test_a_takeover_fences_every_table_and_a_release_does_not(tmp_path: Path) -> None:
    """Only a writer that took an expired lease fences (a metadata commit a table); a normal one writes nothing."""
    url = str(tmp_path / "out")
    commit_one_night(url, "{}", "r1", expiry_s=30.0)
    out = Output(url)
    before = {t: out.delta.version(t) for t in COMMIT_ORDER}
    commit_one_night(url, "{}", "r2", expiry_s=30.0)  # after a release: no fence
    after = {t: out.delta.version(t) for t in COMMIT_ORDER}
    assert after["runs"] == (before["runs"] or 0) + 1 and after["files"] == (before["files"] or 0) + 1
    dt = out.delta.open("runs")
    assert dt is not None and dt.transaction_version(FENCE_APP_ID) == 2  # the second writer's generation

    out.acquire("scan r3", expiry_s=0.2)
    out.lease._stop.set()  # type: ignore[union-attr]  # a holder whose heartbeat stopped (paused)
    time.sleep(0.5)
    taker = Output(url)
    lease = taker.acquire("scan r4", expiry_s=30.0)
    try:
        assert lease.taken_over is not None
        for table in TABLE_NAMES:
            dt = taker.delta.open(table)
            assert dt is not None and dt.transaction_version(FENCE_APP_ID) == lease.state.generation
    finally:
        taker.release()
