"""``audit_file``: the one boundary that never raises.

Everything a file can do wrong, from a missing object to a forged header to
a bug of our own, comes out of here as finding rows on a :class:`FileAudit`.
Only ``KeyboardInterrupt``, ``SystemExit`` and cancellation pass through.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any

import fsspec

from gguf_audit.checks.structure import check_structure
from gguf_audit.errors import FormatError, SourceError, describe_exception
from gguf_audit.findings import SEVERITY_RANK, Finding, Severity, finding, is_loadable
from gguf_audit.format.model import Header
from gguf_audit.format.wire import Limits
from gguf_audit.plan import SampleConfig
from gguf_audit.source import (
    DEFAULT_READ_CONFIG,
    FsspecSource,
    HeaderRead,
    IOStats,
    ReadConfig,
    classify_error,
    open_source,
    read_header,
)

if TYPE_CHECKING:
    from gguf_audit.checks.data import SampleRow
    from gguf_audit.checks.template import TemplateAudit

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
    samples: SampleConfig | None = None
    """Sample tensor blocks and check their data; None reads the header only."""
    semantics: bool = True
    """Architecture, tokenizer and declared-type checks (header only)."""
    templates: bool = True
    """Inspect and render chat templates (in a sandboxed child process)."""


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
    samples: list[SampleRow] = field(default_factory=list)
    """A row per sampled block, when sampling was on."""
    fingerprint: str | None = None
    """Hash of the sampled bytes with their offsets (see checks.data.sample_fingerprint)."""
    templates: list[TemplateAudit] = field(default_factory=list)
    """One audit per chat template the file holds."""

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
    rows: list[SampleRow] = []
    fingerprint: str | None = None
    templates: list[TemplateAudit] = []
    source = None
    try:
        source = open_source(url, storage_options=storage_options, size=size, fs=fs, config=config.read)
        stats = source.stats
        read = read_header(source, config=config.read, limits=config.limits)
        header = read.header
        findings.extend(check_structure(header, source.size))
        templates = _check_semantics(header, url, config, findings)
        if config.samples is not None:
            rows, fingerprint = _sample(source, read, config.samples, findings)
    except FormatError as exc:
        findings.append(finding(exc.code, exc.message, offset=exc.offset))
    except SourceError as exc:
        findings.append(finding(exc.code, f"{url}: {exc.message}"))
    except Exception as exc:  # noqa: BLE001 - the boundary: nothing escapes a file's audit
        code, _ = classify_error(exc)
        if isinstance(exc, OSError):
            findings.append(finding(code, f"{url}: {type(exc).__name__}: {exc}"))
        else:
            findings.append(finding("internal.unexpected", describe_exception(exc)))
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
        samples=rows,
        fingerprint=fingerprint,
        templates=templates,
    )


def _check_semantics(header: Header, url: str, config: AuditConfig, findings: list[Finding]) -> list[TemplateAudit]:
    """Template and semantic checks; their findings join ``findings``."""
    audits: list[TemplateAudit] = []
    renders: dict[str, str] | None = None
    if config.templates and not _is_later_shard(header):
        audits, file_findings = _audit_templates(header)
        findings.extend(file_findings)
        for audit in audits:
            findings.extend(audit.findings)
        renders = {a.key: a.rendered for a in audits if a.rendered is not None}
    if config.semantics:
        from gguf_audit.checks.semantic import check_semantics

        findings.extend(check_semantics(header, url=url, template_renders=renders))
    return audits


def _is_later_shard(header: Header) -> bool:
    # Runtimes read the tokenizer and templates from the first shard only.
    split_no = header.get("split.no")
    return isinstance(split_no, int) and split_no > 0


_TEMPLATE_CACHE: dict[tuple[object, ...], tuple[list[TemplateAudit], tuple[Finding, ...]]] = {}
_TEMPLATE_CACHE_SIZE = 256


def _audit_templates(header: Header) -> tuple[list[TemplateAudit], tuple[Finding, ...]]:
    """Audit the header's chat templates, once per distinct template set.

    A collection holds many quantizations of each model, all with the same
    template: the child process that renders them starts once per set.
    """
    from gguf_audit.checks.template import audit_templates

    templates = {
        kv.key: kv.value
        for kv in header.kvs
        if (kv.key == "tokenizer.chat_template" or kv.key.startswith("tokenizer.chat_template."))
        and isinstance(kv.value, str)
    }
    bos, eos = _token_text(header, "tokenizer.ggml.bos_token_id"), _token_text(header, "tokenizer.ggml.eos_token_id")
    key = (tuple(sorted(templates.items())), bos, eos)
    cached = _TEMPLATE_CACHE.get(key)
    if cached is None:
        audits, file_findings = audit_templates(templates, bos_token=bos, eos_token=eos)
        cached = (list(audits), tuple(file_findings))
        if len(_TEMPLATE_CACHE) >= _TEMPLATE_CACHE_SIZE:
            _TEMPLATE_CACHE.pop(next(iter(_TEMPLATE_CACHE)))
        _TEMPLATE_CACHE[key] = cached
    return list(cached[0]), cached[1]


def _token_text(header: Header, id_key: str) -> str:
    from gguf_audit.format.model import StringArray

    token_id = header.get(id_key)
    tokens = header.get("tokenizer.ggml.tokens")
    if isinstance(token_id, int) and isinstance(tokens, StringArray) and 0 <= token_id < len(tokens):
        return tokens[token_id]
    return ""


def _sample(
    source: FsspecSource, read: HeaderRead, config: SampleConfig, findings: list[Finding]
) -> tuple[list[SampleRow], str | None]:
    """Sample the file's tensor blocks; their findings join ``findings``."""
    # Imported here: the data checks register their codes, and a header-only
    # audit has no use for them.
    from gguf_audit.plan import plan_samples
    from gguf_audit.sampling import read_samples

    plan = plan_samples(read.header, config=config, file_size=source.size)
    result = read_samples(source, read.header, plan, held=read.buffer, max_gap_bytes=config.max_gap_bytes)
    findings.extend(result.findings)
    return list(result.rows), result.fingerprint
