"""The driver's collector: each file's rows are taken once, however often its batch comes back."""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
from pipeline_helpers import file_row

from gguf_audit.audit import AuditConfig
from gguf_audit.pipelines.scan.collect import Collector, model_summaries
from gguf_audit.pipelines.scan.groups import ModelGroups
from gguf_audit.pipelines.work.batches import make_batches
from gguf_audit.pipelines.work.execute import TaskOptions, audit_batch
from gguf_audit.pipelines.work.tally import facts_of
from gguf_audit.tables.listed import ListedFile
from gguf_audit.tables.schema import rows_to_table


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


def test_models_judged_a_chunk_at_a_time_read_each_facts_table_about_once() -> None:
    """Judging the models in order, a chunk at a time, reads the facts tables that hold the chunk's models,
    not every table for every chunk (a million-file night has about a thousand tables and 500 chunks). The
    summaries are those of reading every table."""
    urls = [f"file:///c/d{i // 40}/m{i:04d}.gguf" for i in range(300)]
    urls += [f"file:///c/s/big-{k:05d}-of-00003.gguf" for k in (1, 2, 3)]  # a shard set: first in the order
    groups = ModelGroups(sorted(urls))
    rows = [{**file_row(u, "r1"), "model_id": groups.model_of(u)} for u in sorted(urls)]
    collector = Collector(urls)
    for start in range(0, len(rows), 16):  # as batches come back: runs of the listing's order
        collector.facts.append(facts_of(rows_to_table("files", rows[start : start + 16])))
    n_tables = len(collector.facts)
    order = list(groups)
    chunks = [order[i : i + 10] for i in range(0, len(order), 10)]

    judged = [s.row for chunk in chunks for s in model_summaries(groups, collector, chunk)]

    assert collector.facts.reads <= 2 * n_tables + 2 * len(chunks)  # was n_tables a chunk: 20 x 31
    everything = {m: groups[m] for m in order}  # a plain mapping: every table read for every chunk
    assert judged == [s.row for chunk in chunks for s in model_summaries(everything, collector, chunk)]
    assert len(judged) == 301 and all(r["n_files"] for r in judged)
