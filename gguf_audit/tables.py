"""File audits as rows of the audit tables (:mod:`gguf_audit.schema`).

Pure: values in, Arrow tables out. No I/O and no dask; the pipeline decides
what to read and where the tables go.

Metadata values are untrusted and can be huge (a 256k-token vocabulary, a
template of megabytes): the ``metadata`` table stores each value as JSON cut
to :data:`MAX_ARRAY_ITEMS` items and :data:`MAX_VALUE_CHARS` characters, with
its full ``length``, a ``truncated`` flag and a SHA-256 of the whole value, so
"which models share this tokenizer or chat template" is a query over digests.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Final

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from gguf_audit.audit import FileAudit, Status
from gguf_audit.checks.shards import (
    AGREEING_KEYS,
    SPLIT_COUNT,
    SPLIT_NO,
    SPLIT_TENSORS_COUNT,
    ShardFacts,
    ShardSetVerdict,
    canonical_value,
)
from gguf_audit.findings import CODES, Finding, Severity
from gguf_audit.format.model import KV, Header, StringArray, Value, ValueType, json_scalar
from gguf_audit.format.shard_names import parse_shard_name
from gguf_audit.schema import stored_schema

__all__ = [
    "MAX_ARRAY_ITEMS",
    "MAX_VALUE_CHARS",
    "MODEL_INPUT_COLUMNS",
    "AuditTables",
    "AuditedFile",
    "ListedFile",
    "ModelSummary",
    "audits_to_tables",
    "empty_table",
    "files_to_table",
    "metadata_to_table",
    "model_problems_to_table",
    "models_to_table",
    "problems_to_table",
    "reuse_rows",
    "rows_to_table",
    "samples_to_table",
    "shard_facts_from_tables",
    "summarise_model",
    "tensors_to_table",
]

MAX_ARRAY_ITEMS: Final = 32
"""Array items kept in ``metadata.value``; ``length`` has the real count."""
MAX_VALUE_CHARS: Final = 65536
"""Characters of a string value kept (most chat templates fit whole)."""
MAX_ITEM_CHARS: Final = 1024
"""Characters kept of each string inside a truncated array."""

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1
_STATUS_RANK: Final = {Status.OK: 0, Status.WARNING: 1, Status.ERROR: 2, Status.UNREADABLE: 3}


@dataclass(frozen=True, slots=True)
class ListedFile:
    """One file as the listing (or a manifest) described it, before anything is read."""

    url: str
    size: int | None = None
    etag: str | None = None
    version_id: str | None = None
    mtime: datetime | None = None
    sha256: str | None = None

    def unchanged_since(self, previous: ListedFile) -> bool:
        """Whether the listing shows the same bytes as ``previous`` (same URL, an earlier run).

        The size must match and so must the strongest identity both listings
        have: the LFS sha256, then a version id, then an ETag, then the
        modification time. With none in common the file counts as changed.
        """
        if self.size is None or self.size != previous.size:
            return False
        for mine, theirs in (
            (self.sha256, previous.sha256),
            (self.version_id, previous.version_id),
            (self.etag, previous.etag),
        ):
            if mine is not None and theirs is not None:
                return mine == theirs
        if self.mtime is not None and previous.mtime is not None:
            return self.mtime == previous.mtime
        return False


@dataclass(frozen=True, slots=True)
class AuditedFile:
    """A file's audit with the listing facts and model it belongs to."""

    audit: FileAudit
    listed: ListedFile
    model_id: str


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


def empty_table(table: str) -> pa.Table:
    """A table with no rows and the stored schema of ``table``."""
    return stored_schema(table).empty_table()


def rows_to_table(table: str, rows: Sequence[Mapping[str, Any]]) -> pa.Table:
    """Row dicts as ``table``'s stored schema (missing keys are nulls)."""
    return pa.Table.from_pylist(list(rows), schema=stored_schema(table))


# --------------------------------------------------------------------- values


