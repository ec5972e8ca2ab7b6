"""The ``meta.*`` codes: metadata keys ``llama_model::load_hparams`` reads, and the ``general.*`` strings."""

from __future__ import annotations

from typing import Final

from gguf_audit.codes.code import Code
from gguf_audit.codes.model import CodeInfo, LlamaCpp, Severity

__all__ = ["ENTRIES"]

ENTRIES: Final[tuple[CodeInfo, ...]] = (
    CodeInfo(
        Code.META_MISSING_KEY,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "A key llama.cpp requires is absent: general.architecture, tokenizer.ggml.model, the token list (and "
            "merges for BPE), or, in a model file, context and embedding length and block count, and for known "
            "architectures the norm epsilon, head count and feed-forward length; llama.cpp throws 'key not found' "
            "(without the head count or feed-forward length, its first shape check fails instead)."
        ),
    ),
    CodeInfo(
        Code.META_WRONG_TYPE,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "A key llama.cpp reads has another type than the one it reads it as (a length as a string or uint64, an "
            "id as int32), or a per-layer array is not block_count long; llama.cpp throws 'key ... has wrong type' "
            "('wrong array length'; gguf asserts for a token list that is not an array of strings)."
        ),
    ),
    CodeInfo(
        Code.META_UNKNOWN_ARCHITECTURE,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "general.architecture is not one the pinned llama.cpp builds a model of (its generated tables): it "
            "throws 'unknown model architecture' (or 'unsupported' for a name it knows without a model, as gptj); a "
            "newer build or a fork may load it. Its keys and tensors were not checked."
        ),
    ),
    CodeInfo(
        Code.META_BLOCK_COUNT_MISMATCH,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "{arch}.block_count disagrees with the blk.N tensors present (blocks past it, or blocks without any "
            "tensor); llama.cpp fails on missing tensors or 'wrong number of tensors'."
        ),
    ),
    CodeInfo(
        Code.META_FILE_TYPE_MISMATCH,
        Severity.WARNING,
        LlamaCpp.LOADS,
        (
            "general.file_type is not a llama ftype id, or no weight matrix has the type it names (K-quant mixes and "
            "llama-quantize's fallbacks allowed), or the file name's quantization label says otherwise; llama.cpp "
            "only prints the declared type."
        ),
    ),
    CodeInfo(
        Code.META_MISSING_QUANTIZATION_VERSION,
        Severity.WARNING,
        LlamaCpp.LOADS,
        (
            "A file with quantized tensors has no general.quantization_version (gguf-py and llama-quantize always "
            "write it): the quantization layout it was written with is unknown. llama.cpp does not read it."
        ),
    ),
    CodeInfo(
        Code.META_CONTROL_CHARACTERS,
        Severity.WARNING,
        LlamaCpp.LOADS,
        (
            "A general.* string holds control characters (terminal escapes, C0/C1; newline and tab are allowed in "
            "descriptions) or invisible ones (bidi overrides and isolates, zero-width space, BOM, tag characters)."
        ),
    ),
)
