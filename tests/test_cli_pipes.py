"""The command as a shell runs it: ``python -m gguf_audit``, and output into a pipe whose reader left.

Each case runs the real command in a subprocess whose standard output is a
pipe closed before the command writes, the way ``| head -1`` leaves it once
the first line is read: the command must end at once with the status a shell
reports for SIGPIPE, and print no traceback.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from corpus import corpus_dir

from gguf_audit.cli import EXIT_BROKEN_PIPE


def _run_into_closed_pipe(*args: str) -> tuple[int, str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "gguf_audit", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.close()  # the reader is gone before anything is written
    stderr = proc.stderr.read()
    return proc.wait(timeout=120), stderr


def test_python_dash_m_runs_the_command() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "gguf_audit", "codes", "--json"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert '"code": "header.bad_magic"' in done.stdout


@pytest.mark.parametrize(
    "args",
    [
        ("codes", "--markdown"),
        ("codes",),
        ("inspect", "--json", "{model}"),
        ("inspect", "{model}"),
    ],
    ids=["codes-markdown", "codes", "inspect-json", "inspect-text"],
)
def test_a_closed_pipe_ends_quietly(args: tuple[str, ...]) -> None:
    model = str(corpus_dir() / "models" / "tiny-llama-Q8_0.gguf")
    status, stderr = _run_into_closed_pipe(*(a.replace("{model}", model) for a in args))
    assert status == EXIT_BROKEN_PIPE
    assert "Traceback" not in stderr
    assert "BrokenPipeError" not in stderr
    assert stderr == ""
