"""Arrow tables kept in a file on the driver's disk and mapped, not held in its heap: the night's listing.

The listing is the one structure with a row per file that a night keeps from
its start to its commit, alive through every phase. Here it
is written once as an Arrow IPC file (an unlinked temporary file: it goes
with the last column that reads it) and mapped read-only: the columns are the
same zero-copy Arrow arrays to every reader, while their bytes are the file's
pages in the page cache, which the kernel can reclaim at any time.

The NumPy arrays a night keeps a value a file of (the groups' starts and
hashes, the reused files' positions, the run that read each) go the same way,
written in place (:func:`array_on_disk`).

A pass over the columns still makes the pages it touched resident in the
process: :func:`release_mapped_pages` lets go of them (``MADV_DONTNEED``; a
later read maps them again from the cache, or reads them from the disk), and
the night calls it between phases and while the audit streams the files to
the workers. Where the platform has no ``madvise`` the pages stay mapped
until the kernel needs them.

The files go to the temporary directory (``TMPDIR``), as the driver's ledger
does. Where that is a memory file system (a tmpfs ``/tmp``), they are memory
after all: :func:`temp_dir_in_memory` says so, and a large night warns.
"""

from __future__ import annotations

import ctypes
import functools
import mmap
import os
import tempfile
import threading
import weakref
from collections.abc import Callable
from typing import Any, Final, TypeVar, cast

import numpy as np
import numpy.typing as npt
import pyarrow as pa

__all__ = [
    "BATCH_ROWS",
    "ON_DISK_BYTES",
    "MappedWriter",
    "array_on_disk",
    "give_back_freed_memory",
    "is_mapped",
    "is_on_disk",
    "map_column",
    "map_table",
    "mapped_bytes",
    "release_mapped_pages",
    "temp_dir_in_memory",
]

_DONTNEED: Final = getattr(mmap, "MADV_DONTNEED", None)


class _Maps:
    """The live mappings, each with its address range (weakly held: a mapping goes with its last column)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ranges: dict[int, tuple[int, int]] = {}
        self._maps: weakref.WeakValueDictionary[int, mmap.mmap] = weakref.WeakValueDictionary()

    def add(self, mapped: mmap.mmap, start: int, size: int) -> None:
        with self._lock:
            key = id(mapped)
            self._maps[key] = mapped
            self._ranges[key] = (start, size)
            weakref.finalize(mapped, self._forget, key)

    def _forget(self, key: int) -> None:
        with self._lock:
            self._ranges.pop(key, None)

    def live(self) -> list[mmap.mmap]:
        with self._lock:
            return [m for m in (self._maps.get(k) for k in list(self._ranges)) if m is not None]

    def holds(self, address: int) -> bool:
        with self._lock:
            return any(start <= address < start + size for start, size in self._ranges.values())

    def total(self) -> int:
        with self._lock:
            return sum(size for _, size in self._ranges.values())


_MAPS: Final = _Maps()


BATCH_ROWS: Final = 16_384
"""Rows written pieces are joined into before they are one record batch of a mapped file (or
:data:`_BATCH_BYTES`, whichever comes first)."""
_BATCH_BYTES: Final = 2 << 20


class MappedWriter:
    """A table written a piece at a time to a file on the driver's disk, then mapped (:meth:`close`).

    For rows a night keeps but makes as it streams (the base night's carried
    models): only the piece being written is in the heap. The schema is the
    first piece's; the file goes when the writer is closed, or left (``with``).
    """

    def __init__(self) -> None:
        self._file = tempfile.TemporaryFile(prefix="gguf-audit-mapped-")  # noqa: SIM115 - closed by close()
        self._writer: pa.ipc.RecordBatchFileWriter | None = None
        self._schema: pa.Schema | None = None
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self._pending_bytes = 0
        self.num_rows = 0

    def write(self, table: pa.Table | pa.RecordBatch, *, as_chunked: bool = False) -> None:
        """Append ``table``'s rows (every piece with the first one's schema).

        Small pieces are joined into record batches of :data:`BATCH_ROWS`
        rows: each batch of the mapped table costs the heap a little a
        column. ``as_chunked`` writes
        ``table``'s chunks as they are instead.
        """
        if self._writer is None:
            self._schema = table.schema
            self._writer = pa.ipc.new_file(pa.PythonFile(self._file, mode="w"), table.schema)
        if table.num_rows and as_chunked:
            self._flush()
            self._writer.write(table)
            self.num_rows += table.num_rows
        elif table.num_rows:
            self._pending.append(table if isinstance(table, pa.Table) else pa.Table.from_batches([table]))
            self._pending_rows += table.num_rows
            self._pending_bytes += table.nbytes
            self.num_rows += table.num_rows
            if self._pending_rows >= BATCH_ROWS or self._pending_bytes >= _BATCH_BYTES:
                self._flush()

    def _flush(self) -> None:
        if self._writer is not None and self._pending:
            self._writer.write(pa.concat_tables(self._pending).combine_chunks())
        self._pending, self._pending_rows, self._pending_bytes = [], 0, 0

    def close(self) -> pa.Table | None:
        """The rows written, in order, their buffers in the mapped file (None when no piece was written)."""
        try:
            if self._writer is None or self._schema is None:
                return None
            self._flush()
            self._writer.close()
            if self.num_rows == 0:
                return self._schema.empty_table()
            self._file.flush()
            mapped = mmap.mmap(self._file.fileno(), 0, access=mmap.ACCESS_READ)  # it outlives the descriptor
        finally:
            self._file.close()
        whole = pa.py_buffer(mapped)
        _MAPS.add(mapped, whole.address, whole.size)
        return pa.ipc.open_file(whole).read_all()

    def __enter__(self) -> MappedWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self._file.close()


def map_table(table: pa.Table) -> pa.Table:
    """``table``, with the same columns and chunks, read from a file on the driver's disk (mapped).

    The file is written here, unlinked at once and mapped read-only; the
    returned table's buffers point into the mapping, which stays while any of
    its columns (or slices of them) does. An empty table is returned as it is.
    """
    if table.num_rows == 0:
        return table
    with MappedWriter() as writer:
        writer.write(table, as_chunked=True)
        mapped = writer.close()
    return mapped if mapped is not None else table


def map_column(column: pa.ChunkedArray | pa.Array) -> pa.ChunkedArray:
    """``column`` read from a file on the driver's disk (:func:`map_table`), its chunks kept."""
    chunked = column if isinstance(column, pa.ChunkedArray) else pa.chunked_array([column], column.type)
    return map_table(pa.table({"values": chunked})).column("values")


