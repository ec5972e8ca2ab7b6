"""Rows at some positions of a chunked column or table, without joining its chunks first.

``pyarrow``'s ``take`` on a :class:`pyarrow.ChunkedArray` (and on a table of
them) concatenates every chunk before it picks: one URL asked of a listing of
100,000 costs a copy of all 100,000 (about 150 us and 4 MB; 40 MB at a
million files). The driver asks for a few values at a time all night long
(a model's first URL, a batch's listed files), so :func:`take_rows` finds each
position's chunk and takes from the chunks it touches alone: the work and the
memory follow the values asked for, not the column.

Pure: Arrow values in, Arrow values out.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, TypeVar

import numpy as np
import numpy.typing as npt
import pyarrow as pa

__all__ = ["chunk_starts", "take_rows", "take_strings"]

Taken = TypeVar("Taken", pa.Array, pa.ChunkedArray, pa.Table)


def chunk_starts(lengths: Sequence[int]) -> npt.NDArray[np.int64]:
    """Where each chunk of those ``lengths`` starts, and after the last its end."""
    return np.concatenate([[0], np.cumsum(np.asarray(lengths, dtype=np.int64))]).astype(np.int64)


def take_rows(data: Taken, positions: Iterable[int] | npt.NDArray[np.integer[Any]]) -> Taken:
    """``data.take(positions)`` (positions in ``[0, len)``, in any order, repeats allowed), reading only the chunks
    the positions fall in.

    A table comes back as one chunk a column; a chunked array as one chunk.
    """
    at = np.asarray(positions if isinstance(positions, np.ndarray) else list(positions), dtype=np.int64)
    if isinstance(data, pa.Array):
        return data.take(pa.array(at, pa.int64()))
    if not len(at):
        return data.slice(0, 0)
    pieces = data.to_batches() if isinstance(data, pa.Table) else data.chunks
    if len(pieces) <= 1:
        return data.take(pa.array(at, pa.int64()))
    n = len(data) if isinstance(data, pa.ChunkedArray) else data.num_rows
    if int(at.min()) < 0 or int(at.max()) >= n:
        raise IndexError(f"a position out of [0, {n}) among {len(at)} asked for")
    starts = chunk_starts([len(p) for p in pieces])
    which: npt.NDArray[np.int64] = (np.searchsorted(starts, at, side="right") - 1).astype(np.int64)
    order: npt.NDArray[np.int64] = np.argsort(which, kind="stable").astype(np.int64)
    ordered: npt.NDArray[np.int64] = which[order]
    chunks: npt.NDArray[np.int64] = ordered[np.append(True, ordered[1:] != ordered[:-1])]  # sorted: no hash table
    bounds: list[int] = [*np.searchsorted(ordered, chunks).tolist(), len(at)]
    taken = [
        pieces[int(c)].take(pa.array(at[order[bounds[i] : bounds[i + 1]]] - starts[c], pa.int64()))
        for i, c in enumerate(chunks.tolist())
    ]
    if isinstance(data, pa.Table):
        joined: pa.Table | pa.Array = pa.Table.from_batches(taken, schema=data.schema).combine_chunks()
    else:
        joined = pa.concat_arrays(taken)
    if np.array_equal(order, np.arange(len(at))):  # asked in ascending chunk order: as taken
        return pa.chunked_array([joined], data.type) if isinstance(data, pa.ChunkedArray) else joined
    back = np.empty(len(at), dtype=np.int64)
    back[order] = np.arange(len(at), dtype=np.int64)
    result = joined.take(pa.array(back, pa.int64()))  # within the few rows taken: no copy of the column
    return pa.chunked_array([result], data.type) if isinstance(data, pa.ChunkedArray) else result


def take_strings(
    column: pa.Array | pa.ChunkedArray, positions: Iterable[int] | npt.NDArray[np.integer[Any]]
) -> list[str]:
    """The values of a string column at ``positions``, as Python strings (:func:`take_rows`)."""
    return [str(v) for v in take_rows(column, positions).to_pylist()]
