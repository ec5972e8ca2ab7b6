"""Lineage on the driver: families from the per-file facts, ``lineage.no_full_precision``, and the compare phase.

Once every file has its rows, the driver groups the models into families
(:mod:`gguf_audit.checks.lineage`) from the small facts rows it holds (the
workers' and the reused files' alike: a tensor-set digest, whether the file
is full precision, architecture, name and base model), never from the
tables' rows. A family with quantized models and no full-precision source
gets one ``lineage.no_full_precision`` problem, filed under its first
quantized model. A source is a full-precision GGUF in the collection, or a
``*.safetensors`` file in the directory of one of the family's files (the
directory is listed once, and only for families without a full-precision
GGUF one of whose models is judged this night: scans list only ``*.gguf``;
a family all of whose models are carried keeps its stored answer, so a quiet
night lists nothing; HTTP directories are not listed, as for manifests).
Safetensors sources
silence the finding but are not compared (their tensors have the upstream
names, not GGUF's).

The compare phase (``[checks] compare``, on by default) then sends each
quantized file of a judged model with its family's full-precision single
file to the workers (:func:`~gguf_audit.pipelines.work.compare_task.compare_batch`),
which write the ``compare`` rows; their findings (``compare.layout_suspect``)
become ``problems`` of scope ``model`` with the quantized file's ``url``.

Incremental nights: the ``compare`` rows and lineage problems of a model are
written by the night that judged it, and read through ``models.source_run_id``
like the models' other problems. A model is judged again (and its pairs
compared again) when one of its files was read, when its family columns
changed (family, anchor, whether the family has a source, the reference
chosen) or when its reference file was read this night; otherwise it is
carried with its rows, and its pairs are not compared again.

Memory: the families are judged over columns
(:mod:`~gguf_audit.pipelines.scan.families`), never over a
:class:`~gguf_audit.checks.lineage.ModelLineage` per model; until the models
are judged the driver keeps a family index and a full-precision flag per model
and a row per family, and makes a chunk of models' cells as that chunk is judged.
"""

from __future__ import annotations

import importlib
import itertools
import logging
import secrets
from collections.abc import Callable, Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds
from fsspec.core import url_to_fs

from gguf_audit.checks.lineage import Pair, model_lineage
from gguf_audit.checks.mmproj_pairing import pair_rows
from gguf_audit.errors import describe_exception
from gguf_audit.findings import Finding
from gguf_audit.format.shard_names import parse_shard_name
from gguf_audit.format.tensor_table import TensorTableAt
from gguf_audit.io.options import for_workers, options_for
from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.listing import DirectorySet, Listing
from gguf_audit.pipelines.scan.collect import Collector
from gguf_audit.pipelines.scan.families import (
    CARRIED_ROWS,
    Judged,
    LackingFamily,
    LineageCells,
    Members,
    judge_members,
)
from gguf_audit.pipelines.scan.groups import ModelGroups
from gguf_audit.pipelines.scan.reuse import reused_shard_facts
from gguf_audit.pipelines.spill import released_after_each
from gguf_audit.pipelines.store import Output
from gguf_audit.pipelines.work import FACT_COLUMNS, CompareBatch, CompareOptions, CompareResult, compare_batch, facts_of
from gguf_audit.tables.lineage import ModelLineageCells, apply_lineage, pair_problems_to_table
from gguf_audit.tables.models import ModelSummary
from gguf_audit.tables.provenance import LINEAGE_FACT_COLUMNS

__all__ = [
    "PAIRS_PER_TASK",
    "Lineage",
    "PairStream",
    "compare_batches",
    "compare_options",
    "judge_lineage",
    "lineage_of",
    "reload_member_facts",
    "reload_shard_facts",
    "run_compare",
    "safetensors_dirs",
]

log = logging.getLogger(__name__)

