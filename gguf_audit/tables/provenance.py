"""Provenance and lineage cells of a ``files`` row: who quantized it, from what, with which importance matrix.

The provenance itself is :func:`~gguf_audit.checks.provenance.provenance_of`'s; this module lays it out as cells.

Pure: a header in, column values out (:mod:`gguf_audit.checks.lineage` says
what the tensor-set digest and full precision are).
"""

from __future__ import annotations

from typing import Any, Final

from gguf_audit.bounded import ITEM_LIMIT, clip
from gguf_audit.checks.lineage import is_full_precision, tensor_set_digest
from gguf_audit.checks.mmproj_pairing import pairing_facts
from gguf_audit.checks.provenance import provenance_of
from gguf_audit.format.model import Header
from gguf_audit.tables.cells import arrow_text, i64

__all__ = ["LINEAGE_FACT_COLUMNS", "PROVENANCE_COLUMNS", "lineage_cells"]

LINEAGE_FACT_COLUMNS: Final = (
    "tensor_set_digest",
    "full_precision",
    "base_model_name",
    "base_model_organization",
    "base_model_repo_url",
    "projector_type",
    "projection_dim",
    "embedding_length",
)
"""The ``files`` columns the driver keeps per file for lineage (with ``url``, ``architecture``, ``name``...)."""

PROVENANCE_COLUMNS: Final = (
    "quantized_by",
    "imatrix_file",
    "imatrix_dataset",
    "imatrix_entries_count",
    "imatrix_chunks_count",
    "source_url",
    "source_repo_url",
    "source_hf_repository",
    "made_with_imatrix",
)
"""The ``files`` columns of :class:`~gguf_audit.checks.provenance.Provenance`'s fields of the same names."""

_STRINGS: Final = {
    "base_model_name": "general.base_model.0.name",
    "base_model_organization": "general.base_model.0.organization",
    "base_model_repo_url": "general.base_model.0.repo_url",
}
_INTS: Final = {
    "base_model_count": "general.base_model.count",
}


def lineage_cells(header: Header) -> dict[str, Any]:
    """The lineage and provenance columns of a ``files`` row (nulls for keys absent or of another type)."""
    row: dict[str, Any] = {"tensor_set_digest": tensor_set_digest(header), "full_precision": is_full_precision(header)}
    made = provenance_of(header)
    for column in PROVENANCE_COLUMNS:
        value = getattr(made, column)
        row[column] = arrow_text(value) if isinstance(value, str) else value
    row["quantize_keys"] = [arrow_text(k) for k in made.quantize_keys]
    for column, key in _STRINGS.items():
        value = header.get_str(key)
        row[column] = None if value is None else arrow_text(clip(value, ITEM_LIMIT))
    for column, key in _INTS.items():
        row[column] = i64(header.get_int(key))
    pairing = pairing_facts(header)
    row["projector_type"] = None if pairing["projector_type"] is None else arrow_text(pairing["projector_type"])
    row["projection_dim"] = i64(pairing["projection_dim"])
    row["embedding_length"] = i64(pairing["embedding_length"])
    return row
