"""Incremental reuse: a reused file's new files row, and the shard facts read back from stored rows (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

import fsspec

from gguf_audit.audit import FileAudit, audit_file
from gguf_audit.checks.shards import shard_facts
from gguf_audit.pipelines.scan.reuse import reuse_rows
from gguf_audit.tables.listed import ListedFile
from gguf_audit.tables.per_file import AuditedFile, audits_to_tables
from gguf_audit.tables.shard_facts import shard_facts_from_tables
from gguf_audit.testing.builder import KV, Tensor, build_gguf, kv_i32, kv_str, kv_u16, kv_u32


def _audit(path: str, data: bytes) -> FileAudit:
    fs = fsspec.filesystem("memory")
    fs.pipe_file(path, data)
    return audit_file(f"memory://{path}")


def test_reuse_rows_and_facts_from_tables() -> None:
    kvs: list[KV] = [
        kv_str("general.architecture", "llama"),
        kv_u32("general.alignment", 64),
        kv_u16("split.no", 0),
        kv_u16("split.count", 2),
        kv_i32("split.tensors.count", 3),
    ]
    audit = _audit(
        "/t/s-00001-of-00002.gguf", build_gguf(kvs, [Tensor("a", (32,), 0), Tensor("b", (32,), 0)], alignment=64)
    )
    t = audits_to_tables([AuditedFile(audit, ListedFile(audit.url, audit.size, "e"), "m")], run_id="r1")
    [facts] = shard_facts_from_tables(t.files, t.metadata, t.tensors)
    assert facts == shard_facts(audit)

    listing = {audit.url: ListedFile(audit.url, audit.size, "e", None, datetime(2026, 5, 1, tzinfo=UTC))}
    [row] = reuse_rows(t.files, listing).to_pylist()
    assert row["reused"] is True and row["bytes_read"] == row["requests"] == 0 and row["source_run_id"] == "r1"
    assert row["mtime"] == datetime(2026, 5, 1, tzinfo=UTC)
    assert reuse_rows(t.files, {}).num_rows == 0
