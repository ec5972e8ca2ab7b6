"""The output store: recovering staged runs an earlier scan left behind."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

from gguf_audit.pipelines.store import COMMIT_MARKER, Output, new_run_id


def _stage(out: Output, run_id: str, *, marker: bool, tables: tuple[str, ...] = ()) -> None:
    staging = out.staging(run_id)
    out.fs.makedirs(f"{staging}/files", exist_ok=True)
    out.fs.pipe_file(f"{staging}/files/part-00000.parquet", b"x")
    if marker:
        out.fs.pipe_file(f"{staging}/{COMMIT_MARKER}", json.dumps({"run_id": run_id}).encode())
    for table in tables:
        out.fs.makedirs(out.partition(table, run_id), exist_ok=True)
        out.fs.pipe_file(f"{out.partition(table, run_id)}/part-00000.parquet", b"x")


def test_recover(tmp_path: Path) -> None:
    out = Output(str(tmp_path / "out"))
    now = datetime(2026, 1, 2, 12, 0, tzinfo=UTC)
    interrupted = new_run_id(now - timedelta(minutes=1))
    committed = new_run_id(now - timedelta(minutes=2))
    running = new_run_id(now - timedelta(minutes=3))
    abandoned = new_run_id(now - timedelta(days=3))
    _stage(out, interrupted, marker=True, tables=("files", "models"))
    _stage(out, committed, marker=True, tables=("files", "runs"))
    _stage(out, running, marker=False)
    _stage(out, abandoned, marker=False)

    done = {(r.run_id, r.action) for r in out.recover(now=now)}
    assert done == {(interrupted, "rolled back"), (committed, "cleaned"), (abandoned, "removed")}
    assert not out.fs.exists(out.partition("files", interrupted))
    assert not out.fs.exists(out.partition("models", interrupted))
    assert out.fs.exists(out.partition("files", committed))  # a committed run is never touched
    assert out.fs.exists(out.staging(running))  # another scan may still be staging it
    assert out.recover(now=now) == []
