"""File audits as the five per-file audit tables: ``files``, ``problems``, ``tensors``, ``metadata``, ``samples``.

Pure: values in, Arrow tables out (schemas in :mod:`gguf_audit.tables.schema`,
cells in :mod:`gguf_audit.tables.cells`). No I/O and no dask; the pipeline
decides what to read and where the tables go.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from operator import itemgetter
from typing import Any

import pyarrow as pa

from gguf_audit.audit import FileAudit
from gguf_audit.bounded import clip
from gguf_audit.checks.shards import SPLIT_COUNT, SPLIT_NO, SPLIT_TENSORS_COUNT, member_findings, member_verdict
from gguf_audit.decode.fingerprints import metadata_fingerprint, metadata_parts
from gguf_audit.decode.stats import SampleRow
from gguf_audit.findings import CODES, Finding, Severity
from gguf_audit.format.model import Header, TensorInfo, ValueType
from gguf_audit.format.shard_names import parse_shard_name
from gguf_audit.gguf_constants import LlamaFileType
from gguf_audit.redact import redact_text, redact_value
from gguf_audit.tables.cells import arrow_text, digest, fits_int64, i64, value_cells
from gguf_audit.tables.listed import ListedFile
from gguf_audit.tables.provenance import lineage_cells
from gguf_audit.tables.schema import rows_to_table, stored_schema

__all__ = [
    "AuditTables",
    "AuditedFile",
    "audits_to_tables",
    "files_to_table",
    "metadata_to_table",
    "problem_row",
    "problems_to_table",
    "samples_to_table",
    "tensors_to_table",
]


@dataclass(frozen=True, slots=True)
class AuditedFile:
    """A file's audit with the listing facts and model it belongs to."""

    audit: FileAudit
    listed: ListedFile
    model_id: str

    @property
    def findings(self) -> list[Finding]:
        """The audit's findings as the rows hold them: a shard's as a member of its set (a later shard
        is refused only given alone: :func:`~gguf_audit.checks.shards.member_findings`)."""
        return member_findings(self.audit.url, self.audit.findings)


@dataclass(frozen=True, slots=True)
class AuditTables:
    """The per-file tables of some audited files."""

    files: pa.Table
    problems: pa.Table
    tensors: pa.Table
    metadata: pa.Table
    samples: pa.Table

    def per_file(self) -> dict[str, pa.Table]:
        """The tables by name (each has a ``url`` column)."""
        return {
            "files": self.files,
            "problems": self.problems,
            "tensors": self.tensors,
            "metadata": self.metadata,
            "samples": self.samples,
        }


def _str_value(header: Header, key: str) -> str | None:
    value = header.get_str(key)
    return None if value is None else arrow_text(clip(value))


def _int_value(header: Header, key: str) -> int | None:
    return i64(header.get_int(key))


def _file_type_name(file_type: int | None) -> str | None:
    if file_type is None:
        return None
    try:
        name = LlamaFileType(file_type).name
    except ValueError:
        return None
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")


def _vocab_size(header: Header, arch: str | None) -> int | None:
    tokens = header.metadata.get("tokenizer.ggml.tokens")
    if tokens is not None and tokens.type is ValueType.ARRAY:
        return tokens.length
    return _int_value(header, f"{arch}.vocab_size") if arch else None


def _template_digest(header: Header) -> str | None:
    value = header.get("tokenizer.chat_template")
    return digest(value) if isinstance(value, str) else None


def _template_end(audit: FileAudit) -> str | None:
    """How the default template ends the standard conversation (its rendered tail)."""
    for template in audit.templates:
        if template.key == "tokenizer.chat_template":
            return template.rendered_tail
    return None


