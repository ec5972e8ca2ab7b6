"""Incremental reuse: which files a run reads again, and what it keeps pointing at for the others.

``incremental`` compares the listing with the base run's ``files`` rows
(size plus sha256, version id, ETag or mtime, see
:meth:`ListedFile.unchanged_since`) and re-reads only new or changed files,
and files whose last read failed (``io.*``, ``internal.*``, ``run.*``). An
unchanged file gets a new ``files`` row (the base row with the new listing's
facts, ``reused`` true, ``bytes_read`` 0) whose ``source_run_id`` keeps naming
the run that read it: its ``tensors``, ``metadata``, ``samples`` and
``problems`` rows stay where that run wrote them and are not copied.

A model none of whose files was read and whose files are the same as in the
base run keeps its ``models`` row as it was (its ``source_run_id`` names the
run that judged it, whose ``problems`` rows of scope ``model`` it keeps);
only the other models are judged again, a sharded one from the shard facts
of its read shards and, for its unchanged shards, from the few stored rows
the checks need (:func:`reused_shard_facts`).

The base night's rows are streamed a record batch at a time, so the
driver's memory does not grow with the rows of the collection: it holds a
flag, a position and a hash a reused file (:class:`ReusedFiles`: the listing
itself is on its disk), the index of the run that read it
(:class:`ReadingRuns`), and the carried models' rows in a mapped file on its
disk (:mod:`~gguf_audit.pipelines.spill`).

Which runs can be built on (:func:`base_run`): the last committed run of the
same schema version (a version that only added columns reads the old rows
with the new columns null), the same check settings and the same
:data:`~gguf_audit.VERDICTS_VERSION` (raised by a release whose checks judge
the same bytes otherwise). The tool's own version is recorded, not compared.
"""

from __future__ import annotations

import functools
import itertools
import json
import operator
import struct
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from gguf_audit import VERDICTS_VERSION
from gguf_audit.checks.shards import AGREEING_KEYS, SPLIT_NO, ShardFacts
from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.listing import Listing
from gguf_audit.pipelines.scan.groups import HashIndex, ModelGroups, string_chunks
from gguf_audit.pipelines.spill import (
    MappedWriter,
    array_on_disk,
    is_mapped,
    map_table,
    released_after_each,
)
from gguf_audit.pipelines.store import Output, source_pairs
from gguf_audit.pipelines.work import Tally, ids_of
from gguf_audit.tables.listed import ListedFile, ListedFiles
from gguf_audit.tables.schema import PARTITION_COLUMN
from gguf_audit.tables.shard_facts import shard_facts_from_tables
from gguf_audit.tables.stored_header import STORED_FILE_COLUMNS, STORED_TENSOR_COLUMNS, known_table

__all__ = [
    "ReadingRuns",
    "ReusePlan",
    "ReusedFiles",
    "base_run",
    "carried_models",
    "plan_reuse",
    "reuse_rows",
    "reused_files",
    "reused_problem_tally",
    "reused_shard_facts",
    "stored_tables",
]

_RETRY_PREFIXES: Final = ("io.", "internal.", "run.")
"""A file whose last row has one of these is read again even when unchanged."""

_CHUNK: Final = 4096
"""URLs made into Python strings at a time."""

_IDENTITY: Final = ("url", "size", "etag", "version_id", "mtime", "sha256")
"""The ``files`` columns that say which bytes a row describes (:meth:`ListedFile.unchanged_since`)."""


class ReusedFiles(Mapping[str, ListedFile]):
    """The listed files whose rows a night keeps, by URL: their positions in the listing and an index of their
    URLs (the listing may be on disk), each :class:`ListedFile` made when asked for."""

    __slots__ = ("_index", "_listing", "_positions")

    def __init__(self, listing: ListedFiles, positions: npt.NDArray[np.integer[Any]]) -> None:
        self._listing = listing
        self._positions = array_on_disk(np.asarray(positions, dtype=np.int32 if len(listing) < 2**31 else np.int64))
        n = len(self._positions)
        chunks = (self._urls_at(np.arange(s, min(s + _CHUNK, n))) for s in range(0, n, _CHUNK))
        self._index = HashIndex(chunks, n, self._urls_at)

    @classmethod
    def none(cls) -> ReusedFiles:
        return cls(ListedFiles(), np.zeros(0, dtype=np.int32))

    def _urls_at(self, at: npt.NDArray[np.int64]) -> list[str]:
        return self._listing.urls_at(self._positions[at])

    def __len__(self) -> int:
        return len(self._positions)

    def __iter__(self) -> Iterator[str]:
        for start in range(0, len(self), _CHUNK):
            yield from self._urls_at(np.arange(start, min(start + _CHUNK, len(self))))

    def __getitem__(self, url: str) -> ListedFile:
        at = self._index.find(url) if isinstance(url, str) else -1
        if at < 0:
            raise KeyError(url)
        return self._listing[int(self._positions[at])]

    def __contains__(self, url: object) -> bool:
        return isinstance(url, str) and self._index.find(url) >= 0

    def positions_of(self, urls: Sequence[str]) -> npt.NDArray[np.int64]:
        """Where each of ``urls`` is among these files (-1: not one of them)."""
        return self._index.find_many(urls)

    def files_at(self, at: npt.NDArray[np.int64]) -> ListedFiles:
        """The files at positions ``at`` among these (:meth:`positions_of`), in that order."""
        return self._listing.take(self._positions[at].tolist())


