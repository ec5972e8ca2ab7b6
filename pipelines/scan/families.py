"""Lineage's families on the driver as Arrow and NumPy columns, never as a Python object per model.

:mod:`gguf_audit.checks.lineage` says what a family is, a ``ModelLineage`` a model (with a model id a
model in the family columns' dict: about half a kilobyte a model). Here the same answers come from columns:

- :class:`Members`: what lineage knows of each model (family key, full
  precision, file type, architecture), one row per model, made from the facts
  rows a batch's table at a time and from the carried models' stored rows;
  a model is known by its position in the night's groups
  (:class:`ModelGroups`), its URLs and id read from the groups when needed;
- :func:`judge_members` sorts them by family and model id and judges each
  family with NumPy over its rows (anchor, reference, source, finding), as
  :func:`~gguf_audit.checks.lineage.judge_family` does one family of objects;
- :class:`LineageCells`: what stays until the models are judged: each model's
  family (an ``int32``) and full precision (an ``int8``), and one row per
  family; a chunk of models' :class:`~gguf_audit.tables.lineage.ModelLineageCells`
  is made when that chunk is judged.

Only a shard set whose facts disagree with the listing's order of its files (a shard without facts, or its
first digest not on its first shard) is kept as values (:attr:`Members.odd`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from gguf_audit.checks.lineage import ModelLineage, Pair, no_full_precision, reference_rank
from gguf_audit.findings import Finding
from gguf_audit.pipelines.scan.groups import ModelGroups
from gguf_audit.pipelines.spill import array_on_disk, driver_phase, released_after_each
from gguf_audit.tables.lineage import ModelLineageCells

__all__ = ["CARRIED_ROWS", "LackingFamily", "LineageCells", "Members", "ModelGroups", "judge_members"]

_BATCH: Final = 4096
"""Rows gathered as Python values before they become an Arrow record batch."""
CARRIED_ROWS: Final = 16_384
"""Carried rows lineage reads at a time (a quiet night carries every model)."""

_TEXT: Final = pa.dictionary(pa.int32(), pa.string())
"""The members' text columns: a code a model, each value once (a family's key, file types, architectures)."""
_TEXT_COLUMNS: Final = ("file_type_name", "architecture")
_MEMBER_SCHEMA: Final = pa.schema(
    [
        ("pos", pa.int32()),
        ("key", _TEXT),
        ("full", pa.bool_()),
        ("file_type_name", _TEXT),
        ("architecture", _TEXT),
    ]
)
_FAMILY_SCHEMA: Final = pa.schema(
    [
        ("key", pa.string()),
        ("anchor", pa.int32()),
        ("source", pa.string()),
        ("reference_url", pa.string()),
        ("n_quantized", pa.int32()),
        ("file_type_names", pa.list_(pa.string())),
        ("architecture", pa.string()),
    ]
)
"""One row per family; ``n_quantized``, ``file_type_names`` and ``architecture`` only for a family with a
``lineage.no_full_precision`` finding (what its message says)."""


def _directory(url: str) -> str:
    return url.rsplit("/", 1)[0] if "/" in url else ""


def _array(values: Sequence[Any], kind: pa.DataType) -> pa.Array:
    if pa.types.is_dictionary(kind):
        return pc.dictionary_encode(pa.array(values, kind.value_type))
    return pa.array(values, kind)


@dataclass
class _Batches:
    """Rows appended as Python values, made into record batches of :data:`_BATCH` rows as they come."""

    schema: pa.Schema
    batches: list[pa.RecordBatch] = field(default_factory=list)
    pending: list[tuple[Any, ...]] = field(default_factory=list)

    def add(self, *values: Any) -> None:
        self.pending.append(values)
        if len(self.pending) >= _BATCH:
            self.flush()

    def flush(self) -> None:
        if self.pending:
            columns = list(zip(*self.pending, strict=True))
            arrays = [_array(c, f.type) for c, f in zip(columns, self.schema, strict=True)]
            self.batches.append(pa.RecordBatch.from_arrays(arrays, schema=self.schema))
            self.pending = []

    def table(self) -> pa.Table:
        self.flush()
        return pa.Table.from_batches(self.batches, schema=self.schema)


@dataclass(frozen=True)
class LackingFamily:
    """A quantized family without a full-precision GGUF, as the safetensors search sees it."""

    directories: frozenset[str]
    carried: bool
    """Every member is carried with its stored ``models`` row."""
    stored_safetensors: bool
    """A member's stored row says its family's source is safetensors."""


class Members:
    """What lineage knows of each model, a row per model, as columns (built a row at a time, then :meth:`done`).

    ``pos`` is the model's position in the :class:`ModelGroups`; a model with facts rows wins over its carried
    row, and a later facts row over an earlier one (as a dict of models would keep it).
    """

    def __init__(self, view: ModelGroups) -> None:
        self.view = view
        self._rows = _Batches(_MEMBER_SCHEMA)
        self.odd: dict[int, tuple[tuple[str, ...], str]] = {}
        """``(urls, directory)`` of the models whose facts do not say the groups' URLs in their order."""
        self.carried = np.zeros(len(view), dtype=bool)
        """Models with a stored (carried) ``models`` row."""
        self.stored_safetensors = np.zeros(len(view), dtype=bool)
        self.table = pa.Table.from_batches([], schema=_MEMBER_SCHEMA)

    def add_model(self, position: int, m: ModelLineage, urls: Sequence[str] | None = None) -> None:
        """A model's lineage from its facts (``m``, made and let go of at once); ``urls``: its URLs, if known."""
        urls = self.view.members_at(position) if urls is None else urls
        if tuple(urls) != m.urls or (m.urls and _directory(m.urls[0]) != m.directory):
            self.odd[position] = (m.urls, m.directory)
        self._rows.add(position, m.key, m.full_precision, m.file_type_name, m.architecture)

    def add_carried(self, carried: pa.Table) -> None:
        """The carried models' stored rows (``model_id``, ``architecture``, ``file_type_name``, ``family_key``,
        ``full_precision``, ``family_source``), as :func:`~gguf_audit.checks.lineage.carried_lineage` reads them:
        :data:`CARRIED_ROWS` at a time (on the driver's disk), a batch each with its own dictionaries."""
        batches: list[pa.RecordBatch] = []
        for start in released_after_each(range(0, carried.num_rows, CARRIED_ROWS)):
            rows = carried.slice(start, CARRIED_ROWS)
            at = self.view.positions_of(rows.column("model_id"))
            known = rows.filter(pa.array(at >= 0))
            pos = at[at >= 0].astype(np.int32)
            self.carried[pos] = True
            source = pc.fill_null(pc.equal(known.column("family_source"), "safetensors"), False)
            self.stored_safetensors[pos] = source.to_numpy(zero_copy_only=False)
            full = known.column("full_precision")
            key = pc.if_else(pc.is_valid(full), known.column("family_key"), pa.scalar(None, pa.string()))
            text = [pc.dictionary_encode(c.combine_chunks()) for c in (key, *known.select(_TEXT_COLUMNS).columns)]
            columns = [pa.array(pos, pa.int32()), text[0], full, *text[1:]]
            stored = pa.Table.from_arrays(columns, names=_MEMBER_SCHEMA.names)
            batches.extend(stored.cast(_MEMBER_SCHEMA).combine_chunks().to_batches())
        self._rows.flush()
        self._rows.batches[:0] = batches  # first: a model's facts rows win over its stored row

    def done(self) -> None:
        table = self._rows.table()
        self._rows = _Batches(_MEMBER_SCHEMA)
        pos = table.column("pos").to_numpy()
        seen = np.zeros(len(self.view), dtype=bool)  # not np.unique: its hash table
        seen[pos] = True
        if int(np.count_nonzero(seen)) != len(pos):  # the last row of each model, as a dict keeps it
            last = np.full(len(self.view), -1, dtype=np.int64)
            np.maximum.at(last, pos, np.arange(len(pos)))
            table = table.take(pa.array(np.sort(last[last >= 0])))
        self.table = table

    def settle(self) -> None:
        """Let go of the columns once the families are judged (the cells keep the groups and the odd models)."""
        self.table = _MEMBER_SCHEMA.empty_table()
        self.carried = np.zeros(0, dtype=bool)
        self.stored_safetensors = np.zeros(0, dtype=bool)

    def urls_of(self, position: int) -> Sequence[str]:
        odd = self.odd.get(position)
        return odd[0] if odd is not None else self.view.members_at(position)

    def directories(self, positions: npt.NDArray[np.int32]) -> frozenset[str]:
        """Where the models at ``positions`` live (their first URLs' directories, a batch of URLs at a time)."""
        found: set[str] = set()
        odd = np.fromiter(self.odd, np.int64)
        for start in released_after_each(range(0, len(positions), _BATCH)):
            chunk = positions[start : start + _BATCH].astype(np.int64)
            plain = ~np.isin(chunk, odd)
            found.update(_directory(u) for u in self.view.first_urls(chunk[plain]))
            found.update(self.odd[p][1] for p in chunk[~plain].tolist())
        return frozenset(found)

    def n_urls(self, positions: npt.NDArray[np.int32]) -> npt.NDArray[np.int64]:
        """How many files each model at ``positions`` has (as lineage counts them)."""
        sizes = self.view.sizes_at(positions.astype(np.int64))
        if self.odd:
            for i in np.flatnonzero(np.isin(positions, np.fromiter(self.odd, np.int64))).tolist():
                sizes[i] = len(self.odd[int(positions[i])][0])
        return sizes


