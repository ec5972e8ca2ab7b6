"""Discovery: roots, globs, manifests, and the listing's facts."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from pathlib import Path

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pipeline_helpers import s3_options

from gguf_audit.io.options import options_for
from gguf_audit.pipelines.listing.discover import DiscoveryError, discover, listed_from_info, read_manifest
from gguf_audit.testing.http import RangeHTTPServer
from gguf_audit.testing.s3 import MotoS3Server


def _tree(root: Path, names: list[str]) -> None:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(name.encode())


def test_local_root_with_globs(tmp_path: Path) -> None:
    _tree(tmp_path, ["a.gguf", "sub/b.gguf", "sub/deep/c.gguf", "tmp/d.gguf", "notes.txt", "e.gguf.part"])
    listing = discover([str(tmp_path)])
    names = [f.url.removeprefix(f"file://{tmp_path}/") for f in listing.files]
    assert names == ["a.gguf", "sub/b.gguf", "sub/deep/c.gguf", "tmp/d.gguf"]
    assert all(f.url.startswith("file:///") for f in listing.files)
    first = listing.files[0]
    assert first.size == len(b"a.gguf") and first.mtime is not None and first.mtime.tzinfo is not None
    assert listing.total_bytes == sum(
        len(n.encode()) for n in ["a.gguf", "sub/b.gguf", "sub/deep/c.gguf", "tmp/d.gguf"]
    )

    listing = discover([str(tmp_path)], exclude=["tmp/*", "c.gguf"])
    assert [f.url.rsplit("/", 1)[1] for f in listing.files] == ["a.gguf", "b.gguf"]
    listing = discover([str(tmp_path)], include=["sub/**/*.gguf"])
    assert [f.url.rsplit("/", 1)[1] for f in listing.files] == ["b.gguf", "c.gguf"]
    # A file named as a root is taken whatever the globs say; overlapping roots list a file once.
    listing = discover([str(tmp_path / "notes.txt"), str(tmp_path / "sub"), str(tmp_path / "sub" / "b.gguf")])
    assert [f.url.rsplit("/", 1)[1] for f in listing.files] == ["notes.txt", "b.gguf", "c.gguf"]


def test_memory_root() -> None:
    fs = fsspec.filesystem("memory")
    base = f"/disc-{uuid.uuid4().hex[:8]}"
    fs.pipe_file(f"{base}/x/m.gguf", b"1234")
    fs.pipe_file(f"{base}/y.bin", b"1")
    [listed] = discover([f"memory://{base}"]).files
    assert (listed.url, listed.size) == (f"memory://{base}/x/m.gguf", 4)


def test_missing_root_fails(tmp_path: Path) -> None:
    with pytest.raises(DiscoveryError, match="does not exist"):
        discover([str(tmp_path / "nope")])


def test_s3_listing_keeps_etag_and_mtime(moto: MotoS3Server) -> None:
    bucket = f"disc-{uuid.uuid4().hex[:10]}"
    moto.make_bucket(bucket)
    etags = {key: moto.put(bucket, key, key.encode() * 3) for key in ["a/m.gguf", "a/b/n.gguf", "c/o.gguf", "p.gguf"]}
    moto.put(bucket, "a/readme.md", b"x")
    moto.reset_stats()
    listing = discover([f"s3://{bucket}"], storage_options={"s3": s3_options(moto)})
    # What the listing cost, counted as sent: every request the S3 server saw (LISTs, the root's HEAD).
    assert listing.requests == len(moto.requests) == 1  # one flat listing of every key (no delimiter)
    by_url = {f.url: f for f in listing.files}
    assert sorted(by_url) == sorted(f"s3://{bucket}/{k}" for k in etags)
    for key, etag in etags.items():
        listed = by_url[f"s3://{bucket}/{key}"]
        assert listed.etag == etag and listed.size == len(key) * 3
        assert listed.mtime is not None and listed.mtime.tzinfo is not None
    # A prefix root, and objects replaced since the last listing by the same process.
    moto.put(bucket, "a/m.gguf", b"changed")
    moto.reset_stats()
    again = discover([f"s3://{bucket}/a/"], storage_options={"s3": s3_options(moto)})
    assert {f.url: f.size for f in again.files} == {f"s3://{bucket}/a/b/n.gguf": 30, f"s3://{bucket}/a/m.gguf": 7}
    assert again.requests == len(moto.requests) > 0  # the same client, counted again from zero


def test_one_folder_per_model_lists_as_one_stream(moto: MotoS3Server) -> None:
    """40 files in 40 folders: one flat, paginated listing (no delimiter), not a listing per folder."""
    bucket = f"disc-{uuid.uuid4().hex[:10]}"
    moto.make_bucket(bucket)
    for i in range(40):
        moto.put(bucket, f"models/org-{i:02d}/m-{i:02d}.gguf", b"x" * (i + 1))
    moto.put(bucket, "models/org-00/README.md", b"r")
    moto.reset_stats()
    listing = discover([f"s3://{bucket}/models"], storage_options={"s3": s3_options(moto)})
    assert len(listing.files) == 40 and listing.total_bytes == sum(range(1, 41))
    assert listing.requests == len(moto.requests) <= 3
    assert all(r.method == "GET" and "list-type=2" in r.path and "delimiter=&" in r.path for r in moto.requests)
    # A root naming one object still works: the empty listing under it, then one look at the object.
    moto.reset_stats()
    [one] = discover([f"s3://{bucket}/models/org-07/m-07.gguf"], storage_options={"s3": s3_options(moto)}).files
    assert one.size == 8
    with pytest.raises(DiscoveryError, match="does not exist"):
        discover([f"s3://{bucket}/nothing-here"], storage_options={"s3": s3_options(moto)})


def test_hf_style_info() -> None:
    info = {
        "name": "org/repo/m.gguf",
        "size": 4_000_000_000,
        "type": "file",
        "blob_id": "0123abcd",
        "lfs": {"size": 4_000_000_000, "sha256": "f" * 64, "pointer_size": 135},
    }
    listed = listed_from_info("hf://org/repo/m.gguf", info)
    assert (listed.size, listed.sha256, listed.version_id, listed.etag) == (4_000_000_000, "f" * 64, "0123abcd", None)
    s3 = listed_from_info(
        "s3://b/k", {"size": 5, "ETag": '"e"', "LastModified": datetime(2026, 1, 1), "VersionId": "v1"}
    )
    assert (s3.etag, s3.version_id, s3.mtime) == ('"e"', "v1", datetime(2026, 1, 1, tzinfo=UTC))
    gcs = listed_from_info("gs://b/k", {"size": 5, "etag": "CJ", "generation": "17", "updated": "2026-01-01T00:00:00Z"})
    assert (gcs.etag, gcs.version_id, gcs.mtime) == ("CJ", "17", datetime(2026, 1, 1, tzinfo=UTC))


def test_manifests(tmp_path: Path) -> None:
    (tmp_path / "text.txt").write_text("# models\nhttp://h/a.gguf\n\n  sub/b.gguf  \n/abs/c.gguf\n")
    listed = read_manifest(str(tmp_path / "text.txt"))
    assert [f.url for f in listed] == ["http://h/a.gguf", f"file://{tmp_path}/sub/b.gguf", "file:///abs/c.gguf"]

    (tmp_path / "m.csv").write_text("url,size,etag,sha256\nhttp://h/a.gguf,10,e1,\nhttp://h/b.gguf,,,abc\n")
    a, b = read_manifest(str(tmp_path / "m.csv"))
    assert (a.size, a.etag, a.sha256) == (10, "e1", None)
    assert (b.size, b.etag, b.sha256) == (None, None, "abc")

    table = pa.table(
        {
            "url": ["http://h/a.gguf", "http://h/b.gguf"],
            "size": [1, 2],
            "mtime": [datetime(2026, 1, 1, tzinfo=UTC), None],
        }
    )
    pq.write_table(table, tmp_path / "m.parquet")
    a, b = read_manifest(str(tmp_path / "m.parquet"))
    assert (a.size, a.mtime, b.size, b.mtime) == (1, datetime(2026, 1, 1, tzinfo=UTC), 2, None)

    (tmp_path / "bad.csv").write_text("path\nx\n")
    with pytest.raises(DiscoveryError, match=r"no 'url' column\. Got \['path'\]\."):
        read_manifest(str(tmp_path / "bad.csv"))
    with pytest.raises(DiscoveryError, match="cannot read manifest"):
        read_manifest(str(tmp_path / "missing.txt"))

    listing = discover([], manifests=[str(tmp_path / "text.txt"), str(tmp_path / "m.csv")])
    assert [f.url for f in listing.files][:3] == [
        "http://h/a.gguf",
        f"file://{tmp_path}/sub/b.gguf",
        "file:///abs/c.gguf",
    ]
    assert len(listing.files) == 4  # http://h/a.gguf once
    assert listing.requests == 0  # local manifests, nothing sent
    assert discover([str(tmp_path)]).requests == 0
    with RangeHTTPServer(files={"list.txt": b"http://h/a.gguf\n"}) as server:
        remote = discover([], manifests=[server.url_for("list.txt")])
    assert [f.url for f in remote.files] == ["http://h/a.gguf"] and remote.requests is None  # HTTP is not counted


def test_options_for() -> None:
    flat = {"anon": True}
    assert options_for("s3://b/k", flat) == flat
    assert options_for("/local/path", flat) == {}
    assert options_for("memory://x", flat) == {}
    per = {"s3": {"anon": True}, "hf": {"revision": "main"}, "http": {"client_kwargs": {}}}
    assert options_for("s3://b/k", per) == {"anon": True}
    assert options_for("hf://o/r/m.gguf", per) == {"revision": "main"}
    assert options_for("https://h/m.gguf", per) == {"client_kwargs": {}}
    assert options_for("gs://b/k", per) == {}


def test_a_shard_given_alone_brings_its_set(tmp_path: Path) -> None:
    """Scanning only the first shard lists the rest of its set beside it (not other sets, not other files)."""
    for name in (
        "m-Q4-00001-of-00003.gguf",
        "m-Q4-00002-of-00003.gguf",
        "m-Q4-00003-of-00003.gguf",
        "m-Q8-00001-of-00002.gguf",
        "m-Q4-00001-of-00004.gguf",
        "other.gguf",
    ):
        (tmp_path / name).write_bytes(b"GGUF")
    listing = discover([str(tmp_path / "m-Q4-00001-of-00003.gguf")])
    assert sorted(Path(f.url).name for f in listing.files) == [
        "m-Q4-00001-of-00003.gguf",
        "m-Q4-00002-of-00003.gguf",
        "m-Q4-00003-of-00003.gguf",
    ]
    assert all(f.size == 4 for f in listing.files)
    # A plain file given alone stays alone.
    assert [Path(f.url).name for f in discover([str(tmp_path / "other.gguf")]).files] == ["other.gguf"]


def test_safetensors_beside_ggufs_are_noted_not_listed_for_audit(tmp_path: Path) -> None:
    """A listed directory's safetensors are lineage sources: recorded with the listing, never audited as GGUF."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for name in ("a/m-Q4_K_M.gguf", "a/model-00001-of-00002.safetensors", "b/m-Q8_0.gguf"):
        (tmp_path / name).write_bytes(b"GGUF")
    listing = discover([str(tmp_path)])
    assert sorted(Path(f.url).name for f in listing.files) == ["m-Q4_K_M.gguf", "m-Q8_0.gguf"]
    dirs = {d.rsplit("/", 1)[1] for d in listing.safetensors_dirs}
    assert dirs == {"a"}
    assert f"file://{tmp_path}/a" in listing.listed_dirs and f"file://{tmp_path}/b" in listing.listed_dirs
    assert len(listing.listed_dirs) == 2 and f"file://{tmp_path}" not in listing.listed_dirs
    # A single file given as the root does not vouch for its directory.
    assert len(discover([str(tmp_path / "b" / "m-Q8_0.gguf")]).listed_dirs) == 0


