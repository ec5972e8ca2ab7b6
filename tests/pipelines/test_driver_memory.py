"""The driver's memory per model: its data files flushed in small row groups, lineage as columns."""

from __future__ import annotations

import ctypes
import platform
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
import pyarrow.fs as pafs
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from pipeline_helpers import file_row

from gguf_audit.checks.lineage import ModelLineage, families, judge_family, model_lineage
from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.scan import night as night_module
from gguf_audit.pipelines.scan.collect import Collector
from gguf_audit.pipelines.scan.groups import ModelGroups
from gguf_audit.pipelines.scan.lineage import _members
from gguf_audit.pipelines.scan.night import DRIVER_ROW_GROUP_ROWS, MODELS_PER_CHUNK
from gguf_audit.pipelines.scan.run import run_scan
from gguf_audit.pipelines.spill import PhaseEnd, driver_phase, watch_phases
from gguf_audit.pipelines.spill._mapped import give_back_freed_memory
from gguf_audit.pipelines.store.delta import BATCH_ROWS, STREAM, scan_batches
from gguf_audit.pipelines.store.output import Output
from gguf_audit.pipelines.store.parts import ROW_GROUP_ROWS, RunParts
from gguf_audit.pipelines.work.tally import facts_of
from gguf_audit.tables.lineage import model_lineage_cells
from gguf_audit.tables.schema import SCHEMAS, rows_to_table

pytestmark = pytest.mark.slow  # listings of many files in subprocesses: outside the fast loop


def test_the_driver_writes_its_rows_as_they_come_not_at_the_end(tmp_path: Path) -> None:
    out = Output(str(tmp_path / "out"))
    out.preflight()
    parts = RunParts(out.url, out.fsspec_options, "r1", "driver", ("files",), measure_encodings=True, row_group_rows=3)
    for chunk in range(3):
        rows = [file_row(f"file:///m/{chunk}-{i}.gguf", "r1") for i in range(2)]
        parts.write("files", rows_to_table("files", rows))
    written = list((tmp_path / "out" / "files").rglob("*.parquet"))
    assert len(written) == 1  # flushed once 3 rows were pending, before the writer closed
    [part] = parts.close()
    meta = pq.ParquetFile(tmp_path / "out" / "files" / part.path).metadata
    assert [meta.row_group(i).num_rows for i in range(meta.num_row_groups)] == [4, 2]
    assert part.rows == 6
    # a night's driver holds at most a chunk of models' rows, far fewer than a worker's row group
    assert DRIVER_ROW_GROUP_ROWS <= MODELS_PER_CHUNK < ROW_GROUP_ROWS


def _facts(rows: list[dict[str, object]]) -> pa.Table:
    full = [{**file_row(str(r["url"]), "r1"), **r} for r in rows]
    return facts_of(rows_to_table("files", full))


def test_lineage_keeps_a_row_of_columns_per_model_and_meets_shards_across_tables() -> None:
    shard_1 = "file:///m/big-00001-of-00002.gguf"
    shard_2 = "file:///m/big-00002-of-00002.gguf"
    singles = [f"file:///m/q{i}.gguf" for i in range(3)]
    groups = ModelGroups([shard_1, shard_2, *singles])
    model_of = {u: mid for mid, urls in groups.items() for u in urls}

    def row(url: str, digest: str, full: bool) -> dict[str, object]:
        return {
            "url": url, "model_id": model_of[url], "architecture": "llama", "name": "Tiny", "file_type_name": "Q4_0",
            "shard_index": 1 if url == shard_1 else 2 if url == shard_2 else None,
            "tensor_set_digest": digest, "full_precision": full,
        }  # fmt: skip

    first = [row(shard_1, f"{1:032x}", True), *(row(u, f"{3:032x}", False) for u in singles[:2])]
    second = [row(singles[2], f"{3:032x}", False), row(shard_2, f"{2:032x}", True)]
    collector = Collector(frozenset(model_of))
    collector.facts.extend([_facts(first), _facts(second)])

    members, pairing = _members(collector, groups, SCHEMAS["models"].empty_table())

    big = model_of[shard_1]
    whole = model_lineage(big, [first[0], second[1]])  # shards met across the batches' tables
    assert whole.tensors == f"{3:032x}" and whole.full_precision is True
    table = members.table.sort_by("pos")
    assert table.column_names == ["pos", "key", "full", "file_type_name", "architecture"]
    assert table.column("pos").to_pylist() == [0, 1, 2, 3]  # a row per model, by its place in the groups
    assert table.column("key").to_pylist() == [whole.key] * 4  # one family: the shards' digests add up
    assert table.column("full").to_pylist() == [True, False, False, False]
    assert members.odd == {}  # the facts say the listing's URLs: no model kept as values
    assert pairing == []  # no projector in the directory: pairing keeps no row


def test_family_members_share_their_cells_and_the_anchor_keeps_the_findings() -> None:
    def member(name: str, full: bool, kind: str) -> ModelLineage:
        return ModelLineage(f"file:///m/{name}", (f"file:///m/{name}.gguf",), "llama", "name:Tiny", f"{7:032x}",
                            full, kind, "file:///m")  # fmt: skip

    quantized = [member(f"q{i}", False, "Q4_0") for i in range(4)]
    [family] = families([member("f16", True, "F16"), *quantized])
    cells = model_lineage_cells([judge_family(family)])
    anchor = family.anchor
    others = [cells[m.model_id] for m in quantized if m.model_id != anchor]
    assert len(others) == 3 and all(c is others[0] for c in others)
    assert others[0].reference_url == "file:///m/f16.gguf" and others[0].family_anchor == anchor
    assert cells[anchor] is not others[0] and cells[anchor].columns() == others[0].columns()
    assert cells["file:///m/f16"].reference_url is None and cells["file:///m/f16"].full_precision is True

    [lonely] = families(quantized)  # no full-precision member: the finding is filed under the anchor alone
    cells = model_lineage_cells([judge_family(lonely)])
    assert [c.findings[0].code for c in cells.values() if c.findings] == ["lineage.no_full_precision"]


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="malloc_trim is glibc's")
def test_the_driver_gives_freed_memory_back_between_phases() -> None:
    """Where glibc is the C library, the pages a phase freed are handed back at its end (``malloc_trim`` found
    and run), and whoever watches the phases is told."""
    ends: list[PhaseEnd] = []
    stop = watch_phases(ends.append)
    try:
        with driver_phase("a phase"):
            made = [bytes(1000) for _ in range(50_000)]  # past pymalloc's 512 bytes: glibc's heap
            kept = made[::16]  # a block kept every 16 pages or so: the heap cannot shrink from its top alone
            del made
    finally:
        stop()
    with driver_phase("unwatched"):
        pass
    assert [(e.name, e.heap_trimmed) for e in ends] == [("a phase", True)]
    assert len(kept) == 3125


def test_a_stream_of_a_table_decodes_a_batch_ahead_of_a_slow_reader_not_every_file(
    tmp_path: Path, counting_pool: Callable[[], pa.MemoryPool]
) -> None:
    """The driver streams the base night's rows (``DeltaTables.batches``) slower than Arrow decodes them: the
    stream holds a few files' rows, where pyarrow's threaded scan decoded every data file ahead of the reader
    whatever its readahead settings."""
    n_files, rows = 40, 4096  # as the workers write a night's rows: a file a batch, small row groups
    for i in range(n_files):
        text = pa.array([f"s3://bucket/d{i:03d}/m-{j:07d}.gguf" * 8 for j in range(rows)], pa.string())
        table = pa.table({"url": text, "n": pa.array(range(rows))})
        pq.write_table(table, tmp_path / f"part-{i:03d}.parquet", row_group_size=1024)
    dataset = ds.dataset(tmp_path, format="parquet")
    total = n_files * pq.read_table(tmp_path / "part-000.parquet").nbytes
    pool = counting_pool()
    seen = 0
    for batch in scan_batches(dataset, batch_rows=rows):
        seen += batch.num_rows
        time.sleep(0.005)  # the driver's work on a batch (a quarter of a file)
    peak = pool.max_memory()
    threaded = counting_pool()
    for _ in dataset.to_batches(batch_size=rows):  # the peer: pyarrow's defaults
        time.sleep(0.005)
    assert seen == n_files * rows
    assert peak < 0.3 * total, (peak, total)  # measured: 3 MB of 42
    assert threaded.max_memory() > 0.6 * total  # the peer decoded every file ahead, in the same run


