"""Lineage as table cells: ``compare`` rows, the models' family columns, the compared files' problems.

Pure: values in, rows and Arrow tables out (:mod:`gguf_audit.checks.lineage`
says what a family is).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final

import pyarrow as pa

from gguf_audit.audit import Status
from gguf_audit.bounded import clip
from gguf_audit.checks.lineage import FamilyVerdict
from gguf_audit.compare import Comparison
from gguf_audit.findings import Finding, Severity
from gguf_audit.tables.cells import arrow_text
from gguf_audit.tables.models import ModelSummary
from gguf_audit.tables.per_file import problem_row
from gguf_audit.tables.schema import rows_to_table

__all__ = [
    "ModelLineageCells",
    "apply_lineage",
    "compare_rows",
    "model_lineage_cells",
    "pair_problems_to_table",
]

# --- compare rows -------------------------------------------------------------


def compare_rows(comparison: Comparison, *, model_id: str, family: str | None, run_id: str) -> list[dict[str, Any]]:
    """One ``compare`` row per tensor compared."""
    return [
        {
            "url": comparison.quant_url,
            "model_id": model_id,
            "reference_url": comparison.reference_url,
            "family_key": family,
            "tensor": arrow_text(clip(t.name)),
            "type": t.quant_type,
            "reference_type": t.reference_type,
            "n_blocks": t.n_blocks,
            "n_values": t.n_values,
            "relative_rmse": t.relative_rmse,
            "rmse": t.rmse,
            "max_abs_error": t.max_abs_error,
            "max_error_steps": t.max_error_steps,
            "rmse_steps": t.rmse_steps,
            "over_step_fraction": t.over_step_fraction,
            "sign_flip_fraction": t.sign_flip_fraction,
            "verdict": "layout_suspect" if t.layout_suspect else "ok",
            "source_run_id": run_id,
            "derivation": t.derivation,
            "n_derived_blocks": t.n_derived_blocks,
            "file_derivation": str(comparison.derivation),
            "n_planned_blocks": t.n_planned_blocks,
        }
        for t in comparison.tensors
    ]


def pair_problems_to_table(found: Iterable[tuple[str, str, Finding]], *, run_id: str) -> pa.Table:
    """``problems`` rows of scope ``model`` for ``(url, model_id, finding)``: a compared file's findings."""
    rows = [problem_row(f, url=url, model_id=model_id, scope="model", run_id=run_id) for url, model_id, f in found]
    return rows_to_table("problems", rows)


# --- the models' family columns ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class ModelLineageCells:
    """A model's family columns, and the lineage findings filed under it this night."""

    family_key: str | None = None
    full_precision: bool | None = None
    family_anchor: str | None = None
    family_source: str | None = None
    reference_url: str | None = None
    findings: tuple[Finding, ...] = field(default=())

    def columns(self) -> dict[str, Any]:
        return {
            "family_key": self.family_key,
            "full_precision": self.full_precision,
            "family_anchor": self.family_anchor,
            "family_source": self.family_source,
            "reference_url": self.reference_url,
        }

    def same_columns(self, row: Mapping[str, Any]) -> bool:
        """Whether a stored ``models`` row has these family columns (a carried model stays carried)."""
        return all(row.get(k) == v for k, v in self.columns().items())


def model_lineage_cells(verdicts: Iterable[FamilyVerdict]) -> dict[str, ModelLineageCells]:
    """The family columns of every model of ``verdicts``' families, by model id."""
    out: dict[str, ModelLineageCells] = {}
    for v in verdicts:
        family = v.family
        # once per family: each is a pass over its members (per member, a family of F models cost F^2)
        reference = family.reference()
        anchor = family.anchor
        # The members other than the anchor share one value per precision (frozen): one object, not one a model.
        shared: dict[bool | None, ModelLineageCells] = {}
        for m in family.models:
            cells = shared.get(m.full_precision) if m.model_id != anchor else None
            if cells is None:
                cells = ModelLineageCells(
                    family_key=family.key,
                    full_precision=m.full_precision,
                    family_anchor=anchor,
                    family_source=v.source,
                    reference_url=reference.urls[0] if reference is not None and m.full_precision is False else None,
                    findings=v.findings if m.model_id == anchor else (),
                )
                if m.model_id != anchor:
                    shared[m.full_precision] = cells
            out[m.model_id] = cells
    return out


_RANK: Final = {Status.OK: 0, Status.WARNING: 1, Status.ERROR: 2, Status.UNREADABLE: 3}


def apply_lineage(
    summary: ModelSummary, cells: ModelLineageCells | None, extra: Sequence[Finding] = ()
) -> ModelSummary:
    """``summary`` with its family columns, its lineage findings, and ``extra`` findings already written
    as problems rows (a compared file's) counted in its status, codes and ``n_problems``."""
    row = dict(summary.row)
    row.update((cells or ModelLineageCells()).columns())
    findings = (*summary.findings, *(cells.findings if cells else ()))
    counted = [*(cells.findings if cells else ()), *extra]
    if counted:
        severities = Counter(f.severity for f in counted)
        status = Status(row["status"])
        if status is not Status.UNREADABLE:
            if severities[Severity.ERROR]:
                status = max(status, Status.ERROR, key=_RANK.__getitem__)
            elif severities[Severity.WARNING]:
                status = max(status, Status.WARNING, key=_RANK.__getitem__)
        row["status"] = str(status)
        row["codes"] = sorted({*(row.get("codes") or ()), *(f.code for f in counted)})
        row["n_problems"] = int(row["n_problems"]) + len(counted)
    return replace(summary, row=row, findings=findings)
