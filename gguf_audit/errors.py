"""The one error root of gguf-audit.

Pure layers raise these; :func:`gguf_audit.audit.audit_file` turns them into
finding rows. Each error that matches a built-in also subclasses it, so
callers catching ``ValueError`` or ``OSError`` keep working.
"""

from __future__ import annotations

import traceback

__all__ = ["FormatError", "GGUFAuditError", "SourceError", "describe_exception"]


class GGUFAuditError(Exception):
    """Base of every error gguf-audit raises on purpose."""


class FormatError(GGUFAuditError, ValueError):
    """The bytes are not a GGUF header gguf-audit can read past this point.

    ``code`` is a registered finding code, ``offset`` the absolute byte
    position where the problem was seen.
    """

    def __init__(self, code: str, message: str, offset: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.offset = offset

    def __reduce__(self) -> tuple[type[FormatError], tuple[str, str, int | None]]:
        return (type(self), (self.code, self.message, self.offset))


class SourceError(GGUFAuditError, OSError):
    """A read failed for good (after retries); ``code`` is an ``io.*`` finding code."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def __reduce__(self) -> tuple[type[SourceError], tuple[str, str]]:
        return (type(self), (self.code, self.message))


def describe_exception(exc: BaseException) -> str:
    """``Type: message at file.py:line``, naming where the exception was raised, in one line."""
    where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    at = f" at {where.filename.rsplit('/', 1)[-1]}:{where.lineno}" if where else ""
    return f"{type(exc).__name__}: {exc}{at}"


class Terminated(KeyboardInterrupt):
    """SIGTERM (what cron, systemd and Kubernetes send to stop a job), raised like Ctrl-C so every
    ``finally`` and context manager on the way out runs; ``signum`` is the signal's number."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum
