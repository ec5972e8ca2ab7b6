"""Retention: keep the last N nights, drop the rows no kept night references, compact, vacuum.

:func:`vacuum_nights` is ``gguf-audit tables OUT --vacuum --keep-nights N``:

0. the output's lease is taken (:mod:`~gguf_audit.pipelines.store.lease`): a scan
   writing to the output makes vacuum wait ``lease_wait_s`` and then stop
   with one line, and no scan starts while vacuum runs;
1. interrupted commits are rolled back (:meth:`Output.recover`);
2. ``runs``, ``files`` and ``models`` lose the partitions of the nights not
   kept (metadata-only Delta deletes);
3. each detail table keeps, per partition (a run that read files), the rows
   some kept night's ``files`` (or, for model problems, ``models``) rows point
   at: a partition nobody points at is deleted whole, one pointed at in part
   is rewritten with only those rows (one ``replaceWhere`` overwrite of that
   partition);
4. every table is compacted (``optimize.compact``: the small per-batch files of
   a partition become a few large ones) and vacuumed (``vacuum(full=True)``:
   data files no version since ``min_age_hours`` ago names, including those a
   killed run left, are deleted), then checkpointed and its expired log removed.

``min_age_hours`` (default 24) keeps files younger than that: a scan whose
lease expired while it still ran (paused longer than its expiry) may have
data files no log names yet, and vacuum must not take them. Pass 0 when no
scan runs. The report counts what vacuum removed and what the minimum age
kept (``files_kept_young``), per table. Time travel to versions older
than that is given up; the kept nights need none (the tables only grow
between retention runs, so the latest version holds them all).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc
from deltalake import write_deltalake

from gguf_audit.pipelines.store.lease import DEFAULT_EXPIRY_S
from gguf_audit.pipelines.store.output import COMMIT_ORDER, DETAIL_TABLES, Output, Recovered, source_pairs
from gguf_audit.tables.schema import PARTITION_COLUMN, SCHEMAS

__all__ = ["DEFAULT_MIN_AGE_HOURS", "Retention", "vacuum_nights"]

log = logging.getLogger(__name__)

DEFAULT_MIN_AGE_HOURS: Final = 24


@dataclass
class Retention:
    """What a retention run kept and removed."""

    kept: list[str]
    dropped: list[str]
    recovered: list[Recovered] = field(default_factory=list)
    rows_dropped: dict[str, int] = field(default_factory=dict)
    partitions_dropped: dict[str, int] = field(default_factory=dict)
    files_compacted: dict[str, int] = field(default_factory=dict)
    files_vacuumed: dict[str, int] = field(default_factory=dict)
    files_kept_young: dict[str, int] = field(default_factory=dict)
    """Files vacuum would have removed but for ``min_age_hours``."""
    min_age_hours: int = DEFAULT_MIN_AGE_HOURS


def _partitions(out: Output, table: str) -> list[str]:
    dt = out.delta.open(table)
    if dt is None:
        return []
    return sorted({str(p[PARTITION_COLUMN]) for p in dt.partitions()})


def _rows(out: Output, table: str, run_id: str) -> int:
    return int(out.read(table, [run_id], columns=[PARTITION_COLUMN]).num_rows)


def _keep_mask(data: pa.Table, table: str, urls: set[str], model_ids: set[str]) -> pa.Array:
    if table == "compare":  # the rows of the night that judged the model, as its problems
        return pc.fill_null(pc.is_in(data["model_id"], value_set=pa.array(sorted(model_ids), pa.string())), False)
    in_urls = pc.is_in(data["url"], value_set=pa.array(sorted(urls), pa.string()))
    in_urls = pc.fill_null(in_urls, False)
    if table != "problems":
        return in_urls
    is_model = pc.equal(data["scope"], "model")
    in_models = pc.is_in(data["model_id"], value_set=pa.array(sorted(model_ids), pa.string()))
    return pc.or_(pc.and_(pc.invert(is_model), in_urls), pc.and_(is_model, in_models))


def _trim_detail(
    out: Output, table: str, urls_of: Mapping[str, set[str]], models_of: Mapping[str, set[str]], report: Retention
) -> None:
    for run_id in _partitions(out, table):
        urls, model_ids = urls_of.get(run_id, set()), models_of.get(run_id, set())
        if not urls and not model_ids:
            report.rows_dropped[table] = report.rows_dropped.get(table, 0) + _rows(out, table, run_id)
            out.delta.delete_runs(table, [run_id])
            report.partitions_dropped[table] = report.partitions_dropped.get(table, 0) + 1
            continue
        data = out.read(table, [run_id])
        keep = _keep_mask(data, table, urls, model_ids)
        kept = data.filter(keep)
        if kept.num_rows == data.num_rows:
            continue
        report.rows_dropped[table] = report.rows_dropped.get(table, 0) + data.num_rows - kept.num_rows
        write_deltalake(
            out.delta.uri(table),
            kept.cast(SCHEMAS[table]),
            mode="overwrite",
            predicate=f"{PARTITION_COLUMN} = '{run_id}'",
            partition_by=[PARTITION_COLUMN],
            storage_options=out.delta.storage_options or None,
        )


def _references(out: Output, kept: Sequence[str]) -> tuple[dict[str, set[str]], dict[str, set[str]]]:
    """Detail rows the kept nights point at: urls and model ids by the partition (run) holding them."""
    files = out.read("files", list(kept), columns=["url", "source_run_id"])
    urls_of = {run: set(urls) for run, urls in source_pairs(files).items()}
    models = out.read("models", list(kept), columns=["model_id", "source_run_id", PARTITION_COLUMN])
    models_of: dict[str, set[str]] = {}
    sources = pc.coalesce(models["source_run_id"], models[PARTITION_COLUMN]).to_pylist()
    for model_id, source in zip(models["model_id"].to_pylist(), sources, strict=True):
        models_of.setdefault(str(source), set()).add(str(model_id))
    return urls_of, models_of


def vacuum_nights(
    out: Output,
    keep_nights: int,
    *,
    min_age_hours: int = DEFAULT_MIN_AGE_HOURS,
    lease_wait_s: float = 0.0,
    lease_expiry_s: float = DEFAULT_EXPIRY_S,
) -> Retention:
    """Keep the last ``keep_nights`` committed nights and reclaim everything else (see the module docs).

    Takes the output's lease unless this process holds it already; raises
    :class:`~gguf_audit.pipelines.store.lease.LeaseHeld` when a scan holds it.
    """
    if keep_nights < 1:
        raise ValueError(f"keep_nights must be at least 1. Got {keep_nights!r}.")
    if out.lease is not None:
        return _vacuum(out, keep_nights, min_age_hours)
    out.acquire("vacuum", wait_s=lease_wait_s, expiry_s=lease_expiry_s)
    try:
        return _vacuum(out, keep_nights, min_age_hours)
    finally:
        out.release()


def _vacuum(out: Output, keep_nights: int, min_age_hours: int) -> Retention:
    recovered = out.recover()
    runs = sorted(out.committed_runs().to_pylist(), key=lambda r: (r["finished_at"], r["run_id"]))
    ids = [str(r["run_id"]) for r in runs]
    report = Retention(
        kept=ids[-keep_nights:], dropped=ids[:-keep_nights], recovered=recovered, min_age_hours=min_age_hours
    )
    kept = set(report.kept)
    for table in ("files", "models", "runs", "mirror"):
        gone = [r for r in _partitions(out, table) if r not in kept]
        if gone:
            report.rows_dropped[table] = sum(_rows(out, table, r) for r in gone)
            report.partitions_dropped[table] = len(gone)
            out.delta.delete_runs(table, gone)
    if report.kept:
        urls_of, models_of = _references(out, report.kept)
        for table in (*DETAIL_TABLES, "problems", "compare"):
            _trim_detail(out, table, urls_of, models_of if table in ("problems", "compare") else {}, report)
    for table in COMMIT_ORDER:
        dt = out.delta.open(table)
        if dt is None:
            continue
        metrics = dt.optimize.compact()
        report.files_compacted[table] = int(metrics.get("numFilesRemoved", 0))
        removed = dt.vacuum(retention_hours=min_age_hours, dry_run=False, enforce_retention_duration=False, full=True)
        report.files_vacuumed[table] = len(removed)
        if min_age_hours > 0:  # what the minimum age spared: every unreferenced file, less those removed
            unreferenced = dt.vacuum(retention_hours=0, dry_run=True, enforce_retention_duration=False, full=True)
            report.files_kept_young[table] = len(set(unreferenced) - set(removed))
        dt.create_checkpoint()
        dt.cleanup_metadata()
    return report