def test_urls_that_redact_alike_are_named_not_dropped_silently(tmp_path: Path) -> None:
    (tmp_path / "m.txt").write_text(
        "http://h/a.gguf?sig=s3cr3tA\nhttp://h/a.gguf?sig=s3cr3tB\nhttp://h/a.gguf?sig=s3cr3tA\nhttp://h/b.gguf?sig=x\n"
    )
    listing = discover([], manifests=[str(tmp_path / "m.txt")])
    assert [f.url for f in listing.files] == ["http://h/a.gguf?sig=***", "http://h/b.gguf?sig=***"]
    assert listing.files[0].source_url == "http://h/a.gguf?sig=s3cr3tA"  # the first listed is the one audited
    named = [s for s in listing.skipped if s.url == "http://h/a.gguf?sig=***"]
    assert len(named) == 1 and named[0].reason.startswith("1 more listed URL(s) redact to this one")
    assert "s3cr3t" not in str(named[0])


def test_token_shaped_paths_that_redact_alike_are_one_file_named(tmp_path: Path) -> None:
    a, b = "hf_abcdefghijklmnopqrstuvwxyzABCDEFGH", "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"
    (tmp_path / "m.txt").write_text(f"http://h/{a}.gguf\nhttp://h/{b}.gguf\n")
    listing = discover([], manifests=[str(tmp_path / "m.txt")])
    assert [f.url for f in listing.files] == ["http://h/***.gguf"]  # a URL is a file's identity: one row
    assert [s.url for s in listing.skipped] == ["http://h/***.gguf"]
    assert a not in str(listing.skipped) and b not in str(listing.skipped)
