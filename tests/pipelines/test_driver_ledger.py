"""The driver's per-file state off the Python heap: the ledger, the spills, the listing and the groups as columns."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime

import numpy as np
import pyarrow as pa
import pytest

from gguf_audit.codes import Code
from gguf_audit.format.shard_names import group_models
from gguf_audit.pipelines.scan.groups import ModelGroups
from gguf_audit.pipelines.scan.reuse import ReadingRuns
from gguf_audit.pipelines.spill import TableSpill, UrlLedger
from gguf_audit.pipelines.spill._mapped import ON_DISK_BYTES, is_on_disk, release_mapped_pages
from gguf_audit.pipelines.work.batches import ids_of
from gguf_audit.tables.listed import ListedFile, ListedFiles

pytestmark = pytest.mark.slow  # listings of many files in subprocesses: outside the fast loop


def test_the_ledger_takes_each_listed_url_once_and_counts_the_rows_on_disk() -> None:
    ledger = UrlLedger(f"s3://b/m{i}.gguf" for i in range(5))
    assert len(ledger) == 5 and ledger.n_seen == 0
    batch = ["s3://b/m1.gguf", "s3://b/m1.gguf", "s3://b/m2.gguf", "s3://b/other.gguf"]
    assert ledger.unseen(batch) == ["s3://b/m1.gguf", "s3://b/m2.gguf"]  # once each, listed ones only
    ledger.mark_seen(batch)
    assert ledger.n_seen == 2 and ledger.seen_urls() == {"s3://b/m1.gguf", "s3://b/m2.gguf"}
    assert ledger.unseen(["s3://b/m2.gguf", "s3://b/m3.gguf"]) == ["s3://b/m3.gguf"]
    ledger.mark_seen(["s3://b/m2.gguf"])  # already seen: not counted twice
    assert ledger.n_seen == 2

    rows = pa.chunked_array(
        [["s3://b/m0.gguf", "s3://b/m1.gguf", "s3://b/m1.gguf"], ["s3://b/m2.gguf", "s3://b/zz.gguf"]]
    )
    n, duplicated, missing, unexpected = ledger.one_row_report([rows, pa.array(["s3://b/m4.gguf"])])
    assert n == 6
    assert duplicated == (1, ["s3://b/m1.gguf"])
    assert missing == (1, ["s3://b/m3.gguf"])
    assert unexpected == (1, ["s3://b/zz.gguf"])
    every = pa.array([f"s3://b/m{i}.gguf" for i in range(5)])
    assert ledger.one_row_report([every]) == (5, (0, []), (0, []), (0, []))  # the check can be run again
    ledger.close()


def test_a_spill_gives_back_its_tables_in_order() -> None:
    spill = TableSpill()
    assert list(spill) == [] and len(spill) == 0
    first = pa.table({"url": ["a", "b"], "n": [1, 2]})
    second = pa.table({"url": ["c"], "n": [3]})
    spill.append(first)
    spill.append(first.slice(0, 0))  # nothing to keep
    spill.extend([second])
    assert len(spill) == 2 and spill.num_rows == 3
    assert [t.to_pylist() for t in spill] == [first.to_pylist(), second.to_pylist()]
    assert [t.to_pylist() for t in spill] == [first.to_pylist(), second.to_pylist()]  # read again, same
    spill.close()
    assert list(spill) == []


def _listed(i: int) -> ListedFile:
    return ListedFile(
        f"s3://b/d{i // 3}/m{i}.gguf",
        size=None if i == 4 else 100 + i,
        etag=f'"{i:x}"',
        version_id=None,
        mtime=datetime(2026, 1, 1, 0, 0, i, 123456, tzinfo=UTC),
        sha256=None if i % 2 else f"{i:064x}",
        revision="main" if i == 2 else None,
    )


def test_listed_files_as_columns_give_back_every_field() -> None:
    files = [_listed(i) for i in range(7)]
    files[3] = ListedFile.at("https://user:pw@h/m3.gguf", size=5)
    files[5] = ListedFile("s3://b/broken.gguf", error_code=Code.IO_NOT_FOUND, error_message="gone")
    compact = ListedFiles.of(files)
    assert len(compact) == 7 and list(compact) == files
    assert [f.read_url for f in compact] == [f.read_url for f in files]  # not compared by ==
    assert compact[-1] == files[-1] and compact[3].read_url == "https://user:pw@h/m3.gguf"
    assert list(compact[2:5]) == files[2:5] and compact[2:5][1].read_url == files[3].read_url
    assert list(compact.take([5, 0])) == [files[5], files[0]]
    assert compact.read_urls() == {files[3].url: "https://user:pw@h/m3.gguf"}
    assert compact.total_size() == sum(f.size or 0 for f in files) and compact.unsized() == 2
    assert list(compact.urls()) == [f.url for f in files]
    with pytest.raises(IndexError):
        compact[7]

    again = ListedFiles.of([files[1], _listed(9), files[0]])
    joined = ListedFiles.first_of_each_url([compact, again])
    assert [f.url for f in joined] == [f.url for f in files] + [_listed(9).url]  # each URL where it first came
    assert joined[3].read_url == files[3].read_url and joined[5].error_code == Code.IO_NOT_FOUND


URLS = [
    "s3://b/a/big-00002-of-00003.gguf",
    "s3://b/a/q4.gguf",
    "s3://b/a/big-00001-of-00003.gguf",
    "s3://b/a/big.gguf",  # its id is the shard set's: it keeps its URL
    "s3://b/c/x-00001-of-00002.gguf?sig=1",
    "s3://b/c/x-00002-of-00002.gguf?sig=2",
    "s3://b/b/q4.gguf",
    "https://h/m.gguf?x=1",
    "s3://b/a/big-00003-of-00003.gguf",
    "s3://b/é/modèle-00001-of-00001.gguf",  # ids cut by characters, not bytes
    "s3://b/é/modèle.gguf",
]


@pytest.mark.parametrize("as_column", [False, True])
def test_model_groups_are_group_models_as_columns(as_column: bool) -> None:
    groups = ModelGroups(pa.chunked_array([URLS[:3], URLS[3:]], pa.string()) if as_column else URLS)
    want = group_models(URLS)
    assert list(groups) == list(want) and len(groups) == len(want)
    assert {m: groups[m] for m in groups} == want
    assert list(groups.items_in_order()) == list(want.items())
    assert all(groups.model_ids[u] == m for m, urls in want.items() for u in urls)
    assert "s3://b/a/big" in groups and "s3://b/a/nope" not in groups and 3 not in groups
    assert groups.get("s3://b/a/nope") is None
    with pytest.raises(KeyError):
        groups.model_ids["s3://b/a/nope.gguf"]
    # looked up together, as a batch's files are: the same answers, in order, repeats and misses kept
    asked = [*reversed(URLS), "s3://b/a/nope.gguf", URLS[2], "s3://b/a/big-00009-of-00009.gguf"]
    assert groups.models_of(asked) == [groups.model_of(u) for u in asked]
    assert groups.models_of(asked)[-2:] == [groups.model_of(URLS[2]), None]
    assert groups.model_ids.many(URLS) == [groups.model_ids[u] for u in URLS]
    assert ids_of(groups.model_ids, URLS[:4]) == ids_of(dict(groups.model_ids.items()), URLS[:4])
    with pytest.raises(KeyError, match="nope"):
        groups.model_ids.many([URLS[0], "s3://b/a/nope.gguf"])
    assert len(groups.model_ids) == len(URLS) and list(groups.model_ids) == [u for us in want.values() for u in us]
    assert list(ModelGroups([])) == []
    ids = list(groups)
    assert groups.ids_in_order() == (ids == sorted(set(ids)))
    assert [groups.id_at(i) for i in range(len(ids))] == ids


def test_the_groups_keep_each_id_as_a_length_not_a_string() -> None:
    """An id is a prefix of its model's first URL: the groups allocate no Arrow column of ids (about 60 bytes
    a model here), only NumPy's lengths, starts and hashes."""
    n = 20_000
    urls = pa.chunked_array([[f"s3://bucket/org-{i // 100:04d}/model-{i:06d}.Q4_K_M.gguf" for i in range(n)]])
    before = pa.total_allocated_bytes()
    groups = ModelGroups(urls)
    assert pa.total_allocated_bytes() - before < 2 * n  # what Arrow keeps: nothing per model
    assert len(groups) == n and groups.id_at(n - 1) == f"s3://bucket/org-0199/model-{n - 1:06d}.Q4_K_M"
    assert groups.ids_in_order() and groups.id_column().to_pylist() == [
        u.removesuffix(".gguf") for u in urls.to_pylist()
    ]


