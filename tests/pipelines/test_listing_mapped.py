"""The listing on the driver's disk: mapped columns read as the heap's did, and their pages let go of."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from gguf_audit.pipelines.scan.groups import ModelGroups
from gguf_audit.pipelines.spill._mapped import (
    BATCH_ROWS,
    ON_DISK_BYTES,
    MappedWriter,
    array_on_disk,
    is_mapped,
    is_on_disk,
    map_column,
    map_table,
    mapped_bytes,
    release_mapped_pages,
    temp_dir_in_memory,
)
from gguf_audit.tables.listed import ListedFile, ListedFiles

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status (Linux)")


def _urls(n: int, start: int = 0) -> list[str]:
    return [f"s3://bucket/org-{i // 100:04d}/model-{i:06d}/model-{i:06d}.Q4_K_M.gguf" for i in range(start, n)]


def test_a_mapped_table_reads_as_the_table_it_was_with_its_chunks() -> None:
    table = pa.Table.from_batches(
        [
            pa.record_batch({"url": pa.array(_urls(n, n - 3000)), "size": pa.array(range(3000), pa.int64())})
            for n in (3000, 6000, 7000)
        ]
    )
    mapped = map_table(table)
    assert mapped.equals(table)
    assert [len(c) for c in mapped.column("url").chunks] == [3000, 3000, 3000]
    assert is_mapped(mapped.column("url")) and is_mapped(mapped.column("url").slice(4000, 10))
    assert not is_mapped(table.column("url"))
    # a computation on mapped columns makes its result in the heap, as on any Arrow column
    lengths = pc.utf8_length(mapped.column("url"))
    assert not is_mapped(lengths) and lengths.equals(pc.utf8_length(table.column("url")))


def test_an_empty_table_is_kept_as_it_is() -> None:
    empty = pa.table({"url": pa.array([], pa.string())})
    assert map_table(empty) is empty


def test_the_mapping_goes_with_its_last_column() -> None:
    gc.collect()
    before = mapped_bytes()
    column = map_column(pa.array(_urls(20_000)))
    piece = column.slice(100, 5)
    size = mapped_bytes() - before
    assert size > 20_000 * 40  # the URLs' bytes at least, on disk
    del column
    gc.collect()
    assert mapped_bytes() - before == size  # a slice still reads from it
    assert piece.to_pylist() == _urls(105, 100)
    del piece
    gc.collect()
    assert mapped_bytes() == before


def test_listed_files_moved_to_disk_keep_their_rows_and_rare_facts() -> None:
    files = [ListedFile(u, size=i) for i, u in enumerate(_urls(5000))]
    files[7] = ListedFile.at("https://user:secret@host/a.gguf", size=3)
    listed = ListedFiles.of(files)
    moved = listed.with_table(map_table)
    assert list(moved) == list(listed) and moved.read_urls() == listed.read_urls()
    assert is_mapped(moved.url_column())
    with pytest.raises(ValueError, match="rows or columns"):
        listed.with_table(lambda t: t.slice(1))


def test_groups_that_reorder_a_mapped_listing_keep_their_copy_on_disk() -> None:
    # shards listed before their set's first shard: grouping puts them in index order, a copy of the URLs
    urls = [f"s3://b/m/model-{i:05d}-of-00003.gguf" for i in (3, 1, 2)] + _urls(1000)
    mapped = map_column(pa.array(urls, pa.string()))
    groups = ModelGroups(mapped)
    assert groups["s3://b/m/model"] == [f"s3://b/m/model-{i:05d}-of-00003.gguf" for i in (1, 2, 3)]
    assert is_mapped(groups.url_column)
    in_heap = ModelGroups(pa.array(urls, pa.string()))
    assert not is_mapped(in_heap.url_column)  # a listing in the heap: the groups' copy stays there
    assert list(in_heap.items_in_order()) == list(groups.items_in_order())


_RELEASED = """
import json
import pyarrow as pa
import pyarrow.compute as pc
from gguf_audit.pipelines.spill._mapped import map_column, release_mapped_pages

def rss_file():
    for line in open("/proc/self/status"):
        if line.startswith("RssFile:"):
            return int(line.split()[1]) * 1024
    raise SystemExit("no RssFile")

