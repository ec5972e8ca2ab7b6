"""Writers at once on one output: scans and a vacuum, on a local disk and on moto's S3 (issue 22, item 1).

Before the lease, a scan (or ``tables --vacuum``) started while another scan
was between its first table commit and its ``runs`` commit rolled that night
back, and the first scan then recorded a night whose detail rows were gone.
Here a real scan is held inside its commit (an observer that blocks, or a
driver process stopped with SIGSTOP) while the others start. Every test ends
by checking that no ``runs`` row lacks its rows and no live night was undone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from pipeline_helpers import SAMPLE_COUNT, s3_options

from gguf_audit.cli import main as cli_main
from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.scan.run import ScanObserver, run_scan
from gguf_audit.pipelines.store.lease import LeaseHeld
from gguf_audit.pipelines.store.output import COMMIT_ORDER, Output
from gguf_audit.testing.s3 import MotoS3Server


@pytest.fixture(params=["local", "s3"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, dict[str, Any] | None]]:
    """``--out`` on a local disk or in a fresh moto bucket, with its storage options."""
    if request.param == "local":
        yield str(tmp_path / "out"), None
        return
    moto: MotoS3Server = request.getfixturevalue("moto")
    bucket = f"writers-{uuid.uuid4().hex[:10]}"
    moto.make_bucket(bucket)
    yield f"s3://{bucket}/out", s3_options(moto)


def _config(collection: Path, target: tuple[str, dict[str, Any] | None], **kw: Any) -> ScanConfig:
    return ScanConfig(
        roots=(str(collection),),
        out=target[0],
        out_storage_options=target[1],
        samples=False,
        compare=False,
        **kw,
    )


def _check_nights(out: Output, live: list[str], gone: list[str]) -> None:
    """``live`` are exactly the committed nights, each with every listed file's rows; ``gone`` left no row."""
    runs = out.committed_runs().to_pylist()
    assert sorted(r["run_id"] for r in runs) == sorted(live)
    for row in runs:
        files = out.read("files", [row["run_id"]])
        assert files.num_rows == row["n_files"] == SAMPLE_COUNT  # no night recorded without its rows
        for table, count in row["rows_written"].items():
            if table != "runs":
                assert out.read(table, [row["run_id"]]).num_rows == count, table
        assert out.read("tensors", [row["run_id"]]).num_rows > 0
    for table in COMMIT_ORDER:
        assert out.read(table, gone).num_rows == 0, table
    assert out.pending() == []


def _vacuum_cli(target: tuple[str, dict[str, Any] | None], *extra: str) -> list[str]:
    options = ["--storage-options", json.dumps(target[1])] if target[1] else []
    return ["tables", target[0], "--vacuum", "--keep-nights", "5", "--min-age-hours", "0", *options, *extra]


class _PauseAfterFirstCommit(ScanObserver):
    """Holds the scan inside its commit: after its first table's commit, before the others and ``runs``."""

    def __init__(self) -> None:
        self.paused = threading.Event()
        self.resume = threading.Event()

    def committed(self, table: str, version: int) -> None:
        if table == COMMIT_ORDER[0]:
            self.paused.set()
            self.resume.wait(120)