def test_a_large_night_s_groups_and_reading_runs_keep_their_arrays_on_disk() -> None:
    """From 65,536 models the groups' starts, id lengths and hashes, and a reading run per file, are arrays in
    files on the driver's disk (``array_on_disk``): the same answers as the heap's arrays give a small night."""
    n = ON_DISK_BYTES // 4 + 500
    urls = [f"s3://bucket/org-{i // 100:04d}/model-{i:06d}.Q4_K_M.gguf" for i in range(n)]
    urls += [f"s3://bucket/sets/big-{k:05d}-of-00003.gguf" for k in (2, 3, 1)]
    groups = ModelGroups(pa.chunked_array([urls[:40_000], urls[40_000:]], pa.string()))
    assert all(is_on_disk(a) for a in (groups._starts, groups._id_lengths, groups._by_id._hashes))
    asked = [urls[7], urls[-1], urls[n - 1], "s3://bucket/org-0000/nope.gguf", urls[n]]
    want = ["s3://bucket/org-0000/model-000007.Q4_K_M", "s3://bucket/sets/big", urls[n - 1].removesuffix(".gguf")]
    assert groups.models_of(asked) == [*want, None, "s3://bucket/sets/big"]
    at = groups.positions(["s3://bucket/sets/big", want[0], "s3://bucket/nope"])
    assert at[2] == -1 and groups.ids_at(at[:2]) == ["s3://bucket/sets/big", want[0]]
    assert groups.sizes_at(at[:2]).tolist() == [3, 1] and len(groups) == n + 1
    assert groups.members_at(int(at[0])) == [f"s3://bucket/sets/big-{k:05d}-of-00003.gguf" for k in (1, 2, 3)]
    runs = ReadingRuns.for_positions(len(urls))
    assert is_on_disk(runs.of)
    runs.note(np.array([3, n - 1]), ["night-1", "night-2"])
    release_mapped_pages()  # what was noted stays noted once its pages are let go of
    assert runs.ours(np.array([3, n - 1, 4, -1]), "night-2").tolist() == [False, True, False, False]
    assert runs.ours(np.array([3]), "night-1").tolist() == [True]