def _file_row(item: AuditedFile, run_id: str) -> dict[str, Any]:
    audit, listed = item.audit, item.listed
    h = audit.header
    shard = parse_shard_name(audit.url)
    findings = item.findings
    severities = Counter(f.severity for f in findings)
    loadable, llama_cpp = member_verdict(audit)
    row: dict[str, Any] = {
        "url": audit.url,
        "model_id": item.model_id,
        "shard_index": shard.shard_index if shard else None,
        "shard_count": shard.shard_count if shard else None,
        "size": i64(audit.size if audit.size is not None else listed.size),
        "etag": listed.etag if listed.etag is not None else audit.etag,
        "version_id": listed.version_id,
        "mtime": listed.mtime,
        "sha256": listed.sha256,
        "status": str(audit.status),
        "loadable": loadable,
        "llama_cpp": None if llama_cpp is None else str(llama_cpp),
        "n_problems": len(findings),
        "n_errors": severities[Severity.ERROR],
        "n_warnings": severities[Severity.WARNING],
        "codes": sorted({f.code for f in findings}),
        "fingerprint": audit.fingerprint,
        "bytes_read": audit.io.bytes_read,
        "requests": audit.io.requests,
        "io_seconds": audit.io.seconds,
        "seconds": audit.seconds,
        "source_run_id": run_id,
        "reused": False,
        "sampled_tensors": audit.sampled_tensors,
        "sampled_strata": audit.sampled_strata,
        "upstream_url": audit.upstream_url,
        "revision": listed.revision,
        "rate_limited": audit.io.rate_limited,
        "rate_limit_wait_s": audit.io.rate_limit_wait_s,
        "resolve_requests": audit.io.resolve_requests,
        "cdn_requests": audit.io.cdn_requests,
        "weights_fingerprint": audit.weights_fingerprint,
    }
    if h is not None:
        arch = _str_value(h, "general.architecture")
        file_type = _int_value(h, "general.file_type")
        row.update(
            version=i64(h.version),
            byte_order=h.byte_order,
            alignment=i64(h.alignment),
            n_tensors=i64(h.n_tensors),
            n_kv=i64(h.n_kv),
            header_bytes=i64(h.header_bytes),
            data_offset=i64(h.data_offset),
            min_file_size=i64(h.min_file_size),
            architecture=arch,
            name=_str_value(h, "general.name"),
            basename=_str_value(h, "general.basename"),
            size_label=_str_value(h, "general.size_label"),
            file_type=file_type,
            file_type_name=_file_type_name(file_type),
            quantization_version=_int_value(h, "general.quantization_version"),
            context_length=_int_value(h, f"{arch}.context_length") if arch else None,
            vocab_size=_vocab_size(h, arch),
            chat_template_sha256=_template_digest(h),
            chat_template_end=_template_end(audit),
            split_no=_int_value(h, SPLIT_NO),
            split_count=_int_value(h, SPLIT_COUNT),
            split_tensors_count=_int_value(h, SPLIT_TENSORS_COUNT),
        )
        row.update(lineage_cells(h))
        parts = metadata_parts(h)
        row.update(
            metadata_fingerprint=metadata_fingerprint(h, parts),
            metadata_parts=[f"{group}={part[:16]}" for group, part in parts.items()],
        )
    return row


def files_to_table(items: Sequence[AuditedFile], *, run_id: str) -> pa.Table:
    """One ``files`` row per audited file; ``run_id`` is the run that read them."""
    return rows_to_table("files", [_file_row(item, run_id) for item in items])


def problem_row(f: Finding, *, url: str | None, model_id: str, scope: str, run_id: str) -> dict[str, Any]:
    info = CODES.get(f.code)
    return {
        "url": url,
        "model_id": model_id,
        "scope": scope,
        "code": f.code,
        "severity": str(f.severity),
        "refused": info.refused if info is not None else None,
        "llama_cpp": str(info.llama_cpp) if info is not None and info.llama_cpp is not None else None,
        "message": arrow_text(redact_text(f.message)),
        "tensor": arrow_text(f.tensor) if f.tensor is not None else None,
        "offset": i64(f.offset),
        "source_run_id": run_id,
    }


def problems_to_table(items: Sequence[AuditedFile], *, run_id: str) -> pa.Table:
    """One ``problems`` row per finding of each file (scope ``file``)."""
    rows = [
        problem_row(f, url=item.audit.url, model_id=item.model_id, scope="file", run_id=run_id)
        for item in items
        for f in item.findings
    ]
    return rows_to_table("problems", rows)


