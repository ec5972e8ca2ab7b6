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

The base night's rows are streamed a record batch at a time (the listing and
a URL set are all the driver holds per file), so the driver's memory does not
grow with the rows of the collection.

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
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from gguf_audit import VERDICTS_VERSION
from gguf_audit.checks.shards import AGREEING_KEYS, SPLIT_NO, ShardFacts
from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.listing.discover import Listing
from gguf_audit.pipelines.scan.tally import Tally
from gguf_audit.pipelines.store.output import Output, rows_in, source_pairs
from gguf_audit.tables.listed import ListedFile, ListedFiles
from gguf_audit.tables.schema import PARTITION_COLUMN
from gguf_audit.tables.shard_facts import shard_facts_from_tables
from gguf_audit.tables.stored_header import STORED_FILE_COLUMNS, STORED_TENSOR_COLUMNS, known_table

__all__ = [
    "ReusePlan",
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

_IDENTITY: Final = ("url", "size", "etag", "version_id", "mtime", "sha256")
"""The ``files`` columns that say which bytes a row describes (:meth:`ListedFile.unchanged_since`)."""


@dataclass(frozen=True, slots=True)
class ReusePlan:
    """Which listed files keep their rows, and which are read."""

    reuse: dict[str, ListedFile]
    read: ListedFiles
    """Held as Arrow columns, as the listing's files are (a first night reads them all and copies none)."""


def plan_reuse(out: Output, base_run_id: str | None, listing: Listing) -> ReusePlan:
    """Which listed files keep their rows from ``base_run_id``, and which are read.

    The base night's ``files`` rows are streamed a batch at a time: the driver
    keeps only the set of URLs found unchanged, never the rows.
    """
    if base_run_id is None:
        return ReusePlan({}, listing.compact)
    listed = {f.url: f for f in listing.files}
    columns = ["url", "size", "etag", "version_id", "mtime", "sha256", "codes"]
    unchanged: set[str] = set()
    for rows in out.batches("files", [base_run_id], columns=columns):
        for url, size, etag, version_id, mtime, sha256, codes in zip(
            *(rows.column(c).to_pylist() for c in columns), strict=True
        ):
            now = listed.get(url)
            if (
                now is not None
                and not any(c.startswith(_RETRY_PREFIXES) for c in codes or ())
                and now.unchanged_since(ListedFile(url, size, etag, version_id, mtime, sha256))
            ):
                unchanged.add(url)
    reuse = {f.url: f for f in listing.files if f.url in unchanged}
    read = [i for i, url in enumerate(listing.compact.urls()) if url not in unchanged]
    return ReusePlan(reuse, listing.compact.take(read))


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
    kept = rows_in(table, "url", list(listing))
    if kept.num_rows == 0:
        return kept
    facts = [listing[u] for u in kept.column("url").to_pylist()]
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
        ids = pa.array([model_ids[u] for u in rows.column("url").to_pylist()], pa.string())
        yield _set_column(rows, "model_id", ids)


def reused_problem_tally(out: Output, pairs: Mapping[str, Sequence[str]]) -> Tally:
    """The tally of the ``problems`` (scope ``file``) of reused files, read where the reading run wrote them.

    ``pairs`` names the files by the run that read them (:func:`source_pairs`);
    the rows are streamed and counted a batch at a time.
    """
    tally = Tally()
    for source, urls in pairs.items():
        if not urls:
            continue
        for problems in out.batches("problems", [source], urls=urls, columns=["code", "severity", "scope"]):
            tally.add_problems(problems.filter(pc.equal(problems.column("scope"), "file")))
    return tally


def carried_models(
    out: Output, base_run_id: str, groups: Mapping[str, Sequence[str]], read: Iterable[str]
) -> tuple[pa.Table, Tally]:
    """The base run's ``models`` rows of models whose files are the same and none was read.

    Returns them with the tally of their problems (scope ``model``, where the run that judged them wrote them).
    """
    touched = set(read)
    models = out.read("models", [base_run_id])
    keep = []
    for i, (model_id, urls) in enumerate(
        zip(models.column("model_id").to_pylist(), models.column("urls").to_pylist(), strict=True)
    ):
        members = groups.get(model_id)
        if members is not None and set(members) == set(urls or ()) and not touched.intersection(members):
            keep.append(i)
    carried = models.take(pa.array(keep, pa.int64()))
    sources = pc.fill_null(carried.column("source_run_id"), base_run_id)
    carried = _set_column(carried, "source_run_id", sources)
    tally = Tally()
    by_source: dict[str, list[str]] = {}
    for model_id, source in zip(carried.column("model_id").to_pylist(), sources.to_pylist(), strict=True):
        by_source.setdefault(str(source), []).append(str(model_id))
    for source, ids in by_source.items():
        where = (ds.field("scope") == "model") & ds.field("model_id").isin(pa.array(ids, pa.string()))
        tally.add_problems(out.read("problems", [source], columns=["code", "severity"], where=where))
    return carried, tally


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
