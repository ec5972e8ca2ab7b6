"""Data file layout: columns with no value left out, rows in key order, encodings chosen by measurement."""

from __future__ import annotations

import hashlib
import io
import random
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pipeline_helpers import file_row

from gguf_audit.pipelines.store import parts as parts_module
from gguf_audit.pipelines.store.duck import connect
from gguf_audit.pipelines.store.layout import _trial, choose_layout
from gguf_audit.pipelines.store.output import Output
from gguf_audit.pipelines.store.parts import RunParts
from gguf_audit.tables.schema import rows_to_table, stored_schema


def _stored_columns(path: Path) -> list[str]:
    return list(pq.ParquetFile(path).schema_arrow.names)


def test_a_file_written_in_one_piece_leaves_out_its_empty_columns_and_every_reader_sees_them_null(
    tmp_path: Path,
) -> None:
    out = Output(str(tmp_path / "out"))
    out.preflight()
    written = {}
    for run_id, extra in (("r1", {}), ("r2", {"quantized_by": "someone"})):
        parts = RunParts(out.url, out.fsspec_options, run_id, "t", ("files",))
        parts.write("files", rows_to_table("files", [file_row(f"file:///m/{run_id}.gguf", run_id, **extra)]))
        [part] = parts.close()
        written[run_id] = tmp_path / "out" / "files" / part.path
        out.delta.commit("files", [part], run_id)
    assert "quantized_by" not in _stored_columns(written["r1"])
    assert "architecture" not in _stored_columns(written["r1"])
    assert "quantized_by" in _stored_columns(written["r2"])
    assert "url" in _stored_columns(written["r1"])  # never-null columns stay even when empty would do

    expected = [("file:///m/r1.gguf", None), ("file:///m/r2.gguf", "someone")]
    ours = out.read("files", ["r1", "r2"], columns=["url", "quantized_by"]).sort_by("url").to_pylist()
    assert [(r["url"], r["quantized_by"]) for r in ours] == expected
    duck = connect()
    uri = out.delta.uri("files")
    assert duck.sql(f"SELECT url, quantized_by FROM delta_scan('{uri}') ORDER BY url").fetchall() == expected
    frame = pl.read_delta(uri).select("url", "quantized_by").sort("url")
    assert list(frame.iter_rows()) == expected


def test_a_file_written_in_row_groups_keeps_every_column(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A column null in the first row group may have values in a later one, so nothing is left out."""
    monkeypatch.setattr(parts_module, "ROW_GROUP_ROWS", 2)
    out = Output(str(tmp_path / "out"))
    out.preflight()
    parts = RunParts(out.url, out.fsspec_options, "r1", "t", ("files",))
    rows = [file_row(f"file:///m/{i}.gguf", "r1", quantized_by="late" if i == 3 else None) for i in range(4)]
    for row in rows:
        parts.write("files", rows_to_table("files", [row]))
    [part] = parts.close()
    path = tmp_path / "out" / "files" / part.path
    assert pq.ParquetFile(path).metadata.num_row_groups == 2
    assert _stored_columns(path) == stored_schema("files").names
    assert pq.read_table(path).column("quantized_by").to_pylist() == [None, None, None, "late"]


def test_files_and_models_rows_are_written_in_key_order(tmp_path: Path) -> None:
    out = Output(str(tmp_path / "out"))
    out.preflight()
    parts = RunParts(out.url, out.fsspec_options, "r1", "t", ("files",))
    urls = [f"file:///m/{name}.gguf" for name in ("c", "a", "d", "b")]
    parts.write("files", rows_to_table("files", [file_row(u, "r1") for u in urls]))
    [part] = parts.close()
    assert pq.read_table(tmp_path / "out" / "files" / part.path).column("url").to_pylist() == sorted(urls)


def _encodings(layout_table: pa.Table, path_in_schema: str, **options: object) -> tuple[str, ...]:
    sink = io.BytesIO()
    pq.write_table(layout_table, sink, **options)
    meta = pq.ParquetFile(io.BytesIO(sink.getvalue())).metadata.row_group(0)
    for i in range(meta.num_columns):
        if meta.column(i).path_in_schema == path_in_schema:
            return tuple(meta.column(i).encodings)
    raise AssertionError(path_in_schema)


def test_each_column_keeps_the_encoding_that_made_it_smallest() -> None:
    n = 4096
    shuffle = random.Random(7)
    digests = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(50)]
    rows = pa.table(
        {
            "offset": pa.array(range(0, 32 * n, 32), pa.int64()),  # grows by a block: delta encodes it in bits
            "digest": pa.array([shuffle.choice(digests) for _ in range(n)]),  # 50 long values: a dictionary
        }
    )
    layout = choose_layout(rows.schema, rows, complete=True, measure=True)
    assert layout.encodings == {"offset": "DELTA_BINARY_PACKED"}
    assert layout.dictionary == ["digest"]
    chosen = io.BytesIO()
    pq.write_table(rows, chosen, store_schema=False, **layout.writer_options())
    everywhere = io.BytesIO()
    pq.write_table(rows, everywhere, store_schema=False, compression="zstd", use_dictionary=True)
    assert chosen.tell() < everywhere.tell()
    assert "DELTA_BINARY_PACKED" in _encodings(rows, "offset", **layout.writer_options())
    assert pq.read_table(io.BytesIO(chosen.getvalue())).equals(rows)


def test_an_encoding_the_writer_refuses_leaves_the_choice_to_the_others() -> None:
    rows = pa.table({"s": pa.array(["a", "b", "a"])})
    sizes = _trial(rows, {"s": "BYTE_STREAM_SPLIT"})  # not an encoding of strings
    assert set(sizes) == {"dictionary", "PLAIN"}
    assert all(v > 0 for v in sizes["PLAIN"].values())


def _chunk_encodings(path: Path, column: str) -> set[str]:
    meta = pq.ParquetFile(path).metadata.row_group(0)
    [chunk] = [meta.column(i) for i in range(meta.num_columns) if meta.column(i).path_in_schema == column]
    return set(chunk.encodings)


def test_the_driver_measures_its_encodings_and_workers_keep_the_dictionary(tmp_path: Path) -> None:
    """The driver's files (rows every night writes) are measured; a worker's keep dictionary encoding."""
    out = Output(str(tmp_path / "out"))
    out.preflight()
    rows = rows_to_table("files", [file_row(f"file:///mirror/org/model-{i:05d}.gguf", "r1") for i in range(500)])
    paths = {}
    for measure in (True, False):
        parts = RunParts(out.url, out.fsspec_options, "r1", "t", ("files",), measure_encodings=measure)
        parts.write("files", rows)
        [part] = parts.close()
        paths[measure] = tmp_path / "out" / "files" / part.path
    assert "DELTA_BYTE_ARRAY" in _chunk_encodings(paths[True], "url")  # sorted URLs share their prefixes
    assert "RLE_DICTIONARY" in _chunk_encodings(paths[False], "url")
    assert paths[True].stat().st_size < paths[False].stat().st_size
    assert pq.read_table(paths[True]).equals(pq.read_table(paths[False]))
