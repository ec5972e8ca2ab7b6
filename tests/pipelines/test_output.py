"""The output: its preflight, one commit per table with runs last, and the recovery of an interrupted commit."""

from __future__ import annotations

import uuid
from pathlib import Path

import pyarrow as pa
import pytest
from pipeline_helpers import file_row, read_only_dir, s3_options

from gguf_audit.pipelines.store.output import COMMIT_ORDER, Output, OutputError
from gguf_audit.pipelines.store.parts import PartFile, RunParts
from gguf_audit.tables.schema import SCHEMAS, rows_to_table
from gguf_audit.testing.s3 import MotoS3Server


def test_preflight_refuses_what_cannot_take_a_run(tmp_path: Path) -> None:
    Output(str(tmp_path / "new" / "out")).preflight()  # a missing directory is made
    assert (tmp_path / "new" / "out").is_dir() and list((tmp_path / "new" / "out").iterdir()) == []
    (tmp_path / "f").write_text("a file")
    with pytest.raises(OutputError, match=r"'.*/f' is a file, not a directory\. Got '.*/f/out'\."):
        Output(str(tmp_path / "f" / "out")).preflight()
    with read_only_dir(tmp_path / "ro") as ro, pytest.raises(OutputError, match="cannot write to the output"):
        Output(str(ro / "out")).preflight()
    with pytest.raises(OutputError, match="deltalake cannot commit to memory://"):
        Output("memory://x/out").preflight()
    old = tmp_path / "old"
    (old / "files" / "run_id=r1").mkdir(parents=True)
    (old / "files" / "run_id=r1" / "part-00000.parquet").write_bytes(b"PAR1")
    with pytest.raises(OutputError, match="no Delta log"):
        Output(str(old)).preflight()


def test_an_unreachable_store_is_named_as_one_not_as_a_missing_bucket(aws_env: None) -> None:
    """s3fs's exists() answers False for a store it cannot reach: the preflight said 'the bucket does not exist'
    after 23 s. It names the connection error now."""
    closed = {"client_kwargs": {"endpoint_url": "http://127.0.0.1:1", "region_name": "us-east-1"},
              "config_kwargs": {"proxies": {}, "connect_timeout": 1, "retries": {"max_attempts": 1}}}  # fmt: skip
    with pytest.raises(OutputError, match=r"cannot reach the store of s3://bucket/audit: Could not connect") as err:
        Output("s3://bucket/audit", closed).preflight()
    assert "does not exist" not in str(err.value)


def test_preflight_on_s3_never_creates_a_bucket(moto: MotoS3Server) -> None:
    missing = f"missing-{uuid.uuid4().hex[:10]}"
    with pytest.raises(OutputError, match=rf"the bucket '{missing}' does not exist \(gguf-audit never creates one\)"):
        Output(f"s3://{missing}/audit", s3_options(moto)).preflight()
    assert missing not in {b["Name"] for b in moto.client().list_buckets()["Buckets"]}
    present = f"present-{uuid.uuid4().hex[:10]}"
    moto.make_bucket(present)
    Output(f"s3://{present}/audit", s3_options(moto)).preflight()
    assert moto.client().list_objects_v2(Bucket=present).get("KeyCount") == 0  # the probe is gone


def _write(out: Output, run_id: str, table: str, rows: list[dict[str, object]]) -> PartFile:
    parts = RunParts(out.url, out.fsspec_options, run_id, "t", (table,))
    parts.write(table, rows_to_table(table, rows))
    [part] = parts.close()
    return part


def _runs_part(out: Output, run_id: str) -> PartFile:
    from datetime import UTC, datetime

    now = datetime.now(UTC)
    row = {
        "schema_version": 1, "tool_version": "t", "status": "committed", "started_at": now, "finished_at": now,
        "incremental": False, **{k: 0 for k in SCHEMAS["runs"].names if k.startswith("n_")},
        "requests": 0, "bytes_read": 0, "collection_bytes": 0, "listing_seconds": 0.0, "seconds": 0.0,
        "files_per_second": 0.0,
    }  # fmt: skip
    return _write(out, run_id, "runs", [row])