@dataclass(frozen=True, slots=True)
class ReusePlan:
    """Which listed files keep their rows, and which are read."""

    reuse: ReusedFiles
    read: ListedFiles
    """Held as Arrow columns, as the listing's files are (a first night reads them all and copies none)."""


def plan_reuse(out: Output, base_run_id: str | None, listing: Listing) -> ReusePlan:
    """Which listed files keep their rows from ``base_run_id``, and which are read.

    The base night's ``files`` rows are streamed a batch at a time and found
    in the listing through an index of its URLs' hashes: the driver keeps a
    flag a file, never the rows, and makes a :class:`ListedFile` only for a
    batch's files. The files read are the listing's own columns when they are
    all of it, else taken from it (to the driver's disk when the listing is).
    """
    compact = listing.files
    if base_run_id is None:
        return ReusePlan(ReusedFiles.none(), compact)
    index = HashIndex(string_chunks(compact.url_column()), len(compact), compact.urls_at)
    unchanged = np.zeros(len(compact), dtype=bool)
    columns = ["url", "size", "etag", "version_id", "mtime", "sha256", "codes"]
    for rows in released_after_each(out.batches("files", [base_run_id], columns=columns)):
        values = [rows.column(c).to_pylist() for c in columns]
        at = index.find_many([str(u) for u in values[0]])
        found = np.flatnonzero(at >= 0)
        now_files = compact.take(at[found].tolist())
        for i, now in zip(found.tolist(), now_files, strict=True):
            url, size, etag, version_id, mtime, sha256, codes = (v[i] for v in values)
            if not any(c.startswith(_RETRY_PREFIXES) for c in codes or ()) and now.unchanged_since(
                ListedFile(url, size, etag, version_id, mtime, sha256)
            ):
                unchanged[at[i]] = True
    del index
    kept = np.flatnonzero(unchanged)
    if not len(kept):
        return ReusePlan(ReusedFiles.none(), compact)
    read = compact.take(np.flatnonzero(~unchanged).tolist())
    if len(read) and is_mapped(compact.url_column()):
        read = read.with_table(map_table)
    return ReusePlan(ReusedFiles(compact, kept), read)


def base_run(out: Output, config: ScanConfig) -> tuple[str | None, str | None]:
    """The run an incremental scan builds on, or None and the reason none is usable."""
    row = out.last_committed_row()
    if row is None:
        return None, "incremental: no committed run yet, every file is read"
    run_id = str(row["run_id"])
    try:
        recorded = json.loads(row["config"] or "{}")
    except json.JSONDecodeError:
        recorded = {}
    before = {k: recorded.get(k) for k in config.verdict_settings()}
    verdicts = row.get("verdicts_version")
    if verdicts != VERDICTS_VERSION or before != config.verdict_settings():
        return None, (
            f"incremental: the last run {run_id} was judged with checks {before} (verdicts version {verdicts}); "
            f"this one uses {config.verdict_settings()} (verdicts version {VERDICTS_VERSION}): every file is read"
        )
    return run_id, None


def _set_column(table: pa.Table, name: str, column: pa.Array) -> pa.Table:
    i = table.schema.get_field_index(name)
    return table.set_column(i, table.schema.field(i), column)


