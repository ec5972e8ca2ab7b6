"""The ``tensor.*`` codes: tensor infos, their data regions against each other, the shapes and names an
architecture's loader creates (``src/llama-model-loader.cpp``), and the size overflows of the security
advisories (:mod:`gguf_audit.codes.advisories`).
"""

from __future__ import annotations

from typing import Final

from gguf_audit.codes.code import Code
from gguf_audit.codes.model import CodeInfo, LlamaCpp, Severity

__all__ = ["ENTRIES"]

ENTRIES: Final[tuple[CodeInfo, ...]] = (
    CodeInfo(
        Code.TENSOR_NAME_TOO_LONG,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        "A tensor name of 64 bytes or more (GGML_MAX_NAME).",
    ),
    CodeInfo(
        Code.TENSOR_DUPLICATE_NAME,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        "Two tensors share a name (up to the first NUL byte, as ggml keeps it).",
    ),
    CodeInfo(
        Code.TENSOR_NUL_IN_NAME,
        Severity.WARNING,
        LlamaCpp.LOADS,
        "A tensor name holds a NUL byte: ggml keeps only the bytes before it, so other tools see another name.",
    ),
    CodeInfo(
        Code.TENSOR_SHAPE_ABORTS,
        Severity.ERROR,
        LlamaCpp.ABORTS,
        (
            "A shape gguf.cpp accepts but ggml_new_tensor asserts on (an element count of exactly INT64_MAX's bound, "
            "or overflowing dims behind a zero): the loading process aborts."
        ),
    ),
    CodeInfo(
        Code.TENSOR_UNALIGNED_BUFFER,
        Severity.ERROR,
        LlamaCpp.ABORTS,
        (
            "general.alignment below 32 puts the data section off ggml's 32-byte tensor alignment: mapping the "
            "weights fails a GGML_ASSERT in ggml-backend.cpp and the loading process aborts."
        ),
    ),
    CodeInfo(
        Code.TENSOR_BAD_DIMS,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        "More than 4 dimensions, a dimension negative as int64, or an element count that overflows int64.",
    ),
    CodeInfo(
        Code.TENSOR_UNKNOWN_TYPE,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        "A ggml type id llama.cpp does not know (forks such as ik_llama.cpp number their own types).",
    ),
    CodeInfo(
        Code.TENSOR_REMOVED_TYPE,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        "A ggml type id whose support was removed from GGUF (4, 5, 31 to 33, 36 to 38).",
    ),
    CodeInfo(
        Code.TENSOR_ROW_NOT_BLOCK_MULTIPLE,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        "The first dimension is not a multiple of the type's block size.",
    ),
    CodeInfo(
        Code.TENSOR_MISALIGNED_OFFSET,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        "A tensor's data offset is not a multiple of general.alignment.",
    ),
    CodeInfo(
        Code.TENSOR_OFFSET_NOT_PACKED,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        "A tensor's offset is not the running sum of the padded sizes before it, as llama.cpp requires.",
    ),
    CodeInfo(Code.TENSOR_OVERLAP, Severity.ERROR, LlamaCpp.REFUSES, "Two tensors' data regions overlap."),
    CodeInfo(
        Code.TENSOR_UNDERSIZED_REGION,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        "The gap before the next tensor's offset is smaller than the tensor's own size.",
    ),
    CodeInfo(
        Code.TENSOR_MISSING,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "A tensor llama.cpp's loader creates as required for this file is absent (output.weight is not: llama.cpp "
            "ties it to token_embd); llama.cpp throws \"tensor 'x' not found\". Judged by running the architecture's "
            "translated load_tensors (docs/llama-tables.md), token_embd only for the others; not "
            "on a shard of a split model."
        ),
    ),
    CodeInfo(
        Code.TENSOR_UNEXPECTED,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "A tensor llama.cpp does not create: a name the architecture never uses (a typo, a converter's "
            "leftover), or, where its loader is translated, one it does not create for this file's hyperparameters "
            "(an expert tensor in a dense model, a fused and a split projection both); the loader ends on 'wrong "
            "number of tensors'."
        ),
    ),
    CodeInfo(
        Code.TENSOR_WRONG_SHAPE,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "A tensor's shape (optional ones too) disagrees with the one the loader computes from the hyperparameters "
            "(translated architectures; the curated ones elsewhere); llama.cpp throws \"tensor 'x' has wrong shape; "
            'expected ..., got ...".'
        ),
    ),
    CodeInfo(
        Code.TENSOR_PACKED_MULTIMODAL,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "A language-model file also holds vision or audio encoder tensors (v.*, a.*, mm.*, resampler.*), as some "
            "exporters pack them: llama.cpp creates none of them and fails with 'wrong number of tensors'. Split the "
            "projector into its own mmproj file."
        ),
    ),
    CodeInfo(
        Code.TENSOR_SIZE_OVERFLOW,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "Sizes that wrap 64-bit arithmetic although each element count fits int64: a tensor's byte size past "
            "SIZE_MAX (CVE-2026-33298, fixed by llama.cpp PR #19072), padded tensor sizes whose running sum "
            "overflows 64 bits (CVE-2025-53630, fixed in llama.cpp commit 26a48ad6), or a data section so large that "
            "ggml's context size wraps (CVE-2026-27940, ggml_context size checks of llama.cpp PR #19856). Current "
            "llama.cpp refuses the file; older builds read or write out of bounds."
        ),
    ),
)
