"""Failures during a scan: dead workers, a killed driver, tasks that fail, interrupted commits, readers meanwhile."""

from __future__ import annotations

import contextlib
import errno
import gc
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pipeline_helpers import SAMPLE_COUNT, read_dataset

from gguf_audit.audit import AuditConfig
from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.scan import cluster as cluster_module
from gguf_audit.pipelines.scan import run as run_module
from gguf_audit.pipelines.scan.run import RunError, ScanObserver, run_scan
from gguf_audit.pipelines.store.delta import DeltaTables
from gguf_audit.pipelines.store.duck import connect
from gguf_audit.pipelines.store.output import COMMIT_ORDER, Output
from gguf_audit.pipelines.store.retention import vacuum_nights
from gguf_audit.pipelines.work.batches import Batch, iter_batches, make_batches
from gguf_audit.pipelines.work.execute import BatchResult, TaskOptions, audit_batch
from gguf_audit.tables.listed import ListedFile, ListedFiles
from gguf_audit.testing.http import RangeHTTPServer

pytestmark = pytest.mark.slow  # real scans with failures injected by servers: outside the fast loop

PYTHON = sys.executable


def _serve_copies(sample: dict[str, bytes], n: int) -> dict[str, bytes]:
    data = sample["tiny-llama-Q4_K_M.gguf"]
    return {f"m/model-{i:04d}.gguf": data for i in range(n)}


def _manifest(path: Path, srv: RangeHTTPServer, names: list[str]) -> Path:
    path.write_text("\n".join(srv.url_for(n) for n in names) + "\n")
    return path


def _versions(out: Path) -> dict[str, int | None]:
    return {t: DeltaTables(str(out)).version(t) for t in COMMIT_ORDER}


def _data_files(out: Path) -> set[str]:
    """The data files under ``out``; os.walk passes over a folder removed while it looks (the preflight's probe)."""
    found = set()
    for folder, _, names in os.walk(out):
        rel = Path(folder).relative_to(out)
        if "_delta_log" not in rel.parts:
            found.update(str(rel / n) for n in names if n.endswith(".parquet"))
    return found


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
        config = ScanConfig().replace(manifests=(str(manifest),), out=str(out), batch_size=6, threads=3, retries=0)
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

    def take(result: BatchResult) -> list[str]:
        results.append(result)
        return []

    batches = make_batches(listed, {f.url: f.url for f in listed}, 8)
    out = tmp_path / "out"
    options = TaskOptions("r1", {}, AuditConfig(), 4, out=str(out))
    run_module._run_batches(client, batches, options, take, task=flaky)
    parts = [p for r in results for p in r.parts if p.table == "files"]
    tables = [pq.read_table(out / "files" / p.path) for p in parts]  # a file leaves out its empty columns
    rows = pa.concat_tables(tables, promote_options="default").to_pylist()
    assert sorted(r["url"] for r in rows) == sorted(f.url for f in listed)
    by_url = {r["url"]: r for r in rows}
    assert by_url[poison]["codes"] == ["run.worker_lost"]
    assert all(r["status"] == "ok" for u, r in by_url.items() if u != poison)


def test_a_full_disk_stops_the_night_at_once(client: Any, tmp_path: Path, sample: dict[str, bytes]) -> None:
    """A failure no retry can get past (no space left) stops the night: no split, no rerun, no re-read."""
    root = tmp_path / "c"
    root.mkdir()
    for i in range(16):
        (root / f"m{i:02d}.gguf").write_bytes(sample["tiny-llama-Q4_K_M.gguf"])
    listed = [ListedFile("file://" + str(root / f"m{i:02d}.gguf")) for i in range(16)]
    calls = tmp_path / "calls.txt"

    def full(batch: Batch, options: TaskOptions) -> BatchResult:
        with open(calls, "a") as f:  # the workers share this disk
            f.write(batch.batch_id + "\n")
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "out" / "files"))

    results: list[BatchResult] = []

    def take(result: BatchResult) -> list[str]:
        results.append(result)
        return []

    batches = make_batches(listed, {f.url: f.url for f in listed}, 8)
    options = TaskOptions("rf", {}, AuditConfig(), 4, out=str(tmp_path / "out"))
    with pytest.raises(RunError) as caught:
        run_module._run_batches(client, batches, options, take, task=full, window=1)
    assert "No space left on device" in str(caught.value) and "\n" not in str(caught.value)
    assert not results
    assert calls.read_text().split() == [batches[0].batch_id]  # one try of the first batch, no halves


