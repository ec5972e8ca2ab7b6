"""An s3:// root listed a page of keys at a time: the same files and facts as ``fs.find`` gave, the same requests."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

import pytest
from fsspec.core import url_to_fs
from pipeline_helpers import s3_options

from gguf_audit.io.options import options_for
from gguf_audit.pipelines.listing import discover
from gguf_audit.pipelines.listing.discover import DiscoveryError, _find, _listed
from gguf_audit.pipelines.listing.objects import PAGE_KEYS, KeyStream, s3_keys, streams_keys
from gguf_audit.testing.s3 import MotoS3Server

KEYS = (
    "models/org-a/m-Q4_K_M.gguf",
    "models/org-a/m-Q8_0.gguf",
    "models/org-a/model.safetensors",
    "models/org-a/README.md",
    "models/org-b/big-Q4-00001-of-00003.gguf",
    "models/org-b/big-Q4-00002-of-00003.gguf",
    "models/org-b/big-Q4-00003-of-00003.gguf",
    "models/org-b/tmp/partial.gguf",
    "models/org-c/deep/er/m.gguf",
    "models/org-c/deep/model-00001-of-00002.safetensors",
    "models/org-é/ünïcode-F16.gguf",
    "models/org-z/m.gguf.part",
    "models/placeholder/",
    "top.gguf",
)


def _bucket(moto: MotoS3Server, keys: Sequence[str] = KEYS) -> str:
    name = f"lst-{uuid.uuid4().hex[:12]}"
    moto.make_bucket(name)
    for i, key in enumerate(keys):
        moto.put(name, key, key.encode() * (i + 1))
    return name


def _options(moto: MotoS3Server, **extra: Any) -> dict[str, Any]:
    return {"s3": {**s3_options(moto), **extra}}


def _as_find_listed(root: str, options: dict[str, Any], include: Sequence[str], exclude: Sequence[str]) -> list[Any]:
    """The root's files as the listing made them before it streamed: ``fs.find``'s dict, sorted, selected."""
    fs, path = url_to_fs(root, **options_for(root, options))
    fs.invalidate_cache()
    path = path.rstrip("/")
    entries = _find(fs, path)
    return list(_listed(fs, path, ((p, entries[p]) for p in sorted(entries)), include, exclude))


@pytest.mark.parametrize(
    ("root", "include", "exclude"),
    [
        ("", ("*.gguf",), ()),
        ("/models", ("*.gguf",), ("*/tmp/*", "*-00002-of-*")),
        ("/models/", ("org-b/**/*.gguf", "README.md"), ()),
        ("/models", ("*",), ("*.part",)),
    ],
)
def test_streamed_listing_equals_finds(
    moto: MotoS3Server, root: str, include: tuple[str, ...], exclude: tuple[str, ...]
) -> None:
    bucket = _bucket(moto)
    options = _options(moto)
    url = f"s3://{bucket}{root}"
    moto.reset_stats()
    listing = discover([url], include=include, exclude=exclude, storage_options=options)
    assert listing.requests == len(moto.requests) == 1  # one LIST: 14 keys, no HEAD, no listing per folder
    old = _as_find_listed(url, options, include, exclude)
    assert list(listing.files) == [f for f in old if not f.url.endswith(".safetensors")]
    assert listing.safetensors_dirs == {f.url.rsplit("/", 1)[0] for f in old if f.url.endswith(".safetensors")}
    assert all(f.size and f.etag and f.mtime for f in listing.files)
    if root == "/models":
        assert [f.url.removeprefix(f"s3://{bucket}/models/") for f in listing.files] == (
            [
                "org-a/m-Q4_K_M.gguf",
                "org-a/m-Q8_0.gguf",
                "org-b/big-Q4-00001-of-00003.gguf",
                "org-b/big-Q4-00003-of-00003.gguf",
                "org-c/deep/er/m.gguf",
                "org-é/ünïcode-F16.gguf",
            ]
            if include == ("*.gguf",)
            else [  # '*' takes every key, the folder placeholder too, as fs.find gave it
                "org-a/README.md",
                "org-a/m-Q4_K_M.gguf",
                "org-a/m-Q8_0.gguf",
                "org-b/big-Q4-00001-of-00003.gguf",
                "org-b/big-Q4-00002-of-00003.gguf",
                "org-b/big-Q4-00003-of-00003.gguf",
                "org-b/tmp/partial.gguf",
                "org-c/deep/er/m.gguf",
                "org-é/ünïcode-F16.gguf",
                "placeholder/",
            ]
        )
        assert listing.safetensors_dirs == {f"s3://{bucket}/models/org-a", f"s3://{bucket}/models/org-c/deep"}


def test_versioned_listing_keeps_version_ids(moto: MotoS3Server) -> None:
    """A version-aware filesystem lists the latest version of each key, with its id, as ``find`` did."""
    bucket = f"lst-{uuid.uuid4().hex[:12]}"
    moto.make_bucket(bucket)
    moto.client().put_bucket_versioning(Bucket=bucket, VersioningConfiguration={"Status": "Enabled"})
    for key in ("a/m.gguf", "a/m.gguf", "b/n.gguf"):  # a/m.gguf twice: two versions, the latest listed
        moto.put(bucket, key, key.encode() + uuid.uuid4().bytes)
    options = _options(moto, version_aware=True)
    listing = discover([f"s3://{bucket}"], storage_options=options)
    assert list(listing.files) == _as_find_listed(f"s3://{bucket}", options, ("*.gguf",), ())
    versions = moto.client().list_object_versions(Bucket=bucket)["Versions"]
    latest = {v["Key"]: v["VersionId"] for v in versions if v["IsLatest"]}
    assert {f.url: f.version_id for f in listing.files} == {f"s3://{bucket}/{k}": v for k, v in latest.items()}


def test_one_list_per_thousand_keys(moto: MotoS3Server) -> None:
    """2,500 keys in 250 folders: three LISTs (1,000 keys each, no delimiter), and nothing else."""
    bucket = f"lst-{uuid.uuid4().hex[:12]}"
    moto.make_bucket(bucket)
    keys = [f"m/org-{i // 10:03d}/q{i % 10}.gguf" for i in range(2500)]
    assert moto.put_many(bucket, ((k, b"x" * (1 + i % 5)) for i, k in enumerate(keys))) == 2500
    moto.reset_stats()
    listing = discover([f"s3://{bucket}/m"], storage_options=_options(moto))
    assert listing.requests == len(moto.requests) == 3
    assert all(r.method == "GET" and "list-type=2" in r.path and "delimiter=&" in r.path for r in moto.requests)
    assert [f.url for f in listing.files] == [f"s3://{bucket}/{k}" for k in sorted(keys)]
    assert listing.total_bytes == sum(1 + i % 5 for i in range(2500))
    assert len(listing.listed_dirs) == 250 and all(
        f"s3://{bucket}/m/org-{i:03d}" in listing.listed_dirs for i in range(250)
    )
    assert f"s3://{bucket}/m" not in listing.listed_dirs and f"s3://{bucket}/m/org-250" not in listing.listed_dirs


def test_the_stream_asks_a_page_when_the_last_is_used(moto: MotoS3Server) -> None:
    """The next page is asked for only once the caller took every key of the last one; closing stops it."""
    bucket = f"lst-{uuid.uuid4().hex[:12]}"
    moto.make_bucket(bucket)
    moto.put_many(bucket, ((f"k/{i:05d}", b"") for i in range(2 * PAGE_KEYS + 1)))
    fs, path = url_to_fs(f"s3://{bucket}/k", **s3_options(moto))
    assert streams_keys(fs)
    moto.reset_stats()
    seen = KeyStream()
    keys = s3_keys(fs, path, seen)
    for _ in range(PAGE_KEYS):
        next(keys)
    assert (len(moto.requests), seen.keys) == (1, PAGE_KEYS)
    name, info = next(keys)
    assert (name, info["size"], info["type"]) == (f"{bucket}/k/{PAGE_KEYS:05d}", 0, "file")
    assert (len(moto.requests), seen.keys) == (2, 2 * PAGE_KEYS)
    keys.close()
    assert len(moto.requests) == 2 and seen.in_order
    assert not streams_keys(url_to_fs("memory://x")[0])


def test_empty_prefix_and_one_object_roots(moto: MotoS3Server) -> None:
    bucket = _bucket(moto)
    options = _options(moto)
    # A root naming one object: the empty listing under it, then the object; a shard brings its set.
    moto.reset_stats()
    [one] = discover([f"s3://{bucket}/top.gguf"], storage_options=options).files
    assert moto.requests[0].method == "GET" and "list-type=2" in moto.requests[0].path
    assert [r.method for r in moto.requests[1:]] == ["HEAD", "HEAD"]  # isfile, info; find's own HEAD is gone
    assert (one.url, one.size) == (f"s3://{bucket}/top.gguf", len(KEYS[-1]) * len(KEYS))
    shard = discover([f"s3://{bucket}/models/org-b/big-Q4-00002-of-00003.gguf"], storage_options=options)
    assert [f.url.rsplit("/", 1)[1] for f in shard.files] == [f"big-Q4-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    assert len(shard.listed_dirs) == 0  # a file root does not see its whole directory
    one_file = discover([f"s3://{bucket}/models/org-z/m.gguf.part"], storage_options=options).files
    assert [f.url for f in one_file] == [f"s3://{bucket}/models/org-z/m.gguf.part"]  # named: taken whatever the globs
    # A prefix holding keys the globs leave out lists nothing, without error; one holding no key does not exist.
    assert list(discover([f"s3://{bucket}/models/placeholder"], storage_options=options).files) == []
    assert list(discover([f"s3://{bucket}/models/org-z"], storage_options=options).files) == []
    for missing in (f"s3://{bucket}/models/org-", f"s3://{bucket}/nothing", f"s3://no-{bucket}"):
        with pytest.raises(DiscoveryError, match="does not exist"):
            discover([missing], storage_options=options)
