"""The ``lineage.*`` codes: families of files across a collection (scans)."""

from __future__ import annotations

from typing import Final

from gguf_audit.codes.code import Code
from gguf_audit.codes.model import CodeInfo, LlamaCpp, Severity

__all__ = ["ENTRIES"]

ENTRIES: Final[tuple[CodeInfo, ...]] = (
    CodeInfo(
        Code.LINEAGE_NO_FULL_PRECISION,
        Severity.INFO,
        LlamaCpp.LOADS,
        (
            "A family of quantized files (same architecture, tensor names and shapes, base model or name) has no "
            "full-precision (F32, F16 or BF16) GGUF in the collection, nor a safetensors file beside it: nothing to "
            "re-quantize from or to compare against."
        ),
    ),
)
