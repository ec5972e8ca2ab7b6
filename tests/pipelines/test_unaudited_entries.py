"""A listed entry that could not be audited never passes a gate (issue 34, item 3).

Before, a file whose name is not UTF-8 (or a broken link, a FIFO named like a
model) was only named in ``runs.skipped``, and the night "passed --fail-on
error": a way to hide a file from the audit by its name. Now each such entry
is a ``files`` row of its own with an error-severity ``problems`` row and an
``io.*`` code, through the real CLI, and every gate counts it: ``scan
--fail-on error``, ``--fail-on new-error`` on the night it appears (not the
next), and ``diff --fail-on error``.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from pipeline_helpers import read_dataset

from gguf_audit.cli import main


def _collection(root: Path, sample: dict[str, bytes]) -> bytes:
    """A good model, and a copy of it under a name that is not UTF-8; the hidden file's path as bytes."""
    (root / "ok").mkdir(parents=True)
    (root / "ok" / "tiny-Q4_K_M.gguf").write_bytes(sample["tiny-llama-Q4_K_M.gguf"])
    hidden = os.fsencode(root) + b"/ok/evil\xfe.gguf"
    with open(hidden, "wb") as f:
        f.write(sample["tiny-llama-Q4_K_M.gguf"])
    return hidden


def _scan(root: Path, out: Path, client: Any, *flags: str) -> int:
    argv = ["scan", str(root), "--out", str(out), "--scheduler", client.scheduler.address, "--no-progress"]
    return main([*argv, "--no-samples", "--no-compare", *flags])


@pytest.mark.slow
@pytest.mark.cluster
def test_a_name_that_is_not_utf8_is_an_error_row_every_gate_counts(
    client: Any, tmp_path: Path, sample: dict[str, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    root, out = tmp_path / "models", tmp_path / "out"
    _collection(root, sample)
    assert _scan(root, out, client, "--fail-on", "error") == 1
    printed = capsys.readouterr().out
    assert "the run fails --fail-on error" in printed

    shown = f"file://{root}/ok/evil\\xfe.gguf"  # its bytes escaped: a URL the tables and a terminal can hold
    files = read_dataset(out, "files").sort_by("url")
    assert files.column("url").to_pylist() == [shown, f"file://{root}/ok/tiny-Q4_K_M.gguf"]
    assert files.column("n_errors").to_pylist() == [1, 0]
    problems = read_dataset(out, "problems").filter(pc.field("url") == shown).to_pylist()
    assert [(p["code"], p["severity"]) for p in problems] == [("io.name_not_utf8", "error")]
    assert "not UTF-8" in problems[0]["message"]
    assert read_dataset(out, "runs").column("n_skipped").to_pylist() == [0]
    assert main(["diff", str(out), "--fail-on", "error"]) == 1  # the first night's errors are new

    # The next night the entry is still there: an error each night, new only on the night it appeared.
    assert _scan(root, out, client, "--fail-on", "new-error") == 0
    assert _scan(root, out, client, "--fail-on", "error") == 1
    capsys.readouterr()
    nights = read_dataset(out, "files").filter(pc.field("url") == shown)
    assert nights.num_rows == 3 and set(nights.column("n_errors").to_pylist()) == {1}


@pytest.mark.slow
@pytest.mark.cluster
def test_broken_links_and_special_files_count_against_the_gate(
    client: Any, tmp_path: Path, sample: dict[str, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    root, out = tmp_path / "models", tmp_path / "out"
    (root / "ok").mkdir(parents=True)
    (root / "ok" / "tiny-Q4_K_M.gguf").write_bytes(sample["tiny-llama-Q4_K_M.gguf"])
    (root / "ok" / "gone.gguf").symlink_to("missing.gguf")
    os.mkfifo(root / "ok" / "pipe.gguf")
    assert _scan(root, out, client) == 0  # the default gate: a committed night exits 0
    assert _scan(root, out, client, "--fail-on", "error") == 1
    capsys.readouterr()
    problems = read_dataset(out, "problems").filter(pc.field("url").is_valid())
    codes = sorted(zip(problems.column("url").to_pylist(), problems.column("code").to_pylist(), strict=True))
    base = f"file://{root}/ok"
    assert set(codes) == {(f"{base}/gone.gguf", "io.broken_link"), (f"{base}/pipe.gguf", "io.not_listable")}
