"""Ctrl-C at the start of a scan and under its progress bar: one line of its own, no dask traceback."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from gguf_audit.testing.http import RangeHTTPServer

pytestmark = pytest.mark.slow  # real scans in subprocesses, interrupted: outside the fast loop

MESSAGE = "gguf-audit scan: SIGINT received; nothing was committed"


class _Scan:
    """A real scan in a subprocess, its standard error read as it comes (a bar's ``\\r`` included)."""

    def __init__(self, argv: list[str], cwd: Path) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "gguf_audit", "scan", *argv],
            cwd=cwd,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.err: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stderr is not None
        while ch := self.proc.stderr.read(1):
            self.err.append(ch)

    def wait_for(self, text: str, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while text not in "".join(self.err):
            assert self.proc.poll() is None and time.monotonic() < deadline, "".join(self.err)[-2000:]
            time.sleep(0.01)

    def interrupt(self) -> str:
        self.proc.send_signal(signal.SIGINT)
        assert self.proc.wait(timeout=60) == 130
        self.reader.join(timeout=10)
        return "".join(self.err)


@pytest.mark.parametrize("after_listing", [0.0, 0.4, 0.8, 1.2])
def test_ctrl_c_while_the_cluster_starts_is_one_line(
    tmp_path: Path, local_collection: Path, after_listing: float
) -> None:
    scan = _Scan([str(local_collection), "--out", str(tmp_path / "out"), "--workers", "2"], tmp_path)
    scan.wait_for("listed ")  # the local cluster starts right after the listing
    time.sleep(after_listing)
    err = scan.interrupt()
    assert "Traceback" not in err and "Error" not in err, err
    assert MESSAGE in err.splitlines(), err


@pytest.mark.parametrize("bar_seconds", [0.2, 1.5])
def test_the_message_is_not_glued_to_the_progress_bar(
    tmp_path: Path, sample: dict[str, bytes], bar_seconds: float
) -> None:
    name, data = next((k, v) for k, v in sample.items() if "-of-" not in k)
    files = {f"m{i:03d}-{Path(name).name}": data for i in range(40)}
    with RangeHTTPServer(files=files, latency_s=0.3) as srv:
        manifest = tmp_path / "urls.txt"
        manifest.write_text("".join(f"{srv.url_for(n)}\n" for n in files))
        argv = ["--manifest", str(manifest), "--out", str(tmp_path / "out"), "--workers", "1", "--no-dashboard"]
        scan = _Scan(argv, tmp_path)
        scan.wait_for("file/s]")  # the bar is drawn
        time.sleep(bar_seconds)
        err = scan.interrupt()
    # Each piece a terminal would show on a line (a bar redraws after \r): the message is one on its own.
    assert MESSAGE in re.split(r"[\r\n]", err), err
    assert "Traceback" not in err, err
