"""What a listing says of a file, and when a file counts as unchanged since an earlier run."""

from __future__ import annotations

from datetime import UTC, datetime

from gguf_audit.tables.listed import ListedFile


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