_SOURCES: Final = ("gguf", "safetensors")


class LineageCells:
    """Each model's family columns and findings, held as a family index and a full-precision flag a model.

    ``family_of[p]``, ``full[p]``: position ``p``'s row of :attr:`families` (-1: none), full precision (1, 0; -1).
    """

    def __init__(
        self,
        members: Members | None,
        family_of: npt.NDArray[np.int32],
        full: npt.NDArray[np.int8],
        families: pa.Table,
    ) -> None:
        self._members = members
        self.family_of = family_of
        self.full = full
        self.families = families

    @property
    def nbytes(self) -> int:
        """The bytes of the columns it holds (the groups it looks models up in are the night's, not counted)."""
        held = int(self.family_of.nbytes) + int(self.full.nbytes) + int(self.families.nbytes)
        if self._members is not None:
            members = self._members
            held += int(members.table.nbytes) + int(members.carried.nbytes) + int(members.stored_safetensors.nbytes)
        return held

    @classmethod
    def empty(cls) -> LineageCells:
        return cls(None, np.zeros(0, np.int32), np.zeros(0, np.int8), _FAMILY_SCHEMA.empty_table())

    def positions(self, model_ids: Iterable[str]) -> npt.NDArray[np.int64]:
        if self._members is None:
            return np.array([-1 for _ in model_ids], dtype=np.int64)
        return self._members.view.positions(list(model_ids))

    def of(self, model_ids: Sequence[str]) -> list[ModelLineageCells | None]:
        """The cells of each of ``model_ids`` (None: no family), made for these models alone."""
        positions = self.positions(model_ids)
        families = np.where(positions >= 0, self.family_of[np.maximum(positions, 0)] if len(self.family_of) else -1, -1)
        if not (families >= 0).any() or self._members is None:
            return [None] * len(positions)
        wanted, which = np.unique(np.maximum(families, 0), return_inverse=True)
        rows = self.families.take(pa.array(wanted)).to_pylist()
        anchors = self._members.view.ids_at(np.array([r["anchor"] for r in rows], dtype=np.int64))
        # the members other than the anchor share one value per family and precision (frozen)
        shared: dict[tuple[int, bool], ModelLineageCells] = {}
        out: list[ModelLineageCells | None] = []
        for position, family, at in zip(positions.tolist(), families.tolist(), which.tolist(), strict=True):
            if family < 0:
                out.append(None)
                continue
            row = rows[at]
            full = bool(self.full[position])
            anchor = position == row["anchor"]
            cells = None if anchor else shared.get((family, full))
            if cells is None:
                findings: tuple[Finding, ...] = ()
                if anchor and row["n_quantized"] is not None:
                    first = self._members.urls_of(position)[0]
                    findings = (
                        no_full_precision(row["n_quantized"], row["file_type_names"], row["architecture"], first),
                    )
                cells = ModelLineageCells(
                    family_key=row["key"],
                    full_precision=full,
                    family_anchor=anchors[at],
                    family_source=row["source"],
                    reference_url=row["reference_url"] if not full else None,
                    findings=findings,
                )
                if not anchor:
                    shared[(family, full)] = cells
            out.append(cells)
        return out

    def get(self, model_id: str) -> ModelLineageCells | None:
        [cells] = self.of([model_id])
        return cells

    def columns_at(self, positions: npt.NDArray[np.int64]) -> pa.Table:
        """The five family columns of the models at ``positions`` (-1: a model not listed), nulls without a family."""
        n = len(self.family_of)
        at = np.where(positions >= 0, positions, 0)
        family = self.family_of[at] if n else np.full(len(positions), -1, np.int32)
        family = np.where(positions >= 0, family, -1)
        none = family < 0
        index = pa.array(np.maximum(family, 0), pa.int64(), mask=none)
        rows = self.families.take(index) if self.families.num_rows else None
        full_values = self.full[at] == 1 if n else np.zeros(len(positions), bool)
        full = pa.array(full_values, pa.bool_(), mask=none)
        if rows is None:
            nothing = pa.nulls(len(positions), pa.string())
            key = anchor = source = reference = nothing
        else:
            key, source = rows.column("key"), rows.column("source")
            anchor_at = pc.cast(rows.column("anchor"), pa.int64())
            anchor = self._members.view.id_column_at(anchor_at) if self._members is not None else pa.nulls(0)
            reference = pc.if_else(pc.fill_null(full, True), pa.scalar(None, pa.string()), rows.column("reference_url"))
        return pa.table(
            {
                "family_key": key,
                "full_precision": full,
                "family_anchor": anchor,
                "family_source": source,
                "reference_url": reference,
            }
        )

    def reference_urls(self) -> set[str]:
        return {str(u) for u in pc.unique(pc.drop_null(self.families.column("reference_url"))).to_pylist()}


