"""Local listings follow symlinks (a Hugging Face cache scans as its files) and name what they skip."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
import types
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from pipeline_helpers import read_dataset

from gguf_audit.cli import main
from gguf_audit.codes import Code
from gguf_audit.pipelines.listing.discover import discover
from gguf_audit.pipelines.listing.local import Skipped, _shown, walk_local
from gguf_audit.tables.listed import ListedFiles


def _hf_cache(root: Path) -> Path:
    """``models--org--name`` as huggingface_hub lays it out: snapshots link to content-addressed blobs."""
    repo = root / "models--org--name"
    blobs = repo / "blobs"
    blobs.mkdir(parents=True)
    (blobs / "aaa111").write_bytes(b"q4 model bytes")
    (blobs / "bbb222").write_bytes(b"f16 model bytes, longer")
    (blobs / "ccc333").write_bytes(b"readme")
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("sha2")
    for sha, names in {"sha1": ["m-Q4_K.gguf"], "sha2": ["m-Q4_K.gguf", "m-F16.gguf", "README.md"]}.items():
        snap = repo / "snapshots" / sha
        snap.mkdir(parents=True)
        for name in names:
            blob = {"m-Q4_K.gguf": "aaa111", "m-F16.gguf": "bbb222", "README.md": "ccc333"}[name]
            (snap / name).symlink_to(f"../../blobs/{blob}")
    return repo


def test_hf_cache_scans_as_its_files_once_each(tmp_path: Path) -> None:
    repo = _hf_cache(tmp_path)
    listing = discover([str(tmp_path)])
    snap = f"file://{repo}/snapshots"
    # Each blob once, under the snapshot refs/main names (never the blob's hash name, nor the old sha1 that
    # comes first in walk order), with the target's size.
    assert [(f.url, f.size) for f in listing.files] == [
        (f"{snap}/sha2/m-F16.gguf", len(b"f16 model bytes, longer")),
        (f"{snap}/sha2/m-Q4_K.gguf", len(b"q4 model bytes")),
    ]
    assert all(f.mtime is not None for f in listing.files)
    # The old snapshot's link to the same blob is named, not silently dropped.
    assert [str(s) for s in listing.skipped] == [f"{snap}/sha1/m-Q4_K.gguf: same file as {snap}/sha2/m-Q4_K.gguf"]


def test_hf_cache_is_recorded_under_refs_main_by_the_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = _hf_cache(tmp_path / "hub")
    assert main(["scan", str(tmp_path / "hub"), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    shown = [line.strip() for line in capsys.readouterr().out.splitlines() if line.startswith("  file://")]
    assert shown == [f"file://{repo}/snapshots/sha2/m-F16.gguf", f"file://{repo}/snapshots/sha2/m-Q4_K.gguf"]
    (repo / "refs" / "main").write_text("sha1\n")  # huggingface_hub moved main back: its snapshot wins
    assert main(["scan", str(tmp_path / "hub"), "--out", str(tmp_path / "out"), "--dry-run"]) == 0
    assert f"file://{repo}/snapshots/sha1/m-Q4_K.gguf" in capsys.readouterr().out


def test_links_loops_and_broken_links_are_named(tmp_path: Path) -> None:
    real = tmp_path / "models"
    (real / "a").mkdir(parents=True)
    (real / "a" / "x.gguf").write_bytes(b"x" * 10)
    (real / "a" / "up").symlink_to("..")  # a loop back to an ancestor
    (real / "alias").symlink_to("a")  # the same directory under a second name
    (real / "gone.gguf").symlink_to("nowhere.gguf")  # broken
    (real / "self.gguf").symlink_to("self.gguf")  # a link to itself
    (real / "gone.txt").symlink_to("nowhere.txt")  # broken, but not a file the scan covers
    os.mkfifo(real / "pipe.gguf")
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    (outside / "y.gguf").write_bytes(b"y" * 7)
    (real / "linked").symlink_to(outside)  # a symlinked directory is entered
    listing = discover([str(real)])
    base = f"file://{real}"
    audited = [(f.url, f.size) for f in listing.files if f.error_code is None]
    assert audited == [(f"{base}/a/x.gguf", 10), (f"{base}/linked/y.gguf", 7)]
    # A directory reached again is only named: its files are listed under its first path.
    reasons = {s.url.removeprefix(base + "/"): s.reason for s in listing.skipped}
    assert reasons == {"a/up": f"symlink loop {base}", "alias": f"same directory as {base}/a"}
    # An entry that may hide a file is a listed file of its own with an error code, so it gets a row.
    unaudited = {f.url.removeprefix(base + "/"): (f.error_code, f.error_message) for f in listing.files if f.error_code}
    assert unaudited == {
        "gone.gguf": (Code.IO_BROKEN_LINK, "broken symlink (FileNotFoundError)"),
        "self.gguf": (Code.IO_BROKEN_LINK, "symlink loop (OSError)"),
        "pipe.gguf": (Code.IO_NOT_LISTABLE, "not a regular file"),
    }


def test_names_that_are_not_utf8_are_named_and_the_walk_goes_on(tmp_path: Path) -> None:
    """A file or folder name that is not UTF-8 (Linux allows any bytes) cannot be a URL: such a file is named
    among the skipped, its bytes shown escaped, and the rest of the collection is listed (the walk raised
    before: Arrow refuses such a string)."""
    real = tmp_path / "models"
    (real / "ok").mkdir(parents=True)
    (real / "ok" / "a.gguf").write_bytes(b"a" * 3)
    base = os.fsencode(real)
    with open(base + b"/x\xfe.gguf", "wb") as f:
        f.write(b"x")
    os.makedirs(base + b"/\xffdir/inner")
    with open(base + b"/\xffdir/inner/m.gguf", "wb") as f:
        f.write(b"m")
    with open(base + b"/\xffdir/readme.txt", "wb") as f:  # not a file the scan covers: no news
        f.write(b"r")
    (real / "zz").mkdir()
    (real / "zz" / "b.gguf").write_bytes(b"b" * 5)
    listing = discover([str(real)])
    url = f"file://{real}"
    audited = [(f.url, f.size) for f in listing.files if f.error_code is None]
    assert audited == [(f"{url}/ok/a.gguf", 3), (f"{url}/zz/b.gguf", 5)]
    # Each is a listed file of its own with an error (a row no gate lets pass), never only a name in runs.
    assert not listing.skipped
    unaudited = {f.url.removeprefix(url + "/"): (f.error_code, f.error_message) for f in listing.files if f.error_code}
    assert unaudited == {
        "x\\xfe.gguf": (Code.IO_NAME_NOT_UTF8, "its path is not UTF-8: no URL names it"),
        "\\xffdir/inner/m.gguf": (Code.IO_NAME_NOT_UTF8, "its path is not UTF-8: no URL names it"),
    }
    assert all(f.url.encode("utf-8") for f in listing.files)  # the tables and the terminal can hold them
    # a lone surrogate that no file system's bytes gave (a caller's own URL function) is shown as well
    assert _shown(Skipped("file:///m/\ud800.gguf", "x")).url == "file:///m/\\ud800.gguf"


def test_symlinked_root_file_and_shard_siblings(tmp_path: Path) -> None:
    store = tmp_path / "store"
    store.mkdir()
    view = tmp_path / "view"
    view.mkdir()
    for i in (1, 2):
        (store / f"b{i}").write_bytes(b"s" * i)
        (view / f"m-0000{i}-of-00002.gguf").symlink_to(store / f"b{i}")
    listing = discover([str(view / "m-00001-of-00002.gguf")])
    assert [(f.url.rsplit("/", 1)[1], f.size) for f in listing.files] == [
        ("m-00001-of-00002.gguf", 1),
        ("m-00002-of-00002.gguf", 2),
    ]


def test_scan_of_a_hf_cache_audits_each_file_and_names_the_rest(
    client: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], sample: dict[str, bytes]
) -> None:
    """Through the CLI: the cache's files get rows under their snapshot paths; what was skipped is printed
    and lands in ``runs``."""
    repo = tmp_path / "hub" / "models--org--tiny"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "f1").write_bytes(sample["tiny-llama-Q4_K_M.gguf"])
    for sha in ("s1", "s2"):
        (repo / "snapshots" / sha).mkdir(parents=True)
        (repo / "snapshots" / sha / "tiny-Q4_K_M.gguf").symlink_to("../../blobs/f1")
    (repo / "snapshots" / "s2" / "broken.gguf").symlink_to("../../blobs/missing")
    out = tmp_path / "out"
    status = main(["scan", str(tmp_path / "hub"), "--out", str(out), "--scheduler", client.scheduler.address])
    printed = capsys.readouterr().out
    assert status == 0, printed
    snap = f"file://{repo}/snapshots"
    assert "files: 2 (ok 1," in printed
    assert "skipped 1 listed entr" in printed
    assert f"{snap}/s2/tiny-Q4_K_M.gguf: same file as {snap}/s1/tiny-Q4_K_M.gguf" in printed
    files = read_dataset(out, "files").sort_by("url")
    assert files.column("url").to_pylist() == [f"{snap}/s1/tiny-Q4_K_M.gguf", f"{snap}/s2/broken.gguf"]
    assert files.column("status").to_pylist() == ["ok", "unreadable"]  # the broken link is a row of its own
    problems = read_dataset(out, "problems").filter(pc.field("url").is_valid()).to_pylist()  # the files' own
    assert [(p["url"], p["code"], p["severity"]) for p in problems] == [
        (f"{snap}/s2/broken.gguf", "io.broken_link", "error")
    ]
    runs = read_dataset(out, "runs").to_pylist()[0]
    assert runs["n_skipped"] == 1
    assert runs["skipped"] == [f"{snap}/s2/tiny-Q4_K_M.gguf: same file as {snap}/s1/tiny-Q4_K_M.gguf"]


def test_hf_cache_with_every_file_included_shows_snapshot_paths(tmp_path: Path) -> None:
    repo = _hf_cache(tmp_path)
    listing = discover([str(tmp_path)], include=["*"])
    urls = [f.url.removeprefix(f"file://{repo}/") for f in listing.files]
    assert "snapshots/sha2/m-Q4_K.gguf" in urls and "snapshots/sha2/m-F16.gguf" in urls
    assert not any(u.startswith("blobs/") for u in urls)
    assert {s.url.removeprefix(f"file://{repo}/") for s in listing.skipped} >= {"blobs/aaa111", "blobs/bbb222"}


def _reachable(root: object) -> int:
    """How many Python objects ``root`` reaches (classes, modules and functions not counted)."""
    seen: set[int] = set()
    stack = [root]
    while stack:
        obj = stack.pop()
        if id(obj) in seen or isinstance(obj, type | types.ModuleType | types.FunctionType):
            continue
        seen.add(id(obj))
        stack.extend(gc.get_referents(obj))
    return len(seen)


def _many_files(root: Path, n: int) -> None:
    for i in range(n):
        folder = root / f"org-{i // 500:03d}" / f"model-{i // 50:05d}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"model-{i:06d}.Q4_K_M.gguf").write_bytes(b"")


_PEAKS = """
import gc, json, sys, tracemalloc
from gguf_audit.pipelines.listing.local import walk_local
walk_local(sys.argv[1], lambda rel: rel.endswith(".gguf"))  # imports and first-use caches, untraced
peaks = []
for root in sys.argv[1:]:
    gc.collect()
    tracemalloc.start()
    walk_local(root, lambda rel: rel.endswith(".gguf"))
    peaks.append(tracemalloc.get_traced_memory()[1])
    tracemalloc.stop()
print(json.dumps(peaks))
"""


def _walk_peaks(roots: list[Path]) -> list[int]:
    """The Python heap's peak while walking each root, measured in a fresh interpreter: in this one, a test
    cluster's threads allocate while the walk runs, and tracemalloc counts their bytes too."""
    done = subprocess.run(
        [sys.executable, "-c", _PEAKS, *map(str, roots)], capture_output=True, text=True, check=True, timeout=300
    )
    peaks: list[int] = json.loads(done.stdout)
    return peaks


def test_the_walk_keeps_its_files_as_columns_not_objects(tmp_path: Path) -> None:
    """What the walk returns holds as many Python objects for 9,000 files as for 60: the files are Arrow
    columns, not a dict, tuple or ListedFile each. And while walking, its Python heap grows by less than
    70 bytes a file (its typed arrays and their sorts; the dicts and tuples it kept before took about 450),
    past the URLs it holds as strings until it has a chunk's worth (both larger sizes fill one)."""
    sizes = {"tiny": 60, "small": 4500, "big": 9000}
    for name, n in sizes.items():
        _many_files(tmp_path / name, n)
    walks = {name: walk_local(str(tmp_path / name), lambda rel: rel.endswith(".gguf")) for name in sizes}
    many = walks["big"]
    assert isinstance(many.files, ListedFiles) and len(many.files) == 9000 and not many.skipped
    assert many.files[8999].url == f"file://{tmp_path}/big/org-017/model-00179/model-008999.Q4_K_M.gguf"
    assert _reachable(many) == _reachable(walks["tiny"])
    small, big = _walk_peaks([tmp_path / "small", tmp_path / "big"])
    per_file = (big - small) / (sizes["big"] - sizes["small"])
    assert per_file < 70, f"the walk's peak grew {per_file:.0f} bytes a file"


def test_a_folder_per_model_walks_in_little_more_than_its_names(tmp_path: Path) -> None:
    """A root holding a folder per model: the folders waiting to be walked cost their names as bytes in Arrow,
    and the folders walked 16 bytes of key each in a sorted array: about 50 bytes a folder of Python heap
    (names as Python strings and keys in a set of integers took 118; a scandir entry, a path and a dict of
    key tuples to paths 410)."""
    sizes = {"small": 4096 + 1000, "big": 3 * 4096 + 1000}  # the same URLs pending past whole chunks of them
    for name, n in sizes.items():
        for i in range(n):
            folder = tmp_path / name / f"model-{i:07d}-instruct"
            folder.mkdir(parents=True)
            (folder / f"model-{i:07d}-instruct.Q4_K_M.gguf").write_bytes(b"")
    assert len(walk_local(str(tmp_path / "big"), lambda rel: rel.endswith(".gguf")).files) == sizes["big"]
    small, big = _walk_peaks([tmp_path / "small", tmp_path / "big"])
    per_file = (big - small) / (sizes["big"] - sizes["small"])
    assert per_file < 80, f"the walk's peak grew {per_file:.0f} bytes a folder"


def test_one_path_per_real_file_through_hard_links_and_a_hf_cache(tmp_path: Path) -> None:
    """Hard links, symlinks and a Hugging Face cache on a real tree: each real file listed once, under its
    first path in walk order unless that is a cache's blob, in URL order, with the target's size and
    modification time; every other path named with the path kept."""
    root = tmp_path / "tree"
    (root / "a").mkdir(parents=True)
    (root / "a" / "x.gguf").write_bytes(b"x" * 3)
    os.link(root / "a" / "x.gguf", root / "a" / "y.gguf")  # a hard link, after x in walk order
    os.link(root / "a" / "x.gguf", root / "b.gguf")  # and one in the folder above
    (root / "a-b.gguf").write_bytes(b"ab")  # sorts before a/ as a URL though walked after it
    (root / "c.gguf").symlink_to(root / "a-b.gguf")  # a symlink to a file: the file once
    os.utime(root / "a-b.gguf", ns=(0, 1_700_000_000_123_456_789))
    repo = root / "hub" / "models--org--m"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / "h1.gguf").write_bytes(b"h" * 5)  # a blob named like a GGUF: walked before snapshots/
    (repo / "snapshots" / "s1").mkdir(parents=True)
    (repo / "snapshots" / "s1" / "m.gguf").symlink_to("../../blobs/h1.gguf")
    (repo / "blobs" / "h2.gguf").write_bytes(b"only a blob")  # no snapshot: its blob path is all there is
    os.link(repo / "blobs" / "h2.gguf", repo / "blobs" / "h3.gguf")

    walk = walk_local(str(root), lambda rel: rel.endswith(".gguf"))
    url = f"file://{root}"
    # A folder's files are walked before its subfolders': b.gguf before a/x.gguf.
    assert [(f.url, f.size) for f in walk.files] == [
        (f"{url}/a-b.gguf", 2),
        (f"{url}/b.gguf", 3),
        (f"{url}/hub/models--org--m/blobs/h2.gguf", 11),
        (f"{url}/hub/models--org--m/snapshots/s1/m.gguf", 5),
    ]
    assert [(s.url, s.reason) for s in walk.skipped] == [
        (f"{url}/a/x.gguf", f"same file as {url}/b.gguf"),
        (f"{url}/a/y.gguf", f"same file as {url}/b.gguf"),
        (f"{url}/c.gguf", f"same file as {url}/a-b.gguf"),
        (f"{url}/hub/models--org--m/blobs/h1.gguf", f"same file as {url}/hub/models--org--m/snapshots/s1/m.gguf"),
        (f"{url}/hub/models--org--m/blobs/h3.gguf", f"same file as {url}/hub/models--org--m/blobs/h2.gguf"),
    ]
    # Modification times as datetime.fromtimestamp rounds os.stat's: a night compares them with the last one's.
    assert walk.files[0].mtime == datetime(2023, 11, 14, 22, 13, 20, 123457, tzinfo=UTC)
    for listed in walk.files:
        path = listed.url.removeprefix("file://")
        assert listed.mtime == datetime.fromtimestamp(os.stat(path).st_mtime, tz=UTC)
