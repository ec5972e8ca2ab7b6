"""The ``io.*`` codes: reading the file. Most are the store's answer, not the file's, so llama.cpp's
verdict is unknown.
"""

from __future__ import annotations

from typing import Final

from gguf_audit.codes.code import Code
from gguf_audit.codes.model import CodeInfo, LlamaCpp, Severity

__all__ = ["ENTRIES"]

ENTRIES: Final[tuple[CodeInfo, ...]] = (
    CodeInfo(
        Code.IO_NOT_FOUND,
        Severity.ERROR,
        None,
        ("The file does not exist at the URL (the store's answer, not the file's: llama.cpp's verdict is unknown)."),
    ),
    CodeInfo(
        Code.IO_PERMISSION_DENIED,
        Severity.ERROR,
        None,
        "The credentials in use may not read the file (llama.cpp's verdict is unknown).",
    ),
    CodeInfo(
        Code.IO_TIMEOUT, Severity.ERROR, None, "A read timed out after all retries (llama.cpp's verdict is unknown)."
    ),
    CodeInfo(
        Code.IO_ERROR,
        Severity.ERROR,
        None,
        "Another I/O failure after all retries (connection reset, server error, short read).",
    ),
    CodeInfo(
        Code.IO_RANGE_IGNORED,
        Severity.WARNING,
        LlamaCpp.LOADS,
        (
            "The server answers Range requests with the whole file, and the bytes asked lie past what gguf-audit "
            "reads of such an answer (max_ignored_range_bytes): they were not read, never taken from the wrong "
            "place."
        ),
    ),
    CodeInfo(
        Code.IO_RATE_LIMITED,
        Severity.WARNING,
        None,
        (
            "The server kept rate-limiting reads (429, RateLimit or Retry-After) past the wait allowed ([io] "
            "rate_limit_wait_s): the file was not read this time, and an incremental run reads it again. A warning: "
            "the store's limit, not the file."
        ),
    ),
    CodeInfo(
        Code.IO_SIZE_MISMATCH,
        Severity.ERROR,
        None,
        (
            "The listing and the server's answers (Content-Range totals) disagree on the file's size, and kept "
            "disagreeing when asked again: the message names both sizes. The file is not judged truncated or padded "
            "on either; an incremental run reads it again."
        ),
    ),
    CodeInfo(
        Code.IO_SIZE_UNKNOWN,
        Severity.WARNING,
        LlamaCpp.LOADS,
        "Neither the listing nor the server told the file's size; size checks are skipped.",
    ),
    CodeInfo(
        Code.IO_NAME_NOT_UTF8,
        Severity.ERROR,
        None,
        "The listed path is not UTF-8, so no URL names it and it was not audited (shown with its bytes escaped).",
    ),
    CodeInfo(
        Code.IO_BROKEN_LINK,
        Severity.ERROR,
        None,
        "A symbolic link the scan's globs match points nowhere or loops: no file behind it was audited.",
    ),
    CodeInfo(
        Code.IO_NOT_LISTABLE,
        Severity.ERROR,
        None,
        "A listed entry that could not be audited: a directory that cannot be listed, a special file (FIFO, "
        "socket, device) or a path that cannot be looked up.",
    ),
)