@dataclass(frozen=True)
class Judged:
    """:func:`judge_members`' answer: the cells, and per family with a reference its quantized models in order."""

    cells: LineageCells
    to_compare: list[tuple[int, npt.NDArray[np.int32]]]
    """``(family row, positions)``: the quantized models of each family with a reference, by model id."""

    def has_pairs(self, skip: npt.NDArray[np.bool_]) -> bool:
        """Whether :meth:`pair_chunks` gives any pair (nothing made to say so)."""
        return any(bool((~skip[positions]).any()) for _, positions in self.to_compare)

    def pair_chunks(self, skip: npt.NDArray[np.bool_]) -> Iterator[list[Pair]]:
        """The compare pairs of the models ``skip`` does not name (carried models that stay carried), a family's
        :data:`_BATCH` models at a time (in family, then model id order): the
        compare phase makes and lets go of them as it goes, never a pair per file of the night at once."""
        members = self.cells._members
        if members is None:
            return
        keys = self.cells.families.column("key")
        references = self.cells.families.column("reference_url")
        for family, positions in self.to_compare:
            key, reference = str(keys[family].as_py()), str(references[family].as_py())
            for start in range(0, len(positions), _BATCH):
                taken = positions[start : start + _BATCH]
                chunk = taken[~skip[taken]].astype(np.int64)
                if not len(chunk):
                    continue
                single = (members.view.sizes_at(chunk) == 1) & ~np.isin(chunk, np.fromiter(members.odd, np.int64))
                firsts = iter(members.view.first_urls(chunk[single]))
                out: list[Pair] = []
                for p, model_id, alone in zip(chunk.tolist(), members.view.ids_at(chunk), single.tolist(), strict=True):
                    urls = (next(firsts),) if alone else members.urls_of(p)
                    out.extend(Pair(url, reference, model_id, key) for url in urls)
                yield out