def _scheduler_tasks(dask_scheduler: Any) -> int:
    return sum(1 for key in dask_scheduler.tasks if str(key).startswith("gguf-audit-rw-"))


def test_batches_go_through_a_window(client: Any, tmp_path: Path, sample: dict[str, bytes]) -> None:
    """At most ``window`` batches are on the cluster at once, and every batch still gets its rows."""
    root = tmp_path / "c"
    root.mkdir()
    for i in range(12):
        (root / f"m{i:02d}.gguf").write_bytes(sample["tiny-llama-Q4_K_M.gguf"])
    listed = [ListedFile("file://" + str(root / f"m{i:02d}.gguf")) for i in range(12)]
    on_cluster: list[int] = []
    results: list[BatchResult] = []

    def take(result: BatchResult) -> list[str]:
        # The next batch is submitted before its predecessor's result is taken; the submission reaches the
        # scheduler on the client's batched stream, a moment after: wait for it (the window kept full) first.
        if len(results) < 9:
            with contextlib.suppress(AssertionError):
                _wait_for(lambda: client.run_on_scheduler(_scheduler_tasks) >= 3, 10, "the window to fill")
        on_cluster.append(client.run_on_scheduler(_scheduler_tasks))
        results.append(result)
        return []

    batches = make_batches(listed, {f.url: f.url for f in listed}, 1)
    options = TaskOptions("rw", {}, AuditConfig(), 2, out=str(tmp_path / "out"))
    run_module._run_batches(client, batches, options, take, window=3)
    assert sorted(u for r in results for u in r.urls) == sorted(f.url for f in listed)
    # the window, plus the batch whose result is being taken (its release reaches the scheduler after)
    assert len(on_cluster) == 12 and max(on_cluster) <= 3 + 1 and min(on_cluster[:9]) >= 3


def _batches_alive(prefix: str) -> int:
    """Batches alive in this process whose ids start with ``prefix`` (the session's cluster keeps others')."""
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, Batch) and o.batch_id.startswith(prefix))


def test_the_cluster_a_night_starts_keeps_no_batch_it_sent(tmp_path: Path, sample: dict[str, bytes]) -> None:
    """A night's own LocalCluster (its scheduler in the driver's process) lets each batch go once its result is
    taken: distributed's stream logs (1,000 messages by default) kept every batch sent, its files as objects."""
    root = tmp_path / "c"
    root.mkdir()
    n = 64
    for i in range(n):
        (root / f"m{i:02d}.gguf").write_bytes(sample["tiny-llama-Q4_K_M.gguf"])
    listed = ListedFiles.of([ListedFile("file://" + str(root / f"m{i:02d}.gguf")) for i in range(n)])
    options = TaskOptions("rw", {}, AuditConfig(), 2, out=str(tmp_path / "out"))
    taken: list[str] = []

    def take(result: BatchResult) -> list[str]:
        taken.extend(result.urls)
        return []

    config = ScanConfig().replace(workers=1, threads_per_worker=1)
    with cluster_module.night_cluster(config, None) as (own_client, scheduler, _, _):
        assert scheduler == "local"
        batches = iter_batches(listed, {u: u for u in listed.urls()}, 1, prefix="sent")
        run_module._run_batches(own_client, batches, options, take, window=2)
        alive = _batches_alive("sent")
    assert sorted(taken) == sorted(listed.urls())
    # At most the last message each stream sent, which its sender holds until it sends the next (logs of
    # 1,000 messages kept all 64 batches; 16 a stream kept 32).
    assert alive <= 2


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
            PYTHON, "-m", "gguf_audit.pipelines.commands.scan", "--manifest", str(manifest), "--out", str(out),
            "--scheduler", _scheduler_address(client), "--no-progress", "--batch-size", "2", "--threads", "2",
        ]  # fmt: skip
        proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            _wait_for(lambda: len(_data_files(out)) >= 3, 60, "the workers to write data files")
        finally:
            proc.kill()
            proc.wait(30)
        srv.latency_s = 0.0
        assert proc.returncode == -signal.SIGKILL
        # Data files were written, and no table was created: a reader finds nothing at all.
        assert _versions(out) == dict.fromkeys(COMMIT_ORDER)
        con = connect()
        try:
            with pytest.raises(duckdb.Error):
                con.execute(f"SELECT * FROM delta_scan('{out}/files')").fetchall()
        finally:
            con.close()
        # And the run can simply be run again; retention removes what the killed one left.
        result = run_scan(ScanConfig().replace(manifests=(str(manifest),), out=str(out)), client=client)
    files_rows = read_dataset(out, "files")
    assert set(files_rows.column("run_id").to_pylist()) == {result.run_id} and files_rows.num_rows == 40
    orphans = {f for f in _data_files(out) if result.run_id not in f}
    assert orphans
    vacuum_nights(Output(str(out)), 1, min_age_hours=0)
    assert {f for f in _data_files(out) if result.run_id not in f} == set()
    assert read_dataset(out, "tensors").num_rows == 40 * 21