def is_mapped(column: pa.ChunkedArray | pa.Array) -> bool:
    """Whether every buffer of ``column`` lies in a live mapping (an empty column counts as mapped)."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    return all(_MAPS.holds(b.address) for chunk in chunks for b in chunk.buffers() if b is not None and b.size)


_Value = TypeVar("_Value", bound=np.generic)

ON_DISK_BYTES: Final = 256 * 1024
"""The size from which :func:`array_on_disk` puts an array in a file (65,536 ``int32`` values: a night of as
many files); a smaller one stays in the heap, where it costs less than a file and a mapping."""


def array_on_disk(values: npt.NDArray[_Value]) -> npt.NDArray[_Value]:
    """``values`` copied into a file on the driver's disk and mapped, read and written in place, when they take
    :data:`ON_DISK_BYTES` or more; ``values`` themselves otherwise.

    For the arrays a night keeps a value a file or model of, from its listing
    to its commit (the groups' starts and id hashes, the reused files'
    positions, the run that read each). Mapped, their pages are let go of with the
    listing's (:func:`release_mapped_pages`); a page written since stays in
    the page cache and the file, and is read back from there.
    """
    array = np.ascontiguousarray(values)
    if array.nbytes < ON_DISK_BYTES:
        return array
    with tempfile.TemporaryFile(prefix="gguf-audit-array-") as file:
        file.truncate(array.nbytes)
        mapped = mmap.mmap(file.fileno(), array.nbytes)  # shared and writable; it outlives the descriptor
    on_disk = cast("npt.NDArray[_Value]", np.frombuffer(mapped, dtype=array.dtype, count=array.size))
    on_disk = on_disk.reshape(array.shape)
    on_disk[...] = array
    _MAPS.add(mapped, on_disk.ctypes.data, array.nbytes)
    return on_disk


def is_on_disk(array: npt.NDArray[Any]) -> bool:
    """Whether ``array``'s values lie in a live mapping (:func:`array_on_disk`'s)."""
    return array.nbytes > 0 and _MAPS.holds(array.ctypes.data)


def mapped_bytes() -> int:
    """The bytes of every live mapping (on the driver's disk, resident only where recently read)."""
    return _MAPS.total()


def release_mapped_pages() -> int:
    """Let go of the mapped pages the process holds (they stay in the page cache): how many mappings."""
    if _DONTNEED is None:
        return 0
    live = _MAPS.live()
    for mapped in live:
        mapped.madvise(_DONTNEED)
    return len(live)


def give_back_freed_memory() -> bool:
    """Let go of the mapped pages (:func:`release_mapped_pages`) and hand the free pages of Arrow's pool and of
    the C heap (glibc's ``malloc_trim``) back to the system: whether the C heap had any.

    What a phase or a streamed batch frees (a listing's sort, a batch of the
    base night's rows, lineage's columns) goes back to glibc, which keeps it
    resident: a later allocation a little larger than any hole left extends the
    heap instead. The night calls this at the end of each phase and streamed
    step (:func:`~gguf_audit.pipelines.spill.driver_phase`).
    """
    release_mapped_pages()
    pa.default_memory_pool().release_unused()
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    try:
        trim: Callable[[int], int] = ctypes.CDLL(None).malloc_trim  # the process's own symbols: glibc's, if it is
    except (OSError, AttributeError, TypeError):  # no glibc (macOS, musl, Windows): nothing to do
        return None
    return trim


_MEMORY_FILE_SYSTEMS: Final = frozenset({"tmpfs", "ramfs"})


def temp_dir_in_memory(mounts: str = "/proc/mounts") -> str | None:
    """The temporary directory, when the file system holding it is in memory (tmpfs, ramfs): the driver's
    spill files there cost memory after all. None on a disk, or where the mounts cannot be read."""
    directory = os.path.realpath(tempfile.gettempdir())
    found, kind = "", ""
    try:
        with open(mounts, encoding="utf-8", errors="replace") as table:
            for line in table:
                fields = line.split()
                if len(fields) < 3:
                    continue
                mount = fields[1].replace("\\040", " ")
                inside = directory == mount or directory.startswith(mount.rstrip("/") + "/")
                if inside and len(mount) >= len(found):  # the deepest mount holding it (the last one mounted wins)
                    found, kind = mount, fields[2]
    except OSError:
        return None
    return directory if kind in _MEMORY_FILE_SYSTEMS else None