def _c_heap_in_use() -> int:
    """glibc's bytes in use (``mallinfo2``): where a Parquet file's metadata lives once read (no Arrow pool)."""
    fields = ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")

    class MallInfo2(ctypes.Structure):
        _fields_ = [(name, ctypes.c_size_t) for name in fields]

    try:
        call = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        pytest.skip("the C library is not glibc 2.33 or later: no mallinfo2 to count its heap with")
    call.restype = MallInfo2
    info = call()
    return int(info.uordblks + info.hblkhd)


def test_a_stream_holds_one_data_file_s_metadata_not_every_file_s(tmp_path: Path) -> None:
    """A dataset's fragments keep each data file's Parquet metadata once scanned, until the stream ends: 100 KB
    a file of ``files`` rows, 100 MB over a million-file night's. ``scan_batches`` makes each file's fragment
    for its scan; the peer in the same test, the dataset's own scan, holds every file's."""
    n_files, columns = 200, 80
    schema = pa.schema([(f"column_{c:02d}_with_a_long_name", pa.string()) for c in range(columns)])
    for i in range(n_files):
        table = pa.table([pa.array([f"v{i}-{r}" for r in range(8)]) for _ in range(columns)], schema=schema)
        pq.write_table(table, tmp_path / f"part-{i:03d}.parquet")

    def dataset() -> ds.Dataset:  # a new one each scan: a scanned dataset's fragments keep what they read
        return ds.dataset(tmp_path, format="parquet")

    def held_at_the_last_batch(batches: Any) -> tuple[int, int]:
        before, seen, held = _c_heap_in_use(), 0, 0
        for batch in batches:
            seen += batch.num_rows
            held = _c_heap_in_use() - before
        return seen, held

    give_back_freed_memory()
    seen, ours = held_at_the_last_batch(scan_batches(dataset(), columns=["column_00_with_a_long_name"]))
    filtered, _ = held_at_the_last_batch(
        scan_batches(dataset(), filter=pc.field("column_01_with_a_long_name") == "v7-3")
    )
    give_back_freed_memory()
    peer_seen, peer = held_at_the_last_batch(dataset().to_batches(columns=["column_00_with_a_long_name"], **STREAM))
    assert seen == peer_seen == n_files * 8 and filtered == 1
    assert peer > 10_000_000, peer  # measured: 47 MB, 236 KB a file
    assert ours < peer / 20, (ours, peer)  # measured: 0.5 MB


def test_a_writer_starts_a_new_file_after_so_many_row_groups(tmp_path: Path) -> None:
    """The driver's files end after a number of row groups (a Parquet writer keeps each one's footer metadata
    until it closes); every row is in exactly one file, each file's count is its own, the names differ."""
    out = Output(str(tmp_path / "out"))
    out.preflight()
    parts = RunParts(out.url, out.fsspec_options, "r1", "driver", ("files",), row_group_rows=2, row_groups_per_file=3)
    urls = [f"file:///m/{i:02d}.gguf" for i in range(15)]
    for at in range(0, len(urls), 2):
        parts.write("files", rows_to_table("files", [file_row(u, "r1") for u in urls[at : at + 2]]))
    written = parts.close()
    assert [p.rows for p in written] == [6, 6, 3] and len({p.path for p in written}) == 3
    read = [pq.read_table(tmp_path / "out" / "files" / p.path) for p in written]
    assert [pq.ParquetFile(tmp_path / "out" / "files" / p.path).metadata.num_row_groups for p in written] == [3, 3, 2]
    assert [u for t in read for u in t.column("url").to_pylist()] == urls
    assert [t.num_rows for t in read] == [p.rows for p in written]


def test_the_one_row_check_reads_a_driver_file_s_urls_a_batch_at_a_time(tmp_path: Path) -> None:
    """The one-row check reads the ``url`` column of the night's files in batches of a driver's row group: a
    driver's file of 32,768 rows read whole held 10 MB of a quiet 100,000-file night's anonymous memory to its
    end."""
    out = Output(str(tmp_path / "out"))
    out.preflight()
    parts = RunParts(out.url, out.fsspec_options, "r1", "driver", ("files",), row_group_rows=DRIVER_ROW_GROUP_ROWS)
    urls = [f"file:///m/{i:04d}.gguf" for i in range(2 * DRIVER_ROW_GROUP_ROWS + 7)]
    parts.write("files", rows_to_table("files", [file_row(u, "r1") for u in urls]))
    [part] = parts.close()
    batches = list(night_module._url_batches(out.fs, out.path("files", part.path)))
    assert [b.num_rows for b in batches] == [DRIVER_ROW_GROUP_ROWS, DRIVER_ROW_GROUP_ROWS, 7]
    assert [b.schema.names for b in batches] == [["url"]] * 3
    assert [u for b in batches for u in b.column("url").to_pylist()] == urls


def test_a_night_in_many_small_driver_files_reads_back_as_one(
    client: Any, local_collection: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A model a chunk, a row group and two row groups a file: the driver writes its ``models`` and
    ``problems`` rows in several files, and the night's tables are those of a night with the defaults."""
    config = ScanConfig().replace(roots=(str(local_collection),), compare=False)
    whole = run_scan(config.replace(out=str(tmp_path / "whole")), client=client)
    monkeypatch.setattr(night_module, "MODELS_PER_CHUNK", 1)
    monkeypatch.setattr(night_module, "DRIVER_ROW_GROUP_ROWS", 1)
    monkeypatch.setattr(night_module, "DRIVER_ROW_GROUPS_PER_FILE", 2)
    small = run_scan(config.replace(out=str(tmp_path / "small")), client=client)
    models = DeltaTable(str(tmp_path / "small" / "models")).file_uris()
    assert whole.n_models == small.n_models >= 4 and len(models) >= whole.n_models // 2
    assert len(DeltaTable(str(tmp_path / "whole" / "models")).file_uris()) == 1
    varying = ("run_id", "source_run_id", "seconds", "cpu_seconds", "read_seconds", "audited_at")
    for table in ("models", "problems"):
        rows = {
            name: sorted(({k: v for k, v in r.items() if k not in varying} for r in night_rows), key=repr)
            for name, night_rows in (
                ("whole", Output(str(tmp_path / "whole")).read(table, [whole.run_id]).to_pylist()),
                ("small", Output(str(tmp_path / "small")).read(table, [small.run_id]).to_pylist()),
            )
        }
        assert rows["small"] == rows["whole"], table


def test_a_stream_scans_a_driver_file_a_window_of_row_groups_at_a_time(
    tmp_path: Path, counting_pool: Callable[[], pa.MemoryPool]
) -> None:
    """A Parquet scan buffers every row group of its fragment ahead of its batches; a quiet night reads back the
    last quiet night's ``files`` rows, the driver's files of 64 row groups each: scanned whole, each held most of
    its rows decoded at once (20 to 60 MB of a quiet 100,000-file night's driver). ``scan_batches`` scans a
    window of row groups at a time; the peer in the same test, the same file scanned whole."""
    out = Output(str(tmp_path / "out"))
    out.preflight()
    parts = RunParts(
        out.url,
        out.fsspec_options,
        "r1",
        "driver",
        ("files",),
        measure_encodings=True,
        row_group_rows=night_module.DRIVER_ROW_GROUP_ROWS,
        row_groups_per_file=night_module.DRIVER_ROW_GROUPS_PER_FILE,
    )
    facts = {"metadata_parts": [f"general.key_{k}=value {k}" for k in range(12)], "codes": ["tensor.x"]}
    for chunk in range(night_module.DRIVER_ROW_GROUPS_PER_FILE):  # as a quiet night writes them: 1,024 at a time
        urls = [f"s3://bucket/d{chunk:03d}/m-{i:05d}.gguf" for i in range(1024)]
        parts.write("files", rows_to_table("files", [file_row(u, "r0", architecture="llama", **facts) for u in urls]))
    [part] = parts.close()
    path = tmp_path / "out" / "files" / part.path
    assert pq.ParquetFile(path).metadata.num_row_groups == night_module.DRIVER_ROW_GROUPS_PER_FILE

    def peak(batches: Callable[[], Any]) -> tuple[int, int]:
        pool, seen = counting_pool(), 0
        for batch in batches():
            seen += batch.num_rows
            time.sleep(0.003)  # the driver's work on a batch: the scan's buffering runs ahead meanwhile
        return seen, pool.max_memory()

    seen, ours = peak(lambda: scan_batches(ds.dataset(path, format="parquet")))
    whole = ds.ParquetFileFormat().make_fragment(str(path), pafs.LocalFileSystem())
    peer_seen, peer = peak(lambda: whole.to_batches(batch_size=BATCH_ROWS, **STREAM))
    assert seen == peer_seen == 64 * 1024
    assert ours < peer / 2, (ours, peer)  # measured: 2.4 MB of Arrow's pool against 11 to 22
