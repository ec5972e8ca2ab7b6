"""The driver's collector: each file's rows are staged once, however often its batch comes back."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from gguf_audit.audit import AuditConfig
from gguf_audit.pipelines.batches import make_batches
from gguf_audit.pipelines.collect import Collector
from gguf_audit.pipelines.execute import TaskOptions, audit_batch
from gguf_audit.pipelines.store import Output
from gguf_audit.tables.listed import ListedFile


def test_a_batch_delivered_twice_adds_no_rows(tmp_path: Path, local_collection: Path) -> None:
    """Results are keyed by URL: a rerun batch's second result (or a file in two batches) is dropped."""
    names = ["tiny-llama-Q4_K_M.gguf", "mirror/tiny-llama-Q4_K_M.gguf", "downloads/tiny-llama-Q4_K_M.gguf"]
    listed = [ListedFile("file://" + str(local_collection / n)) for n in names]
    options = TaskOptions("r1", {}, AuditConfig(), 2)
    first = audit_batch(make_batches(listed, {f.url: f.url for f in listed}, 10)[0], options)
    overlapping = audit_batch(make_batches(listed[1:], {f.url: f.url for f in listed}, 10)[0], options)
    out = Output(str(tmp_path / "out"))
    collector = Collector(out.sinks("r1"), frozenset(f.url for f in listed))
    assert collector.add(first.tables, first.shard_facts) == 3
    assert collector.add(first.tables, first.shard_facts) == 0
    assert collector.add(overlapping.tables, overlapping.shard_facts) == 0
    assert collector.dropped == 5
    for sink in collector.sinks.values():
        sink.close()
    files = pq.read_table(f"{out.staging('r1')}/files/part-00000.parquet")
    assert sorted(files.column("url").to_pylist()) == sorted(f.url for f in listed)
    problems = pq.read_table(f"{out.staging('r1')}/problems/part-00000.parquet")
    assert problems.column("code").to_pylist().count("data.truncated") == 1