@dataclass(frozen=True)
class _Codes:
    """A dictionary column as NumPy codes (-1: null), equal values one code, codes in the values' order."""

    codes: npt.NDArray[np.int32]
    values: pa.Array
    """The distinct values, by code."""

    def value(self, code: int) -> str | None:
        return str(self.values[code].as_py()) if code >= 0 else None


def _codes(column: pa.ChunkedArray) -> _Codes:
    """``column``'s codes across its chunks (each with its own dictionary, none unified or copied): a value's
    code is its dense rank among all the chunks' dictionary values (Arrow's order, the UTF-8 bytes': Python's)."""
    chunks = [c for c in column.chunks if len(c)]
    if not chunks:
        return _Codes(np.zeros(0, np.int32), pa.array([], pa.string()))
    values = pa.concat_arrays([c.dictionary for c in chunks])
    dense = (pc.rank(values, sort_keys="ascending", tiebreaker="dense").to_numpy() - 1).astype(np.int32)
    offsets = np.cumsum([0, *(len(c.dictionary) for c in chunks[:-1])])
    codes = np.concatenate(
        [
            np.where(local >= 0, dense[np.maximum(local, 0) + offset], -1).astype(np.int32)
            for c, offset in zip(chunks, offsets.tolist(), strict=True)
            for local in [c.indices.fill_null(-1).to_numpy(zero_copy_only=False)]
        ]
    )
    first = np.zeros(int(dense.max()) + 1 if len(dense) else 0, dtype=np.int64)
    first[dense[::-1]] = np.arange(len(dense) - 1, -1, -1)  # each code's first entry among the values
    return _Codes(codes, values.take(pa.array(first)))