def test_writers_started_during_a_commit_are_refused_or_wait(
    client: Any,
    local_collection: Path,
    target: tuple[str, dict[str, Any] | None],
    capsys: pytest.CaptureFixture[str],
) -> None:
    config = _config(local_collection, target)
    out = Output(target[0], target[1])
    pause = _PauseAfterFirstCommit()
    results: dict[str, Any] = {}

    def scan(name: str, cfg: ScanConfig, observer: ScanObserver | None = None) -> None:
        try:
            results[name] = run_scan(cfg, client=client, observer=observer)
        except Exception as exc:  # noqa: BLE001 - the test reads it
            results[name] = exc

    first = threading.Thread(target=scan, args=("first", config, pause))
    first.start()
    assert pause.paused.wait(180), results
    holder = out.pending()
    assert len(holder) == 1 and out.committed_runs().num_rows == 0  # inside its commit: files in, runs not

    # A second scan: refused at once, one line naming the holder, nothing rolled back.
    with pytest.raises(LeaseHeld, match=rf"is being written by scan {holder[0]} \(host .*, pid {os.getpid()}"):
        run_scan(config, client=client)
    if target[1] is None:  # the same through the command (its flags reach a local --out)
        status = cli_main(["scan", str(local_collection), "--out", target[0], "--no-progress", "--no-samples"])
        err = capsys.readouterr().err.strip().splitlines()
        assert status == 2 and len(err) == 1, err
        assert err[0].startswith(f"gguf-audit: scan: {target[0]} is being written by scan {holder[0]}")
    # A vacuum: the same.
    assert cli_main(_vacuum_cli(target)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("gguf-audit: tables: ") and f"scan {holder[0]}" in err[0], err
    assert out.read("files", holder).num_rows == SAMPLE_COUNT  # the live night is untouched

    # A scan that waits: it starts once the first has committed and released.
    waiting = threading.Thread(target=scan, args=("waiting", config.replace(lease_wait_s=120.0)))
    waiting.start()
    time.sleep(1.0)
    assert "waiting" not in results
    pause.resume.set()
    first.join(180)
    waiting.join(180)
    assert results["first"].run_id == holder[0], results
    assert results["waiting"].recovered == (), results
    _check_nights(out, [holder[0], results["waiting"].run_id], [])
    # With no writer left, vacuum runs (and says what it removed).
    assert cli_main(_vacuum_cli(target)) == 0
    said = capsys.readouterr().out
    assert "kept 2 nights, dropped 0" in said and "removed " in said


_STOP_AFTER_FILES = textwrap.dedent(
    """
    import os, signal, sys
    from gguf_audit.pipelines.scan import run

    def committed(self, table, version):  # the driver stops itself inside its commit, as SIGSTOP would find it
        if table == "files":
            os.kill(os.getpid(), signal.SIGSTOP)

    run.ScanObserver.committed = committed
    from gguf_audit.cli import main
    sys.exit(main(sys.argv[1:]))
    """
)


@pytest.mark.slow
def test_a_driver_stopped_in_its_commit_loses_its_expired_lease_and_records_nothing(
    client: Any, local_collection: Path, target: tuple[str, dict[str, Any] | None], tmp_path: Path
) -> None:
    expiry_s = 4.0
    toml = [f"[scan]\nlease_expiry_s = {expiry_s}\n"]
    if target[1] is not None:
        endpoint = target[1]["client_kwargs"]["endpoint_url"]
        toml.append(
            f'[out_storage_options]\nclient_kwargs = {{ endpoint_url = "{endpoint}", region_name = "us-east-1" }}\n'
            "config_kwargs = { proxies = {} }\n"
        )
    cfg = tmp_path / "stopped.toml"
    cfg.write_text("".join(toml))
    argv = [
        sys.executable, "-c", _STOP_AFTER_FILES, "scan", str(local_collection), "--out", target[0],
        "--config", str(cfg), "--scheduler", str(client.scheduler.address), "--no-progress", "--no-samples",
        "--no-compare",
    ]  # fmt: skip
    proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180
        while psutil.Process(proc.pid).status() != psutil.STATUS_STOPPED:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-2000:]
            time.sleep(0.05)
        stopped_at = time.monotonic()
        out = Output(target[0], target[1])
        [stopped] = out.pending()
        assert out.read("files", [stopped]).num_rows == SAMPLE_COUNT and out.committed_runs().num_rows == 0

        # While its lease is live (the process exists, its heartbeat is fresh): refused.
        with pytest.raises(LeaseHeld, match=rf"scan {stopped} \(host .*, pid {proc.pid}"):
            run_scan(_config(local_collection, target), client=client)
        assert cli_main(_vacuum_cli(target)) == 2
        assert out.read("files", [stopped]).num_rows == SAMPLE_COUNT

        # Once it expired, the next scan takes the lease and rolls the stopped night back.
        time.sleep(max(0.0, stopped_at + expiry_s + 0.5 - time.monotonic()))
        second = run_scan(_config(local_collection, target), client=client)
        assert [(r.run_id, r.action) for r in second.recovered] == [(stopped, "rolled back")]
    finally:
        proc.send_signal(signal.SIGCONT)
    _, stderr = proc.communicate(timeout=120)
    lines = stderr.strip().splitlines()
    assert proc.returncode == 2, stderr[-3000:]
    assert "Traceback" not in stderr and lines[-1].startswith("gguf-audit: scan: this writer's lease"), stderr[-3000:]
    assert lines[-1].endswith("nothing was recorded")
    _check_nights(out, [second.run_id], [stopped])


