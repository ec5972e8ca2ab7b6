"""The Arrow schemas of every audit table, with one schema version.

A scan writes nine Delta tables under its ``--out``: ``runs``, ``files``,
``models``, ``tensors``, ``metadata``, ``problems``, ``samples``, ``compare`` and ``mirror``, each
partitioned by ``run_id`` (``<out>/<table>/run_id=<run_id>/part-*.parquet``
plus ``<out>/<table>/_delta_log/``). ``run_id`` is the partition column: it
lives in the commit's partition values, not in the Parquet files, and every
Delta reader puts it on every row. ``docs/tables.md`` says what a night is and
how to read one.

:data:`SCHEMAS` holds each table as readers see it (``run_id`` last);
:func:`stored_schema` the schema of the Parquet data files themselves. Both
carry the schema version in their metadata. ``docs/tables.md`` documents every
column; a test keeps the two in step.

Pure: pyarrow only. :func:`rows_to_table` and :func:`empty_table` build tables of these schemas.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any, Final

import pyarrow as pa

__all__ = [
    "PARTITION_COLUMN",
    "SCHEMAS",
    "SCHEMA_VERSION",
    "TABLE_NAMES",
    "empty_table",
    "rows_to_table",
    "schema_version_of",
    "stored_schema",
]

SCHEMA_VERSION: Final = 1
"""Raised whenever a column is removed, renamed or changes type. Adding a nullable
column at the end does not raise it (the next commit adds it to the Delta table and
earlier files read it as null). An incremental run only reuses rows from a run with
the same version."""

PARTITION_COLUMN: Final = "run_id"

_VERSION_KEY: Final = b"gguf_audit.schema_version"
_TABLE_KEY: Final = b"gguf_audit.table"

_TS: Final = pa.timestamp("us", tz="UTC")


def _f(name: str, type_: pa.DataType, nullable: bool = True) -> pa.Field:
    return pa.field(name, type_, nullable=nullable)


_DATA_TABLES: Final = ("files", "models", "tensors", "metadata", "problems", "samples")

_RUNS: Final = [
    _f("schema_version", pa.int32(), False),
    _f("tool_version", pa.string(), False),
    _f("status", pa.string(), False),
    _f("started_at", _TS, False),
    _f("finished_at", _TS, False),
    _f("roots", pa.list_(pa.string())),
    _f("manifests", pa.list_(pa.string())),
    _f("include", pa.list_(pa.string())),
    _f("exclude", pa.list_(pa.string())),
    _f("incremental", pa.bool_(), False),
    _f("base_run_id", pa.string()),
    _f("scheduler", pa.string()),
    _f("n_workers", pa.int32()),
    _f("n_files", pa.int64(), False),
    _f("n_read", pa.int64(), False),
    _f("n_reused", pa.int64(), False),
    _f("n_models", pa.int64(), False),
    _f("n_incomplete_models", pa.int64(), False),
    _f("n_ok", pa.int64(), False),
    _f("n_warning", pa.int64(), False),
    _f("n_error", pa.int64(), False),
    _f("n_unreadable", pa.int64(), False),
    _f("n_problems", pa.int64(), False),
    _f("requests", pa.int64(), False),
    _f("bytes_read", pa.int64(), False),
    _f("collection_bytes", pa.int64(), False),
    _f("listing_seconds", pa.float64(), False),
    _f("seconds", pa.float64(), False),
    _f("files_per_second", pa.float64(), False),
    _f("config", pa.string()),
    _f("verdicts_version", pa.int32()),
    _f("table_versions", pa.struct([_f(t, pa.int64()) for t in _DATA_TABLES])),
    _f("rows_written", pa.struct([_f(t, pa.int64()) for t in _DATA_TABLES])),
]

_FILES: Final = [
    _f("url", pa.string(), False),
    _f("model_id", pa.string(), False),
    _f("shard_index", pa.int32()),
    _f("shard_count", pa.int32()),
    # what the listing said
    _f("size", pa.int64()),
    _f("etag", pa.string()),
    _f("version_id", pa.string()),
    _f("mtime", _TS),
    _f("sha256", pa.string()),
    # the verdict
    _f("status", pa.string(), False),
    _f("loadable", pa.bool_()),
    _f("n_problems", pa.int32(), False),
    _f("n_errors", pa.int32(), False),
    _f("n_warnings", pa.int32(), False),
    _f("codes", pa.list_(pa.string())),
    # the header
    _f("version", pa.int64()),
    _f("byte_order", pa.string()),
    _f("alignment", pa.int64()),
    _f("n_tensors", pa.int64()),
    _f("n_kv", pa.int64()),
    _f("header_bytes", pa.int64()),
    _f("data_offset", pa.int64()),
    _f("min_file_size", pa.int64()),
    # what the metadata declares (the questions people ask of a collection)
    _f("architecture", pa.string()),
    _f("name", pa.string()),
    _f("basename", pa.string()),
    _f("size_label", pa.string()),
    _f("file_type", pa.int64()),
    _f("file_type_name", pa.string()),
    _f("quantization_version", pa.int64()),
    _f("context_length", pa.int64()),
    _f("vocab_size", pa.int64()),
    _f("chat_template_sha256", pa.string()),
    _f("chat_template_end", pa.string()),
    _f("split_no", pa.int64()),
    _f("split_count", pa.int64()),
    _f("split_tensors_count", pa.int64()),
    _f("fingerprint", pa.string()),
    # what reading it cost
    _f("bytes_read", pa.int64(), False),
    _f("requests", pa.int64(), False),
    _f("io_seconds", pa.float64(), False),
    _f("seconds", pa.float64(), False),
    # where the row came from
    _f("source_run_id", pa.string(), False),
    _f("reused", pa.bool_(), False),
    # what sampling looked at (null without sampling)
    _f("sampled_tensors", pa.int32()),
    _f("sampled_strata", pa.int32()),
    # the upstream config compared with (null when off or none found)
    _f("upstream_url", pa.string()),
    # added later (null in earlier runs): the pinned revision and rate-limit waits
    _f("revision", pa.string()),
    _f("rate_limited", pa.int32()),
    _f("rate_limit_wait_s", pa.float64()),
]

_VERDICT: Final = [
    # added after the lineage columns, at the end (null in earlier nights): what llama.cpp LLAMA_CPP_BUILD does
    _f("llama_cpp", pa.string()),
]

_FILES_PROVENANCE: Final = [
    # after the verdict, at the end: the rest of what the file says of its making (gguf_audit.checks.provenance)
    _f("made_with_imatrix", pa.bool_()),
    _f("quantize_keys", pa.list_(pa.string())),
]

_FILES_LINEAGE: Final = [
    # lineage (gguf_audit.checks.lineage) and provenance, from the header
    _f("tensor_set_digest", pa.string()),
    _f("full_precision", pa.bool_()),
    _f("quantized_by", pa.string()),
    _f("imatrix_file", pa.string()),
    _f("imatrix_dataset", pa.string()),
    _f("imatrix_entries_count", pa.int64()),
    _f("imatrix_chunks_count", pa.int64()),
    _f("source_url", pa.string()),
    _f("source_repo_url", pa.string()),
    _f("source_hf_repository", pa.string()),
    _f("base_model_count", pa.int64()),
    _f("base_model_name", pa.string()),
    _f("base_model_organization", pa.string()),
    _f("base_model_repo_url", pa.string()),
    # pairing a projector (mmproj) with its language model (gguf_audit.checks.mmproj_pairing)
    _f("projector_type", pa.string()),
    _f("projection_dim", pa.int64()),
    _f("embedding_length", pa.int64()),
    # what the night's compare phase spent on the file (as a quantized file or as its family's reference)
    _f("compare_requests", pa.int64()),
    _f("compare_bytes", pa.int64()),
    # then the Hub's two kinds of requests (issue 19): null for other stores and for reused rows
    _f("resolve_requests", pa.int64()),
    _f("cdn_requests", pa.int64()),
    # same weights, different metadata (gguf_audit.decode.fingerprints): null in earlier runs
    _f("weights_fingerprint", pa.string()),
    _f("metadata_fingerprint", pa.string()),
    _f("metadata_parts", pa.list_(pa.string())),
]

_MODELS_LINEAGE: Final = [
    # the model's family (gguf_audit.checks.lineage), judged by the driver
    _f("family_key", pa.string()),
    _f("full_precision", pa.bool_()),
    _f("family_anchor", pa.string()),
    _f("family_source", pa.string()),
    _f("reference_url", pa.string()),
]

_RUNS_LINEAGE: Final = [
    _f("compare_version", pa.int64()),
    _f("compare_rows", pa.int64()),
    # added after the compare columns, at the end: earlier nights read it as null
    _f("listing_requests", pa.int64()),
    _f("llama_cpp_build", pa.string()),
    # then what the listing skipped (broken links, loops, aliases of listed files): counted, and named up to a limit
    _f("n_skipped", pa.int64()),
    _f("skipped", pa.list_(pa.string())),
    # then the mirror table's version and rows (nights with no mirror check: 0 rows)
    _f("mirror_version", pa.int64()),
    _f("mirror_rows", pa.int64()),
    # then the seconds the listing waited out the Hub's rate limit (429 with Retry-After); earlier nights null
    _f("listing_wait_s", pa.float64()),
]

_COMPARE: Final = [
    _f("url", pa.string(), False),
    _f("model_id", pa.string(), False),
    _f("reference_url", pa.string(), False),
    _f("family_key", pa.string()),
    _f("tensor", pa.string(), False),
    _f("type", pa.string()),
    _f("reference_type", pa.string()),
    _f("n_blocks", pa.int64()),
    _f("n_values", pa.int64()),
    _f("relative_rmse", pa.float64()),
    _f("rmse", pa.float64()),
    _f("max_abs_error", pa.float64()),
    _f("max_error_steps", pa.float64()),
    _f("rmse_steps", pa.float64()),
    _f("over_step_fraction", pa.float64()),
    _f("sign_flip_fraction", pa.float64()),
    _f("verdict", pa.string(), False),
    _f("source_run_id", pa.string(), False),
    # added at the end (nullable): earlier nights read them as null
    _f("derivation", pa.string()),
    _f("n_derived_blocks", pa.int64()),
    _f("file_derivation", pa.string()),
    # added at the end: the blocks planned for the tensor (n_blocks of them were measured); earlier nights null
    _f("n_planned_blocks", pa.int64()),
]

_MIRROR: Final = [
    _f("path", pa.string(), False),
    _f("status", pa.string(), False),
    _f("evidence", pa.string(), False),
    _f("code", pa.string()),
    _f("severity", pa.string()),
    _f("message", pa.string(), False),
    _f("mirror_url", pa.string()),
    _f("source_url", pa.string()),
    _f("mirror_size", pa.int64()),
    _f("source_size", pa.int64()),
    _f("mirror_etag", pa.string()),
    _f("mirror_version_id", pa.string()),
    _f("mirror_sha256", pa.string()),
    _f("mirror_revision", pa.string()),
    _f("source_sha256", pa.string()),
    _f("source_version_id", pa.string()),
    _f("source_revision", pa.string()),
    _f("mirror_weights_fingerprint", pa.string()),
    _f("source_weights_fingerprint", pa.string()),
    _f("requests", pa.int64(), False),
    _f("bytes_read", pa.int64(), False),
    _f("reused", pa.bool_(), False),
    _f("judged_run_id", pa.string(), False),
    # added at the end (issue 38): what keys a side's stored hash, and the samples' coverage; earlier nights null
    _f("mirror_mtime", pa.timestamp("us", tz="UTC")),
    _f("source_mtime", pa.timestamp("us", tz="UTC")),
    _f("source_etag", pa.string()),
    _f("sampled_bytes", pa.int64()),
    _f("data_bytes", pa.int64()),
]

_MODELS: Final = [
    _f("model_id", pa.string(), False),
    _f("sharded", pa.bool_(), False),
    _f("shard_count", pa.int32(), False),
    _f("n_files", pa.int32(), False),
    _f("shards_present", pa.list_(pa.int32())),
    _f("shards_missing", pa.list_(pa.int32())),
    _f("complete", pa.bool_(), False),
    _f("status", pa.string(), False),
    _f("loadable", pa.bool_()),
    _f("architecture", pa.string()),
    _f("name", pa.string()),
    _f("file_type", pa.int64()),
    _f("file_type_name", pa.string()),
    _f("n_tensors", pa.int64()),
    _f("size", pa.int64()),
    _f("n_problems", pa.int32(), False),
    _f("codes", pa.list_(pa.string())),
    _f("urls", pa.list_(pa.string())),
    _f("source_run_id", pa.string()),
]

_TENSORS: Final = [
    _f("url", pa.string(), False),
    _f("model_id", pa.string(), False),
    _f("index", pa.int64(), False),
    _f("name", pa.string(), False),
    _f("type", pa.string(), False),
    _f("type_id", pa.int64(), False),
    _f("shape", pa.list_(pa.int64())),
    _f("n_dims", pa.int32(), False),
    _f("offset", pa.int64()),
    _f("data_offset", pa.int64()),
    _f("n_bytes", pa.int64()),
    _f("n_elements", pa.int64()),
    _f("source_run_id", pa.string(), False),
]

_METADATA: Final = [
    _f("url", pa.string(), False),
    _f("model_id", pa.string(), False),
    _f("key", pa.string(), False),
    _f("type", pa.string(), False),
    _f("length", pa.int64()),
    _f("value", pa.string()),
    _f("value_text", pa.string()),
    _f("truncated", pa.bool_(), False),
    _f("value_sha256", pa.string()),
    _f("offset", pa.int64()),
    _f("source_run_id", pa.string(), False),
]

_PROBLEMS: Final = [
    _f("url", pa.string()),
    _f("model_id", pa.string(), False),
    _f("scope", pa.string(), False),
    _f("code", pa.string(), False),
    _f("severity", pa.string(), False),
    _f("refused", pa.bool_()),
    _f("message", pa.string(), False),
    _f("tensor", pa.string()),
    _f("offset", pa.int64()),
    _f("source_run_id", pa.string(), False),
]

_SAMPLES: Final = [
    _f("url", pa.string(), False),
    _f("model_id", pa.string(), False),
    _f("tensor", pa.string(), False),
    _f("block_index", pa.int64(), False),
    _f("offset", pa.int64(), False),
    _f("n_bytes", pa.int64(), False),
    _f("type", pa.string(), False),
    _f("count", pa.int64()),
    _f("min", pa.float64()),
    _f("max", pa.float64()),
    _f("mean", pa.float64()),
    _f("std", pa.float64()),
    _f("max_abs", pa.float64()),
    _f("n_nan", pa.int64()),
    _f("n_inf", pa.int64()),
    _f("zero_fraction", pa.float64()),
    _f("source_run_id", pa.string(), False),
]

_FIELDS: Final = {
    "runs": [*_RUNS, *_RUNS_LINEAGE],
    "files": [*_FILES, *_FILES_LINEAGE, *_VERDICT, *_FILES_PROVENANCE],
    "models": [*_MODELS, *_MODELS_LINEAGE, *_VERDICT],
    "tensors": _TENSORS,
    "metadata": _METADATA,
    "problems": [*_PROBLEMS, *_VERDICT],
    "samples": _SAMPLES,
    "compare": _COMPARE,
    "mirror": _MIRROR,
}

TABLE_NAMES: Final = tuple(_FIELDS)
"""In commit order: ``runs`` is written last, and its row is what makes a run committed."""


def _metadata(table: str) -> dict[bytes, bytes]:
    return {_VERSION_KEY: str(SCHEMA_VERSION).encode(), _TABLE_KEY: table.encode()}


@cache
def stored_schema(table: str) -> pa.Schema:
    """The schema of ``table``'s Parquet files: every column but the ``run_id`` partition (made once per table:
    schemas are immutable)."""
    fields = _FIELDS.get(table)
    if fields is None:
        raise KeyError(f"no table named {table!r}; the tables are {', '.join(TABLE_NAMES)}. Got {table!r}.")
    return pa.schema(fields, metadata=_metadata(table))


def empty_table(table: str) -> pa.Table:
    """A table with no rows and the stored schema of ``table``."""
    return stored_schema(table).empty_table()


def rows_to_table(table: str, rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """Row dicts as ``table``'s stored schema (missing keys are nulls, keys of no column ignored)."""
    schema = stored_schema(table)
    # One conversion of the rows as structs: for the wide tables (files, ~80 columns) a fraction of
    # from_pylist's cost, which converts column by column.
    rows_array = pa.array(list(rows), type=_row_type(table))
    return pa.Table.from_batches([pa.RecordBatch.from_struct_array(rows_array)], schema=schema)


@cache
def _row_type(table: str) -> pa.StructType:
    return pa.struct(list(stored_schema(table)))


SCHEMAS: Final = {
    name: pa.schema([*fields, _f(PARTITION_COLUMN, pa.string(), False)], metadata=_metadata(name))
    for name, fields in _FIELDS.items()
}
"""Each table as a Delta reader sees it: the stored columns, then ``run_id``."""


def schema_version_of(schema: pa.Schema) -> int | None:
    """The schema version a Parquet file's schema records, or None when it records none."""
    raw = (schema.metadata or {}).get(_VERSION_KEY)
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None