# A driver that dies, or pauses, at a named point of its commit: around DeltaTables.commit of one table.
_COMMIT_HOOK = textwrap.dedent(
    """
    import os, signal, sys, time
    from pathlib import Path
    from gguf_audit.pipelines.store import delta
    from gguf_audit.pipelines.commands.scan import main

    when, table_at = os.environ["HOOK_AT"].split(":")
    action = os.environ["HOOK_DO"]
    commit = delta.DeltaTables.commit

    def act():
        if action == "die":
            os.kill(os.getpid(), signal.SIGKILL)
        flag = Path(os.environ["HOOK_FLAG"])
        flag.with_suffix(".paused").write_text("paused")
        while not flag.with_suffix(".go").exists():
            time.sleep(0.02)

    def hooked(self, table, parts, run_id, *, fence=None):
        if (when, table_at) == ("before", table):
            act()
        version = commit(self, table, parts, run_id, fence=fence)
        if (when, table_at) == ("after", table):
            act()
        return version

    delta.DeltaTables.commit = hooked
    sys.exit(main(sys.argv[1:]))
    """
)


def _hooked_scan(tmp_path: Path, client: Any, collection: Path, out: Path, at: str, do: str) -> subprocess.Popen[bytes]:
    script = tmp_path / "hook.py"
    script.write_text(_COMMIT_HOOK)
    env = {**os.environ, "HOOK_AT": at, "HOOK_DO": do, "HOOK_FLAG": str(tmp_path / "flag")}
    argv = [PYTHON, str(script), str(collection), "--out", str(out), "--scheduler", _scheduler_address(client)]
    return subprocess.Popen(
        [*argv, "--no-progress"], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )


def _night_rows(out: Path) -> dict[str, dict[str, int]]:
    """Rows per table of each night present in any table (committed or not)."""
    found: dict[str, dict[str, int]] = {}
    tables = DeltaTables(str(out))
    for table in COMMIT_ORDER:
        if tables.version(table) is None:
            continue
        for run_id in tables.read(table, columns=["run_id"]).column("run_id").to_pylist():
            found.setdefault(run_id, {}).setdefault(table, 0)
            found[run_id][table] += 1
    return found


@pytest.mark.parametrize("at", ["before:files", "after:tensors", "after:runs"])
def test_driver_killed_in_its_commit(client: Any, tmp_path: Path, local_collection: Path, at: str) -> None:
    """Killed before, during and after its commit: each table holds the night whole or not at all."""
    out = tmp_path / "out"
    first = run_scan(ScanConfig().replace(roots=(str(local_collection),), out=str(out)), client=client)
    whole = _night_rows(out)[first.run_id]
    before = _versions(out)
    proc = _hooked_scan(tmp_path, client, local_collection, out, at, "die")
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == -signal.SIGKILL, err.decode()[-2000:]
    output = Output(str(out))
    [killed] = output.pending()  # its commit began: the marker says which run
    rows = _night_rows(out).get(killed, {})
    # Each table: at its previous version, or with every row the killed night writes to it.
    for table in COMMIT_ORDER:
        n = rows.get(table, 0)
        assert n in (0, whole.get(table, 0) if table != "runs" else 1), (table, n)
    committed_tables = {t for t in COMMIT_ORDER if rows.get(t)}
    expected = {
        "before:files": set(),
        "after:tensors": {"files", "models", "tensors"},
        "after:runs": {t for t in COMMIT_ORDER if whole.get(t) or t == "runs"},
    }[at]
    assert committed_tables == expected
    changed = {t for t, v in _versions(out).items() if v != before[t]}
    assert changed <= expected
    assert output.last_committed_run() == (killed if at == "after:runs" else first.run_id)

    # The next scan settles it first, then runs whole.
    again = run_scan(
        ScanConfig().replace(roots=(str(local_collection),), out=str(out), incremental=True), client=client
    )
    action = "cleaned" if at == "after:runs" else "rolled back"
    assert [(r.run_id, r.action) for r in again.recovered] == [(killed, action)]
    nights = _night_rows(out)
    assert (killed in nights) is (at == "after:runs")
    assert nights[again.run_id]["files"] == SAMPLE_COUNT and output.pending() == []
    assert again.base_run_id == (killed if at == "after:runs" else first.run_id)