def test_readers_never_see_the_rows_of_a_killed_commit(
    client: Any, local_collection: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 22 item 7: a driver killed between its first commit and ``runs`` leaves rows in the detail tables
    until the next scan or vacuum; every reader gguf-audit ships, and the documented SQL, shows none of them."""
    from gguf_audit.pipelines.nights.export import night_jsonl
    from gguf_audit.pipelines.nights.nightview import file_rows, night_problems, nights
    from gguf_audit.pipelines.nights.picture import picture_table
    from gguf_audit.pipelines.store.duck import connect
    from gguf_audit.pipelines.store.parts import RunParts
    from gguf_audit.tables.schema import rows_to_table

    target = (str(tmp_path / "out"), None)
    night = run_scan(_config(local_collection, target), client=client).run_id
    out = Output(target[0])
    before = {t: picture_table(out, t).num_rows for t in ("files", "tensors", "problems")}
    jsonl, problems = night_jsonl(out), night_problems(out, night).num_rows
    # The killed run: its marker, then files, tensors and problems committed for the same urls; no runs row.
    killed = "29990101T000000000Z-deadbeef"
    url = out.read("files", [night], columns=["url"])["url"][0].as_py()
    out.fs.pipe_file(out.path("_pending", f"{killed}.json"), b"{}")
    for table, row in (
        ("files", {"url": url, "model_id": url, "status": "error", "n_problems": 1, "n_errors": 1, "n_warnings": 0,
                   "bytes_read": 1, "requests": 1, "io_seconds": 0.0, "seconds": 0.0, "source_run_id": killed,
                   "reused": False}),
        ("tensors", {"url": url, "model_id": url, "index": 0, "name": "ghost.weight", "type": "F32", "type_id": 0,
                     "n_dims": 1, "source_run_id": killed}),
        ("problems", {"url": url, "model_id": url, "scope": "file", "code": "ghost.code", "severity": "error",
                      "message": "a row of a night that never was", "source_run_id": killed}),
    ):  # fmt: skip
        parts = RunParts(out.url, out.fsspec_options, killed, "k", (table,))
        parts.write(table, rows_to_table(table, [row]))
        out.delta.commit(table, parts.close(), killed)
    assert out.read("tensors", [killed]).num_rows == 1  # there, in the raw table

    assert [r["run_id"] for r in nights(out)] == [night]
    assert {t: picture_table(out, t).num_rows for t in before} == before
    assert night_jsonl(out) == jsonl and night_problems(out, night).num_rows == problems
    assert all(f.url != url or f.status != "error" for f in file_rows(out, night))
    assert cli_main(["snapshot", target[0], "--run", killed, "--to", str(tmp_path / "snap")]) == 2
    assert f"no committed night {killed!r}" in capsys.readouterr().err
    # The SQL docs/tables.md gives for reading a detail table whole: only committed nights' rows.
    con = connect()
    try:
        raw = con.sql(f"SELECT count(*) FROM delta_scan('{target[0]}/problems') WHERE code = 'ghost.code'")
        committed = con.sql(
            f"SELECT count(*) FROM delta_scan('{target[0]}/problems') "
            f"WHERE run_id IN (SELECT run_id FROM delta_scan('{target[0]}/runs')) AND code = 'ghost.code'"
        )
        assert (raw.fetchone(), committed.fetchone()) == ((1,), (0,))
    finally:
        con.close()
    # The next writer rolls it back.
    assert cli_main(_vacuum_cli(target)) == 0
    assert f"first rolled back the interrupted run {killed}" in capsys.readouterr().out
    assert out.read("tensors", [killed]).num_rows == 0
