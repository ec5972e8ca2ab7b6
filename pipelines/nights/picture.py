"""The picture as of a night: every table as that committed run left the collection, read from the Delta tables.

A night ``R`` is its ``runs`` row; its ``files`` and ``models`` rows are those
with ``run_id = R``. The detail tables (``tensors``, ``metadata``,
``samples`` and the ``problems`` of scope ``file``) hold a file's rows once,
in the partition of the run that read it: the night's are those whose
``(url, run_id)`` is a ``(url, source_run_id)`` of its ``files`` rows. The
``problems`` of scope ``model`` are those whose ``(model_id, run_id)`` is a
``(model_id, source_run_id)`` of its ``models`` rows. ``docs/tables.md`` has
the same joins in SQL and polars.

:func:`picture` streams one table's picture as record batches, with
``run_id`` set to the night (``source_run_id`` still names the run that read
each row) and the detail rows' ``model_id`` taken from the night's ``files``
rows (a file can change model when another file appears beside it), so a
picture has exactly the columns of :data:`~gguf_audit.tables.schema.SCHEMAS`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from gguf_audit.errors import GGUFAuditError
from gguf_audit.pipelines.store import Output, conform, scan_batches, source_pairs
from gguf_audit.tables.schema import PARTITION_COLUMN, SCHEMAS, TABLE_NAMES

__all__ = ["NightNotFound", "night_row", "picture", "picture_table"]

BATCH_ROWS: Final = 64 * 1024


class NightNotFound(GGUFAuditError, LookupError):
    """No committed night of that run id (or none at all)."""


def night_row(out: Output, run_id: str | None = None) -> dict[str, Any]:
    """The ``runs`` row of ``run_id`` (default: the latest committed night)."""
    runs: list[dict[str, Any]] = out.committed_runs().to_pylist()
    if not runs:
        raise NightNotFound(f"no committed night in the output. Got {out.url!r}.")
    if run_id is None:
        return max(runs, key=lambda r: (r["finished_at"], r["run_id"]))
    for row in runs:
        if row["run_id"] == run_id:
            return row
    raise NightNotFound(f"no committed night {run_id!r} in the output {out.url!r}. Got {run_id!r}.")


def _stamped(batch: pa.RecordBatch, table: str, night: str, model_ids: Mapping[str, str] | None) -> pa.RecordBatch:
    """A non-empty batch as the picture has it: ``run_id`` the night, ``model_id`` the night's."""
    data = conform(pa.Table.from_batches([batch]), table)
    n = data.num_rows
    data = data.set_column(data.schema.get_field_index(PARTITION_COLUMN), PARTITION_COLUMN, pa.array([night] * n))
    if model_ids is not None:
        pairs = zip(data["url"].to_pylist(), data["model_id"].to_pylist(), strict=True)
        ids = pa.array([model_ids.get(u, m) for u, m in pairs], pa.string())
        data = data.set_column(data.schema.get_field_index("model_id"), "model_id", ids)
    return data.cast(SCHEMAS[table]).combine_chunks().to_batches()[0]


def _scan(out: Output, table: str, run_ids: Sequence[str], where: ds.Expression | None) -> Iterator[pa.RecordBatch]:
    dataset = out.delta.dataset(table, list(run_ids))
    yield from scan_batches(dataset, filter=where, batch_rows=BATCH_ROWS)


def picture(out: Output, table: str, run_id: str | None = None) -> Iterator[pa.RecordBatch]:
    """The rows of ``table`` as of night ``run_id`` (default: the latest), as record batches."""
    if table not in TABLE_NAMES:
        raise KeyError(f"no table named {table!r}; the tables are {', '.join(TABLE_NAMES)}. Got {table!r}.")
    night = str(night_row(out, run_id)["run_id"])
    if table in ("runs", "files", "models", "mirror"):
        where = ds.field(PARTITION_COLUMN) == night if table == "runs" else None
        for batch in _scan(out, table, [night], where):
            if batch.num_rows:
                yield _stamped(batch, table, night, None)
        return
    if table == "compare":  # written by the night that judged the quantized file's model, as model problems
        yield from _of_models(out, table, night, None)
        return
    files = out.read("files", [night], columns=["url", "model_id", "source_run_id"])
    model_ids = dict(zip(files["url"].to_pylist(), files["model_id"].to_pylist(), strict=True))
    scope = ds.field("scope") == "file" if table == "problems" else None
    for source, urls in source_pairs(files).items():
        where = ds.field("url").isin(pa.array(urls, pa.string()))
        for batch in _scan(out, table, [source], where if scope is None else where & scope):
            if batch.num_rows:
                yield _stamped(batch, table, night, model_ids)
    if table != "problems":
        return
    yield from _of_models(out, "problems", night, ds.field("scope") == "model")


def _of_models(out: Output, table: str, night: str, scope: ds.Expression | None) -> Iterator[pa.RecordBatch]:
    """Rows whose ``(model_id, run_id)`` is a ``(model_id, source_run_id)`` of the night's models rows."""
    models = out.read("models", [night], columns=["model_id", "source_run_id"])
    sources = pc.fill_null(models["source_run_id"], night).to_pylist()
    by_source: dict[str, list[str]] = {}
    for model_id, source in zip(models["model_id"].to_pylist(), sources, strict=True):
        by_source.setdefault(str(source), []).append(str(model_id))
    for source, ids in by_source.items():
        where = ds.field("model_id").isin(pa.array(ids, pa.string()))
        for batch in _scan(out, table, [source], where if scope is None else scope & where):
            if batch.num_rows:
                yield _stamped(batch, table, night, None)


def picture_table(out: Output, table: str, run_id: str | None = None) -> pa.Table:
    """:func:`picture` as one table (small outputs and tests)."""
    return pa.Table.from_batches(list(picture(out, table, run_id)), schema=SCHEMAS[table])
