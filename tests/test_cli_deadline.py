"""``inspect --deadline``: one wall-clock deadline for a whole file, against a server that trickles."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gguf_audit.testing.builder import build_gguf, tiny_llama_like
from gguf_audit.testing.http import RangeHTTPServer

pytestmark = pytest.mark.slow  # the CLI in subprocesses against slow servers: outside the fast loop


@pytest.fixture(scope="module")
def trickling() -> Iterator[RangeHTTPServer]:
    kvs, tensors = tiny_llama_like()
    # Two bytes a second: the first 512 KiB request alone would take three days.
    with RangeHTTPServer(files={"m.gguf": build_gguf(kvs, tensors)}, trickle_bytes_per_s=2) as server:
        yield server


def _inspect(*args: str, timeout: float = 90) -> tuple[subprocess.CompletedProcess[str], float]:
    began = time.monotonic()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "gguf_audit", "inspect", *args], capture_output=True, text=True, timeout=timeout, env=env
    )
    return done, time.monotonic() - began


@pytest.mark.parametrize("samples", [[], ["--samples"]])
def test_a_trickling_server_ends_at_the_deadline(trickling: RangeHTTPServer, samples: list[str]) -> None:
    done, seconds = _inspect(trickling.url_for("m.gguf"), "--deadline", "2", "--format", "json", *samples)
    assert done.returncode == 2, done.stderr
    out = json.loads(done.stdout)
    [problem] = out["problems"]
    assert problem["code"] == "run.file_deadline" and "deadline of 2 s" in problem["message"]
    assert out["loadable"] is None and out["status"] == "unreadable"
    assert seconds < 30
    assert done.stderr == ""


def test_a_file_within_its_deadline_is_judged(tmp_path: Path) -> None:
    kvs, tensors = tiny_llama_like()
    path = tmp_path / "m.gguf"
    path.write_bytes(build_gguf(kvs, tensors))
    done, _ = _inspect(str(path), "--deadline", "60", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert "run.file_deadline" not in {p["code"] for p in json.loads(done.stdout)["problems"]}


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf"])
def test_a_deadline_that_is_not_a_positive_number_is_a_usage_error(value: str) -> None:
    done, _ = _inspect("whatever.gguf", "--deadline", value)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        f"gguf-audit: --deadline must be a positive number of seconds. Got {float(value)}."
    ]
