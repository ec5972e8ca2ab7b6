"""The ``compare.*`` codes: quantization error against a reference (``gguf-audit compare``)."""

from __future__ import annotations

from typing import Final

from gguf_audit.codes.code import Code
from gguf_audit.codes.model import CodeInfo, LlamaCpp, Severity

__all__ = ["ENTRIES"]

ENTRIES: Final[tuple[CodeInfo, ...]] = (
    CodeInfo(
        Code.COMPARE_LAYOUT_SUSPECT,
        Severity.ERROR,
        LlamaCpp.LOADS,
        (
            "Against its reference, a tensor's errors reach whole quantization steps or its signs flip "
            "systematically: the symptom of a wrong block layout, not of rounding."
        ),
    ),
    CodeInfo(
        Code.COMPARE_NO_COMMON_TENSORS,
        Severity.WARNING,
        LlamaCpp.LOADS,
        "The quantized file and the reference share no tensor with the same name and shape.",
    ),
)
