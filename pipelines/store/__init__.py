"""The output: data files, Delta tables, the commit protocol and its lease, retention, DuckDB."""

from __future__ import annotations

from gguf_audit.pipelines.store.delta import conform, scan_batches, scan_table, table_uri
from gguf_audit.pipelines.store.duck import connect, extension_path
from gguf_audit.pipelines.store.lease import LEASE_DIR, LeaseError
from gguf_audit.pipelines.store.output import COMMIT_ORDER, Output, OutputError, Recovered, new_run_id, source_pairs
from gguf_audit.pipelines.store.parts import PartFile, RunParts, is_local_fs
from gguf_audit.pipelines.store.retention import DEFAULT_MIN_AGE_HOURS, Retention, vacuum_nights

__all__ = [
    "COMMIT_ORDER",
    "DEFAULT_MIN_AGE_HOURS",
    "LEASE_DIR",
    "LeaseError",
    "Output",
    "OutputError",
    "PartFile",
    "Recovered",
    "Retention",
    "RunParts",
    "conform",
    "connect",
    "extension_path",
    "is_local_fs",
    "new_run_id",
    "scan_batches",
    "scan_table",
    "source_pairs",
    "table_uri",
    "vacuum_nights",
]
