"""The ``models`` table: one row per model (a file, or a set of shards), from its files' rows.

Pure: rows in, rows out. A sharded model's row takes the shard-set verdict of
:mod:`gguf_audit.checks.shards`; its findings become ``problems`` rows of
scope ``model``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa

from gguf_audit.audit import Status
from gguf_audit.checks.shards import ShardSetVerdict
from gguf_audit.codes import VERDICT_RANK
from gguf_audit.findings import Finding, LlamaCpp, Severity, llama_cpp_of_codes
from gguf_audit.tables.per_file import problem_row
from gguf_audit.tables.schema import rows_to_table

__all__ = ["MODEL_INPUT_COLUMNS", "ModelSummary", "model_problems_to_table", "models_to_table", "summarise_model"]

_STATUS_RANK: Final = {Status.OK: 0, Status.WARNING: 1, Status.ERROR: 2, Status.UNREADABLE: 3}


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
    llama_cpp = model_llama_cpp(members, findings, loadable)

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
        "llama_cpp": None if llama_cpp is None else str(llama_cpp),
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


def model_llama_cpp(
    members: Sequence[Mapping[str, Any]], findings: Sequence[Finding], loadable: bool | None
) -> LlamaCpp | None:
    """A model's llama.cpp verdict: the worst of its files' (each from its ``codes`` and ``loadable``, as
    stored, so a row carried from an earlier night counts) and of the set's own findings; a model that is
    not loadable (a missing shard) is at least ``refuses``."""
    verdicts = [llama_cpp_of_codes(r.get("codes") or (), r.get("loadable")) for r in members]
    verdicts.append(llama_cpp_of_codes((f.code for f in findings), True if members else None))
    known = [v for v in verdicts if v is not None]
    worst = max(known, key=VERDICT_RANK.__getitem__, default=None)
    if worst is LlamaCpp.LOADS and len(known) < len(verdicts):
        worst = None
    if loadable is False and worst in (None, LlamaCpp.LOADS):
        return LlamaCpp.REFUSES
    return worst


def models_to_table(models: Iterable[ModelSummary], *, run_id: str) -> pa.Table:
    """``models`` rows judged by ``run_id`` (their ``source_run_id``)."""
    return rows_to_table("models", [{**m.row, "source_run_id": run_id} for m in models])


def model_problems_to_table(models: Iterable[ModelSummary], *, run_id: str) -> pa.Table:
    """``problems`` rows (scope ``model``, no ``url``) for the findings about whole models."""
    rows = [
        problem_row(f, url=None, model_id=str(m.row["model_id"]), scope="model", run_id=run_id)
        for m in models
        for f in m.findings
    ]
    return rows_to_table("problems", rows)
