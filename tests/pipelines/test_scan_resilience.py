"""Failures during a scan: dead workers, a killed driver, tasks that fail, interrupted commits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import duckdb
import fsspec
import pyarrow as pa
import pytest
from pipeline_helpers import SAMPLE_COUNT, read_dataset

from gguf_audit.audit import AuditConfig
from gguf_audit.pipelines import run as run_module
from gguf_audit.pipelines.batches import Batch, make_batches
from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.execute import BatchResult, TaskOptions, audit_batch
from gguf_audit.pipelines.run import ScanObserver, run_scan
from gguf_audit.pipelines.store import COMMIT_MARKER, Output
from gguf_audit.tables.listed import ListedFile
from gguf_audit.tables.schema import TABLE_NAMES
from gguf_audit.testing.http import RangeHTTPServer

PYTHON = sys.executable


def _serve_copies(sample: dict[str, bytes], n: int) -> dict[str, bytes]:
    data = sample["tiny-llama-Q4_K_M.gguf"]
    return {f"m/model-{i:04d}.gguf": data for i in range(n)}


def _manifest(path: Path, srv: RangeHTTPServer, names: list[str]) -> Path:
    path.write_text("\n".join(srv.url_for(n) for n in names) + "\n")
    return path


def _visible_runs(out: Path, table: str) -> set[str]:
    base = out / table
    if not base.exists():
        return set()
    return {p.name.split("=", 1)[1] for p in base.iterdir() if p.name.startswith("run_id=")}


def _scheduler_address(client: Any) -> str:
    return str(client.scheduler.address)


# ------------------------------------------------------------ dead workers


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # distributed may warn about the dead worker's comms
def test_worker_killed_mid_run(client: Any, tmp_path: Path, sample: dict[str, bytes]) -> None:
    files = _serve_copies(sample, 120)
    with RangeHTTPServer(files=files, latency_s=0.05) as srv:
        manifest = _manifest(tmp_path / "m.txt", srv, list(files))
        killed: list[int] = []

        class KillOne(ScanObserver):
            def progress(self, done: int, total: int, bytes_read: int) -> None:
                if done >= 12 and not killed:
                    pids = client.run(os.getpid)
                    pid = sorted(pids.values())[0]
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)

        out = tmp_path / "out"
        config = ScanConfig(manifests=(str(manifest),), out=str(out), batch_size=6, threads=3, retries=0)
        result = run_scan(config, client=client, observer=KillOne())
    assert killed
    table = read_dataset(out, "files")
    urls = table.column("url").to_pylist()
    assert len(urls) == len(set(urls)) == 120 == result.rows_checked
    assert set(table.column("status").to_pylist()) == {"ok"}
    assert read_dataset(out, "tensors").num_rows == 120 * 21


def test_failing_batches_are_split_until_the_culprit_is_alone(
    client: Any, tmp_path: Path, sample: dict[str, bytes]
) -> None:
    """A batch that keeps failing (as when its file kills every worker) is halved until one file is left."""
    root = tmp_path / "c"
    root.mkdir()
    for i in range(16):
        (root / f"m{i:02d}.gguf").write_bytes(sample["tiny-llama-Q4_K_M.gguf"])
    listed = [ListedFile("file://" + str(root / f"m{i:02d}.gguf")) for i in range(16)]
    poison = listed[5].url

    def flaky(batch: Batch, options: TaskOptions) -> BatchResult:
        if any(f.url == poison for f in batch.files):
            raise RuntimeError("this batch kills its worker")
        return audit_batch(batch, options)

    results: list[BatchResult] = []
    batches = make_batches(listed, {f.url: f.url for f in listed}, 8)
    options = TaskOptions("r1", {}, AuditConfig(), 4)
    run_module._run_batches(client, batches, options, results.append, task=flaky)
    rows = pa.concat_tables([r.tables.files for r in results]).to_pylist()
    assert sorted(r["url"] for r in rows) == sorted(f.url for f in listed)
    by_url = {r["url"]: r for r in rows}
    assert by_url[poison]["codes"] == ["run.worker_lost"]
    assert all(r["status"] == "ok" for u, r in by_url.items() if u != poison)


# ------------------------------------------------------------ a killed driver


def _wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def test_driver_killed_mid_run_leaves_nothing(client: Any, tmp_path: Path, sample: dict[str, bytes]) -> None:
    files = _serve_copies(sample, 40)
    out = tmp_path / "out"
    with RangeHTTPServer(files=files, latency_s=0.2) as srv:
        manifest = _manifest(tmp_path / "m.txt", srv, list(files))
        argv = [
            PYTHON, "-m", "gguf_audit.pipelines.cli", "--manifest", str(manifest), "--out", str(out),
            "--scheduler", _scheduler_address(client), "--no-progress", "--batch-size", "2", "--threads", "2",
        ]  # fmt: skip
        proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _wait_for(lambda: len(srv.requests) >= 6, 60, "the scan to start reading")
        finally:
            proc.kill()
            proc.wait(30)
        srv.latency_s = 0.0
        assert proc.returncode == -signal.SIGKILL
        for table in TABLE_NAMES:
            assert _visible_runs(out, table) == set()
        # What a reader sees: nothing at all.
        with pytest.raises(duckdb.Error):
            duckdb.execute(f"SELECT * FROM read_parquet('{out}/files/*/*.parquet', hive_partitioning=true)").fetchall()
        # And the run can simply be run again.
        result = run_scan(ScanConfig(manifests=(str(manifest),), out=str(out)), client=client)
    assert _visible_runs(out, "files") == _visible_runs(out, "runs") == {result.run_id}
    assert read_dataset(out, "files").num_rows == 40


_KILL_AFTER_FILES_MOVED = textwrap.dedent(
    """
    import os, signal, sys
    from gguf_audit.pipelines import store
    from gguf_audit.pipelines.cli import main

    move = store.Output._move_in

    def move_then_die(self, source, target):
        move(self, source, target)
        if "/files/" in target:
            os.kill(os.getpid(), signal.SIGKILL)  # the driver dies mid-commit

    store.Output._move_in = move_then_die
    sys.exit(main(sys.argv[1:]))
    """
)


def test_driver_killed_mid_commit_is_rolled_back(client: Any, tmp_path: Path, local_collection: Path) -> None:
    out = tmp_path / "out"
    script = tmp_path / "die.py"
    script.write_text(_KILL_AFTER_FILES_MOVED)
    argv = [PYTHON, str(script), str(local_collection), "--out", str(out), "--scheduler", _scheduler_address(client)]
    proc = subprocess.run([*argv, "--no-progress"], cwd=tmp_path, capture_output=True, timeout=120, check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr.decode()[-2000:]

    [killed] = _visible_runs(out, "files")
    assert _visible_runs(out, "runs") == set()
    assert (out / "_staging" / killed / COMMIT_MARKER).exists()
    # The run is not committed: the runs table, which readers join on, does not list it.
    assert Output(str(out)).last_committed_run() is None
    committed_view = (
        f"SELECT count(*) FROM read_parquet('{out}/files/*/*.parquet', hive_partitioning=true) "
        f"WHERE run_id IN (SELECT run_id FROM read_parquet('{out}/runs/*/*.parquet', hive_partitioning=true))"
    )
    with pytest.raises(duckdb.Error):  # no runs table at all yet
        duckdb.execute(committed_view).fetchall()

    result = run_scan(ScanConfig(roots=(str(local_collection),), out=str(out)), client=client)
    assert [(r.run_id, r.action) for r in result.recovered] == [(killed, "rolled back")]
    for table in TABLE_NAMES:
        assert _visible_runs(out, table) == {result.run_id}, table
    assert duckdb.execute(committed_view).fetchall() == [(SAMPLE_COUNT,)]
    assert not (out / "_staging").exists()


# ------------------------------------------------------------ the store


def test_commit_to_an_object_store(client: Any, local_collection: Path) -> None:
    """Where a move is a copy (memory://, like S3), each table still appears as one whole object."""
    out = f"memory://gguf-audit-test-{os.getpid()}-{time.monotonic_ns()}"
    result = run_scan(ScanConfig(roots=(str(local_collection),), out=out), client=client)
    fs = fsspec.filesystem("memory")
    base = out.removeprefix("memory://")
    for table in TABLE_NAMES:
        assert fs.ls(f"/{base}/{table}/run_id={result.run_id}", detail=False) == [
            f"/{base}/{table}/run_id={result.run_id}/part-00000.parquet"
        ]
    assert read_dataset(f"/{base}", "files", filesystem=fs).num_rows == SAMPLE_COUNT
    assert not fs.exists(f"/{base}/_staging/{result.run_id}")


def test_a_failed_commit_is_rolled_back_at_once(
    client: Any, tmp_path: Path, local_collection: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    move = Output._move_in

    def flaky_move(self: Output, source: str, target: str) -> None:
        if "/metadata/" in target:
            raise OSError("the store went away")
        move(self, source, target)

    monkeypatch.setattr(Output, "_move_in", flaky_move)
    out = tmp_path / "out"
    with pytest.raises(OSError, match="went away"):
        run_scan(ScanConfig(roots=(str(local_collection),), out=str(out)), client=client)
    for table in TABLE_NAMES:
        assert _visible_runs(out, table) == set(), table
    assert not (out / "_staging").exists()