urls = [f"s3://bucket/org-{i // 100:04d}/model-{i:06d}/model-{i:06d}.Q4_K_M.gguf" for i in range(300_000)]
column = map_column(pa.array(urls, pa.string()))
del urls
release_mapped_pages()
before = rss_file()
total = pc.sum(pc.utf8_length(column)).as_py()  # a pass over every URL: their pages resident
touched = rss_file()
release_mapped_pages()
after = rss_file()
again = pc.sum(pc.utf8_length(column)).as_py()  # read again from the page cache, the same bytes
print(json.dumps({"bytes": total, "touched": touched - before, "after": after - before, "same": again == total}))
"""


@linux_only
def test_a_pass_over_mapped_columns_leaves_no_page_resident_once_released() -> None:
    """Measured in a fresh interpreter (RssFile: the file-backed pages the process has mapped in)."""
    done = subprocess.run([sys.executable, "-c", _RELEASED], capture_output=True, text=True, check=True, timeout=300)
    figures = json.loads(done.stdout)
    assert figures["same"]
    assert figures["touched"] > 0.8 * figures["bytes"]  # the pass made the URLs' pages resident
    assert figures["after"] < 0.05 * figures["bytes"], figures  # and the release let go of them


def test_an_array_on_disk_reads_and_writes_as_the_array_it_was() -> None:
    small = np.arange(10, dtype=np.int32)
    assert array_on_disk(small) is small and not is_on_disk(small)  # a small one stays in the heap
    values = np.arange(ON_DISK_BYTES // 8 * 3, dtype=np.int64)[::-1]  # a view, backwards
    on_disk = array_on_disk(values)
    assert is_on_disk(on_disk) and on_disk.dtype == values.dtype and np.array_equal(on_disk, values)
    gc.collect()
    size = mapped_bytes()
    on_disk[5] = -7  # written in place
    release_mapped_pages()  # a written page let go of is read back as it was written
    assert on_disk[5] == -7 and on_disk[6] == values[6] and np.array_equal(on_disk[7:], values[7:])
    taken = on_disk[np.array([0, 5])]  # what is taken from it is an array of its own
    del on_disk
    gc.collect()
    assert mapped_bytes() == size - values.nbytes  # the mapping went with the array
    assert taken.tolist() == [values[0], -7]


_ARRAYS = """
import json
import numpy as np
from gguf_audit.pipelines.spill._mapped import array_on_disk, release_mapped_pages

def rss(kind):
    for line in open("/proc/self/status"):
        if line.startswith(kind + ":"):
            return int(line.split()[1]) * 1024
    raise SystemExit("no " + kind)

before = rss("RssAnon")
hashes = array_on_disk(np.arange(8_000_000, dtype=np.int64) * 7919)  # a million files' hashes, eight times
total = int(hashes.sum())  # a pass over them
release_mapped_pages()
kept = rss("RssAnon") - before
in_heap = np.arange(8_000_000, dtype=np.int64) * 7919  # the peer: the same array in the heap
print(json.dumps({"bytes": hashes.nbytes, "kept": kept, "peer": rss("RssAnon") - before - kept,
                  "same": total == int(in_heap.sum())}))
"""


@linux_only
def test_an_array_on_disk_holds_no_anonymous_memory_once_its_pages_are_released() -> None:
    """Measured in a fresh interpreter (RssAnon: the heap's pages, which the kernel cannot drop; the peer, the
    same values in a NumPy array of the heap, holds all of them)."""
    done = subprocess.run([sys.executable, "-c", _ARRAYS], capture_output=True, text=True, check=True, timeout=300)
    figures = json.loads(done.stdout)
    assert figures["same"]
    assert figures["peer"] > 0.9 * figures["bytes"], figures
    assert figures["kept"] < 0.1 * figures["bytes"], figures  # measured: none of 64 MB


def test_a_temporary_directory_on_a_memory_file_system_is_named(tmp_path: Path, monkeypatch: Any) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    mounts = tmp_path / "mounts"
    # the deepest mount holding the directory decides, whatever its order in the table
    mounts.write_text(f"/dev/vda / ext4 rw 0 0\ntmpfs {tmp_path} tmpfs rw 0 0\nnone /proc proc rw 0 0\n")
    assert temp_dir_in_memory(str(mounts)) == os.path.realpath(tmp_path)
    mounts.write_text(f"tmpfs / tmpfs rw 0 0\n/dev/vdb {tmp_path} ext4 rw 0 0\n")
    assert temp_dir_in_memory(str(mounts)) is None
    spaced = tmp_path / "a dir"
    spaced.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spaced))
    mounts.write_text(f"/dev/vda / ext4 rw 0 0\nramfs {str(spaced).replace(' ', chr(92) + '040')} ramfs rw 0 0\n")
    assert temp_dir_in_memory(str(mounts)) == os.path.realpath(spaced)
    assert temp_dir_in_memory(str(tmp_path / "no-such-table")) is None


def test_a_writer_joins_small_pieces_into_few_record_batches() -> None:
    """A table written a few hundred rows at a time (a quiet night's carried models) reads back as the rows
    written, in record batches of :data:`BATCH_ROWS`: a batch of a mapped table costs the heap a few hundred
    bytes a column however few its rows (586 batches of 25 columns held 7.5 MB)."""
    pieces = [
        pa.table({"url": pa.array(_urls(n + 500, n)), "size": pa.array(range(n, n + 500), pa.int64())})
        for n in range(0, 40_000, 500)
    ]
    with MappedWriter() as writer:
        for piece in pieces:
            writer.write(piece if len(piece) % 2 else piece.to_batches()[0])
        mapped = writer.close()
    assert mapped is not None and mapped.equals(pa.concat_tables(pieces))
    *full, last = [len(c) for c in mapped.column("url").chunks]
    assert len(full) == 2 and all(BATCH_ROWS <= n < BATCH_ROWS + 500 for n in full) and 0 < last < BATCH_ROWS
    assert is_mapped(mapped.column("url")) and is_mapped(mapped.column("size"))
