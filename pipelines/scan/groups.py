"""A night's models and their files, held as Arrow columns: :class:`ModelGroups`.

:func:`~gguf_audit.format.shard_names.group_models` says which files make one
model; as a dict of lists it costs a model-id string, a list and a URL string
per file. Here the same groups, in the same order, cost a few integers a
file: the URLs are the listing's own column (or made into
one a chunk at a time, given as strings), grouped in Arrow (a copy the
grouping made of a listing on disk goes to disk too: :mod:`~gguf_audit.pipelines.spill`); an id is kept as
its length (it is a prefix of the model's first URL) and looked up through
sorted hashes (Python's own ``hash`` of the string, stable within the
process); a URL's model is found from its name.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from gguf_audit.format.shard_names import model_id_for, parse_shard_name, url_path
from gguf_audit.pipelines.spill import MappedWriter, array_on_disk, is_mapped, map_column
from gguf_audit.tables.take import take_strings

__all__ = ["HashIndex", "ModelGroups", "ModelIds", "string_chunks"]

_CHUNK: Final = 4096
"""URLs turned into Python strings at a time (building, iterating, hashing)."""


class HashIndex:
    """Positions of some strings, found by their hash (collisions checked against the strings themselves,
    which ``values_at`` gives for some positions)."""

    __slots__ = ("_hashes", "_order", "_values_at")

    def __init__(
        self, chunks: Iterable[list[str]], n: int, values_at: Callable[[npt.NDArray[np.int64]], list[str]]
    ) -> None:
        self._values_at = values_at
        hashes = np.empty(n, dtype=np.int64)
        at = 0
        for chunk in chunks:
            hashes[at : at + len(chunk)] = [hash(v) for v in chunk]
            at += len(chunk)
        order = np.argsort(hashes, kind="stable")
        self._hashes = array_on_disk(hashes[order])
        del hashes
        self._order = array_on_disk(order.astype(np.int32) if len(order) < 2**31 else order)  # half the bytes

    def find(self, value: str) -> int:
        """The position of ``value``, or -1."""
        h = hash(value)
        at = int(np.searchsorted(self._hashes, h))
        while at < len(self._hashes) and self._hashes[at] == h:
            position = int(self._order[at])
            if self._values_at(np.array([position], dtype=np.int64))[0] == value:
                return position
            at += 1
        return -1

    def find_many(self, values: Sequence[str]) -> npt.NDArray[np.int64]:
        """The position of each of ``values`` (-1: absent), hashed and searched together."""
        found = np.full(len(values), -1, dtype=np.int64)
        if not len(values) or not len(self._hashes):
            return found
        at = np.searchsorted(self._hashes, np.array([hash(v) for v in values], dtype=np.int64))
        candidates = self._order[np.minimum(at, len(self._hashes) - 1)].astype(np.int64)
        seen = self._values_at(candidates)
        for i, (value, there) in enumerate(zip(values, seen, strict=True)):
            # the first of equal hashes matched: found; otherwise absent or a collision, looked up alone
            found[i] = candidates[i] if there == value else self.find(value)
        return found


def string_chunks(column: pa.ChunkedArray | pa.Array) -> Iterator[list[str]]:
    """``column``'s values as Python strings, :data:`_CHUNK` at a time."""
    for start in range(0, len(column), _CHUNK):
        yield [str(v) for v in column.slice(start, _CHUNK).to_pylist()]


