"""Nights written row by row (no scan): exact, carried rows included, for tests of how nights are read."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from gguf_audit.pipelines.store.output import Output
from gguf_audit.pipelines.store.parts import PartFile, RunParts
from gguf_audit.tables.schema import SCHEMAS, rows_to_table


def part(out: Output, run_id: str, table: str, rows: list[dict[str, Any]]) -> PartFile:
    """One data file of ``rows`` in ``table``'s partition of ``run_id``."""
    parts = RunParts(out.url, out.fsspec_options, run_id, "t", (table,))
    parts.write(table, rows_to_table(table, rows))
    [written] = parts.close()
    return written


def commit_night(out: Output, run_id: str, tables: dict[str, list[dict[str, Any]]], **runs: Any) -> None:
    """Commit night ``run_id`` with ``tables``' rows (``runs`` columns added to its runs row)."""
    now = datetime.now(UTC)
    row = {
        "schema_version": 1, "tool_version": "t", "status": "committed", "started_at": now, "finished_at": now,
        "incremental": True, **{k: 0 for k in SCHEMAS["runs"].names if k.startswith("n_")},
        "requests": 0, "bytes_read": 0, "collection_bytes": 0, "listing_seconds": 0.0, "seconds": 0.0,
        "files_per_second": 0.0, **runs,
    }  # fmt: skip
    parts = {t: [part(out, run_id, t, rows)] for t, rows in tables.items() if rows}
    out.commit(run_id, parts, lambda versions: part(out, run_id, "runs", [row]))


def model_row(name: str, source: str | None, **extra: Any) -> dict[str, Any]:
    """A ``models`` row of the single-file model ``m-<name>`` judged by ``source``."""
    return {
        "model_id": f"m-{name}", "sharded": False, "shard_count": 1, "n_files": 1, "complete": True,
        "status": "warning", "n_problems": 0, "urls": [name], "source_run_id": source, **extra,
    }  # fmt: skip
