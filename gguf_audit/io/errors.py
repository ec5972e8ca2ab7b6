"""The one table from exceptions to ``io.*`` finding codes, and whether retrying may help.

Every source maps a failed request through :func:`classify_error`; a read
that fails for good becomes a :class:`~gguf_audit.errors.SourceError`
carrying the code and :func:`describe_io_error`'s one-line message.
"""

from __future__ import annotations

from typing import Final

from gguf_audit.codes import Code
from gguf_audit.errors import GGUFAuditError, SourceError

__all__ = [
    "RangeAnswerError",
    "SizeMismatchError",
    "classify_error",
    "describe_io_error",
    "source_error",
]


class RangeAnswerError(GGUFAuditError, ConnectionError):
    """A ranged answer that is not the bytes asked (a Content-Range for other bytes, a short body).

    Never used as data; retried like a dropped connection (a proxy or a
    server under load may answer one request badly and the next well).
    """


class SizeMismatchError(RangeAnswerError):
    """An answer whose ``Content-Range`` total (or whole-body length) is not the size learnt before it.

    Retried like any bad answer (a proxy may lie once); when the retries keep
    disagreeing the file gets ``io.size_mismatch``, never a truncation verdict.
    """

    def __init__(self, known: int, known_from: str, told: int, content_range: str | None) -> None:
        self.known = known
        self.told = told
        shown = f" ({content_range!r})" if content_range else ""
        super().__init__(f"{known_from} says the file has {known} bytes, an answer says {told}{shown}")


_TRANSIENT_STATUS: Final = frozenset({408, 425, 429, 500, 502, 503, 504})
"""HTTP statuses worth a retry: timeouts, rate limits and passing server trouble."""

_TRANSIENT_NAMES: Final = frozenset(
    {
        "ClientConnectorError",
        "ServerDisconnectedError",
        "ClientOSError",
        "ClientPayloadError",
        "EndpointConnectionError",
        "ConnectionClosedError",
        "ReadTimeoutError",
        "IncompleteReadError",
        "IncompleteRead",
    }
)
"""aiohttp's, botocore's and http.client's connection failures, by name (none is imported here)."""


def classify_error(exc: BaseException) -> tuple[Code, bool]:
    """The ``io.*`` code for an exception and whether retrying may help.

    The one table from exceptions to codes: every source maps through it.
    """
    if isinstance(exc, SourceError):
        return exc.code, False
    if isinstance(exc, SizeMismatchError):
        return Code.IO_SIZE_MISMATCH, True
    if isinstance(exc, FileNotFoundError | IsADirectoryError | NotADirectoryError):
        return Code.IO_NOT_FOUND, False
    if isinstance(exc, PermissionError):
        return Code.IO_PERMISSION_DENIED, False
    if isinstance(exc, TimeoutError):  # asyncio.TimeoutError too: the same class since Python 3.11
        return Code.IO_TIMEOUT, True
    status = getattr(exc, "status", None) or getattr(exc, "code", None)
    if isinstance(status, int):
        if status == 404:
            return Code.IO_NOT_FOUND, False
        if status in (401, 403):
            return Code.IO_PERMISSION_DENIED, False
        return Code.IO_ERROR, status in _TRANSIENT_STATUS
    name = type(exc).__name__
    if "Timeout" in name:
        return Code.IO_TIMEOUT, True
    if isinstance(exc, ConnectionError) or name in _TRANSIENT_NAMES:
        return Code.IO_ERROR, True
    return Code.IO_ERROR, False


def describe_io_error(exc: BaseException) -> str:
    """``Type: first line of the message`` (cut to 300 characters), for a finding's message.

    Unlike :func:`gguf_audit.errors.describe_exception`, which names the
    raising line for our own bugs, this keeps only what the storage said:
    a failed read is the storage's doing, and its place in fsspec says nothing.
    """
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first[:300]}" if first else type(exc).__name__


def source_error(exc: BaseException) -> SourceError:
    """A SourceError for ``exc``: its ``io.*`` code and :func:`describe_io_error`'s message."""
    code, _ = classify_error(exc)
    return SourceError(code, describe_io_error(exc))
