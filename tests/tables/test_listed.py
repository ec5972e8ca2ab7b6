"""What a listing says of a file, and when a file counts as unchanged since an earlier run."""

from __future__ import annotations

from datetime import UTC, datetime

import pyarrow as pa

from gguf_audit.codes import Code
from gguf_audit.tables.listed import ListedFile, ListedFiles


def test_unchanged_since() -> None:
    t = datetime(2026, 1, 1, tzinfo=UTC)
    before = ListedFile("u", 10, '"e1"', None, t, None)
    assert ListedFile("u", 10, '"e1"', None, t).unchanged_since(before)
    assert not ListedFile("u", 11, '"e1"', None, t).unchanged_since(before)
    assert not ListedFile("u", 10, '"e2"', None, t).unchanged_since(before)  # the ETag wins over the mtime
    assert ListedFile("u", 10, '"e1"', None, datetime(2027, 1, 1, tzinfo=UTC)).unchanged_since(before)
    assert ListedFile("u", 10, None, None, t).unchanged_since(before)  # only the mtime in common
    assert not ListedFile("u", 10).unchanged_since(ListedFile("u", 10))  # nothing to compare: read it
    lfs = ListedFile("u", 10, "x", None, None, "a" * 64)
    assert not ListedFile("u", 10, "x", None, None, "b" * 64).unchanged_since(lfs)  # sha256 first
    assert not ListedFile("u", None).unchanged_since(ListedFile("u", None))


def test_files_made_from_columns_filtered_and_their_directories() -> None:
    t = datetime(2026, 1, 1, 0, 0, 0, 5, tzinfo=UTC)
    files = ListedFiles.of_columns(
        url=pa.chunked_array([pa.array(["s3://b/a/x.gguf", "s3://b/a/y.safetensors"]), pa.array(["s3://b/c/z.gguf"])]),
        size=pa.array([1, 2, None], pa.int64()),
        mtime=pa.array([t, None, t], pa.timestamp("us", tz="UTC")),
    )
    assert list(files) == [
        ListedFile("s3://b/a/x.gguf", 1, mtime=t),
        ListedFile("s3://b/a/y.safetensors", 2),
        ListedFile("s3://b/c/z.gguf", None, mtime=t),
    ]
    assert list(files.directories(pa.chunked_array([[True, True, True]]))) == ["s3://b/a", "s3://b/c"]
    assert list(files.directories(pa.chunked_array([[False, True, False]]))) == ["s3://b/a"]
    assert [f.url for f in files.filter(pa.array([True, False, None]))] == ["s3://b/a/x.gguf"]
    # What few files have (an error, a URL to read holding a secret) follows its file through the filter.
    rare = ListedFiles.of(
        [
            ListedFile.at("https://u:p@h/a.gguf"),
            ListedFile("https://h/b.gguf", error_code=Code.IO_NOT_FOUND, error_message="gone"),
            ListedFile("https://h/c.gguf"),
        ]
    )
    kept = rare.filter(pa.array([False, True, True]))
    assert [(f.url, f.error_code, f.read_url) for f in kept] == [
        ("https://h/b.gguf", Code.IO_NOT_FOUND, None),
        ("https://h/c.gguf", None, None),
    ]
    assert rare.filter(pa.array([True, False, False]))[0].read_url == "https://u:p@h/a.gguf"
