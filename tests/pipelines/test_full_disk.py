"""A scan whose output disk fills up: one line and exit 2 (the lease that cannot be given back is no second line).

The disk is a real, small tmpfs mounted for the test; mounting needs root (CI runs as root), elsewhere the
test skips with that reason.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from corpus import corpus_dir


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    where = tmp_path / "disk"
    where.mkdir()
    mounted = (
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "size=600k", "tmpfs", str(where)],
            capture_output=True,
            text=True,
            check=False,
        )
        if shutil.which("mount")
        else None
    )
    if mounted is None or mounted.returncode != 0:
        pytest.skip(
            f"cannot mount a small tmpfs here (needs root): {mounted.stderr.strip() if mounted else 'no mount'}"
        )
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=False)


@pytest.mark.slow
def test_a_full_output_disk_is_one_line(tmp_path: Path, small_disk: Path) -> None:
    models = corpus_dir() / "models"  # nine real models: their tables' rows are bigger than the disk
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gguf_audit",
            "scan",
            str(models),
            "--out",
            str(small_disk / "out"),
            "--workers",
            "1",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 2, done.stderr
    said = [line for line in done.stderr.splitlines() if line.startswith("gguf-audit")]
    assert len(said) == 1, done.stderr
    assert "No space left on device" in said[0]
    assert "could not release" not in done.stderr and "Traceback" not in done.stderr
