"""The driver's collector: each file's rows are taken once, however often its batch comes back."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from gguf_audit.audit import AuditConfig
from gguf_audit.pipelines.scan.batches import make_batches
from gguf_audit.pipelines.scan.collect import Collector
from gguf_audit.pipelines.scan.execute import TaskOptions, audit_batch
from gguf_audit.tables.listed import ListedFile


def test_a_batch_delivered_twice_adds_no_rows(tmp_path: Path, local_collection: Path) -> None:
    """Results are keyed by URL: a rerun batch's second result (or a file in two batches) is left out."""
    names = ["tiny-llama-Q4_K_M.gguf", "mirror/tiny-llama-Q4_K_M.gguf", "downloads/tiny-llama-Q4_K_M.gguf"]
    listed = [ListedFile("file://" + str(local_collection / n)) for n in names]
    out = tmp_path / "out"
    options = TaskOptions("r1", {}, AuditConfig(), 2, out=str(out))
    model_ids = {f.url: f.url for f in listed}
    first = audit_batch(make_batches(listed, model_ids, 10)[0], options)
    overlapping = audit_batch(make_batches(listed[1:], model_ids, 10)[0], options)
    collector = Collector(frozenset(f.url for f in listed))
    assert collector.add(first) == []
    assert collector.add(first) == []  # every file already has rows: nothing left to read
    assert collector.add(overlapping) == []
    assert collector.dropped == 5
    [files] = collector.parts["files"]
    rows = pq.read_table(out / "files" / files.path)
    assert sorted(rows.column("url").to_pylist()) == sorted(f.url for f in listed)
    assert collector.rows["files"] == 3 and collector.tally.codes["data.truncated"] == 1

    # A batch holding a file that has rows and one that has none: refused whole, the other file is read again.
    late = Collector(frozenset(f.url for f in listed))
    assert late.add(overlapping) == []
    assert late.add(first) == [listed[0].url]
    assert late.seen_urls() == {f.url for f in listed[1:]}
