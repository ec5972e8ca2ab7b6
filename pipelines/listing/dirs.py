"""Directories a listing saw whole, held as digests: :class:`DirectorySet` and its :class:`DirectoryDigests`.

Lineage asks of a directory only whether the listing saw all of it (then the
listing already says whether it holds safetensors, and no request is needed).
In the common layout, a folder per model, there are as many directories as
files, and a frozenset of their URLs cost about 150 bytes each (the string
and its slot); here each is a 16-byte BLAKE2b digest in one sorted NumPy
array. Two directories share a digest with a probability of about
``n**2 / 2**129``: nil for any collection.
"""

from __future__ import annotations

import hashlib
from collections.abc import Container, Iterable
from typing import Final

import numpy as np
import numpy.typing as npt

from gguf_audit.pipelines.spill import array_on_disk

__all__ = ["DirectoryDigests", "DirectorySet"]

_DIGEST_BYTES: Final = 16
_DTYPE: Final = f"S{_DIGEST_BYTES}"  # fixed-width bytes: sortable and searchable by NumPy
_PENDING: Final = 8192
"""Digests gathered as bytes objects (about 60 bytes each) before they are sorted into a chunk of 16 bytes each."""
_CHUNKS: Final = 16
"""Sorted chunks kept apart before they are merged into one."""


def _digest(directory: str) -> bytes:
    return hashlib.blake2b(directory.encode("utf-8", "surrogatepass"), digest_size=_DIGEST_BYTES).digest()


def _distinct(digests: npt.NDArray[np.bytes_]) -> npt.NDArray[np.bytes_]:
    """``digests`` sorted in place, each once: ``np.unique``'s answer without its hash table (three times the
    digests' bytes)."""
    digests.sort()
    if len(digests) < 2:
        return digests
    again = digests[1:] == digests[:-1]
    return digests[np.append(True, ~again)] if again.any() else digests


class DirectorySet(Container[str]):
    """Directory URLs (no trailing ``/``), asked of one at a time: ``directory in dirs``. The strings are
    not kept, so it cannot be iterated; ``len`` counts the distinct directories."""

    __slots__ = ("_digests",)

    def __init__(self, directories: Iterable[str] = ()) -> None:
        built = DirectoryDigests()
        built.update(directories)
        self._digests: npt.NDArray[np.bytes_] = built.sorted_digests()

    @classmethod
    def _of(cls, digests: npt.NDArray[np.bytes_]) -> DirectorySet:
        made = cls()
        made._digests = digests
        return made

    def __contains__(self, directory: object) -> bool:
        if not isinstance(directory, str) or not len(self._digests):
            return False
        key = np.array(_digest(directory), dtype=_DTYPE)
        at = int(np.searchsorted(self._digests, key))
        return at < len(self._digests) and bool(self._digests[at] == key)

    def __len__(self) -> int:
        return len(self._digests)

    def __repr__(self) -> str:
        return f"DirectorySet(<{len(self)} directories>)"


class DirectoryDigests:
    """Gathers directories for a :class:`DirectorySet`, a chunk of sorted digests at a time (a listing's
    files come a directory's worth after another: a directory repeated at once is taken once)."""

    __slots__ = ("_chunks", "_last", "_pending")

    def __init__(self) -> None:
        self._chunks: list[npt.NDArray[np.bytes_]] = []
        self._pending: list[bytes] = []
        self._last: str | None = None

    def add(self, directory: str) -> None:
        if directory == self._last:
            return
        self._last = directory
        self._pending.append(_digest(directory))
        if len(self._pending) >= _PENDING:
            self._sort_pending()

    def update(self, directories: Iterable[str]) -> None:
        for directory in directories:
            self.add(directory)

    def _sort_pending(self) -> None:
        if self._pending:
            self._chunks.append(_distinct(np.array(self._pending, dtype=_DTYPE)))
            self._pending = []
        if len(self._chunks) > _CHUNKS:
            self._chunks = [_distinct(np.concatenate(self._chunks))]

    def sorted_digests(self) -> npt.NDArray[np.bytes_]:
        """Every distinct digest, sorted (on the driver's disk when they are many: :func:`array_on_disk`)."""
        self._sort_pending()
        if not self._chunks:
            return np.zeros(0, dtype=_DTYPE)
        merged = self._chunks[0] if len(self._chunks) == 1 else _distinct(np.concatenate(self._chunks))
        self._chunks = [array_on_disk(merged)]
        return self._chunks[0]

    def build(self) -> DirectorySet:
        return DirectorySet._of(self.sorted_digests())