def reuse_rows(table: pa.Table, listing: Mapping[str, ListedFile]) -> pa.Table:
    """``files`` rows an earlier run stored, as this run's rows of the files ``listing`` shows unchanged.

    Keeps the rows whose ``url`` is in ``listing``, with the new listing's
    facts, ``reused`` true and ``bytes_read``/``requests``/``seconds`` zero;
    ``source_run_id`` keeps naming the run that read the bytes.
    """
    urls = [str(u) for u in table.column("url").to_pylist()]
    if isinstance(listing, ReusedFiles):
        at = listing.positions_of(urls)
        kept = table.filter(pa.array(at >= 0))
        facts: Sequence[ListedFile] = list(listing.files_at(at[at >= 0]))
    else:
        kept = table.filter(pa.array([u in listing for u in urls], pa.bool_()))
        facts = [listing[u] for u in kept.column("url").to_pylist()]
    if kept.num_rows == 0:
        return kept
    n = kept.num_rows
    replace: dict[str, pa.Array] = {
        "size": pa.array([f.size for f in facts], pa.int64()),
        "etag": pa.array([f.etag for f in facts], pa.string()),
        "version_id": pa.array([f.version_id for f in facts], pa.string()),
        "mtime": pa.array([f.mtime for f in facts], kept.schema.field("mtime").type),
        "sha256": pa.array([f.sha256 for f in facts], pa.string()),
        "revision": pa.array([f.revision for f in facts], pa.string()),
        "rate_limited": pa.array(np.zeros(n, dtype=np.int32)),
        "rate_limit_wait_s": pa.array(np.zeros(n, dtype=np.float64)),
        "bytes_read": pa.array(np.zeros(n, dtype=np.int64)),
        "requests": pa.array(np.zeros(n, dtype=np.int64)),
        "resolve_requests": pa.nulls(n, pa.int64()),
        "cdn_requests": pa.nulls(n, pa.int64()),
        "io_seconds": pa.array(np.zeros(n, dtype=np.float64)),
        "seconds": pa.array(np.zeros(n, dtype=np.float64)),
        "reused": pa.array(np.ones(n, dtype=bool)),
    }
    # what a night's compare phase spent is that night's: a reused file was compared by no one yet
    for name in ("compare_requests", "compare_bytes"):
        replace[name] = pa.nulls(n, pa.int64())
    for name, column in replace.items():
        if name in kept.column_names:  # a table from before a column was added reads without it
            kept = _set_column(kept, name, column)
    return kept


def reused_files(
    out: Output, base_run_id: str, reuse: Mapping[str, ListedFile], model_ids: Mapping[str, str]
) -> Iterator[pa.Table]:
    """This run's ``files`` rows for the ``reuse`` files, a batch at a time: the base run's, with the new
    listing and model ids (the driver writes each batch and keeps what it needs of it, never all rows)."""
    for batch in out.batches("files", [base_run_id]):
        rows = reuse_rows(batch, reuse)
        if rows.num_rows == 0:
            continue
        ids = pa.array(ids_of(model_ids, [str(u) for u in rows.column("url").to_pylist()]), pa.string())
        yield _set_column(rows, "model_id", ids)


@dataclass
class ReadingRuns:
    """The run that read (or judged) each of some files (or models), by position: a small index each."""

    runs: list[str]
    of: npt.NDArray[np.int32]
    """The index in :attr:`runs` at each position (-1: none)."""

    @classmethod
    def for_positions(cls, n: int) -> ReadingRuns:
        return cls([], array_on_disk(np.full(n, -1, dtype=np.int32)))

    def note(self, at: npt.NDArray[np.int64], runs: Iterable[str]) -> None:
        """Those at positions ``at`` were read by ``runs`` (one each)."""
        known = {run: i for i, run in enumerate(self.runs)}
        for position, run in zip(at.tolist(), runs, strict=True):
            if run not in known:
                known[run] = len(self.runs)
                self.runs.append(run)
            self.of[position] = known[run]

    def ours(self, at: npt.NDArray[np.int64], run: str) -> npt.NDArray[np.bool_]:
        """Whether each of positions ``at`` (-1: none) was read by ``run``."""
        index = self.runs.index(run) if run in self.runs else -2
        ours: npt.NDArray[np.bool_] = (at >= 0) & (self.of[np.maximum(at, 0)] == index)
        return ours


def reused_problem_tally(out: Output, reuse: ReusedFiles, sources: ReadingRuns) -> Tally:
    """The tally of the ``problems`` (scope ``file``) of reused files, read where the reading run wrote them.

    Each reading run's file problems are streamed a batch at a time and a row
    counted when its file is reused and was read by that run: no list of the
    reused files' URLs is made.
    """
    return _tally_problems(out, sources, "file", "url", reuse.positions_of)


def _tally_problems(
    out: Output,
    runs: ReadingRuns,
    scope: str,
    key: str,
    positions: Callable[[Sequence[str]], npt.NDArray[np.int64]],
) -> Tally:
    """The tally of the ``problems`` of ``scope`` each of ``runs`` wrote of what it read (or judged): its
    rows streamed a batch at a time, a row counted when ``positions`` finds its ``key`` and ``runs`` says
    that run's."""
    tally = Tally()
    for run in runs.runs:
        where = ds.field("scope") == scope
        for problems in released_after_each(
            out.batches("problems", [run], columns=[key, "code", "severity"], where=where)
        ):
            ours = runs.ours(positions([str(v) for v in problems.column(key).to_pylist()]), run)
            if ours.any():
                tally.add_problems(problems.filter(pa.array(ours)))
    return tally


