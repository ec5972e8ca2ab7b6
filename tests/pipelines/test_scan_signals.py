"""Stopping a scan as cron, systemd, Kubernetes and a person at the terminal do.

The real command runs in a subprocess with its own local dask cluster over a
slow HTTP collection; once its workers are writing, it gets SIGTERM or SIGINT.
It must stop within seconds with one line and 143 or 130, commit nothing, and
leave no process behind: every descendant seen while it ran (nannies,
workers, template children) is gone after it exits.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from gguf_audit.testing.http import RangeHTTPServer

pytestmark = pytest.mark.slow  # real scans in subprocesses, signalled: outside the fast loop


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


@pytest.mark.parametrize(("signum", "status"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_stops_the_scan_cleanly(
    tmp_path: Path, sample: dict[str, bytes], signum: signal.Signals, status: int
) -> None:
    name, data = next((k, v) for k, v in sample.items() if "-of-" not in k)
    files = {f"m{i:03d}-{Path(name).name}": data for i in range(40)}
    out = tmp_path / "out"
    with RangeHTTPServer(files=files, latency_s=0.3) as srv:
        manifest = tmp_path / "urls.txt"
        manifest.write_text("".join(f"{srv.url_for(n)}\n" for n in files))
        argv = [
            sys.executable, "-m", "gguf_audit", "scan", "--manifest", str(manifest), "--out", str(out),
            "--workers", "1", "--no-progress", "--no-dashboard", "--batch-size", "2", "--threads", "2",
        ]  # fmt: skip
        proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        seen: set[int] = set()
        deadline = time.monotonic() + 90
        # Wait until the cluster's processes run and the server has answered some reads.
        while time.monotonic() < deadline and proc.poll() is None:
            seen.update(p.pid for p in _descendants(proc.pid))
            if len(srv.requests) >= 4 and len(seen) >= 2:
                break
            time.sleep(0.05)
        assert proc.poll() is None, proc.communicate()[1][-2000:]
        seen.update(p.pid for p in _descendants(proc.pid))
        sent = time.monotonic()
        proc.send_signal(signum)
        stdout, stderr = proc.communicate(timeout=60)
        took = time.monotonic() - sent
    assert proc.returncode == status, stderr[-2000:]
    for noise in ("Traceback", "CancelledError", "CommClosedError", "Exception"):
        assert noise not in stderr, stderr[-3000:]
    assert stderr.strip().splitlines()[-1] == (
        f"gguf-audit scan: {signal.Signals(signum).name} received; nothing was committed"
    ), stderr[-2000:]
    assert stdout == ""
    assert took < 30, f"took {took:.1f} s to stop"
    alive = [pid for pid in seen if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert alive == [], f"left behind: {alive}"
    # Nothing committed: no table has a version a reader could see.
    assert list(out.glob("*/_delta_log/*.json")) == []


def test_an_unreachable_store_is_one_line_and_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Port 9 (discard) on loopback: nothing listens, the connection is refused at once.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    argv = [
        sys.executable, "-m", "gguf_audit", "scan", "s3://bucket/models", "--out", str(tmp_path / "out"),
        "--no-progress", "--storage-options", '{"client_kwargs": {"endpoint_url": "http://127.0.0.1:9"}}',
    ]  # fmt: skip
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr[-3000:]
    assert lines[0].startswith("gguf-audit: scan: the run failed, nothing was committed: cannot list root ")
    assert "'s3://bucket/models': ConnectionError: Could not connect to the endpoint URL" in lines[0]
    assert "127.0.0.1:9" in lines[0] and "Traceback" not in done.stderr