def tensors_to_table(items: Sequence[AuditedFile], *, run_id: str) -> pa.Table:
    """One ``tensors`` row per tensor info of each decoded header."""
    cols: dict[str, list[Any]] = {name: [] for name in stored_schema("tensors").names}
    for item in items:
        h = item.audit.header
        if h is None:
            continue
        for name, column in _tensor_columns(h.tensors).items():
            cols[name].extend(column)
        n = len(h.tensors)
        cols["url"].extend([item.audit.url] * n)
        cols["model_id"].extend([item.model_id] * n)
        cols["source_run_id"].extend([run_id] * n)
    return pa.Table.from_pydict(cols, schema=stored_schema("tensors"))


def _tensor_columns(tensors: Sequence[TensorInfo]) -> dict[str, list[Any]]:
    """The ``tensors`` columns of one header's tensor infos, a column at a time (the widest table):
    a column of int64 cells is checked as a whole and made cell by cell only when a value does not fit."""
    type_names: dict[int, str] = {}
    cols: dict[str, list[Any]] = {
        "index": list(range(len(tensors))),
        "name": [arrow_text(clip(t.name)) for t in tensors],
        "type": [type_names.get(t.type_id) or type_names.setdefault(t.type_id, t.type_name) for t in tensors],
        "n_dims": [len(t.shape) for t in tensors],
    }
    for column in ("offset", "data_offset", "n_bytes", "n_elements"):
        values = [getattr(t, column) for t in tensors]
        cols[column] = values if fits_int64(*values) else [i64(v) for v in values]
    ids = [t.type_id for t in tensors]
    cols["type_id"] = ids if fits_int64(*ids) else [i64(v) or 0 for v in ids]
    shapes = [list(t.shape) for t in tensors]
    cols["shape"] = (
        shapes if fits_int64(*(d for shape in shapes for d in shape)) else [[i64(d) for d in shape] for shape in shapes]
    )
    return cols


def metadata_to_table(items: Sequence[AuditedFile], *, run_id: str) -> pa.Table:
    """One ``metadata`` row per key-value record of each decoded header (duplicates included)."""
    cols: dict[str, list[Any]] = {name: [] for name in stored_schema("metadata").names}
    for item in items:
        h = item.audit.header
        if h is None:
            continue
        for kv in h.kvs:
            cells = value_cells(kv)
            cols["url"].append(item.audit.url)
            cols["model_id"].append(item.model_id)
            cols["key"].append(arrow_text(clip(kv.key)))
            cols["type"].append(kv.type_name)
            cols["length"].append(cells.length)
            # A file's own text may carry a credential (a source URL with its token): shown redacted, as inspect
            # shows it; value_sha256 stays the raw value's.
            cols["value"].append(_shown(cells.value))
            cols["value_text"].append(_shown(cells.value_text))
            cols["truncated"].append(cells.truncated)
            cols["value_sha256"].append(cells.sha256)
            cols["offset"].append(i64(kv.offset))
            cols["source_run_id"].append(run_id)
    return pa.Table.from_pydict(cols, schema=stored_schema("metadata"))


def _shown(value: Any) -> Any:
    return redact_value(value) if isinstance(value, str) else value


def samples_to_table(items: Sequence[AuditedFile], *, run_id: str) -> pa.Table:
    """One ``samples`` row per sampled block (audits made with sampling on).

    Built column by column: a file has about 2,000 sampled blocks, and a dict
    per row cost more than the decoding that made them. The rows are tuples:
    each column is read with a C getter, no object made per row.
    """
    schema = stored_schema("samples")
    columns: dict[str, list[Any]] = {name: [] for name in schema.names}
    for item in items:
        rows = item.audit.samples
        for i, name in enumerate(SampleRow._fields):
            columns[name].extend(map(itemgetter(i), rows))
        columns["url"].extend([item.audit.url] * len(rows))
        columns["model_id"].extend([item.model_id] * len(rows))
        columns["source_run_id"].extend([run_id] * len(rows))
    columns["tensor"] = [arrow_text(t) for t in columns["tensor"]]
    return pa.Table.from_pydict(columns, schema=schema)


def audits_to_tables(items: Sequence[AuditedFile], *, run_id: str) -> AuditTables:
    """The five per-file tables of ``items``."""
    return AuditTables(
        files=files_to_table(items, run_id=run_id),
        problems=problems_to_table(items, run_id=run_id),
        tensors=tensors_to_table(items, run_id=run_id),
        metadata=metadata_to_table(items, run_id=run_id),
        samples=samples_to_table(items, run_id=run_id),
    )
