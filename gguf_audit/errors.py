"""The one error root of gguf-audit.

Pure layers raise these; :func:`gguf_audit.audit.audit_file` turns them into
finding rows. Each error that matches a built-in also subclasses it, so
callers catching ``ValueError`` or ``OSError`` keep working.
"""

from __future__ import annotations

import errno
import re
import traceback
from typing import Final

__all__ = [
    "FormatError",
    "GGUFAuditError",
    "SourceError",
    "UsageError",
    "cannot_succeed_on_retry",
    "describe_exception",
    "one_line",
]

ONE_LINE_MAX_CHARS: Final = 400
"""The longest error line a command prints: a store's error may run to pages (deltalake's are 18 coloured lines)."""


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


class UsageError(GGUFAuditError, ValueError):
    """A command cannot do what it was asked (a bad flag, an output that cannot be read, a night that is not there).

    Commands raise it; :func:`gguf_audit.cli.main` prints its message as one
    redacted line and exits 2. The message names the value at fault.
    """


_ANSI: Final = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]")


def one_line(text: str, limit: int = ONE_LINE_MAX_CHARS) -> str:
    """``text`` as one line: terminal colour codes removed, line breaks and runs of blanks made one space, cut
    to ``limit`` characters (with an ellipsis)."""
    flat = " ".join(_ANSI.sub("", text).split())
    return flat if len(flat) <= limit else flat[: limit - 1].rstrip() + "…"


def describe_exception(exc: BaseException) -> str:
    """``Type: message at file.py:line``, naming where the exception was raised, in one line."""
    where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
    at = f" at {where.filename.rsplit('/', 1)[-1]}:{where.lineno}" if where else ""
    return f"{type(exc).__name__}: {exc}{at}"


PERMANENT_ERRNOS: Final = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM})
"""What no retry fixes: a full disk or quota, a read-only file system, a permission refused."""


def cannot_succeed_on_retry(exc: BaseException) -> bool:
    """True for an error no retry of the same work can get past (:data:`PERMANENT_ERRNOS`, a refused permission).

    A night stops at the first such error rather than splitting and rerunning
    batches that would fail the same way (and re-reading their files).
    """
    return isinstance(exc, PermissionError) or (isinstance(exc, OSError) and exc.errno in PERMANENT_ERRNOS)


class Terminated(KeyboardInterrupt):
    """SIGTERM (what cron, systemd and Kubernetes send to stop a job), raised like Ctrl-C so every
    ``finally`` and context manager on the way out runs; ``signum`` is the signal's number."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum
