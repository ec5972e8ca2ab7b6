"""Incremental reuse: a reused file's new files row, and the shard facts read back from stored rows (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

import fsspec
import numpy as np
import pytest

from gguf_audit.audit import AuditConfig, FileAudit, audit_file
from gguf_audit.checks.shards import shard_facts
from gguf_audit.pipelines.scan.reuse import ReadingRuns, ReusedFiles, reuse_rows
from gguf_audit.tables.listed import ListedFile, ListedFiles
from gguf_audit.tables.per_file import AuditedFile, audits_to_tables
from gguf_audit.tables.shard_facts import shard_facts_from_tables
from gguf_audit.testing.builder import KV, Tensor, build_gguf, kv_i32, kv_str, kv_u16, kv_u32


def _audit(path: str, data: bytes) -> FileAudit:
    fs = fsspec.filesystem("memory")
    fs.pipe_file(path, data)
    return audit_file(f"memory://{path}", config=AuditConfig())


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


def test_the_reused_files_answer_by_url_as_the_dict_of_them_did() -> None:
    urls = [f"s3://bucket/org-{i // 50:03d}/model-{i:05d}.gguf" for i in range(10_000)] + ["s3://b/é/ü.gguf"]
    listed = ListedFiles.of([ListedFile(u, size=i, etag=f"e{i}") for i, u in enumerate(urls)])
    kept = np.array([i for i in range(len(urls)) if i % 3 != 1 or i == len(urls) - 1])
    reuse = ReusedFiles(listed, kept)
    as_dict = {urls[i]: listed[i] for i in kept.tolist()}
    assert len(reuse) == len(as_dict) and list(reuse) == list(as_dict)
    assert all(reuse[u] == f for u, f in as_dict.items())
    assert urls[1] not in reuse and urls[0] in reuse and "s3://b/é/ü.gguf" in reuse and 7 not in reuse
    with pytest.raises(KeyError):
        reuse[urls[4]]
    asked = [urls[0], urls[1], "s3://elsewhere.gguf", urls[-1]]
    at = reuse.positions_of(asked)
    assert at[1] == at[2] == -1 and [f.url for f in reuse.files_at(at[at >= 0])] == [urls[0], urls[-1]]
    assert len(ReusedFiles.none()) == 0 and list(ReusedFiles.none()) == []


def test_reuse_rows_through_the_reused_files_equal_the_dicts() -> None:
    audits = [_audit(f"/t/m{i}.gguf", build_gguf([kv_str("general.architecture", "llama")], [])) for i in range(5)]
    listed = [ListedFile(a.url, a.size, f"e{i}") for i, a in enumerate(audits)]
    t = audits_to_tables([AuditedFile(a, f, a.url) for a, f in zip(audits, listed, strict=True)], run_id="r1")
    compact = ListedFiles.of(listed)
    reuse = ReusedFiles(compact, np.array([0, 2, 3]))
    by_columns = reuse_rows(t.files, reuse)
    by_dict = reuse_rows(t.files, {listed[i].url: listed[i] for i in (0, 2, 3)})
    assert by_columns.equals(by_dict) and by_columns.num_rows == 3


def test_the_reading_runs_say_whose_each_position_is() -> None:
    runs = ReadingRuns.for_positions(6)
    runs.note(np.array([0, 2, 5]), ["a", "b", "a"])
    runs.note(np.array([1]), ["c"])
    assert runs.runs == ["a", "b", "c"]
    at = np.array([0, 1, 2, 3, 5, -1])
    assert runs.ours(at, "a").tolist() == [True, False, False, False, True, False]
    assert runs.ours(at, "c").tolist() == [False, True, False, False, False, False]
    assert not runs.ours(at, "never").any()
