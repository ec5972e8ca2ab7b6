"""The worker side: a batch's task writes its rows as data files and never raises, whatever breaks inside it."""

from __future__ import annotations

import functools
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from gguf_audit.audit import AuditConfig
from gguf_audit.codes import Code
from gguf_audit.pipelines.store import parts as parts_module
from gguf_audit.pipelines.store.parts import STATISTICS_COLUMNS
from gguf_audit.pipelines.work import execute as execute_module
from gguf_audit.pipelines.work.batches import make_batches
from gguf_audit.pipelines.work.deadline import wait_for_files
from gguf_audit.pipelines.work.execute import WORKER_POOLS, BatchResult, TaskOptions, audit_batch
from gguf_audit.tables.listed import ListedFile
from gguf_audit.tables.per_file import audits_to_tables
from gguf_audit.testing.http import RangeHTTPServer


def _rows(out: Path, result: BatchResult, table: str) -> pa.Table:
    [part] = [p for p in result.parts if p.table == table]
    assert part.path.startswith("run_id=r1/part-") and part.size_bytes == (out / table / part.path).stat().st_size
    data = pq.read_table(out / table / part.path)
    assert data.num_rows == part.rows == result.rows[table]
    return data


def test_audit_batch_writes_its_rows(tmp_path: Path, local_collection: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    names = ["tiny-llama-Q4_K_M.gguf", "mirror/tiny-llama-Q4_K_M.gguf", "sharded/complete-00001-of-00002.gguf"]
    listed = [ListedFile("file://" + str(local_collection / n)) for n in names]
    batch = make_batches(listed, {f.url: "m" for f in listed}, 10)[0]
    out = tmp_path / "out"
    # Tiny row groups: rows go out as each file is done, not when the batch ends.
    monkeypatch.setattr(parts_module, "ROW_GROUP_ROWS", 8)
    result = audit_batch(batch, TaskOptions("r1", {}, AuditConfig(), 2, out=str(out)))
    files = _rows(out, result, "files")
    assert sorted(files.column("url").to_pylist()) == sorted(f.url for f in listed)
    assert "run_id" not in files.schema.names  # the partition value lives in the commit
    tensors = _rows(out, result, "tensors")
    [part] = [p for p in result.parts if p.table == "tensors"]
    assert pq.ParquetFile(out / "tensors" / part.path).metadata.num_row_groups > 1
    assert tensors.num_rows == sum(files.column("n_tensors").to_pylist())
    assert result.facts.num_rows == 3 and set(result.facts.column("model_id").to_pylist()) == {"m"}
    assert all(column.num_chunks == 1 for column in result.facts.columns)  # what the driver keeps all night
    assert [f.url for f in result.shard_facts] == [listed[2].url]
    assert result.tally.statuses == {"ok": 3} and result.tally.bytes_read > 0


def test_audit_batch_never_raises(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, local_collection: Path) -> None:
    names = ["tiny-llama-Q4_K_M.gguf", "mirror/tiny-llama-Q4_K_M.gguf", "sharded/complete-00001-of-00002.gguf"]
    listed = [ListedFile("file://" + str(local_collection / n)) for n in names]
    batch = make_batches(listed, {f.url: "m" for f in listed}, 10)[0]
    out = tmp_path / "out"
    options = TaskOptions("r1", {}, AuditConfig(), 2, out=str(out))

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("audit_file broke")

    monkeypatch.setattr(execute_module, "audit_file", boom)
    result = audit_batch(batch, options)
    assert [r["codes"] for r in _rows(out, result, "files").to_pylist()] == [["internal.unexpected"]] * 3
    monkeypatch.undo()

    real = audits_to_tables

    def fragile(items: Any, *, run_id: str) -> Any:
        if any(i.audit.url == listed[1].url and i.audit.header is not None for i in items):
            raise ValueError("cannot build rows")
        return real(items, run_id=run_id)

    monkeypatch.setattr(execute_module, "audits_to_tables", fragile)
    result = audit_batch(batch, options)
    codes = {r["url"]: r["codes"] for r in _rows(out, result, "files").to_pylist()}
    assert codes == {listed[0].url: [], listed[1].url: ["internal.unexpected"], listed[2].url: []}
    monkeypatch.undo()

    monkeypatch.setattr(WORKER_POOLS, "pool", boom)
    result = audit_batch(batch, options)
    messages = _rows(out, result, "problems").column("message").to_pylist()
    assert len(messages) == 3 and all(m.startswith("batch failed: RuntimeError") for m in messages)


def test_data_files_keep_their_key_values_but_no_schema_copy(tmp_path: Path, local_collection: Path) -> None:
    listed = [ListedFile("file://" + str(local_collection / "tiny-llama-Q4_K_M.gguf"))]
    batch = make_batches(listed, {f.url: "m" for f in listed}, 10)[0]
    out = tmp_path / "out"
    result = audit_batch(batch, TaskOptions("r1", {}, AuditConfig(), 2, out=str(out)))
    for part in result.parts:
        meta = pq.ParquetFile(out / part.table / part.path).metadata
        kv = meta.metadata or {}
        assert kv[b"gguf_audit.table"] == part.table.encode() and b"gguf_audit.schema_version" in kv
        assert b"ARROW:schema" not in kv  # the Delta log holds the schema; footers stay small
        columns = [meta.row_group(0).column(i) for i in range(meta.num_columns)]
        with_stats = {c.path_in_schema.split(".")[0] for c in columns if c.is_stats_set}
        assert with_stats and with_stats <= STATISTICS_COLUMNS, part.table
        assert "url" in with_stats or part.table not in ("files", "tensors", "metadata", "samples")


def test_a_file_whose_server_stalls_gets_a_deadline_row_and_its_batch_goes_on(
    tmp_path: Path, local_collection: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that sends headers and then nothing holds one file's audit, not the batch: past the per-file
    deadline the file is written with ``run.file_deadline`` and the other files' rows are written as usual."""
    data = (local_collection / "tiny-llama-Q4_K_M.gguf").read_bytes()
    release = threading.Event()

    def stalled(start: int, end: int) -> bytes:
        release.wait(60)
        return data[start:end]

    monkeypatch.setattr(execute_module, "wait_for_files", functools.partial(wait_for_files, deadline_seconds=1.0))
    out = tmp_path / "out"
    with RangeHTTPServer(files={"ok.gguf": data}) as server:
        server.put_virtual("stalls.gguf", len(data), stalled)
        listed = [ListedFile(server.url_for("ok.gguf")), ListedFile(server.url_for("stalls.gguf"))]
        batch = make_batches(listed, {f.url: f.url for f in listed}, 10)[0]
        begun = time.monotonic()
        try:
            result = audit_batch(batch, TaskOptions("r1", {}, AuditConfig(), 2, out=str(out)))
            took = time.monotonic() - begun
        finally:
            release.set()  # the stalled read ends and its pool thread with it
    codes = {r["url"]: r["codes"] for r in _rows(out, result, "files").to_pylist()}
    assert codes == {listed[0].url: [], listed[1].url: [Code.RUN_FILE_DEADLINE]}
    assert took < 20  # the deadline, not the read's own timeout, ended the wait
    assert {r["code"] for r in _rows(out, result, "problems").to_pylist()} == {Code.RUN_FILE_DEADLINE}