def test_the_groups_share_the_listings_urls_when_every_file_is_a_model_in_order() -> None:
    urls = [f"s3://bucket/org/model-{i:05d}.gguf" for i in range(10_000)]
    listed = ListedFiles.of([ListedFile(u, size=1) for u in urls])
    groups = ModelGroups(listed.url_column())
    assert list(groups.model_ids) == urls and groups["s3://bucket/org/model-00042"] == [urls[42]]
    data = {c.buffers()[2].address for c in listed.url_column().chunks}
    assert {c.buffers()[2].address for c in groups.url_column.chunks} <= data  # slices of the listing's bytes


_HELD = """
import gc, json, tracemalloc
from datetime import UTC, datetime
from gguf_audit.format.shard_names import group_models
from gguf_audit.pipelines.work.batches import ids_of
from gguf_audit.pipelines.scan.groups import ModelGroups
from gguf_audit.tables.listed import ListedFile, ListedFiles

n = 20_000
urls = [f"s3://bucket/org-{i // 100:04d}/model-{i:06d}/model-{i:06d}.Q4_K_M.gguf" for i in range(n)]

def listed():
    return [ListedFile(u, size=i, mtime=datetime(2026, 1, 1, tzinfo=UTC)) for i, u in enumerate(urls)]

def as_columns():
    compact = ListedFiles.of(listed())
    return compact, ModelGroups(compact.urls())

def held(make):
    gc.collect()
    tracemalloc.start()
    made = make()
    gc.collect()
    size = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return made, size

objects, objects_bytes = held(lambda: (tuple(listed()), group_models(urls)))
del objects
(_, groups), columns_bytes = held(as_columns)
print(json.dumps({
    "n": n, "objects": objects_bytes, "columns": columns_bytes, "groups": len(groups),
    "last": groups.model_ids[urls[-1]] == urls[-1].removesuffix(".gguf"),
}))
"""


def test_the_listing_and_the_groups_hold_no_python_object_per_file() -> None:
    """Columns, not objects: the listing and its groups cost a fifteenth of the heap the tuple and the dict did.
    Measured in a fresh interpreter: in this one a test cluster's threads allocate meanwhile, and tracemalloc
    counts their bytes too."""
    done = subprocess.run([sys.executable, "-c", _HELD], capture_output=True, text=True, check=True, timeout=300)
    held = json.loads(done.stdout)
    n = held["n"]
    assert held["groups"] == n and held["last"]
    assert held["objects"] / n > 300  # a ListedFile, its URL and datetime, a model id, a list, dict entries
    # a model's sorted hash (12 bytes), start and id length (4 each) and bounded caches; Arrow is not traced
    assert held["columns"] / n < 30, f"{held['columns'] / n:.1f} bytes a file"
