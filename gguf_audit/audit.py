"""``audit_file``: the one boundary that never raises.

Everything a file can do wrong, from a missing object to a forged header to
a bug of our own, comes out of here as finding rows on a :class:`FileAudit`.
Only ``KeyboardInterrupt``, ``SystemExit`` and cancellation pass through.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

import fsspec

from gguf_audit.checks.structure import check_structure
from gguf_audit.errors import FormatError, SourceError
from gguf_audit.findings import SEVERITY_RANK, Finding, Severity, finding, is_loadable
from gguf_audit.format.model import Header
from gguf_audit.format.parser import Limits
from gguf_audit.source import DEFAULT_READ_CONFIG, IOStats, ReadConfig, classify_error, open_source, read_header

__all__ = ["AuditConfig", "FileAudit", "Status", "audit_file"]


class Status(StrEnum):
    OK = "ok"
    WARNING = "warning"
    ERROR = "error"
    UNREADABLE = "unreadable"
    """No header could be decoded: nothing past the failure is known."""


@dataclass(frozen=True, slots=True)
class AuditConfig:
    read: ReadConfig = DEFAULT_READ_CONFIG
    limits: Limits = field(default_factory=Limits)


DEFAULT_AUDIT_CONFIG = AuditConfig()


@dataclass(slots=True)
class FileAudit:
    """The result of auditing one file."""

    url: str
    size: int | None
    header: Header | None
    findings: list[Finding]
    io: IOStats
    seconds: float
    etag: str | None = None

    @property
    def loadable(self) -> bool | None:
        """Would current llama.cpp on a little-endian host load this file."""
        if self.header is None and not self.findings:
            return None
        return is_loadable(self.findings)

    @property
    def status(self) -> Status:
        if self.header is None:
            return Status.UNREADABLE
        worst = max((SEVERITY_RANK[f.severity] for f in self.findings), default=0)
        if worst >= SEVERITY_RANK[Severity.ERROR]:
            return Status.ERROR
        if worst >= SEVERITY_RANK[Severity.WARNING]:
            return Status.WARNING
        return Status.OK

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity is Severity.ERROR]


def audit_file(
    url: str,
    *,
    size: int | None = None,
    etag: str | None = None,
    storage_options: Mapping[str, Any] | None = None,
    fs: fsspec.AbstractFileSystem | None = None,
    config: AuditConfig = DEFAULT_AUDIT_CONFIG,
) -> FileAudit:
    """Read ``url``'s header, judge it, and return every finding. Never raises."""
    begun = time.perf_counter()
    stats = IOStats()
    header: Header | None = None
    findings: list[Finding] = []
    source = None
    try:
        source = open_source(url, storage_options=storage_options, size=size, fs=fs, config=config.read)
        stats = source.stats
        read = read_header(source, config=config.read, limits=config.limits)
        header = read.header
        findings.extend(check_structure(header, source.size))
    except FormatError as exc:
        findings.append(finding(exc.code, exc.message, offset=exc.offset))
    except SourceError as exc:
        findings.append(finding(exc.code, f"{url}: {exc.message}"))
    except Exception as exc:  # noqa: BLE001 - the boundary: nothing escapes a file's audit
        code, _ = classify_error(exc)
        if isinstance(exc, OSError):
            findings.append(finding(code, f"{url}: {type(exc).__name__}: {exc}"))
        else:
            where = traceback.extract_tb(exc.__traceback__)[-1] if exc.__traceback__ else None
            at = f" at {where.filename.rsplit('/', 1)[-1]}:{where.lineno}" if where else ""
            findings.append(finding("internal.unexpected", f"{type(exc).__name__}: {exc}{at}"))
    if source is not None and source.size is not None:
        size = source.size
    return FileAudit(
        url=url,
        size=size,
        header=header,
        findings=findings,
        io=stats,
        seconds=time.perf_counter() - begun,
        etag=etag,
    )