def test_a_failed_commit_leaves_every_table_at_its_previous_version(tmp_path: Path) -> None:
    out = Output(str(tmp_path / "out"))
    out.preflight()
    first = {"files": [_write(out, "r1", "files", [file_row("a", "r1")])]}
    versions = out.commit("r1", first, lambda v: _runs_part(out, "r1"))
    assert set(versions) == set(COMMIT_ORDER) and versions["files"] == 0
    assert out.last_committed_run() == "r1" and out.pending() == []

    second = {"files": [_write(out, "r2", "files", [file_row("a", "r2"), file_row("b", "r2")])]}

    def broken_runs(v: dict[str, int]) -> PartFile:
        raise OSError("the store went away")

    with pytest.raises(OSError, match="went away"):
        out.commit("r2", second, broken_runs)
    # files took r2's rows, then lost them again: a later version, the same rows as before.
    assert out.delta.version("files") == 2
    assert out.read("files", ["r1", "r2"], columns=["url", "run_id"]).to_pylist() == [{"url": "a", "run_id": "r1"}]
    assert out.pending() == [] and out.last_committed_run() == "r1"


def test_recover_rolls_back_a_commit_whose_driver_died(tmp_path: Path) -> None:
    out = Output(str(tmp_path / "out"))
    out.preflight()
    out.commit("r1", {"files": [_write(out, "r1", "files", [file_row("a", "r1")])]}, lambda v: _runs_part(out, "r1"))
    # A driver that died after committing files and before runs: its marker and its files rows are left.
    out.fs.pipe_file(out.path("_pending", "r2.json"), b"{}")
    out.delta.commit("files", [_write(out, "r2", "files", [file_row("b", "r2")])], "r2")
    # A driver that died after its runs row, before removing its marker.
    out.fs.pipe_file(out.path("_pending", "r1.json"), b"{}")
    assert out.read("files", ["r2"]).num_rows == 1
    done = {(r.run_id, r.action) for r in out.recover()}
    assert done == {("r2", "rolled back"), ("r1", "cleaned")}
    assert out.read("files", ["r2"]).num_rows == 0
    assert out.read("files", ["r1"]).num_rows == 1
    assert out.pending() == [] and out.recover() == []


def test_reading_an_older_table_gives_new_columns_as_null(tmp_path: Path) -> None:
    """A table written before a column was added reads it as null; the next commit adds it to the table."""
    import pyarrow.parquet as pq
    from deltalake import Schema
    from deltalake.transaction import AddAction, create_table_with_add_actions

    out = Output(str(tmp_path / "out"))
    out.preflight()
    row = {"model_id": "m", "sharded": False, "shard_count": 1, "n_files": 1, "complete": True, "status": "ok",
           "n_problems": 0}  # fmt: skip
    older = pa.schema([f for f in SCHEMAS["models"] if f.name not in ("source_run_id", "run_id")])
    old_file = tmp_path / "out" / "models" / "run_id=r0" / "part-old.parquet"
    old_file.parent.mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist([row], schema=older), old_file)
    add = AddAction("run_id=r0/part-old.parquet", old_file.stat().st_size, {"run_id": "r0"}, 0, True, "{}")
    create_table_with_add_actions(
        out.delta.uri("models"),
        Schema.from_arrow(pa.schema([*older, SCHEMAS["models"].field("run_id")])),
        [add],
        mode="append",
        partition_by=["run_id"],
    )
    out.delta.commit("models", [_write(out, "r1", "models", [{**row, "source_run_id": "r1"}])], "r1")
    assert "source_run_id" in {f.name for f in out.delta.open("models").schema().fields}  # type: ignore[union-attr]
    rows = out.read("models", ["r0", "r1"], columns=["model_id", "source_run_id", "run_id"]).to_pylist()
    assert sorted(rows, key=lambda r: str(r["run_id"])) == [
        {"model_id": "m", "source_run_id": None, "run_id": "r0"},
        {"model_id": "m", "source_run_id": "r1", "run_id": "r1"},
    ]
