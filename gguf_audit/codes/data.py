"""The ``data.*`` codes: the data section against the file's size, and sampled tensor blocks
(``ggml_validate_row_data``).
"""

from __future__ import annotations

from typing import Final

from gguf_audit.codes.code import Code
from gguf_audit.codes.model import CodeInfo, LlamaCpp, Severity

__all__ = ["ENTRIES"]

ENTRIES: Final[tuple[CodeInfo, ...]] = (
    CodeInfo(
        Code.DATA_TRUNCATED,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        ("Tensor data extends past the end of the file: an interrupted upload (or Ollama's CVE-2026-7482 trigger)."),
    ),
    CodeInfo(
        Code.DATA_TRAILING_BYTES,
        Severity.INFO,
        LlamaCpp.LOADS,
        "Bytes after the last tensor's padded end: harmless to llama.cpp, but unusual.",
    ),
    CodeInfo(
        Code.DATA_NONFINITE,
        Severity.ERROR,
        LlamaCpp.LOADS,
        (
            "A sampled block holds NaN or Inf, in its values or its scales (llama.cpp loads it; "
            "ggml_validate_row_data refuses it only with --check-tensors, and never NVFP4's 0x7F)."
        ),
    ),
    CodeInfo(
        Code.DATA_ZERO_FILLED,
        Severity.WARNING,
        LlamaCpp.LOADS,
        (
            "Every block sampled from a weight matrix is zero, two at least (norms, biases, adapters and the like "
            "excepted): data never written, or a broken conversion. Sampling reads a run of blocks at a few places "
            "in a file, so a tensor no window reached is not judged."
        ),
    ),
    CodeInfo(
        Code.DATA_BAD_SCALE,
        Severity.ERROR,
        LlamaCpp.LOADS,
        (
            "A sampled block's scale is invalid, such as an MXFP4 exponent byte 0xFF (NaN in OCP MX; llama.cpp loads "
            "it; ggml_validate_row_data refuses it only with --check-tensors)."
        ),
    ),
    CodeInfo(
        Code.DATA_NO_DECODER,
        Severity.INFO,
        LlamaCpp.LOADS,
        "gguf-audit cannot decode this tensor type (or this byte order), so its sampled blocks were not checked.",
    ),
    CodeInfo(
        Code.DATA_SAMPLE_UNREAD,
        Severity.WARNING,
        LlamaCpp.LOADS,
        "Some sampled blocks could not be read (I/O errors or a short file), so they were not checked.",
    ),
)
