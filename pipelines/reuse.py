"""Incremental reuse: which files an incremental run reads again, and the rows it copies for the others.

``incremental`` compares the listing with the last committed run's ``files``
(size plus sha256, version id, ETag or mtime, see
:meth:`ListedFile.unchanged_since`) and re-reads only new or changed files,
and files whose last read failed (``io.*``, ``internal.*``, ``run.*``). The
other files' rows in ``files``, ``problems``, ``tensors``, ``metadata`` and
``samples`` are copied from that run, with ``source_run_id`` still naming the
run that read them and ``bytes_read`` 0, so every run is a complete picture.
Shard sets are checked again from the stored facts of unchanged shards.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gguf_audit import __version__
from gguf_audit.checks.shards import ShardFacts
from gguf_audit.format.shard_names import parse_shard_name
from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.discover import Listing
from gguf_audit.pipelines.store import Output
from gguf_audit.tables.listed import ListedFile
from gguf_audit.tables.per_file import AuditTables
from gguf_audit.tables.shard_facts import shard_facts_from_tables

__all__ = ["base_run", "plan_reuse", "reuse_rows", "reused_tables"]

_RETRY_PREFIXES: Final = ("io.", "internal.", "run.")
"""A file whose last row has one of these is read again even when unchanged."""


def plan_reuse(
    out: Output, base_run_id: str | None, listing: Listing
) -> tuple[dict[str, ListedFile], list[ListedFile]]:
    """Which listed files keep their rows from ``base_run_id``, and which are read."""
    if base_run_id is None:
        return {}, list(listing.files)
    previous = out.read_partition("files", base_run_id, [f.url for f in listing.files])
    before: dict[str, tuple[ListedFile, list[str]]] = {}
    for row in previous.select(["url", "size", "etag", "version_id", "mtime", "sha256", "codes"]).to_pylist():
        listed = ListedFile(row["url"], row["size"], row["etag"], row["version_id"], row["mtime"], row["sha256"])
        before[row["url"]] = (listed, list(row["codes"] or ()))
    reuse: dict[str, ListedFile] = {}
    read: list[ListedFile] = []
    for listed in listing.files:
        prior = before.get(listed.url)
        if (
            prior is not None
            and listed.unchanged_since(prior[0])
            and not any(c.startswith(_RETRY_PREFIXES) for c in prior[1])
        ):
            reuse[listed.url] = listed
        else:
            read.append(listed)
    return reuse, read


def base_run(out: Output, config: ScanConfig) -> tuple[str | None, str | None]:
    """The run an incremental scan reuses rows from, or None and the reason none is usable.

    Rows are reused only from a run made by the same gguf-audit version with the
    same checks: another version or other checks may judge the same bytes otherwise.
    """
    row = out.last_committed_row()
    if row is None:
        return None, "incremental: no committed run yet, every file is read"
    run_id = str(row["run_id"])
    try:
        recorded = json.loads(row["config"] or "{}")
    except json.JSONDecodeError:
        recorded = {}
    before = {k: recorded.get(k) for k in config.checks()}
    if row["tool_version"] != __version__ or before != config.checks():
        return None, (
            f"incremental: the last run {run_id} was made by gguf-audit {row['tool_version']} with checks "
            f"{before}; this one is {__version__} with {config.checks()}: every file is read"
        )
    return run_id, None


def _set_model_ids(table: pa.Table, model_ids: Mapping[str, str]) -> pa.Table:
    if table.num_rows == 0:
        return table
    ids = pa.array([model_ids[u] for u in table.column("url").to_pylist()], pa.string())
    i = table.schema.get_field_index("model_id")
    return table.set_column(i, table.schema.field(i), ids)


def reused_tables(
    out: Output, base_run_id: str, reuse: Mapping[str, ListedFile], model_ids: Mapping[str, str]
) -> tuple[AuditTables, list[ShardFacts]]:
    """The rows of the ``reuse`` files copied from ``base_run_id``, and the facts of those that are shards."""
    urls = list(reuse)
    files = _set_model_ids(reuse_rows(out.read_partition("files", base_run_id, urls), reuse), model_ids)
    problems = out.read_partition("problems", base_run_id, urls)
    problems = _set_model_ids(problems.filter(pc.equal(problems.column("scope"), "file")), model_ids)
    tensors = _set_model_ids(out.read_partition("tensors", base_run_id, urls), model_ids)
    metadata = _set_model_ids(out.read_partition("metadata", base_run_id, urls), model_ids)
    samples = _set_model_ids(out.read_partition("samples", base_run_id, urls), model_ids)
    shard_urls = [u for u in urls if parse_shard_name(u) is not None]
    facts: list[ShardFacts] = []
    if shard_urls:
        keep = pa.array(shard_urls, pa.string())

        def only(t: pa.Table) -> pa.Table:
            return t.filter(pc.is_in(t.column("url"), value_set=keep))

        facts = shard_facts_from_tables(only(files), only(metadata), only(tensors))
    return AuditTables(files, problems, tensors, metadata, samples), facts


def reuse_rows(table: pa.Table, listing: Mapping[str, ListedFile]) -> pa.Table:
    """Rows an earlier run stored, for files whose listing shows them unchanged.

    Keeps the rows whose ``url`` is in ``listing``. ``files`` rows also take
    the new listing's facts and record that reading them cost nothing in this
    run (``reused`` true, ``bytes_read``/``requests``/``seconds`` zero);
    ``source_run_id`` keeps naming the run that read the bytes.
    """
    if table.num_rows == 0:
        return table
    urls = pa.array(list(listing), pa.string())
    kept = table.filter(pc.is_in(table.column("url"), value_set=urls))
    if "reused" not in kept.schema.names or kept.num_rows == 0:
        return kept
    facts = [listing[u] for u in kept.column("url").to_pylist()]
    n = kept.num_rows
    replace: dict[str, pa.Array] = {
        "size": pa.array([f.size for f in facts], pa.int64()),
        "etag": pa.array([f.etag for f in facts], pa.string()),
        "version_id": pa.array([f.version_id for f in facts], pa.string()),
        "mtime": pa.array([f.mtime for f in facts], kept.schema.field("mtime").type),
        "sha256": pa.array([f.sha256 for f in facts], pa.string()),
        "bytes_read": pa.array(np.zeros(n, dtype=np.int64)),
        "requests": pa.array(np.zeros(n, dtype=np.int64)),
        "io_seconds": pa.array(np.zeros(n, dtype=np.float64)),
        "seconds": pa.array(np.zeros(n, dtype=np.float64)),
        "reused": pa.array(np.ones(n, dtype=bool)),
    }
    for name, column in replace.items():
        i = kept.schema.get_field_index(name)
        kept = kept.set_column(i, kept.schema.field(i), column)
    return kept
