"""The ``header.*`` codes: the fixed fields and the key-value section (``ggml/src/gguf.cpp``), and a header
past the read limit.
"""

from __future__ import annotations

from typing import Final

from gguf_audit.codes.code import Code
from gguf_audit.codes.model import CodeInfo, LlamaCpp, Severity

__all__ = ["ENTRIES"]

ENTRIES: Final[tuple[CodeInfo, ...]] = (
    CodeInfo(Code.HEADER_BAD_MAGIC, Severity.ERROR, LlamaCpp.REFUSES, "The file does not start with the bytes 'GGUF'."),
    CodeInfo(
        Code.HEADER_LFS_POINTER,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "The file is a Git LFS or Xet pointer (a mirror cloned without fetching the large files): the message "
            "gives the sha256 (Xet: Merkle hash) and size of the GGUF it stands for. llama.cpp refuses it as a bad "
            "magic."
        ),
    ),
    CodeInfo(
        Code.HEADER_UNSUPPORTED_VERSION,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        "The version is 0 or newer than 3, the last llama.cpp reads.",
    ),
    CodeInfo(
        Code.HEADER_OBSOLETE_VERSION,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        "GGUF v1 (32-bit counts and lengths): llama.cpp no longer reads it.",
    ),
    CodeInfo(
        Code.HEADER_BIG_ENDIAN,
        Severity.WARNING,
        LlamaCpp.REFUSES,
        "A valid big-endian file; llama.cpp refuses it on little-endian hosts (it reads the version as huge).",
    ),
    CodeInfo(
        Code.HEADER_TRUNCATED,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        "The file ends inside its header: a count or length needs more bytes than remain.",
    ),
    CodeInfo(
        Code.HEADER_COUNT_TOO_LARGE,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "A tensor, key or array count past gguf-audit's named limits (a forged or corrupt count; 2^63 hangs "
            "gguf-py 0.19)."
        ),
    ),
    CodeInfo(
        Code.HEADER_STRING_TOO_LONG,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        "A string length past llama.cpp's 1 GiB limit (a forged or corrupt length; 2^63 hangs gguf-py 0.19).",
    ),
    CodeInfo(
        Code.HEADER_BAD_VALUE_TYPE,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        "A metadata value type id outside the 13 GGUF types.",
    ),
    CodeInfo(
        Code.HEADER_NESTED_ARRAY,
        Severity.WARNING,
        LlamaCpp.REFUSES,
        "An array of arrays: valid GGUF, but llama.cpp's reader rejects the key.",
    ),
    CodeInfo(
        Code.HEADER_TOO_DEEP,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        "Arrays nested deeper than gguf-audit's limit; parsing stops there.",
    ),
    CodeInfo(Code.HEADER_EMPTY_KEY, Severity.ERROR, LlamaCpp.REFUSES, "A metadata key of zero length."),
    CodeInfo(Code.HEADER_DUPLICATE_KEY, Severity.ERROR, LlamaCpp.REFUSES, "The same metadata key appears twice."),
    CodeInfo(
        Code.HEADER_BAD_ALIGNMENT,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        "general.alignment is not a uint32, is zero, or is not a power of two.",
    ),
    CodeInfo(
        Code.HEADER_NUL_IN_KEY,
        Severity.WARNING,
        LlamaCpp.LOADS,
        (
            "A key holds a NUL byte: llama.cpp matches keys with strcmp, so it sees only the bytes before it (a key "
            "can hide behind, or shadow, another)."
        ),
    ),
    CodeInfo(
        Code.HEADER_INVALID_UTF8,
        Severity.WARNING,
        LlamaCpp.LOADS,
        "A key or string value is not valid UTF-8 (llama.cpp keeps raw bytes; tokenizers may break).",
    ),
    CodeInfo(
        Code.HEADER_INVALID_BOOL,
        Severity.WARNING,
        LlamaCpp.LOADS,
        "A bool stored as a byte other than 0 or 1 (llama.cpp reads any non-zero as true).",
    ),
    CodeInfo(
        Code.HEADER_NONCANONICAL_KEY,
        Severity.INFO,
        LlamaCpp.LOADS,
        "A key outside the spec's naming rule (lower_snake_case segments separated by dots).",
    ),
    CodeInfo(
        Code.HEADER_TOO_LARGE,
        Severity.ERROR,
        None,
        "The header is larger than the configured read limit; the file was not judged past it.",
    ),
    CodeInfo(
        Code.HEADER_TOO_MANY_ENTRIES,
        Severity.ERROR,
        None,
        (
            "The header claims more key-value pairs or tensor infos than any real model has (past gguf-audit's "
            "read budgets), with no refused record among those read; the file was not judged past them."
        ),
    ),
)
