"""What a listing says of one file before anything is read: :class:`ListedFile`.

It lives with the tables, not with discovery in ``gguf_audit.pipelines``,
because the ``files`` table records these facts (its "what the listing said"
columns) and the row builders take them; the tables must not import the
pipelines. Discovery makes them, an incremental run compares them.

Pure: a frozen value, and :class:`ListedFiles`, a collection's worth of them held as Arrow columns.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final, overload

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from gguf_audit.checks.hub_gguf import HubGGUF
from gguf_audit.codes import Code
from gguf_audit.redact import REDACTED, redact_url
from gguf_audit.tables.take import take_rows, take_strings

__all__ = ["ListedFile", "ListedFiles", "redaction_collisions"]


@dataclass(frozen=True, slots=True)
class ListedFile:
    """One file as the listing (or a manifest) described it, before anything is read.

    ``url`` is the file's identity, in every row and message: redacted
    (:func:`gguf_audit.redact.redact_url`), stable across nights. The URL to
    read, when it holds a secret (``user:password@``, a presigned query), is
    :attr:`read_url`, which no table, message or ``repr`` shows; make both
    with :meth:`at`.
    """

    url: str
    size: int | None = None
    etag: str | None = None
    version_id: str | None = None
    mtime: datetime | None = None
    sha256: str | None = None
    revision: str | None = None
    """The commit the file was listed at (``hf://``: the sha its revision pointed at); reads are pinned to it."""
    error_code: Code | None = None
    """Set when the listing itself failed for this entry (a repository that could not be listed): the
    ``io.*`` code the file's row gets instead of an audit, with :attr:`error_message`."""
    error_message: str | None = None
    hub_gguf: HubGGUF | None = field(default=None, compare=False)
    """``hf://`` files: the Hub's ``gguf`` card of the repository, from the listing (compared with the header)."""
    read_url: str | None = field(default=None, repr=False, compare=False)
    """The URL bytes are read from when it differs from :attr:`url` (its credentials); None: :attr:`url`.
    Goes to the workers that read, never into a row."""

    @classmethod
    def at(cls, url: str, **facts: Any) -> ListedFile:
        """The file at ``url`` (which may hold credentials): ``url`` redacted, the real one kept to read."""
        shown = redact_url(url)
        return cls(url=shown, read_url=None if shown == url else url, **facts)

    @property
    def source_url(self) -> str:
        """The URL to read the file's bytes from."""
        return self.url if self.read_url is None else self.read_url

    def unchanged_since(self, previous: ListedFile) -> bool:
        """Whether the listing shows the same bytes as ``previous`` (same URL, an earlier run).

        The size must match and so must the strongest identity both listings
        have: the LFS sha256, then a version id, then an ETag, then the
        modification time. With none in common the file counts as changed.
        """
        if self.size is None or self.size != previous.size:
            return False
        for mine, theirs in (
            (self.sha256, previous.sha256),
            (self.version_id, previous.version_id),
            (self.etag, previous.etag),
        ):
            if mine is not None and theirs is not None:
                return mine == theirs
        if self.mtime is not None and previous.mtime is not None:
            return self.mtime == previous.mtime
        return False


_COLUMNS: Final = pa.schema(
    [
        ("url", pa.string()),
        ("size", pa.int64()),
        ("etag", pa.string()),
        ("version_id", pa.string()),
        ("mtime", pa.timestamp("us", tz="UTC")),
        ("sha256", pa.string()),
        ("revision", pa.string()),
    ]
)
"""What every listed file has, a column each; the rest (errors, Hub cards, read URLs) is rare and kept aside."""
_CHUNK_ROWS: Final = 4096
"""Files turned into (or made from) Arrow at a time: the Python objects alive at once while building or iterating."""
_DIRS_AT_ONCE: Final = 4096
"""Files whose directories are worked out at a time: as many names in Arrow, its hash table and as Python strings
(a folder per model: 12 MB at 65,536)."""


@dataclass(frozen=True, slots=True)
class _Rare:
    error_code: Code | None
    error_message: str | None
    hub_gguf: HubGGUF | None
    read_url: str | None


class ListedFiles(Sequence[ListedFile]):
    """Listed files held column by column in Arrow: a :class:`ListedFile` is made when one is asked for.

    A collection of a million files costs its URLs' bytes and a few words
    each, not a Python object, a URL string and a datetime per file; the
    fields few files have (listing errors, Hub cards, URLs holding
    credentials) are kept by position beside the columns. Iterating makes
    the files :data:`_CHUNK_ROWS` at a time.
    """

    __slots__ = ("_rare", "_table")

    def __init__(self, table: pa.Table | None = None, rare: Mapping[int, _Rare] | None = None) -> None:
        self._table = _COLUMNS.empty_table() if table is None else table
        self._rare: dict[int, _Rare] = dict(rare or {})

    @classmethod
    def of(cls, files: Iterable[ListedFile]) -> ListedFiles:
        """``files``, in their order (made :data:`_CHUNK_ROWS` at a time)."""
        if isinstance(files, ListedFiles):
            return files
        batches: list[pa.RecordBatch] = []
        rare: dict[int, _Rare] = {}
        chunk: list[ListedFile] = []
        start = 0
        for f in files:
            if f.error_code is not None or f.error_message is not None or f.hub_gguf is not None or f.read_url:
                rare[start + len(chunk)] = _Rare(f.error_code, f.error_message, f.hub_gguf, f.read_url)
            chunk.append(f)
            if len(chunk) == _CHUNK_ROWS:
                batches.append(_batch_of(chunk))
                start += len(chunk)
                chunk = []
        if chunk:
            batches.append(_batch_of(chunk))
        table = pa.Table.from_batches(batches, schema=_COLUMNS) if batches else None  # chunked: no copy
        return cls(table, rare)

    @classmethod
    def of_columns(
        cls, *, url: pa.Array | pa.ChunkedArray, size: pa.Array | None = None, mtime: pa.Array | None = None
    ) -> ListedFiles:
        """Files given as columns (a URL each, and what the listing knows of their sizes and modification
        times), the other facts unknown: no :class:`ListedFile` is made."""
        n = len(url)
        unknown = pa.nulls(n, pa.string())  # one buffer for every string fact nobody gave
        given: dict[str, pa.Array | pa.ChunkedArray] = {"url": url}
        given["size"] = pa.nulls(n, pa.int64()) if size is None else size
        given["mtime"] = pa.nulls(n, _COLUMNS.field("mtime").type) if mtime is None else mtime
        columns = [given.get(name, unknown) for name in _COLUMNS.names]
        return cls(pa.Table.from_arrays(columns, schema=_COLUMNS))

    def __len__(self) -> int:
        return int(self._table.num_rows)

    @overload
    def __getitem__(self, index: int) -> ListedFile: ...

    @overload
    def __getitem__(self, index: slice) -> ListedFiles: ...

    def __getitem__(self, index: int | slice) -> ListedFile | ListedFiles:
        n = len(self)
        if isinstance(index, slice):
            start, stop, step = index.indices(n)
            if step != 1:
                return self.take(range(start, stop, step))
            stop = max(start, stop)
            rare = {i - start: r for i, r in self._rare.items() if start <= i < stop}
            return ListedFiles(self._table.slice(start, stop - start), rare)
        position = index + n if index < 0 else index
        if not 0 <= position < n:
            raise IndexError(f"listed file index out of range. Got {index!r} of {n}.")
        [row] = self._table.slice(position, 1).to_pylist()
        return _file_of(row, self._rare.get(position))

    def __iter__(self) -> Iterator[ListedFile]:
        for start in range(0, len(self), _CHUNK_ROWS):
            rows = self._table.slice(start, _CHUNK_ROWS).to_pylist()
            for i, row in enumerate(rows, start):
                yield _file_of(row, self._rare.get(i))

    def with_table(self, keep: Callable[[pa.Table], pa.Table]) -> ListedFiles:
        """The same files, their columns as ``keep`` returns them (the same rows, in order: moved elsewhere,
        say to a file on disk)."""
        moved = keep(self._table)
        if moved.num_rows != self._table.num_rows or moved.schema != self._table.schema:
            raise ValueError(f"keep changed the listed files' rows or columns: {moved.num_rows} rows of {moved.schema}")
        return ListedFiles(moved, self._rare)

    def take(self, positions: Iterable[int]) -> ListedFiles:
        """The files at ``positions``, in that order."""
        chosen = list(positions)
        rare = {new: self._rare[old] for new, old in enumerate(chosen) if old in self._rare}
        return ListedFiles(take_rows(self._table, chosen), rare)

    def filter(self, mask: pa.Array | pa.ChunkedArray) -> ListedFiles:
        """The files where ``mask`` (a boolean column as long as this) is true, in order."""
        mask = pc.fill_null(mask, False)
        rare: dict[int, _Rare] = {}
        if self._rare:
            whole = mask.combine_chunks() if isinstance(mask, pa.ChunkedArray) else mask
            kept = whole.to_numpy(zero_copy_only=False)
            before = np.cumsum(kept)  # files kept up to each position, itself included
            rare = {int(before[i]) - 1: r for i, r in self._rare.items() if kept[i]}
        return ListedFiles(self._table.filter(mask), rare)

    def directories(self, mask: pa.ChunkedArray) -> Iterator[str]:
        """The directories (each URL up to its last ``/``) of the files where ``mask`` is true, in the files'
        order, a chunk of files at a time (each once within a chunk; a caller keeping them dedupes)."""
        urls = self._table.column("url")
        for start in range(0, len(urls), _DIRS_AT_ONCE):
            chosen = urls.slice(start, _DIRS_AT_ONCE).filter(mask.slice(start, _DIRS_AT_ONCE))
            directories = pc.replace_substring_regex(chosen, pattern="/[^/]*$", replacement="")
            yield from (str(d) for d in pc.unique(directories).to_pylist())

    def urls(self) -> Iterator[str]:
        """Every file's URL, in order (made :data:`_CHUNK_ROWS` at a time)."""
        column = self._table.column("url")
        for start in range(0, len(self), _CHUNK_ROWS):
            yield from (str(u) for u in column.slice(start, _CHUNK_ROWS).to_pylist())

    def urls_at(self, positions: Iterable[int] | npt.NDArray[np.integer[Any]]) -> list[str]:
        """The URLs of the files at ``positions``, in that order."""
        return take_strings(self._table.column("url"), np.asarray(positions, dtype=np.int64))

    def url_column(self) -> pa.ChunkedArray:
        """Every file's URL as one Arrow column."""
        return self._table.column("url")

    def read_urls(self) -> dict[str, str]:
        """The URL to read each file from, by its (redacted) URL, for the few whose URL holds credentials."""
        urls = self._table.column("url")
        return {str(urls[i].as_py()): r.read_url for i, r in sorted(self._rare.items()) if r.read_url is not None}

    def total_size(self) -> int:
        """The listed sizes added up (files without one count nothing)."""
        total = pc.sum(self._table.column("size")).as_py()
        return int(total or 0)

    def unsized(self) -> int:
        """Files whose size the listing did not give."""
        return int(self._table.column("size").null_count)

    def find_urls(self, urls: Iterable[str]) -> list[str]:
        """Those of ``urls`` that are listed here."""
        wanted = pa.array(sorted(set(urls)), pa.string())
        column = self._table.column("url")
        return [str(u) for u in column.filter(pc.is_in(column, value_set=wanted)).to_pylist()]

    @classmethod
    def first_of_each_url(cls, parts: Sequence[ListedFiles]) -> ListedFiles:
        """``parts`` one after the other, each URL once (where it first appears)."""
        if not parts:
            return cls()
        rare: dict[int, _Rare] = {}
        offset = 0
        for part in parts:
            rare.update({offset + i: r for i, r in part._rare.items()})
            offset += len(part)
        joined = cls(pa.concat_tables([p._table for p in parts]), rare)
        if len(joined) < 2:
            return joined
        positions = pa.array(range(len(joined)), pa.int64())
        firsts = (
            pa.table({"url": joined._table.column("url"), "at": positions})
            .group_by("url", use_threads=False)
            .aggregate([("at", "min")])
            .column("at_min")
        )
        if len(firsts) == len(joined):
            return joined
        return joined.take(sorted(firsts.to_pylist()))

    def __repr__(self) -> str:
        return f"ListedFiles({len(self)} files)"


def redaction_collisions(parts: Sequence[ListedFiles]) -> dict[str, int]:
    """The redacted URLs that stand for more than one listed URL (they differ only in what redaction blanks:
    a query value that is not harmless, a token-shaped path segment), each with how many others it hides.

    Only rows whose URL holds the redaction mark can collide; a listing has none or few, so this costs a
    substring test over the URLs. :meth:`ListedFiles.first_of_each_url` keeps the first of each.
    """
    raws: dict[str, set[str]] = {}
    for part in parts:
        urls = part.url_column()
        marked = pc.fill_null(pc.match_substring(urls, REDACTED), False)
        if not pc.any(marked).as_py():
            continue
        at = np.flatnonzero(marked.to_numpy(zero_copy_only=False))
        for position, url in zip(at.tolist(), take_strings(urls, at), strict=True):
            rare = part._rare.get(position)
            raws.setdefault(url, set()).add(rare.read_url if rare is not None and rare.read_url else url)
    return {url: len(seen) - 1 for url, seen in sorted(raws.items()) if len(seen) > 1}


def _batch_of(files: Sequence[ListedFile]) -> pa.RecordBatch:
    return pa.record_batch(
        [
            pa.array([f.url for f in files], pa.string()),
            pa.array([f.size for f in files], pa.int64()),
            pa.array([f.etag for f in files], pa.string()),
            pa.array([f.version_id for f in files], pa.string()),
            pa.array([f.mtime for f in files], _COLUMNS.field("mtime").type),
            pa.array([f.sha256 for f in files], pa.string()),
            pa.array([f.revision for f in files], pa.string()),
        ],
        schema=_COLUMNS,
    )


def _file_of(row: Mapping[str, Any], rare: _Rare | None) -> ListedFile:
    if rare is None:
        return ListedFile(
            row["url"], row["size"], row["etag"], row["version_id"], row["mtime"], row["sha256"], row["revision"]
        )
    return ListedFile(
        row["url"],
        row["size"],
        row["etag"],
        row["version_id"],
        row["mtime"],
        row["sha256"],
        row["revision"],
        rare.error_code,
        rare.error_message,
        rare.hub_gguf,
        rare.read_url,
    )