PAIRS_PER_TASK = 64
"""Quantized files compared per dask task, all with one reference (read once per task: a family of up to
this many quantized files reads its reference once a night)."""


TASKS_PER_LOOKUP: Final = 64
"""Compare tasks whose tensor tables are looked up together (one query of the ledger, one of the stored rows)."""
COMPARE_TASKS_IN_FLIGHT: Final = 32
"""Compare tasks submitted and not yet taken, at most (the next is made as one completes)."""

UNLISTED = ("http://", "https://")
"""Where no directory is listed for safetensors: HTTP servers cannot list (manifests name their files)."""


def safetensors_dirs(dirs: Iterable[str], storage_options: Mapping[str, Any]) -> set[str]:
    """Those of ``dirs`` that hold a ``*.safetensors`` file (one listing each; a failed listing holds none,
    an HTTP directory is not listed)."""
    found: set[str] = set()
    for d in sorted(set(dirs)):
        if d.startswith(UNLISTED):
            continue
        try:
            fs, path = url_to_fs(d, **options_for(d, storage_options))
            if fs.glob(f"{path.rstrip('/')}/*.safetensors"):
                found.add(d)
        except Exception as exc:  # noqa: BLE001 - a directory that cannot be listed has no safetensors we know of
            log.info("lineage: cannot list %s for safetensors: %s", d, describe_exception(exc))
    return found


@dataclass(frozen=True)
class PairStream:
    """A night's compare pairs, made when iterated: a family's chunk of quantized models at a time."""

    judged: Judged | None = None
    stays: npt.NDArray[np.bool_] = field(default_factory=lambda: np.zeros(0, dtype=bool))
    """The carried models that stay carried: their pairs are not compared again."""

    def __iter__(self) -> Iterator[list[Pair]]:
        return iter(()) if self.judged is None else self.judged.pair_chunks(self.stays)

    def __bool__(self) -> bool:
        return self.judged is not None and self.judged.has_pairs(self.stays)


@dataclass
class Lineage:
    """This night's lineage: family columns per model, the models judged again, the pairs, their findings."""

    cells: LineageCells = field(default_factory=LineageCells.empty)
    """Each model's family columns, as columns (:class:`~gguf_audit.pipelines.scan.families.LineageCells`)."""
    rejudge: set[str] = field(default_factory=set)
    """Carried models judged again this night (their family changed, or their reference was read)."""
    compare: PairStream = field(default_factory=lambda: PairStream())
    """The pairs to compare, made a chunk at a time as the compare phase takes them."""
    found: list[tuple[str, str, Finding]] = field(default_factory=list)
    """``(quant url, model id, finding)`` from the compare phase."""
    failures: list[str] = field(default_factory=list)

    @property
    def pairs(self) -> list[Pair]:
        """Every pair at once (tests and small callers: :func:`run_compare` takes them a chunk at a time)."""
        return [p for chunk in self.compare for p in chunk]

    def keep_carried(self, carried: pa.Table) -> pa.Table:
        """The carried ``models`` rows that stay carried."""
        if not self.rejudge or carried.num_rows == 0:
            return carried
        wanted = pa.array(sorted(self.rejudge), pa.string())
        return carried.filter(pc.invert(pc.is_in(carried.column("model_id"), value_set=wanted)))

    def apply(self, summaries: Sequence[ModelSummary]) -> list[ModelSummary]:
        """The judged models' summaries with their family columns and findings (their cells made for them alone)."""
        extra: dict[str, list[Finding]] = {}
        for _, model_id, f in self.found:
            extra.setdefault(model_id, []).append(f)
        ids = [str(s.row["model_id"]) for s in summaries]
        cells = self.cells.of(ids)
        return [apply_lineage(s, c, extra.get(i, ())) for s, c, i in zip(summaries, cells, ids, strict=True)]

    def pair_problems(self, run_id: str) -> pa.Table:
        return pair_problems_to_table(self.found, run_id=run_id)


_LINEAGE_INPUT: Final = (
    "url",
    "model_id",
    "architecture",
    "name",
    "file_type_name",
    "shard_index",
    *LINEAGE_FACT_COLUMNS,
)
"""The facts columns lineage reads (a quiet night reads them for every file: no more than these)."""

_STORED: Final = ("model_id", "architecture", "file_type_name", *ModelLineageCells().columns())
"""The carried models' stored columns lineage reads."""


def _members(collector: Collector, view: ModelGroups, carried: pa.Table) -> tuple[Members, list[dict[str, Any]]]:
    """What lineage knows of each model, as columns, and the rows projector pairing needs.

    The facts are taken one batch's table at a time, a single-file model's
    lineage made from its row at once and kept as one row of columns, only the
    rows of sharded models held until their set is complete. Carried models
    come from their stored rows. Pairing keeps only the rows of directories that
    hold a projector.
    """
    members = Members(view)
    projector_dirs = _projector_dirs(collector)
    sharded: dict[str, list[dict[str, Any]]] = {}
    pairing: list[dict[str, Any]] = []
    for facts in released_after_each(collector.facts):
        rows = facts.select(list(_LINEAGE_INPUT)).to_pylist()
        ids = [str(row["model_id"]) for row in rows]
        positions = view.positions(ids)  # a table's models looked up together, and their single files' URLs
        single = (positions >= 0) & (view.sizes_at(np.maximum(positions, 0)) == 1)
        firsts = iter(view.first_urls(positions[single]))
        for row, model_id, position, alone in zip(rows, ids, positions.tolist(), single.tolist(), strict=True):
            if projector_dirs and _directory(str(row["url"])) in projector_dirs:
                pairing.append(row)
            if alone:
                members.add_model(position, model_lineage(model_id, [row]), (next(firsts),))
            elif position >= 0:
                sharded.setdefault(model_id, []).append(row)
    for model_id, rows in sharded.items():
        members.add_model(view.position(model_id), model_lineage(model_id, rows))
    members.add_carried(carried.select(list(_STORED)))
    members.done()
    return members, pairing


def _directory(url: str) -> str:
    return url.rsplit("/", 1)[0] if "/" in url else ""


def _projector_dirs(collector: Collector) -> set[str]:
    """The directories of the projector (mmproj) files among the facts: pairing looks nowhere else."""
    dirs: set[str] = set()
    for facts in collector.facts:
        projector = pc.or_(pc.is_valid(facts.column("projector_type")), pc.equal(facts.column("architecture"), "clip"))
        hits = facts.filter(pc.fill_null(projector, False)).column("url").to_pylist()
        dirs.update(_directory(str(u)) for u in hits)
    return dirs


def judge_lineage(
    out: Output,
    config: ScanConfig,
    groups: ModelGroups,
    collector: Collector,
    carried: pa.Table,
    read_urls: Iterable[str],
    listing: Listing | None = None,
) -> Lineage:
    """Families, findings and pairs of this night; the carried models whose family changed are judged again
    (and their problems, counted when carried, uncounted)."""
    lineage = lineage_of(config, groups, collector, carried, read_urls, listing)
    if lineage.rejudge:
        _uncount(out, carried, lineage.rejudge, collector)
    return lineage