class ModelGroups(Mapping[str, Sequence[str]]):
    """Files grouped by model (shards in index order), in :func:`group_models`' order, as Arrow columns.

    ``groups[model_id]`` is a list of the model's URLs, made when asked for. A
    model's id is a prefix of its first URL (the URL's path less ``.gguf`` or
    the shard suffix), so only its length is kept: 4 bytes a model, where the
    ids as a column cost their URLs' bytes again.
    """

    def __init__(self, urls: Iterable[str] | pa.ChunkedArray | pa.Array) -> None:
        """``urls``: the listed URLs, each once, as strings or as the listing's Arrow column (then shared)."""
        table = _grouped(urls)
        self._urls = table.column("url")
        if isinstance(urls, pa.Array | pa.ChunkedArray) and is_mapped(urls) and not is_mapped(self._urls):
            self._urls = map_column(self._urls)  # grouping reordered a mapped listing: its copy goes to disk too
        ids = table.column("model_id")
        del table
        n = len(ids)
        if n:
            changes = pc.not_equal(ids.slice(1), ids.slice(0, n - 1)).to_numpy(zero_copy_only=False)
            starts = np.concatenate([[0], np.flatnonzero(changes) + 1])
        else:
            starts = np.zeros(0, dtype=np.int64)
        self._starts: npt.NDArray[np.signedinteger[Any]] = array_on_disk(
            starts.astype(np.int32) if n < 2**31 else starts.astype(np.int64)  # half the bytes, nearly always
        )
        # every file its own model (the common night): the ids are the groups' ids, no copy
        group_ids = ids if len(self._starts) == n else ids.take(pa.array(self._starts))
        del ids
        self._id_lengths = array_on_disk(pc.utf8_length(group_ids).to_numpy(zero_copy_only=False).astype(np.int32))
        self._by_id = HashIndex(string_chunks(group_ids), len(group_ids), self.ids_at)
        del group_ids

    def _urls_at(self, positions: npt.NDArray[np.int64]) -> list[str]:
        return take_strings(self._urls, positions)

    def ids_at(self, positions: npt.NDArray[Any]) -> list[str]:
        """The id of the model at each of ``positions``: its first URL, cut to the id's length."""
        at = np.asarray(positions, dtype=np.int64)
        firsts = self._urls_at(self._starts[at].astype(np.int64))
        return [u[:k] for u, k in zip(firsts, self._id_lengths[at].tolist(), strict=True)]

    def id_at(self, position: int) -> str:
        """The id of the model at ``position``."""
        return self.ids_at(np.array([position], dtype=np.int64))[0]

    def __len__(self) -> int:
        return len(self._starts)

    def __iter__(self) -> Iterator[str]:
        for chunk in self._id_chunks():
            yield from chunk

    def _members(self, group: int) -> list[str]:
        start = int(self._starts[group])
        end = int(self._starts[group + 1]) if group + 1 < len(self._starts) else len(self._urls)
        return [str(u) for u in self._urls.slice(start, end - start).to_pylist()]

    def __getitem__(self, model_id: str) -> list[str]:
        group = self._by_id.find(model_id) if isinstance(model_id, str) else -1
        if group < 0:
            raise KeyError(model_id)
        return self._members(group)

    def __contains__(self, model_id: object) -> bool:
        return isinstance(model_id, str) and self._by_id.find(model_id) >= 0

    @property
    def url_column(self) -> pa.ChunkedArray | pa.Array:
        """The files' URLs, grouped and in order (the listing's own buffers when it was given as a column and
        its order kept)."""
        return self._urls

    def id_column(self) -> pa.ChunkedArray:
        """The models' ids in order, made now: as many strings as models (the groups keep their lengths)."""
        return pa.chunked_array([pa.array(chunk, pa.string()) for chunk in self._id_chunks()], pa.string())

    def _id_chunks(self) -> Iterator[list[str]]:
        for start in range(0, len(self), _CHUNK):
            yield self.ids_at(np.arange(start, min(start + _CHUNK, len(self)), dtype=np.int64))

    def ids_in_order(self) -> bool:
        """Whether the models' ids ascend in the groups' order (a chunk of them at a time: none kept)."""
        last: str | None = None
        for chunk in self._id_chunks():
            if last is not None and chunk and not last < chunk[0]:
                return False
            if any(b <= a for a, b in itertools.pairwise(chunk)):
                return False
            last = chunk[-1] if chunk else last
        return True

    def size_at(self, position: int) -> int:
        """How many files the model at ``position`` has."""
        end = int(self._starts[position + 1]) if position + 1 < len(self._starts) else len(self._urls)
        return end - int(self._starts[position])

    def sizes_at(self, positions: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """How many files the model at each of ``positions`` has."""
        following = positions + 1
        ends = np.where(
            following < len(self._starts), self._starts[np.minimum(following, len(self._starts) - 1)], len(self._urls)
        )
        sizes: npt.NDArray[np.int64] = (ends - self._starts[positions]).astype(np.int64)
        return sizes

    def position(self, model_id: str) -> int:
        """Where ``model_id`` is in the order, or -1."""
        return self._by_id.find(model_id) if isinstance(model_id, str) else -1

    def positions(self, model_ids: Sequence[str]) -> npt.NDArray[np.int64]:
        """Where each of ``model_ids`` is in the order (-1: not a model of this night)."""
        return self._by_id.find_many(model_ids)

    def positions_of(self, model_ids: pa.ChunkedArray | pa.Array) -> npt.NDArray[np.int64]:
        """Where each of an Arrow column of ids is (-1: null, or not a model of this night)."""
        found = np.full(len(model_ids), -1, dtype=np.int64)
        for start in range(0, len(model_ids), _CHUNK):
            chunk = model_ids.slice(start, _CHUNK).to_pylist()
            valid = [i for i, m in enumerate(chunk) if m is not None]
            if valid:
                found[start + np.array(valid)] = self.positions([str(chunk[i]) for i in valid])
        return found

    def id_column_at(self, positions: pa.Array | pa.ChunkedArray) -> pa.Array:
        """The ids at an Arrow column of positions (null where it is null)."""
        at = pc.fill_null(positions, -1).to_numpy(zero_copy_only=False).astype(np.int64)
        valid = at >= 0
        ids: list[str | None] = [None] * len(at)
        for i, model_id in zip(np.flatnonzero(valid).tolist(), self.ids_at(at[valid]), strict=True):
            ids[i] = model_id
        return pa.array(ids, pa.string())

    def first_urls(self, positions: npt.NDArray[np.int64]) -> list[str]:
        """The first URL of the model at each of ``positions``."""
        return self._urls_at(self._starts[positions].astype(np.int64))

    def members_at(self, position: int) -> list[str]:
        """The URLs of the model at ``position`` (its shards in index order)."""
        return self._members(position)

    def items_in_order(self) -> Iterator[tuple[str, list[str]]]:
        """Every model and its URLs, in order (a chunk of models' strings at a time)."""
        for group, model_id in enumerate(self):
            yield model_id, self._members(group)

    def model_of(self, url: str) -> str | None:
        """The model ``url`` belongs to, or None when it is not listed: the id its name gives, or its path
        (a single file whose id another model has), whichever model holds it. No index of the URLs."""
        for model_id in dict.fromkeys((model_id_for(url), url_path(url))):
            group = self._by_id.find(model_id)
            if group >= 0 and url in self._members(group):
                return model_id
        return None

    def models_of(self, urls: Sequence[str]) -> list[str | None]:
        """:meth:`model_of` of each of ``urls``, looked up together: a single file (the common model) is found
        by its name's id and one take of those models' first URLs; the rest one at a time."""
        ids = [model_id_for(u) for u in urls]
        groups = self._by_id.find_many(ids)
        hit = np.flatnonzero(groups >= 0)
        firsts = dict(zip(hit.tolist(), self.first_urls(groups[hit]), strict=True))
        return [ids[i] if firsts.get(i) == url else self.model_of(url) for i, url in enumerate(urls)]

    @property
    def model_ids(self) -> ModelIds:
        """Each file's model, by URL."""
        return ModelIds(self)


class ModelIds(Mapping[str, str]):
    """Each listed file's model id by its URL (:meth:`ModelGroups.model_of`), computed when asked for."""

    __slots__ = ("_groups",)

    def __init__(self, groups: ModelGroups) -> None:
        self._groups = groups

    def __getitem__(self, url: str) -> str:
        model_id = self._groups.model_of(url)
        if model_id is None:
            raise KeyError(url)
        return model_id

    def many(self, urls: Sequence[str]) -> list[str]:
        """The model of each of ``urls``, looked up together (:meth:`ModelGroups.models_of`)."""
        found = self._groups.models_of(urls)
        for url, model_id in zip(urls, found, strict=True):
            if model_id is None:
                raise KeyError(url)
        return [m for m in found if m is not None]

    def __iter__(self) -> Iterator[str]:
        for chunk in string_chunks(self._groups.url_column):
            yield from chunk

    def __len__(self) -> int:
        return len(self._groups.url_column)


def _url_chunks(urls: Iterable[str] | pa.ChunkedArray | pa.Array) -> Iterator[tuple[list[str], pa.Array | None]]:
    """``urls`` a chunk at a time, as strings and, given an Arrow column, as the column's own slice."""
    if isinstance(urls, pa.Array | pa.ChunkedArray):
        arrays = urls.chunks if isinstance(urls, pa.ChunkedArray) else [urls]
        for array in arrays:
            array = array.cast(pa.string()) if array.type != pa.string() else array
            for start in range(0, len(array), _CHUNK):
                piece = array.slice(start, _CHUNK)
                yield [str(u) for u in piece.to_pylist()], piece
        return
    chunk: list[str] = []
    for url in urls:
        chunk.append(url)
        if len(chunk) == _CHUNK:
            yield chunk, None
            chunk = []
    if chunk:
        yield chunk, None


def _rows_to_group(chunk: list[str], seen_at: int) -> pa.RecordBatch:
    """A chunk of URLs' positions (from ``seen_at``), model ids and shard numbers."""
    shards = [parse_shard_name(u) for u in chunk]
    return pa.record_batch(
        {
            "pos": pa.array(range(seen_at, seen_at + len(chunk)), pa.int32()),
            "base": pa.array(
                [s.model_id if s is not None else model_id_for(u) for u, s in zip(chunk, shards, strict=True)],
                pa.string(),
            ),
            "shard": pa.array([s is not None for s in shards], pa.bool_()),
            "index": pa.array([s.shard_index if s is not None else 0 for s in shards], pa.int32()),
            "count": pa.array([s.shard_count if s is not None else 0 for s in shards], pa.int32()),
        }
    )


def _grouped(urls: Iterable[str] | pa.ChunkedArray | pa.Array) -> pa.Table:
    """``url`` and ``model_id`` columns, grouped and ordered as :func:`group_models` orders its dict.

    Given an Arrow column of URLs (the listing's), the ``url`` column is slices of
    it (no copy of the URLs) wherever the order stays the listing's. Given the
    night's mapped listing, the rest of the rows made to group the files (each
    file's id, position and shard numbers) go to the driver's disk as they are
    made, as the listing did.
    """
    url_pieces: list[pa.Array] = []
    batches: list[pa.RecordBatch] = []
    seen_at = 0
    on_disk = isinstance(urls, pa.Array | pa.ChunkedArray) and len(urls) > 0 and is_mapped(urls)
    with MappedWriter() if on_disk else contextlib.nullcontext() as writer:
        for chunk, column in _url_chunks(urls):
            url_pieces.append(column if column is not None else pa.array(chunk, pa.string()))
            batch = _rows_to_group(chunk, seen_at)
            if writer is not None:
                writer.write(batch)
            else:
                batches.append(batch)
            seen_at += len(chunk)
        columns = writer.close() if writer is not None else pa.Table.from_batches(batches) if batches else None
    if columns is None or not url_pieces:
        return pa.table({"url": pa.array([], pa.string()), "model_id": pa.array([], pa.string())})
    batches.clear()
    table = columns.append_column("url", pa.chunked_array(url_pieces, pa.string()))
    del columns
    # the first of each URL (a listing names each once, in order: no hash table; group_models takes each once)
    if not _each_once(table.column("url")):
        firsts = table.group_by("url", use_threads=False).aggregate([("pos", "min")]).column("pos_min")
        table = table.filter(pc.is_in(table.column("pos"), value_set=firsts))
    shard = table.column("shard").to_numpy(zero_copy_only=False)
    if not shard.any():  # the common collection: no copy of the rows
        return _ordered_singles(table, pa.chunked_array([], pa.string()))
    sets = _ordered_sets(table.take(pa.array(np.flatnonzero(shard))))
    singles = _ordered_singles(table.take(pa.array(np.flatnonzero(~shard))), sets.column("model_id"))
    return pa.concat_tables([sets, singles])


def _each_once(values: pa.ChunkedArray) -> bool:
    """Whether no value of ``values`` repeats: at once when they are in ascending order (a listing's URLs,
    and then its models' ids, nearly always are), else through a hash table of them (about 100 bytes a value)."""
    return _ascending(values) or bool(pc.count_distinct(values).as_py() == len(values))


def _ascending(values: pa.ChunkedArray) -> bool:
    n = len(values)
    return n < 2 or bool(pc.all(pc.less(values.slice(0, n - 1), values.slice(1))).as_py())


def _first_seen(values: pa.ChunkedArray) -> npt.NDArray[np.int32]:
    """Each value's rank by where it first appears (equal values, equal ranks): the order of a dict's keys."""
    ranks: npt.NDArray[np.int32] = pc.index_in(values, value_set=pc.unique(values)).to_numpy(zero_copy_only=False)
    return ranks


def _ordered_sets(rows: pa.Table) -> pa.Table:
    """Shard sets in the order they first appear, each set's shards by index (then count, URL)."""
    if rows.num_rows == 0:
        return pa.table({"url": pa.array([], pa.string()), "model_id": pa.array([], pa.string())})
    keyed = pa.table(
        {
            "set": _first_seen(rows.column("base")),
            "index": rows.column("index"),
            "count": rows.column("count"),
            "url": rows.column("url"),
        }
    )
    order = pc.sort_indices(
        keyed, sort_keys=[("set", "ascending"), ("index", "ascending"), ("count", "ascending"), ("url", "ascending")]
    )
    return pa.table({"url": rows.column("url").take(order), "model_id": rows.column("base").take(order)})


def _ordered_singles(rows: pa.Table, set_ids: pa.ChunkedArray) -> pa.Table:
    """Single files by where their id first appears, then as listed; a file whose id another single file or a
    shard set has is its URL's path instead."""
    if rows.num_rows == 0:
        return pa.table({"url": pa.array([], pa.string()), "model_id": pa.array([], pa.string())})
    base = rows.column("base")
    once = _each_once(base)
    if once and not len(set_ids) and _ascending(rows.column("pos")):  # the common collection: as listed, no copy
        return pa.table({"url": rows.column("url"), "model_id": base})
    if once:  # each id once, no hash of ranks
        ranks = np.arange(len(base), dtype=np.int32)
        taken = np.zeros(len(base), dtype=bool)
    else:
        ranks = _first_seen(base)
        taken = np.bincount(ranks)[ranks] > 1
    if len(set_ids):
        taken |= pc.is_in(base, value_set=pc.unique(set_ids)).to_numpy(zero_copy_only=False)
    model_ids: pa.Array | pa.ChunkedArray = base
    if taken.any():
        at = np.flatnonzero(taken)
        own = [url_path(str(u)) for u in rows.column("url").take(pa.array(at)).to_pylist()]
        model_ids = pc.replace_with_mask(base.combine_chunks(), pa.array(taken), pa.array(own, pa.string()))
    order = np.lexsort((rows.column("pos").to_numpy(), ranks))
    if np.array_equal(order, np.arange(len(order))):  # every id once, as listed: no copy
        return pa.table({"url": rows.column("url"), "model_id": model_ids})
    at_order = pa.array(order)
    return pa.table({"url": rows.column("url").take(at_order), "model_id": model_ids.take(at_order)})
