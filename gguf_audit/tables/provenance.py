"""Provenance and lineage cells of a ``files`` row: who quantized it, from what, with which importance matrix.

Pure: a header in, column values out (:mod:`gguf_audit.checks.lineage` says
what the tensor-set digest and full precision are).
"""

from __future__ import annotations

from typing import Any, Final

from gguf_audit.checks.lineage import is_full_precision, tensor_set_digest
from gguf_audit.checks.mmproj_pairing import pairing_facts
from gguf_audit.format.model import Header
from gguf_audit.tables.cells import arrow_text, i64

__all__ = ["LINEAGE_FACT_COLUMNS", "lineage_cells"]

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

_STRINGS: Final = {
    "quantized_by": "general.quantized_by",
    "imatrix_file": "quantize.imatrix.file",
    "imatrix_dataset": "quantize.imatrix.dataset",
    "source_url": "general.source.url",
    "source_repo_url": "general.source.repo_url",
    "source_hf_repository": "general.source.huggingface.repository",
    "base_model_name": "general.base_model.0.name",
    "base_model_organization": "general.base_model.0.organization",
    "base_model_repo_url": "general.base_model.0.repo_url",
}
_INTS: Final = {
    "imatrix_entries_count": "quantize.imatrix.entries_count",
    "imatrix_chunks_count": "quantize.imatrix.chunks_count",
    "base_model_count": "general.base_model.count",
}


def lineage_cells(header: Header) -> dict[str, Any]:
    """The lineage and provenance columns of a ``files`` row (nulls for keys absent or of another type)."""
    row: dict[str, Any] = {"tensor_set_digest": tensor_set_digest(header), "full_precision": is_full_precision(header)}
    for column, key in _STRINGS.items():
        value = header.get_str(key)
        row[column] = None if value is None else arrow_text(value)
    for column, key in _INTS.items():
        row[column] = i64(header.get_int(key))
    pairing = pairing_facts(header)
    row["projector_type"] = None if pairing["projector_type"] is None else arrow_text(pairing["projector_type"])
    row["projection_dim"] = i64(pairing["projection_dim"])
    row["embedding_length"] = i64(pairing["embedding_length"])
    return row
