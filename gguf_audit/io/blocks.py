"""Reading planned byte ranges of a file in one concurrent round, and looking bytes up after.

All merged ranges go out together (:meth:`~gguf_audit.io.source.ByteSource.read_ranges`,
fsspec's ``cat_ranges`` with errors returned per range); bytes already held
from the header read are not fetched again. A failed range costs only the
bytes inside it: it comes back as a value, never raised.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

from gguf_audit.errors import SourceError
from gguf_audit.io.source import ByteSource
from gguf_audit.plan import ByteRange

__all__ = ["ByteStore", "RangeFetch", "read_ranges_into"]


class ByteStore:
    """Byte segments of one file, looked up by absolute range."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._data: list[bytes] = []

    def add(self, start: int, data: bytes) -> None:
        if not data:
            return
        i = bisect.bisect_left(self._starts, start)
        self._starts.insert(i, start)
        self._data.insert(i, data)

    def get(self, start: int, end: int) -> bytes | None:
        """Bytes ``[start, end)`` when the segments cover them all."""
        i = bisect.bisect_right(self._starts, start) - 1
        if i >= 0 and end <= self._starts[i] + len(self._data[i]):
            # One segment holds it all (nearly always: a block inside one fetched range).
            seg_start = self._starts[i]
            return self._data[i][start - seg_start : end - seg_start] if end > start else b""
        pieces = []
        pos = start
        while pos < end:
            i = bisect.bisect_right(self._starts, pos) - 1
            if i < 0:
                return None
            seg_start, data = self._starts[i], self._data[i]
            if pos >= seg_start + len(data):
                return None
            take = data[pos - seg_start : end - seg_start]
            pieces.append(take)
            pos += len(take)
        return b"".join(pieces)


@dataclass(frozen=True, slots=True)
class RangeFetch:
    """The bytes one round of range reads brought, and what failed."""

    store: ByteStore
    fetched: tuple[ByteRange, ...]
    errors: tuple[tuple[ByteRange, SourceError], ...]


def read_ranges_into(source: ByteSource, fetch: Sequence[ByteRange], *, held: bytes = b"") -> RangeFetch:
    """Fetch ``fetch`` (already merged) in one concurrent round; ``held`` is the file's first bytes."""
    results = source.read_ranges(fetch) if fetch else []
    store = ByteStore()
    store.add(0, held)
    errors: list[tuple[ByteRange, SourceError]] = []
    for r, result in zip(fetch, results, strict=True):
        if isinstance(result, SourceError):
            errors.append((r, result))
        else:
            store.add(r.start, result[: r.n_bytes])
    return RangeFetch(store, tuple(fetch), tuple(errors))