def _id_ranks(view: ModelGroups, positions: npt.NDArray[np.int32]) -> npt.NDArray[np.int32]:
    """Each of ``positions``' rank in model id order (the positions themselves, when the ids are in order)."""
    if len(view) < 2 or view.ids_in_order():
        return positions
    ids = view.id_column()  # made for the sort alone
    order = pc.sort_indices(ids).to_numpy()
    del ids
    ranks = np.empty(len(order), dtype=np.int32)
    ranks[order] = np.arange(len(order), dtype=np.int32)
    return ranks[positions]


def _references(
    members: Members,
    pos: npt.NDArray[np.int32],
    full: npt.NDArray[np.bool_],
    type_codes: npt.NDArray[np.int32],
    types: _Codes,
    starts: npt.NDArray[np.int64],
) -> npt.NDArray[np.int64]:
    """Each family's reference row (-1: none): a full-precision single file, the most precise type first,
    then the lowest model id (the first row). Only the full-precision rows are looked at, the few."""
    references = np.full(len(starts), -1, np.int64)
    candidates = np.flatnonzero(full)
    candidates = candidates[members.n_urls(pos[candidates]) == 1]
    if not len(candidates):
        return references
    lut = np.array([*(reference_rank(t) for t in types.values.to_pylist()), reference_rank(None)], dtype=np.int64)
    ranks = lut[type_codes[candidates]]  # code -1 (no file type) is the last entry
    family = np.searchsorted(starts, candidates, side="right") - 1
    best = np.lexsort((candidates, ranks, family))  # by family, then rank, then row
    chosen = best[np.concatenate([[True], family[best][1:] != family[best][:-1]])]
    references[family[chosen]] = candidates[chosen]
    return references


@dataclass(frozen=True, slots=True)
class _Ordered:
    """The members' columns in family order (by family key, then model id): codes a row, values by code."""

    key_codes: npt.NDArray[np.int32]
    keys: _Codes
    pos: npt.NDArray[Any]
    full: npt.NDArray[np.bool_]
    type_codes: npt.NDArray[np.int32]
    types: _Codes
    arch_codes: npt.NDArray[np.int32]
    architectures: _Codes


def _in_family_order(members: Members) -> _Ordered:
    """The keyed members' columns in family order; the table is taken from ``members`` (read once, here)."""
    table = members.table
    members.table = _MEMBER_SCHEMA.empty_table()
    keys = _codes(table.column("key"))
    with driver_phase("judge.sort"):  # the sort's transients, before the codes are taken
        rows_of = _family_order(members.view, table, keys.codes)
    full = pc.fill_null(table.column("full"), False).to_numpy(zero_copy_only=False)[rows_of]
    types = _codes(table.column("file_type_name"))
    architectures = _codes(table.column("architecture"))
    return _Ordered(
        keys.codes[rows_of],
        _Codes(np.zeros(0, np.int32), keys.values),
        table.column("pos").to_numpy()[rows_of],
        full,
        types.codes[rows_of],
        _Codes(np.zeros(0, np.int32), types.values),
        architectures.codes[rows_of],
        _Codes(np.zeros(0, np.int32), architectures.values),
    )


