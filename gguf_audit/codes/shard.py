"""The ``shard.*`` codes: shard sets (``llama_model_loader`` over split files)."""

from __future__ import annotations

from typing import Final

from gguf_audit.codes.code import Code
from gguf_audit.codes.model import CodeInfo, LlamaCpp, Severity

__all__ = ["ENTRIES"]

ENTRIES: Final[tuple[CodeInfo, ...]] = (
    CodeInfo(
        Code.SHARD_MISSING,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        "A shard set lacks one or more of its numbered files; llama.cpp cannot open the model.",
    ),
    CodeInfo(
        Code.SHARD_BAD_INDEX,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "A shard's split.no (counted from 0) disagrees with the number in its file name, or is absent or not a "
            "uint16."
        ),
    ),
    CodeInfo(
        Code.SHARD_COUNT_MISMATCH,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        "split.count disagrees with the -of-MMMMM in the file names, or the shards disagree with each other.",
    ),
    CodeInfo(
        Code.SHARD_TENSOR_COUNT_MISMATCH,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        "The shards' tensors do not add up to split.tensors.count ('N tensors expected but M found').",
    ),
    CodeInfo(
        Code.SHARD_DUPLICATE_TENSOR,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        "The same tensor name appears in two shards of one set ('tensor is duplicated').",
    ),
    CodeInfo(
        Code.SHARD_INCONSISTENT,
        Severity.WARNING,
        LlamaCpp.LOADS,
        (
            "The shards disagree on the GGUF version, byte order, or a declared general.alignment, architecture or "
            "file type: likely assembled from different conversions."
        ),
    ),
    CodeInfo(
        Code.SHARD_LATER_SHARD,
        Severity.INFO,
        LlamaCpp.REFUSES,
        (
            "A later shard of a split model (split.no above 0) given alone: llama.cpp loads a split model from its "
            "first shard and refuses this file ('illegal split file idx'). A scan judges it as a member of its set."
        ),
    ),
    CodeInfo(
        Code.SHARD_INVALID_FILE_NAME,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "split.count is above 1 but the file's name does not end with -00001-of-MMMMM.gguf for that count; "
            "llama.cpp finds the other shards by that name and refuses ('invalid split file name')."
        ),
    ),
)