def carried_models(out: Output, base_run_id: str, groups: ModelGroups, read: Iterable[str]) -> tuple[pa.Table, Tally]:
    """The base run's ``models`` rows of models whose files are the same and none was read.

    Returns them, on the driver's disk (:mod:`~gguf_audit.pipelines.spill`: a quiet night carries
    every model), with the tally of their problems (scope ``model``, where the run that judged them wrote
    them). The rows are streamed a batch at a time; the driver keeps a small index a model of the run that
    judged it.
    """
    touched = set(read)
    judged_by = ReadingRuns.for_positions(len(groups))
    with MappedWriter() as writer:
        for models in released_after_each(out.batches("models", [base_run_id])):
            at = groups.positions([str(m) for m in models.column("model_id").to_pylist()])
            keep = [
                i
                for i, (position, urls) in enumerate(zip(at.tolist(), models.column("urls").to_pylist(), strict=True))
                if position >= 0
                and set(members := groups.members_at(position)) == set(urls or ())
                and not touched.intersection(members)
            ]
            kept = models.take(pa.array(keep, pa.int64()))
            sources = pc.fill_null(kept.column("source_run_id"), base_run_id)
            kept = _set_column(kept, "source_run_id", sources)
            judged_by.note(at[keep], (str(s) for s in sources.to_pylist()))
            writer.write(kept)
        mapped = writer.close()
    carried = mapped if mapped is not None else out.read("models", [base_run_id]).slice(0, 0)
    return carried, _tally_problems(out, judged_by, "model", "model_id", groups.positions)


def reused_shard_facts(out: Output, files: pa.Table) -> list[ShardFacts]:
    """The shard facts of reused shard ``files`` rows: the split keys and tensor names their reading run stored."""
    if files.num_rows == 0:
        return []
    pairs = source_pairs(files)
    keys = pa.array(sorted({SPLIT_NO, *AGREEING_KEYS}), pa.string())
    metadata = pa.concat_tables(
        [out.read("metadata", [run], urls=urls, where=ds.field("key").isin(keys)) for run, urls in pairs.items()]
    )
    tensors = out.read_pairs("tensors", pairs, columns=["url", "index", "name"])
    return shard_facts_from_tables(files, metadata, tensors)


def stored_tables(out: Output, base_run_id: str | None, listed: Mapping[str, ListedFile]) -> dict[str, bytes]:
    """The tensor tables of unchanged files, from the rows of the nights that read them: no byte of the files.

    Each is packed (:meth:`~gguf_audit.format.tensor_table.KnownTable.packed`): the
    driver holds a few dozen bytes a tensor for the files it compares, until their tasks take them.

    ``listed`` is this night's listing of the files wanted (the reused
    siblings and references a compare phase needs). Two reads, each filtered
    to those files alone: the base run's ``files`` rows (the run that read
    each file, its header's facts, the identity it was listed with), then the
    ``tensors`` rows in the partitions of the runs that read them. A file is
    left out, and its header read as before, when its base row no longer
    matches its listing (:meth:`ListedFile.unchanged_since`, as
    :func:`plan_reuse` compares them), its last read failed, or its rows
    cannot stand for its header (an output from before a column existed:
    :func:`~gguf_audit.tables.stored_header.known_table`).
    """
    if base_run_id is None or not listed:
        return {}
    columns = [*_IDENTITY, "codes", "source_run_id", *STORED_FILE_COLUMNS]
    fresh: dict[str, dict[str, Any]] = {}
    by_source: dict[str, list[str]] = {}
    for row in out.read("files", [base_run_id], urls=sorted(listed), columns=columns).to_pylist():
        url = str(row["url"])
        then = ListedFile(*(row[c] for c in _IDENTITY))
        if row["source_run_id"] is None or any(c.startswith(_RETRY_PREFIXES) for c in row["codes"] or ()):
            continue
        if listed[url].unchanged_since(then):
            fresh[url] = row
            by_source.setdefault(str(row["source_run_id"]), []).append(url)
    if not by_source:
        return {}
    where = functools.reduce(
        operator.or_,
        [
            (ds.field(PARTITION_COLUMN) == run) & ds.field("url").isin(pa.array(urls, pa.string()))
            for run, urls in sorted(by_source.items())
        ],
    )
    rows = out.read("tensors", sorted(by_source), columns=list(STORED_TENSOR_COLUMNS), where=where)
    rows = rows.sort_by([("url", "ascending"), ("index", "ascending")])
    found: dict[str, bytes] = {}
    start = 0
    for url, run in itertools.groupby(rows.column("url").to_pylist()):
        n = sum(1 for _ in run)
        table = known_table(fresh[str(url)], rows.slice(start, n), listed[str(url)].size)
        start += n
        try:
            if table is not None:
                found[str(url)] = table.packed()
        except struct.error:  # a value packing cannot hold: the header is read
            continue
    return found