def lineage_of(
    config: ScanConfig,
    groups: ModelGroups,
    collector: Collector,
    carried: pa.Table,
    read_urls: Iterable[str],
    listing: Listing | None = None,
) -> Lineage:
    """:func:`judge_lineage` without the tally: families, cells, the models judged again, the pairs.

    Per model it keeps two numbers (:class:`~gguf_audit.pipelines.scan.families.LineageCells`);
    a carried model's stored row (it kept no facts rows on the driver) says its family.
    """
    view = groups
    members, pairing = _members(collector, view, carried)
    seen, covered = (
        (listing.safetensors_dirs, listing.listed_dirs) if listing is not None else (frozenset(), DirectorySet())
    )

    def with_safetensors(lacking: Sequence[LackingFamily]) -> set[str]:
        return _with_safetensors(lacking, config.storage_options, seen, covered)

    judged = judge_members(members, with_safetensors)
    cells = judged.cells
    del members
    rejudge, stays = _rejudged(cells, view, carried, read_urls)
    compare = PairStream(judged, stays) if config.checks.compare else PairStream()
    paired_ids = {str(r["model_id"]) for r in pairing}
    carried_ids = {m for m in paired_ids if (p := view.position(m)) >= 0 and stays[p]}
    return Lineage(cells, rejudge, compare, found=_projector_pairs(pairing, carried_ids))


def _rejudged(
    cells: LineageCells, view: ModelGroups, carried: pa.Table, read_urls: Iterable[str]
) -> tuple[set[str], npt.NDArray[np.bool_]]:
    """The carried models whose family columns changed or whose reference was read this night, and a flag
    per model of those that stay carried."""
    stays = np.zeros(len(view), dtype=bool)
    rejudge: set[str] = set()
    if carried.num_rows == 0:
        return rejudge, stays
    references = cells.reference_urls()
    read = pa.array(sorted({u for u in read_urls if u in references}) if references else [], pa.string())
    for start in released_after_each(
        range(0, carried.num_rows, CARRIED_ROWS)
    ):  # a quiet night carries every model: a slice at a time
        stored = carried.slice(start, CARRIED_ROWS).select(list(_STORED))
        positions = view.positions_of(stored.column("model_id"))
        now = cells.columns_at(positions)
        changed = np.zeros(stored.num_rows, dtype=bool)
        for name in now.column_names:
            a, b = now.column(name), stored.column(name)
            same = pc.or_kleene(pc.and_(pc.is_null(a), pc.is_null(b)), pc.fill_null(pc.equal(a, b), False))
            changed |= ~same.to_numpy(zero_copy_only=False).astype(bool)
        if len(read):
            hit = pc.is_in(now.column("reference_url"), value_set=read)
            changed |= pc.fill_null(hit, False).to_numpy(zero_copy_only=False).astype(bool)
        rejudge.update(str(m) for m in stored.column("model_id").filter(pa.array(changed)).to_pylist())
        stays[positions[(~changed) & (positions >= 0)]] = True
    return rejudge, stays


def _projector_pairs(rows: Sequence[Mapping[str, Any]], carried: set[str]) -> list[tuple[str, str, Finding]]:
    """``(url, model id, finding)`` of each projector (mmproj) judged this night against the models beside it
    (``rows``: the facts rows of the directories that hold a projector)."""
    model_of = {str(r["url"]): str(r["model_id"]) for r in rows}
    found = pair_rows(rows)
    return [(url, model_of[url], f) for url, f in found if model_of.get(url) not in carried]


def _with_safetensors(
    lacking: Sequence[LackingFamily],
    storage_options: Mapping[str, Any],
    seen: frozenset[str] = frozenset(),
    covered: Container[str] = frozenset(),
) -> set[str]:
    """The directories of ``lacking``'s members that hold safetensors.

    The scan's own listing answers for the directories it listed whole (``seen``
    among ``covered``: no request); the others are listed here for a family
    with a model judged this night, and a family all of whose models are
    carried keeps its stored answer (a quiet night lists nothing).
    """
    known: set[str] = set()
    to_list: set[str] = set()
    for family in lacking:
        directories = family.directories
        known.update(directories & seen)
        if family.carried:
            if family.stored_safetensors:
                known.update(directories)
        else:
            to_list.update(d for d in directories if d not in covered)
    return known | (safetensors_dirs(to_list, storage_options) if to_list else set())