def _family_order(view: ModelGroups, table: pa.Table, key_codes: npt.NDArray[np.int32]) -> npt.NDArray[np.int32]:
    """The rows with a family key, by key then model id (positions, when the groups' ids are in order already)."""
    keyed = np.flatnonzero(key_codes >= 0).astype(np.int32)
    pos = table.column("pos").to_numpy()[keyed]
    return keyed[np.lexsort((_id_ranks(view, pos), key_codes[keyed]))]


def judge_members(members: Members, safetensors: Callable[[Sequence[LackingFamily]], set[str]]) -> Judged:
    """Families of ``members``, judged as :func:`~gguf_audit.checks.lineage.judge_family` judges them.

    ``safetensors(lacking)`` says which directories of the quantized families
    without a full-precision GGUF hold safetensors files.
    """
    view = members.view
    with driver_phase("judge.columns"):  # the members' table and the sort's transients go back here
        columns = _in_family_order(members)
    key_codes, keys, pos, full = columns.key_codes, columns.keys, columns.pos, columns.full
    type_codes, types = columns.type_codes, columns.types
    arch_codes, architectures = columns.arch_codes, columns.architectures
    n = len(pos)
    family_of = array_on_disk(np.full(len(view), -1, np.int32))  # a model's, to the night's end
    full_of = array_on_disk(np.full(len(view), -1, np.int8))
    if n == 0:
        members.settle()
        return Judged(LineageCells(members, family_of, full_of, _FAMILY_SCHEMA.empty_table()), [])
    starts = np.concatenate([[0], np.flatnonzero(key_codes[1:] != key_codes[:-1]) + 1]).astype(np.int64)
    ends = np.append(starts[1:], n)
    quantized = ~full
    n_full = np.add.reduceat(full.astype(np.int64), starts)
    n_quantized = ends - starts - n_full
    # the anchor: a family's first quantized model (by id), else its first model
    anchors = starts.copy()
    quantized_rows = np.flatnonzero(quantized)
    if len(quantized_rows):
        some = n_quantized > 0
        anchors[some] = quantized_rows[np.searchsorted(quantized_rows, starts[some])]
    del quantized_rows
    references = _references(members, pos, full, type_codes, types, starts)
    lacking = np.flatnonzero((n_quantized > 0) & (n_full == 0))
    directories = [members.directories(pos[starts[f] : ends[f]]) for f in lacking]
    carried = np.logical_and.reduceat(members.carried[pos], starts)
    stored = np.logical_or.reduceat(members.stored_safetensors[pos], starts)
    dirs = safetensors(
        [LackingFamily(d, bool(carried[f]), bool(stored[f])) for d, f in zip(directories, lacking, strict=True)]
    )
    beside = {int(f) for d, f in zip(directories, lacking, strict=True) if d & dirs}
    del directories

    out = _Batches(_FAMILY_SCHEMA)
    to_compare: list[tuple[int, npt.NDArray[np.int32]]] = []
    for f, (start, end) in enumerate(zip(starts.tolist(), ends.tolist(), strict=True)):
        source = _SOURCES[0] if n_full[f] else _SOURCES[1] if f in beside else None
        reference = int(references[f])
        reference_url = members.urls_of(int(pos[reference]))[0] if reference >= 0 else None
        finding: tuple[int | None, list[str | None] | None, str | None] = (None, None, None)
        if n_quantized[f] and source is None:
            names = [types.value(int(c)) for c in np.unique(type_codes[start:end])]
            finding = (int(n_quantized[f]), names, architectures.value(int(arch_codes[anchors[f]])))
        out.add(keys.value(int(key_codes[start])), int(pos[anchors[f]]), source, reference_url, *finding)
        if reference >= 0 and n_quantized[f]:
            segment = slice(start, end)
            to_compare.append((f, pos[segment][quantized[segment]]))
        family_of[pos[start:end]] = f
    full_of[pos] = full.astype(np.int8)
    members.settle()
    return Judged(LineageCells(members, family_of, full_of, out.table()), to_compare)
