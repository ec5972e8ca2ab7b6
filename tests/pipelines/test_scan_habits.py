"""What users of other scanners expect of ``gguf-audit scan``: a dry run, quiet and verbose, a clean failure,
the hint for a missing extra; and shell completion for every command."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pipeline_helpers import SAMPLE_COUNT

from gguf_audit.cli import main
from gguf_audit.testing.http import RangeHTTPServer

REPO = Path(__file__).resolve().parents[2]
BLOCK_S3FS = """
import sys

class _NoS3fs:
    def find_spec(self, name, path=None, target=None):
        if name == "s3fs" or name.startswith("s3fs."):
            raise ImportError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, _NoS3fs())
"""


def _scan(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["scan", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _tree(path: Path) -> dict[str, float]:
    return {str(p.relative_to(path)): p.stat().st_mtime for p in path.rglob("*")}


def test_dry_run_lists_and_estimates_without_reading_or_writing(
    client: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], local_collection: Path
) -> None:
    out = tmp_path / "out"
    status, text, _ = _scan(capsys, str(local_collection), "--out", str(out), "--dry-run")
    assert status == 0, text
    assert f"dry run: {SAMPLE_COUNT} files listed" in text
    assert f"would read {SAMPLE_COUNT} files:" in text
    assert re.search(r"estimate \(headers and sampled blocks\): at most \d+ requests and about [\d.]+ \w+", text)
    assert not out.exists()  # nothing was made

    common = ["--scheduler", str(client.scheduler.address), "--no-progress"]
    assert _scan(capsys, str(local_collection), "--out", str(out), *common)[0] == 0
    before = _tree(out)
    status, text, _ = _scan(capsys, str(local_collection), "--out", str(out), "--incremental", "--dry-run")
    assert status == 0
    assert f": {SAMPLE_COUNT} files unchanged)" in text and "would read 0 files:" in text
    assert "at most 0 requests" in text
    (local_collection / "new.gguf").write_bytes((local_collection / "tiny-llama-Q4_K_M.gguf").read_bytes())
    status, text, _ = _scan(capsys, str(local_collection), "--out", str(out), "--incremental", "--dry-run")
    assert "would read 1 file:" in text and text.count("new.gguf") == 1
    assert _tree(out) == before  # the output untouched


def test_dry_run_reads_no_object(tmp_path: Path, capsys: pytest.CaptureFixture[str], sample: dict[str, bytes]) -> None:
    with RangeHTTPServer(files={"m.gguf": sample["tiny-llama-Q4_K_M.gguf"]}) as srv:
        manifest = tmp_path / "m.txt"
        manifest.write_text(srv.url_for("m.gguf") + "\n")
        status, text, _ = _scan(capsys, "--manifest", str(manifest), "--out", str(tmp_path / "o"), "--dry-run")
        assert status == 0 and "would read 1 file:" in text and "m.gguf" in text
        assert [r for r in srv.requests if r[0] == "GET"] == []


def test_a_failed_scan_removes_the_empty_out_it_made(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    status, _, err = _scan(capsys, str(empty), "--out", str(tmp_path / "made"), "--no-progress")
    assert status == 2 and "no files matched" in err
    assert not (tmp_path / "made").exists()
    kept = tmp_path / "kept"
    kept.mkdir()
    assert _scan(capsys, str(empty), "--out", str(kept), "--no-progress")[0] == 2
    assert kept.is_dir()  # a folder the user made stays


def test_output_files_are_checked_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--sarif, --jsonl (scan) and --html (report) under a parent that is a file: one line, exit 2, nothing read."""
    (tmp_path / "a-file").write_text("not a directory")
    bad = str(tmp_path / "a-file" / "x")
    missing = str(tmp_path / "no-collection")  # listing it would fail: the output paths are refused first
    for flag in ("--sarif", "--jsonl"):
        status, _, err = _scan(capsys, missing, "--out", str(tmp_path / "o"), flag, bad)
        assert status == 2 and err.count("\n") == 1 and "is a file, not a directory" in err, err
    assert not (tmp_path / "o").exists()
    assert main(["report", str(tmp_path / "no-output"), "--html", bad]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "is a file, not a directory" in err and "no-output" not in err, err


def test_quiet_and_verbose(
    client: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], local_collection: Path
) -> None:
    common = ["--scheduler", str(client.scheduler.address)]
    status, out, err = _scan(capsys, str(local_collection), "--out", str(tmp_path / "q"), "-q", *common)
    assert status == 0 and err == ""
    lines = out.splitlines()
    assert len(lines) == 2 and lines[0].startswith("run ") and "committed to" in lines[0]
    assert lines[1].startswith("the run passes --fail-on none")
    status, out, err = _scan(capsys, str(local_collection), "--out", str(tmp_path / "v"), "--dry-run", "-v")
    assert status == 0 and re.search(r"^gguf-audit: INFO gguf_audit\.\S+: listed \d+ files", err, re.M), err
    # before the command, and on a built-in command
    assert main(["-q", "codes", "--json"]) == 0 and main(["codes", "--verbose"]) == 0
    assert main(["inspect", "-q", "-v", "x.gguf"]) == 2  # one or the other


def test_scan_s3_without_s3fs_is_the_documented_hint(tmp_path: Path) -> None:
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text(BLOCK_S3FS)
    env = {**os.environ, "PYTHONPATH": str(hide)}
    done = subprocess.run(
        [sys.executable, "-m", "gguf_audit", "scan", "s3://bucket/models", "--out", str(tmp_path / "o")],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
    )
    hint = "gguf-audit: s3:// URLs need an extra that is not installed: pip install 'gguf-audit[s3]'"
    assert done.returncode == 2 and done.stderr.strip() == hint, done.stderr
    assert hint.removeprefix("gguf-audit: ") in (REPO / "docs" / "cli.md").read_text()
    assert not (tmp_path / "o").exists()


def _complete(script: Path, *words: str) -> list[str]:
    """The words bash's completion function offers for the command line ``words`` (the last one being typed)."""
    line = " ".join(f"'{w}'" for w in words)
    program = (
        f'source {script}; COMP_WORDS=({line}); COMP_CWORD={len(words) - 1}; _gguf_audit; echo "${{COMPREPLY[@]}}"'
    )
    done = subprocess.run(["bash", "-c", program], capture_output=True, text=True, timeout=30, check=True)
    return done.stdout.split()


def test_bash_completion(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["completion", "bash"]) == 0
    script = tmp_path / "gguf-audit.bash"
    script.write_text(capsys.readouterr().out)
    assert set(_complete(script, "gguf-audit", "s")) == {"sample", "scan", "snapshot", "sql"}
    assert "completion" in _complete(script, "gguf-audit", "")
    scan_options = _complete(script, "gguf-audit", "scan", "--d")
    assert scan_options == ["--dry-run"]
    assert set(_complete(script, "gguf-audit", "scan", "x", "--fail-on", "")) == {
        "none",
        "error",
        "warning",
        "new-error",
        "aborts",
    }
    assert "--quiet" in _complete(script, "gguf-audit", "-v", "inspect", "--q")
    assert _complete(script, "gguf-audit", "inspect", "--format", "j") == ["json", "jsonl"]
    for shell in ("zsh", "fish"):
        assert main(["completion", shell]) == 0
        text = capsys.readouterr().out
        assert "scan" in text and "dry-run" in text and "new-error" in text
    assert "python" not in script.read_text()  # a TAB runs no Python