def _uncount(out: Output, carried: pa.Table, ids: set[str], collector: Collector) -> None:
    """Take the problems of carried models judged again out of the tally (they were counted as carried)."""
    rows = carried.filter(pc.is_in(carried.column("model_id"), value_set=pa.array(sorted(ids), pa.string())))
    by_source: dict[str, list[str]] = {}
    for model_id, source in zip(
        rows.column("model_id").to_pylist(), rows.column("source_run_id").to_pylist(), strict=True
    ):
        by_source.setdefault(str(source), []).append(str(model_id))
    for source, model_ids in by_source.items():
        where = (ds.field("scope") == "model") & ds.field("model_id").isin(pa.array(model_ids, pa.string()))
        problems = out.read("problems", [source], columns=["code", "severity"], where=where)
        collector.tally.codes.subtract(problems.column("code").to_pylist())
        collector.tally.severities.subtract(problems.column("severity").to_pylist())
    collector.tally.codes = +collector.tally.codes  # drop the zero counts
    collector.tally.severities = +collector.tally.severities


def reload_member_facts(
    out: Output, base_run_id: str | None, groups: Mapping[str, Sequence[str]], ids: Iterable[str], collector: Collector
) -> None:
    """The stored facts rows of the files of ``ids`` (carried models judged again), so each is judged from its
    own files' verdicts: none of their files was read this night and the reused files' facts are kept only for
    the models judged again when the night began."""
    urls = [u for mid in sorted(set(ids)) for u in groups.get(mid, ())]
    if not urls or base_run_id is None:
        return
    model_ids = {u: mid for mid in ids for u in groups.get(mid, ())}
    facts = facts_of(out.read("files", [base_run_id], urls=urls, columns=list(FACT_COLUMNS)))
    if facts.num_rows == 0:
        return
    ids_now = pa.array([model_ids[str(u)] for u in facts.column("url").to_pylist()], pa.string())
    facts = facts.set_column(facts.schema.get_field_index("model_id"), "model_id", ids_now)
    collector.add_facts(facts)


def reload_shard_facts(
    out: Output, base_run_id: str | None, groups: Mapping[str, Sequence[str]], ids: Iterable[str], collector: Collector
) -> None:
    """The stored shard facts of the shard sets among ``ids`` (carried models judged again): their shards
    were not read, and the facts of carried sets are not loaded when the reused files are."""
    urls = [u for mid in ids for u in groups.get(mid, ()) if parse_shard_name(u) and u not in collector.shard_facts]
    if not urls or base_run_id is None:
        return
    for fact in reused_shard_facts(out, out.read("files", [base_run_id], urls=urls)):
        collector.shard_facts[fact.url] = fact


def compare_options(
    config: ScanConfig, run_id: str, out: Output, read_urls: Mapping[str, str] | None = None
) -> CompareOptions:
    return CompareOptions(
        read_urls=dict(read_urls or {}),
        run_id=run_id,
        storage_options=for_workers(config.storage_options),
        read=config.io.read,
        budget=config.checks.compare_budget,
        threads=config.io.threads,
        out=out.url,
        out_storage_options=out.fsspec_options,
    )