def _i64(value: object) -> int | None:
    """An int for an int64 column, or None when it is not one or does not fit."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        return None
    n = int(value)
    return n if _INT64_MIN <= n <= _INT64_MAX else None


def _text(value: str) -> str:
    """``value`` as text Arrow accepts (lone surrogates escaped)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def _scalar_json(value: Any) -> Any:
    value = json_scalar(value)
    return _text(value) if isinstance(value, str) else value


def _head_json(value: Value, items: int, chars: int) -> tuple[Any, bool]:
    """The first ``items`` items of an array value as JSON data, and whether that is all of it."""
    if isinstance(value, StringArray):
        n = len(value)
        whole = value[: min(n, items)]
        return [_text(s[:chars]) for s in whole], n > items or any(len(s) > chars for s in whole)
    if isinstance(value, np.ndarray):
        n = int(value.shape[0]) if value.ndim else 1
        return [_scalar_json(v) for v in value[:items].tolist()], n > items
    if isinstance(value, list):
        out = []
        cut = len(value) > items
        for item in value[:items]:
            sub, sub_cut = _head_json(item, items, chars)
            out.append(sub)
            cut = cut or sub_cut
        return out, cut
    return _scalar_json(value), False


def _digest(value: Value) -> str | None:
    """SHA-256 of a string or array value's bytes, None for other scalars.

    Strings hash their UTF-8; numeric arrays their little-endian items; string
    arrays each item's u64 length and bytes (so item boundaries count).
    """
    h = hashlib.sha256()
    if isinstance(value, str):
        h.update(value.encode("utf-8", "surrogatepass"))
    elif isinstance(value, StringArray):
        lengths = value.lengths()
        h.update(np.asarray(lengths, dtype="<u8").tobytes())
        for i in range(len(value)):
            h.update(value.raw(i))
    elif isinstance(value, np.ndarray):
        h.update(np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<")).tobytes())
    elif isinstance(value, list):
        for item in value:
            inner = _digest(item)
            h.update((inner or "").encode())
    else:
        return None
    return h.hexdigest()


@dataclass(frozen=True, slots=True)
class _ValueCells:
    value: str | None
    value_text: str | None
    length: int | None
    truncated: bool
    sha256: str | None


def _value_cells(kv: KV) -> _ValueCells:
    value = kv.value
    if kv.type is ValueType.ARRAY:
        head, cut = _head_json(value, MAX_ARRAY_ITEMS, MAX_ITEM_CHARS)
        return _ValueCells(json.dumps(head, ensure_ascii=False, allow_nan=False), None, kv.length, cut, _digest(value))
    if isinstance(value, str):
        cut = len(value) > MAX_VALUE_CHARS
        text = _text(value[:MAX_VALUE_CHARS])
        return _ValueCells(json.dumps(text, ensure_ascii=False), text, len(value), cut, _digest(value))
    scalar = _scalar_json(value)
    shown = json.dumps(scalar, ensure_ascii=False, allow_nan=False)
    text = ("true" if scalar else "false") if isinstance(scalar, bool) else str(scalar)
    return _ValueCells(shown, text, None, False, None)


# ----------------------------------------------------------------- per file


def _str_value(header: Header, key: str) -> str | None:
    value = header.get_str(key)
    return None if value is None else _text(value)


def _int_value(header: Header, key: str) -> int | None:
    return _i64(header.get_int(key))


def _file_type_name(file_type: int | None) -> str | None:
    if file_type is None:
        return None
    try:
        from gguf.constants import LlamaFileType

        name = LlamaFileType(file_type).name
    except (ImportError, ValueError):
        return None
    return name.removeprefix("MOSTLY_").removeprefix("ALL_")


def _vocab_size(header: Header, arch: str | None) -> int | None:
    tokens = header.metadata.get("tokenizer.ggml.tokens")
    if tokens is not None and tokens.type is ValueType.ARRAY:
        return tokens.length
    return _int_value(header, f"{arch}.vocab_size") if arch else None


def _template_digest(header: Header) -> str | None:
    value = header.get("tokenizer.chat_template")
    return _digest(value) if isinstance(value, str) else None


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
    severities = Counter(f.severity for f in audit.findings)
    row: dict[str, Any] = {
        "url": audit.url,
        "model_id": item.model_id,
        "shard_index": shard.shard_index if shard else None,
        "shard_count": shard.shard_count if shard else None,
        "size": _i64(audit.size if audit.size is not None else listed.size),
        "etag": listed.etag if listed.etag is not None else audit.etag,
        "version_id": listed.version_id,
        "mtime": listed.mtime,
        "sha256": listed.sha256,
        "status": str(audit.status),
        "loadable": audit.loadable,
        "n_problems": len(audit.findings),
        "n_errors": severities[Severity.ERROR],
        "n_warnings": severities[Severity.WARNING],
        "codes": sorted({f.code for f in audit.findings}),
        "fingerprint": audit.fingerprint,
        "bytes_read": audit.io.bytes_read,
        "requests": audit.io.requests,
        "io_seconds": audit.io.seconds,
        "seconds": audit.seconds,
        "source_run_id": run_id,
        "reused": False,
    }
    if h is not None:
        arch = _str_value(h, "general.architecture")
        file_type = _int_value(h, "general.file_type")
        row.update(
            version=_i64(h.version),
            byte_order=h.byte_order,
            alignment=_i64(h.alignment),
            n_tensors=_i64(h.n_tensors),
            n_kv=_i64(h.n_kv),
            header_bytes=_i64(h.header_bytes),
            data_offset=_i64(h.data_offset),
            min_file_size=_i64(h.min_file_size),
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
    return row


def files_to_table(items: Sequence[AuditedFile], *, run_id: str) -> pa.Table:
    """One ``files`` row per audited file; ``run_id`` is the run that read them."""
    return rows_to_table("files", [_file_row(item, run_id) for item in items])


def _problem_row(f: Finding, *, url: str | None, model_id: str, scope: str, run_id: str) -> dict[str, Any]:
    info = CODES.get(f.code)
    return {
        "url": url,
        "model_id": model_id,
        "scope": scope,
        "code": f.code,
        "severity": str(f.severity),
        "refused": info.refused if info is not None else None,
        "message": _text(f.message),
        "tensor": _text(f.tensor) if f.tensor is not None else None,
        "offset": _i64(f.offset),
        "source_run_id": run_id,
    }


def problems_to_table(items: Sequence[AuditedFile], *, run_id: str) -> pa.Table:
    """One ``problems`` row per finding of each file (scope ``file``)."""
    rows = [
        _problem_row(f, url=item.audit.url, model_id=item.model_id, scope="file", run_id=run_id)
        for item in items
        for f in item.audit.findings
    ]
    return rows_to_table("problems", rows)


def _fits(*values: int) -> bool:
    return all(_INT64_MIN <= v <= _INT64_MAX for v in values)


def tensors_to_table(items: Sequence[AuditedFile], *, run_id: str) -> pa.Table:
    """One ``tensors`` row per tensor info of each decoded header."""
    cols: dict[str, list[Any]] = {name: [] for name in stored_schema("tensors").names}
    for item in items:
        h = item.audit.header
        if h is None:
            continue
        url, model_id = item.audit.url, item.model_id
        for index, t in enumerate(h.tensors):
            cols["url"].append(url)
            cols["model_id"].append(model_id)
            cols["index"].append(index)
            cols["name"].append(_text(t.name))
            cols["type"].append(t.type_name)
            if _fits(t.type_id, t.offset, t.data_offset, t.n_bytes, t.n_elements, *t.shape):
                # the common case, without a check per cell (this is the widest table)
                cols["type_id"].append(t.type_id)
                cols["shape"].append(list(t.shape))
                cols["offset"].append(t.offset)
                cols["data_offset"].append(t.data_offset)
                cols["n_bytes"].append(t.n_bytes)
                cols["n_elements"].append(t.n_elements)
            else:
                cols["type_id"].append(_i64(t.type_id) or 0)
                cols["shape"].append([_i64(d) for d in t.shape])
                cols["offset"].append(_i64(t.offset))
                cols["data_offset"].append(_i64(t.data_offset))
                cols["n_bytes"].append(_i64(t.n_bytes))
                cols["n_elements"].append(_i64(t.n_elements))
            cols["n_dims"].append(len(t.shape))
            cols["source_run_id"].append(run_id)
    return pa.Table.from_pydict(cols, schema=stored_schema("tensors"))


def metadata_to_table(items: Sequence[AuditedFile], *, run_id: str) -> pa.Table:
    """One ``metadata`` row per key-value record of each decoded header (duplicates included)."""
    cols: dict[str, list[Any]] = {name: [] for name in stored_schema("metadata").names}
    for item in items:
        h = item.audit.header
        if h is None:
            continue
        for kv in h.kvs:
            cells = _value_cells(kv)
            cols["url"].append(item.audit.url)
            cols["model_id"].append(item.model_id)
            cols["key"].append(_text(kv.key))
            cols["type"].append(kv.type_name)
            cols["length"].append(cells.length)
            cols["value"].append(cells.value)
            cols["value_text"].append(cells.value_text)
            cols["truncated"].append(cells.truncated)
            cols["value_sha256"].append(cells.sha256)
            cols["offset"].append(_i64(kv.offset))
            cols["source_run_id"].append(run_id)
    return pa.Table.from_pydict(cols, schema=stored_schema("metadata"))


def samples_to_table(items: Sequence[AuditedFile], *, run_id: str) -> pa.Table:
    """One ``samples`` row per sampled block (audits made with sampling on)."""
    rows = [
        {**row.as_dict(), "url": item.audit.url, "model_id": item.model_id, "source_run_id": run_id}
        for item in items
        for row in item.audit.samples
    ]
    for row in rows:
        row["tensor"] = _text(row["tensor"])
    return rows_to_table("samples", rows)


def audits_to_tables(items: Sequence[AuditedFile], *, run_id: str) -> AuditTables:
    """The five per-file tables of ``items``."""
    return AuditTables(
        files=files_to_table(items, run_id=run_id),
        problems=problems_to_table(items, run_id=run_id),
        tensors=tensors_to_table(items, run_id=run_id),
        metadata=metadata_to_table(items, run_id=run_id),
        samples=samples_to_table(items, run_id=run_id),
    )


# ------------------------------------------------------------------ reuse


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


def shard_facts_from_tables(files: pa.Table, metadata: pa.Table, tensors: pa.Table) -> list[ShardFacts]:
    """The :class:`ShardFacts` of the shard files in stored ``files`` rows.

    ``metadata`` and ``tensors`` are those files' stored rows; only the split
    keys, :data:`AGREEING_KEYS` and tensor names are used.
    """
    wanted = {SPLIT_NO, *AGREEING_KEYS}
    declared: dict[str, list[tuple[str, str]]] = {}
    split_no_type: dict[str, str] = {}
    if metadata.num_rows:
        keep = metadata.filter(pc.is_in(metadata.column("key"), value_set=pa.array(sorted(wanted))))
        for row in keep.select(["url", "key", "type", "value"]).to_pylist():
            if row["key"] == SPLIT_NO:
                split_no_type.setdefault(row["url"], row["type"])
                continue
            try:
                text = canonical_value(json.loads(row["value"])) if row["value"] is not None else None
            except json.JSONDecodeError:
                text = None
            if text is not None:
                declared.setdefault(row["url"], []).append((row["key"], text))
    names: dict[str, list[str]] = {}
    if tensors.num_rows:
        ordered = tensors.select(["url", "index", "name"]).sort_by([("url", "ascending"), ("index", "ascending")])
        for url, name in zip(ordered.column("url").to_pylist(), ordered.column("name").to_pylist(), strict=True):
            names.setdefault(url, []).append(name)
    out = []
    for row in files.to_pylist():
        shard = parse_shard_name(row["url"])
        if shard is None:
            continue
        readable = row["status"] != str(Status.UNREADABLE)
        order = {k: i for i, k in enumerate(AGREEING_KEYS)}
        split_no = row["split_no"]
        if split_no is None and row["url"] in split_no_type:
            split_no = -1
        out.append(
            ShardFacts(
                url=row["url"],
                index=shard.shard_index,
                count=shard.shard_count,
                readable=readable,
                loadable=row["loadable"],
                version=row["version"],
                byte_order=row["byte_order"],
                split_no=split_no if readable else None,
                split_no_type=split_no_type.get(row["url"]),
                split_count=row["split_count"],
                split_tensors_count=row["split_tensors_count"],
                n_tensors=row["n_tensors"],
                tensor_names=tuple(names.get(row["url"], ())),
                declared=tuple(sorted(declared.get(row["url"], ()), key=lambda kv: order[kv[0]])),
            )
        )
    return out


# ------------------------------------------------------------------ models


@dataclass(frozen=True, slots=True)
class ModelSummary:
    """One ``models`` row and the model-level findings behind it."""

    row: Mapping[str, Any]
    findings: tuple[Finding, ...]


MODEL_INPUT_COLUMNS: Final = (
    "url",
    "status",
    "loadable",
    "size",
    "architecture",
    "name",
    "file_type",
    "file_type_name",
    "n_tensors",
    "codes",
    "shard_index",
)
"""The ``files`` columns :func:`summarise_model` reads."""


def summarise_model(model_id: str, files: Sequence[Mapping[str, Any]], verdict: ShardSetVerdict | None) -> ModelSummary:
    """The ``models`` row of one model from its files' rows (:data:`MODEL_INPUT_COLUMNS` of ``files``).

    ``verdict`` is the shard-set check for a sharded model, None for a single file.
    """
    members = sorted(files, key=lambda r: (r.get("shard_index") or 0, r["url"]))
    findings = verdict.findings if verdict is not None else ()
    rank = max((_STATUS_RANK[Status(r["status"])] for r in members), default=0)
    if any(f.severity is Severity.ERROR for f in findings):
        rank = max(rank, _STATUS_RANK[Status.ERROR])
    elif any(f.severity is Severity.WARNING for f in findings):
        rank = max(rank, _STATUS_RANK[Status.WARNING])
    status = next(s for s, r in _STATUS_RANK.items() if r == rank)
    loadable = verdict.loadable if verdict is not None else (members[0]["loadable"] if members else None)

    def first(column: str) -> Any:
        return next((r[column] for r in members if r.get(column) is not None), None)

    sizes = [r["size"] for r in members]
    tensors = [r["n_tensors"] for r in members]
    codes = {c for r in members for c in (r.get("codes") or ())} | {f.code for f in findings}
    row = {
        "model_id": model_id,
        "sharded": verdict is not None,
        "shard_count": verdict.count if verdict is not None else 1,
        "n_files": len(members),
        "shards_present": list(verdict.present) if verdict is not None else None,
        "shards_missing": list(verdict.missing) if verdict is not None else None,
        "complete": verdict.complete if verdict is not None else True,
        "status": str(status),
        "loadable": loadable,
        "architecture": first("architecture"),
        "name": first("name"),
        "file_type": first("file_type"),
        "file_type_name": first("file_type_name"),
        "n_tensors": sum(tensors) if all(t is not None for t in tensors) and tensors else None,
        "size": sum(sizes) if all(s is not None for s in sizes) and sizes else None,
        "n_problems": len(findings),
        "codes": sorted(codes),
        "urls": [r["url"] for r in members],
    }
    return ModelSummary(row, tuple(findings))


def models_to_table(models: Iterable[ModelSummary]) -> pa.Table:
    return rows_to_table("models", [m.row for m in models])


def model_problems_to_table(models: Iterable[ModelSummary], *, run_id: str) -> pa.Table:
    """``problems`` rows (scope ``model``, no ``url``) for the findings about whole models."""
    rows = [
        _problem_row(f, url=None, model_id=str(m.row["model_id"]), scope="model", run_id=run_id)
        for m in models
        for f in m.findings
    ]
    return rows_to_table("problems", rows)