_NIGHT_SQL = """
WITH night AS (SELECT arg_max(run_id, finished_at) AS run_id, arg_max(n_files, finished_at) AS n_files
               FROM delta_scan('{out}/runs')),
     files AS (SELECT * FROM delta_scan('{out}/files') WHERE run_id = (SELECT run_id FROM night))
SELECT (SELECT run_id FROM night), (SELECT n_files FROM night), (SELECT count(*) FROM files),
       (SELECT coalesce(sum(n_tensors), 0) FROM files),
       (SELECT count(*) FROM delta_scan('{out}/tensors') t JOIN files f ON t.url = f.url AND t.run_id = f.source_run_id)
"""


def test_readers_during_a_commit_see_whole_nights(client: Any, tmp_path: Path, local_collection: Path) -> None:
    out = tmp_path / "out"
    first = run_scan(ScanConfig().replace(roots=(str(local_collection),), out=str(out)), client=client)
    seen: list[tuple[Any, ...]] = []
    stop = threading.Event()

    def read_nights() -> None:
        con = connect()
        try:
            while not stop.is_set():
                seen.append(con.execute(_NIGHT_SQL.format(out=out)).fetchone())
        finally:
            con.close()

    proc = _hooked_scan(tmp_path, client, local_collection, out, "after:tensors", "pause")
    reader = threading.Thread(target=read_nights)
    try:
        _wait_for(lambda: (tmp_path / "flag.paused").exists() or proc.poll() is not None, 120, "the commit to pause")
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:] if proc.stderr else ""
        # files, models and tensors hold the second night already; runs does not list it.
        assert len(set(DeltaTables(str(out)).read("tensors", columns=["run_id"]).column("run_id").to_pylist())) == 2
        reader.start()
        _wait_for(lambda: len(seen) >= 3, 60, "readers during the paused commit")
        (tmp_path / "flag.go").write_text("go")
        proc.communicate(timeout=120)
        assert proc.returncode == 0  # committed (its errors, on purpose, gate nothing by default)
        _wait_for(lambda: bool(seen) and seen[-1][0] != first.run_id, 60, "a reader to see the second night")
    finally:
        stop.set()
        if reader.is_alive():
            reader.join(30)
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
    nights = {row[0] for row in seen}
    assert first.run_id in nights and len(nights) == 2
    for night, n_files, files, n_tensors, tensors in seen:
        assert n_files == files == SAMPLE_COUNT and tensors == n_tensors > 0, night


def test_a_failed_commit_is_rolled_back_at_once(
    client: Any, tmp_path: Path, local_collection: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    commit = DeltaTables.commit

    def flaky(self: DeltaTables, table: str, parts: Any, run_id: str, *, fence: Any = None) -> int:
        if table == "metadata":
            raise OSError("the store went away")
        return commit(self, table, parts, run_id, fence=fence)

    monkeypatch.setattr(DeltaTables, "commit", flaky)
    out = tmp_path / "out"
    with pytest.raises(OSError, match="went away"):
        run_scan(ScanConfig().replace(roots=(str(local_collection),), out=str(out)), client=client)
    assert _night_rows(out) == {}
    assert Output(str(out)).pending() == [] and Output(str(out)).last_committed_run() is None
    monkeypatch.undo()
    result = run_scan(ScanConfig().replace(roots=(str(local_collection),), out=str(out)), client=client)
    assert set(_night_rows(out)) == {result.run_id} and result.recovered == ()