def compare_batches(
    chunks: Iterable[Sequence[Pair]],
    tables: Callable[[Sequence[str]], Mapping[str, bytes]],
    stored: Callable[[Sequence[str]], Mapping[str, bytes]] | None = None,
) -> Iterator[CompareBatch]:
    """The pairs of ``chunks`` as tasks, made as they are taken: grouped by reference, at most
    :data:`PAIRS_PER_TASK` a task, each with the tensor tables of its files.

    The tables are looked up :data:`TASKS_PER_LOOKUP` tasks at a time: where this
    night's audits found them (``tables(urls)``, :meth:`TensorTableAt.packed`
    values), and for files not read this night the tables their stored rows hold
    (``stored(urls)``, packed :class:`~gguf_audit.format.tensor_table.KnownTable`
    values, unpacked by the task).
    """
    made = 0
    pending: list[tuple[str, tuple[Pair, ...]]] = []

    def looked_up() -> Iterator[CompareBatch]:
        nonlocal made
        urls = list(
            dict.fromkeys(u for reference, group in pending for u in (reference, *(p.quant_url for p in group)))
        )
        found = tables(urls)
        unread = [u for u in urls if u not in found]
        kept = stored(unread) if stored is not None and unread else {}
        for reference, group in pending:
            files = [reference, *(p.quant_url for p in group)]
            known = {u: TensorTableAt.unpacked(found[u]) for u in files if u in found}
            kept_here = {u: kept[u] for u in files if u in kept and u not in found}
            yield CompareBatch(str(made), reference, group, known, kept_here)
            made += 1
        pending.clear()

    for chunk in chunks:
        by_reference: dict[str, list[Pair]] = {}
        for pair in chunk:
            by_reference.setdefault(pair.reference_url, []).append(pair)
        for reference, group in by_reference.items():
            for i in range(0, len(group), PAIRS_PER_TASK):
                pending.append((reference, tuple(group[i : i + PAIRS_PER_TASK])))
                if len(pending) == TASKS_PER_LOOKUP:
                    yield from looked_up()
    if pending:
        yield from looked_up()


def run_compare(
    client: Any,
    lineage: Lineage,
    options: CompareOptions,
    collector: Collector,
    on_io: Callable[[int, int], None] | None = None,
    stored: Callable[[Sequence[str]], Mapping[str, bytes]] | None = None,
    window: int | None = None,
) -> None:
    """Compare ``lineage.compare``'s pairs on the workers; their data files and what they spent on each file
    (as a quantized file or as a reference) go to ``collector``, their findings to ``lineage``. A task that
    fails is logged and its pairs get no rows (the scan goes on).

    The pairs, their tasks and their tables are made as the tasks are
    submitted, through a window of ``window`` tasks in flight (:data:`COMPARE_TASKS_IN_FLIGHT`): the driver
    holds a window's worth of the phase, never all of it.
    ``on_io(requests, bytes)`` is told the phase's running totals after each task (the progress bar).
    ``stored(urls)`` gives the tensor tables its stored rows hold of each file of ``urls`` that this night
    did not read (:meth:`Night.stored_tables`): the comparison then reads none of those files' headers.
    """
    if not lineage.compare:
        collector.drop_tensor_tables()
        return
    as_completed = importlib.import_module("distributed").as_completed  # as run.py: only when a scan runs
    batches = compare_batches(lineage.compare, collector.tensor_tables, stored)

    def submit(batch: CompareBatch) -> Any:
        key = f"gguf-audit-compare-{options.run_id}-{batch.batch_id}-{secrets.token_hex(3)}"
        return client.submit(compare_batch, batch, options, key=key, pure=False)

    in_flight = COMPARE_TASKS_IN_FLIGHT if window is None else max(1, window)
    futures = as_completed([submit(b) for b in itertools.islice(batches, in_flight)])
    requests = bytes_read = 0
    for future in futures:
        following = next(batches, None)
        if following is not None:
            futures.add(submit(following))
        try:
            result = future.result()
            if not isinstance(result, CompareResult):
                raise TypeError(f"a compare task returned {type(result).__name__}")
        except Exception as exc:  # noqa: BLE001 - a lost compare task loses its rows, never the night
            message = f"compare task failed: {describe_exception(exc)}"
            log.warning("%s", message)
            lineage.failures.append(message)
            continue
        finally:
            future.release()
        collector.add_parts(result.parts)
        collector.tally.bytes_read += result.bytes_read
        collector.tally.requests += result.requests
        lineage.found.extend(result.findings)
        collector.ledger.add_compare_io(result.io)
        requests += result.requests
        bytes_read += result.bytes_read
        if on_io is not None:
            on_io(requests, bytes_read)
    collector.drop_tensor_tables()
