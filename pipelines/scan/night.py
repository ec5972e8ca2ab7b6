"""One night on the driver's side: what it keeps from the base run, the models, the one-row check, the commit.

The driver writes only small rows itself: a ``files`` row per reused file, a
``models`` row per model, the ``problems`` of the models it judged and the
``runs`` row. Everything read this night was written by the workers.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.parquet as pq
from fsspec import AbstractFileSystem

from gguf_audit.errors import GGUFAuditError, describe_exception
from gguf_audit.format.shard_names import parse_shard_name
from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.listing import Listing
from gguf_audit.pipelines.scan.collect import (
    Collector,
    IncompleteModel,
    ScanResult,
    incomplete_models,
    model_summaries,
    runs_row,
)
from gguf_audit.pipelines.scan.families import CARRIED_ROWS
from gguf_audit.pipelines.scan.groups import ModelGroups
from gguf_audit.pipelines.scan.lineage import Lineage, judge_lineage, reload_member_facts, reload_shard_facts
from gguf_audit.pipelines.scan.reuse import (
    ReadingRuns,
    ReusePlan,
    carried_models,
    reused_files,
    reused_problem_tally,
    reused_shard_facts,
    stored_tables,
)
from gguf_audit.pipelines.spill import driver_phase, released_after_each
from gguf_audit.pipelines.store import Output, PartFile, RunParts
from gguf_audit.pipelines.work import Tally, facts_of
from gguf_audit.tables.models import model_problems_to_table, models_to_table
from gguf_audit.tables.schema import SCHEMAS, rows_to_table, stored_schema

__all__ = ["DRIVER_TABLES", "CommitObserver", "Night", "RunError"]

log = logging.getLogger(__name__)

DRIVER_TABLES: Final = ("files", "models", "problems")
"""The tables the driver writes rows of (reused files, models, model problems); ``runs`` apart."""


MODELS_PER_CHUNK: Final = 512
"""Models judged and written at a time (their summaries are the driver's largest per-model objects)."""
DRIVER_ROW_GROUP_ROWS: Final = MODELS_PER_CHUNK
"""Rows the driver's data files buffer per row group: a chunk of models is written as it is judged, never
held to the end of the night."""
DRIVER_ROW_GROUPS_PER_FILE: Final = 64
"""Row groups in one of the driver's data files before it starts another (32,768 models' rows): a Parquet
writer holds every row group's footer metadata until it closes, so one file a table for the night grew the
driver with the collection."""


def _chunks(values: Iterable[str], size: int) -> Iterator[list[str]]:
    """``values`` in lists of ``size`` (the last may be shorter): a chunk of model ids at a time."""
    it = iter(values)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


def _with_compare_io(
    rows: pa.Table, compare_io_of: Callable[[list[str]], Mapping[str, tuple[int, int]]], schema: pa.Schema
) -> pa.Table:
    """``rows`` of ``files`` as ``schema`` has them, with each file's compare requests and bytes filled in."""
    urls_in = [str(u) for u in rows.column("url").to_pylist()]
    io = compare_io_of(urls_in)
    columns = {
        "compare_requests": pa.array([io[u][0] if u in io else None for u in urls_in], pa.int64()),
        "compare_bytes": pa.array([io[u][1] if u in io else None for u in urls_in], pa.int64()),
    }
    arrays = [
        columns[f.name]
        if f.name in columns
        else rows.column(f.name)
        if f.name in rows.column_names
        else pa.nulls(rows.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(arrays, schema=schema)


def _url_batches(fs: AbstractFileSystem, path: str) -> Iterator[pa.RecordBatch]:
    """A data file's ``url`` column in batches of a driver's row group (a driver's file holds 32,768 rows: read
    whole, its URLs and footer stayed in the night's anonymous memory to the commit)."""
    with fs.open(path, "rb") as f:
        yield from pq.ParquetFile(f).iter_batches(batch_size=DRIVER_ROW_GROUP_ROWS, columns=["url"])


class RunError(GGUFAuditError, RuntimeError):
    """The run itself failed (listing, cluster, invariant, commit); nothing was committed."""


CommitObserver = Callable[[str, int], None]
"""Told ``(table, version)`` after each table's commit."""


class Night:
    """The driver's part of one run: reuse, models, checks and commit, around the workers' batches."""

    def __init__(
        self,
        out: Output,
        run_id: str,
        listing: Listing,
        groups: ModelGroups,
        base_run_id: str | None,
        plan: ReusePlan,
    ) -> None:
        self.out = out
        self.run_id = run_id
        self.groups = groups
        self.base_run_id = base_run_id
        self.plan = plan
        self.listing = listing
        self.model_ids: Mapping[str, str] = groups.model_ids
        with driver_phase("night.ledger"):  # the ledger read every listed URL
            self.collector = Collector(listing.files.urls())
        self.parts = RunParts(
            out.url,
            out.fsspec_options,
            run_id,
            "driver",
            DRIVER_TABLES,
            measure_encodings=True,
            row_group_rows=DRIVER_ROW_GROUP_ROWS,
            row_groups_per_file=DRIVER_ROW_GROUPS_PER_FILE,
        )
        self.carried = SCHEMAS["models"].empty_table()
        self.summaries_judged = 0

    def keep_reused(self) -> None:
        """Write this night's ``files`` rows of the reused files and take the base run's models that stand.

        The reused rows are streamed from the base night a batch at a time and
        written as they come; the driver marks each reused file seen in its
        ledger and keeps a small index a file of the run that read it, and
        facts rows only for the files of models judged again (a carried model
        needs none).
        """
        if self.base_run_id is None or not self.plan.reuse:
            return
        read = set(self.plan.read.urls())
        carried, model_tally = carried_models(self.out, self.base_run_id, self.groups, read)
        self.carried = carried
        is_carried = self._carried_flags(carried)
        tally = Tally()
        sources = ReadingRuns.for_positions(len(self.plan.reuse))
        shards: list[pa.Table] = []
        for files in released_after_each(reused_files(self.out, self.base_run_id, self.plan.reuse, self.model_ids)):
            self.parts.write("files", files)
            tally.merge(Tally.of_files(files))
            batch_urls = [str(u) for u in files.column("url").to_pylist()]
            sources.note(
                self.plan.reuse.positions_of(batch_urls), (str(s) for s in files.column("source_run_id").to_pylist())
            )
            models = self.groups.positions([str(m) for m in files.column("model_id").to_pylist()])
            judged = files.filter(pa.array(~is_carried[np.maximum(models, 0)] | (models < 0)))
            self.collector.add_reused(batch_urls, [facts_of(judged)], Tally(), [])
            # Shards of sets judged again need their stored facts; those of carried sets do not.
            is_shard = [parse_shard_name(str(u)) is not None for u in judged.column("url").to_pylist()]
            if any(is_shard):
                shards.append(judged.filter(pa.array(is_shard, pa.bool_())))
        shard_files = pa.concat_tables(shards) if shards else None
        shard_facts = reused_shard_facts(self.out, shard_files) if shard_files is not None else []
        tally.merge(reused_problem_tally(self.out, self.plan.reuse, sources))
        tally.merge(model_tally)
        self.collector.add_reused([], [], tally, shard_facts)

    def _carried_flags(self, carried: pa.Table) -> npt.NDArray[np.bool_]:
        """Whether the model at each position of the night's order is carried."""
        flags = np.zeros(len(self.groups), dtype=bool)
        ids = carried.column("model_id")
        for start in released_after_each(range(0, len(ids), CARRIED_ROWS)):
            at = self.groups.positions([str(m) for m in ids.slice(start, CARRIED_ROWS).to_pylist()])
            flags[at[at >= 0]] = True
        return flags

    def lineage(self, config: ScanConfig) -> Lineage:
        """This night's families, lineage findings and compare pairs, once every file has its rows.

        Never fails the night: should lineage fail, the models are judged without it (and logged).
        """
        read = self.plan.read.urls()
        try:
            lineage = judge_lineage(self.out, config, self.groups, self.collector, self.carried, read, self.listing)
            reload_member_facts(self.out, self.base_run_id, self.groups, lineage.rejudge, self.collector)
            reload_shard_facts(self.out, self.base_run_id, self.groups, lineage.rejudge, self.collector)
        except Exception as exc:  # noqa: BLE001 - lineage is a judgement across files, never worth the night
            log.warning("lineage failed, models judged without it: %s", describe_exception(exc))
            return Lineage()
        return lineage

    def stored_tables(self, urls: Iterable[str]) -> dict[str, bytes]:
        """The tensor tables the stored rows hold of those of ``urls`` this night reused (none read again),
        packed (:func:`~gguf_audit.pipelines.scan.reuse.stored_tables`).

        Never fails the night: should the rows not be read, the comparison reads those headers (and it is logged).
        """
        listed = {u: self.plan.reuse[u] for u in urls if u in self.plan.reuse}
        try:
            return stored_tables(self.out, self.base_run_id, listed)
        except Exception as exc:  # noqa: BLE001 - the stored rows only spare header reads
            log.warning("stored tensor tables not read, their headers will be: %s", describe_exception(exc))
            return {}

    def judge_models(self, lineage: Lineage | None = None) -> tuple[int, tuple[IncompleteModel, ...]]:
        """Write the models' rows (carried, or judged now with their problems): how many, and the incomplete ones.

        ``lineage`` adds the family columns and lineage and compare problems,
        and may judge carried models again. Models are judged
        :data:`MODELS_PER_CHUNK` at a time and each chunk's rows written as it
        is done: the driver holds one chunk's summaries, never the night's.
        """
        kept = self.carried if lineage is None else lineage.keep_carried(self.carried)
        is_carried = self._carried_flags(kept)
        schema = models_to_table([], run_id=self.run_id).schema
        incomplete: list[IncompleteModel] = []
        for start in released_after_each(
            range(0, kept.num_rows, MODELS_PER_CHUNK)
        ):  # a quiet night carries every model: a chunk at a time
            carried = kept.slice(start, MODELS_PER_CHUNK).select(schema.names).cast(schema)
            self.parts.write("models", carried)
            incomplete.extend(incomplete_models(carried))
        n_models = kept.num_rows
        self.summaries_judged = 0
        judged_ids = (
            model_id
            for start in range(0, len(self.groups), MODELS_PER_CHUNK)
            for model_id in self.groups.ids_at(np.flatnonzero(~is_carried[start : start + MODELS_PER_CHUNK]) + start)
        )
        for chunk in released_after_each(_chunks(judged_ids, MODELS_PER_CHUNK)):
            self.summaries_judged += len(chunk)
            judged = model_summaries(self.groups, self.collector, chunk)
            if lineage is not None:
                judged = lineage.apply(judged)
            models = models_to_table(judged, run_id=self.run_id)
            self.parts.write("models", models)
            incomplete.extend(incomplete_models(models))
            n_models += models.num_rows
            problems = model_problems_to_table(judged, run_id=self.run_id)
            self.parts.write("problems", problems)
            self.collector.tally.add_problems(problems)
        if lineage is not None:
            problems = lineage.pair_problems(self.run_id)
            self.parts.write("problems", problems)
            self.collector.tally.add_problems(problems)
        return n_models, tuple(sorted(incomplete, key=lambda m: m.model_id))

    def close_parts(self) -> None:
        self.collector.add_parts(self.parts.close())

    def abort(self) -> None:
        self.parts.abort()

    def record_compare_io(self) -> None:
        """Put the compare phase's ``(requests, bytes)`` of each file (kept in the ledger) into its ``files`` row.

        The rows were written before the phase ran (by the workers, and the
        driver's for reused files): the data files holding a compared file are
        read back one at a time and written again as new data files, and the
        old ones left out of the commit (and deleted). A night that compared
        nothing rewrites nothing.
        """
        ledger = self.collector.ledger
        if not ledger.compared:
            return
        keep: list[PartFile] = []
        stale: list[PartFile] = []
        for part in self.collector.parts.get("files", []):
            path = self.out.path("files", part.path)
            compared = any(
                ledger.compare_io_of(str(u) for u in b.column("url").to_pylist())
                for b in _url_batches(self.out.fs, path)
            )
            (stale if compared else keep).append(part)
        if not stale:
            return
        schema = stored_schema("files")
        writer = RunParts(
            self.out.url,
            self.out.fsspec_options,
            self.run_id,
            "driver-compare",
            ("files",),
            measure_encodings=True,
            # a row group of the driver's size: the default held, sorted and encoded tens of thousands of
            # files' rows at once (bench_driver.py --references)
            row_group_rows=DRIVER_ROW_GROUP_ROWS,
            row_groups_per_file=DRIVER_ROW_GROUPS_PER_FILE,
        )
        try:
            for part in stale:
                rows = pq.read_table(self.out.path("files", part.path), filesystem=self.out.fs)
                writer.write("files", _with_compare_io(rows, ledger.compare_io_of, schema))
            fresh = writer.close()
        except BaseException:
            writer.abort()
            raise
        self.collector.parts["files"] = [*keep, *fresh]
        for part in stale:
            with contextlib.suppress(OSError):
                self.out.fs.rm_file(self.out.path("files", part.path))

    @property
    def n_files(self) -> int:
        """The files listed this night (each URL once)."""
        return len(self.collector.ledger)

    def check_one_row_per_file(self) -> int:
        """Read the ``url`` column of every ``files`` data file of this night: every listed file exactly once.

        Counted against the listing on the driver's disk (:meth:`UrlLedger.one_row_report`), a data file at
        a time: only the first offending URLs become Python values that stay.
        """
        columns = (
            batch.column("url")
            for part in self.collector.parts.get("files", [])
            for batch in _url_batches(self.out.fs, self.out.path("files", part.path))
        )
        n, duplicated, missing, unexpected = self.collector.ledger.one_row_report(columns)
        if duplicated[0] or missing[0] or unexpected[0]:
            raise RunError(
                f"the files table does not hold exactly one row per listed file: {missing[0]} missing "
                f"{missing[1]}, {duplicated[0]} duplicated {duplicated[1]}, {unexpected[0]} unexpected "
                f"{unexpected[1]}; nothing was committed"
            )
        return n

    def commit(
        self, config: ScanConfig, result: ScanResult, started: datetime, on_committed: CommitObserver | None = None
    ) -> dict[str, int]:
        """Commit every table, ``runs`` last with the versions the others reached."""

        def runs_part(versions: Mapping[str, int]) -> PartFile:
            writer = RunParts(
                self.out.url, self.out.fsspec_options, self.run_id, "driver", ("runs",), measure_encodings=True
            )
            writer.write("runs", rows_to_table("runs", [runs_row(config, result, started, versions)]))
            [part] = writer.close()
            return part

        return self.out.commit(self.run_id, self.collector.parts, runs_part, on_committed=on_committed)

    def close(self) -> None:
        """Let go of the driver's own files (its ledger and spills), committed or not."""
        self.collector.close()

    def discard(self) -> None:
        """Best effort: remove the data files this night wrote (nothing names them; vacuum would anyway)."""
        for parts in self.collector.parts.values():
            for part in parts:
                with contextlib.suppress(OSError):
                    self.out.fs.rm_file(self.out.path(part.table, part.path))
