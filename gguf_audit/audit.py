"""``audit_file``: the one boundary that never raises.

Everything a file can do wrong, from a missing object to a forged header to
a bug of our own, comes out of here as finding rows on a :class:`FileAudit`.
Only ``KeyboardInterrupt``, ``SystemExit`` and cancellation pass through.
"""

from __future__ import annotations

import dataclasses
import os
import threading
import time
from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Final

from gguf_audit.checks.clip import is_projector
from gguf_audit.checks.facts import header_facts
from gguf_audit.checks.header import check_mapping, check_semantics, check_structural, isolated
from gguf_audit.checks.hub_gguf import HubGGUF, check_hub_gguf
from gguf_audit.codes import Code
from gguf_audit.errors import FormatError, SourceError, describe_exception
from gguf_audit.findings import (
    SEVERITY_RANK,
    Finding,
    LlamaCpp,
    Severity,
    cap_findings,
    finding,
    is_loadable,
    llama_cpp_verdict,
)
from gguf_audit.format.model import Header
from gguf_audit.format.wire import Limits
from gguf_audit.io.base import RangeSource
from gguf_audit.io.errors import classify_error
from gguf_audit.io.gate import CpuGate
from gguf_audit.io.header import read_header
from gguf_audit.io.kept import kept_threads
from gguf_audit.io.read_config import DEFAULT_READ_CONFIG, IOStats, ReadConfig
from gguf_audit.redact import redact_text, redact_url
from gguf_audit.templates.audit import (
    DEFAULT_TEMPLATE_CACHE,
    TemplateAudit,
    TemplateCache,
    audit_header_templates,
)
from gguf_audit.validate import check_bool

if TYPE_CHECKING:
    # Only what a header-only audit does not run is imported where it runs: the fsspec sources, sampling and
    # the upstream comparison (fsspec, aiohttp and the decoders are most of a one-file inspect's start-up).
    import fsspec

    from gguf_audit.decode.stats import SampleRow
    from gguf_audit.io.upstream import UpstreamCache, UpstreamConfig
    from gguf_audit.plan import SampleConfig
    from gguf_audit.samples import SampleRead

__all__ = [
    "DEFAULT_AUDIT_CONFIG",
    "FILE_DEADLINE_SECONDS",
    "AuditConfig",
    "AuditResources",
    "AuditTarget",
    "FileAudit",
    "Status",
    "audit_file",
    "audit_file_within",
]


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
    upstream: UpstreamConfig | None = None
    """Compare with the upstream config.json and tokenizer files (``upstream.*``); None skips it."""

    def __post_init__(self) -> None:
        check_bool("AuditConfig.semantics", self.semantics)
        check_bool("AuditConfig.templates", self.templates)


DEFAULT_AUDIT_CONFIG: Final = AuditConfig()


@dataclass(frozen=True, slots=True)
class AuditTarget:
    """What one file is: where it is read from and what its listing already knows of it."""

    url: str
    """The URL (or local path) read."""
    storage_options: Mapping[str, Any] | None = None
    """The fsspec options its store is opened with (never credentials)."""
    size: int | None = None
    """Its size as listed; None learns it from the first read."""
    etag: str | None = None
    """Its ETag as listed, carried to the result."""
    revision: str | None = None
    """Pins an ``hf://`` file to the commit sha its listing saw."""
    display_url: str | None = None
    """The URL the result shows (its ``url``, its messages) when it differs from the one read, e.g.
    :func:`gguf_audit.redact.redact_url` of a presigned URL; None shows the URL read. Either way,
    credentials in error texts are redacted."""
    hub_gguf: HubGGUF | None = None
    """What the Hub's ``gguf`` card of its repository says, from the listing: compared with the header
    at no request (``hub.gguf_mismatch``); None compares nothing."""
    source: RangeSource | None = field(default=None, compare=False, repr=False)
    """A source of ``url`` already open, to read through (a one-file ``inspect`` opens it before its
    imports, its first read under way: :meth:`~gguf_audit.io.plain.PlainHTTPSource.read_ahead`);
    None opens one. Not for targets sent to other processes."""

    @property
    def shown(self) -> str:
        return self.url if self.display_url is None else self.display_url


@dataclass(frozen=True, slots=True)
class AuditResources:
    """What the process lends a file's audit: shared by every file (and thread) that is given them."""

    fs: fsspec.AbstractFileSystem | None = None
    """An open filesystem to read with; None opens one from the target's URL and storage options."""
    gate: CpuGate | None = None
    """Hold one of the process's CPU slots while parsing, checking and decoding, giving it back around
    every read (see :class:`~gguf_audit.io.gate.CpuGate`); None runs ungated."""
    template_cache: TemplateCache = DEFAULT_TEMPLATE_CACHE
    """Audits each distinct set of chat templates once."""
    upstream_cache: UpstreamCache | None = None
    """Reads each upstream place once for the files that share it (a batch's); None reads per file."""
    stdlib_reads: bool = False
    """Read a plain ``http(s)://`` URL or local path with the standard library (:mod:`gguf_audit.io.plain`)
    rather than fsspec, when no ``fs`` is lent and the target has no storage options: the same requests,
    checks and codes, without importing fsspec and aiohttp (a one-file ``inspect``'s start-up). Sampled
    ranges are then read one after another, not concurrently."""


DEFAULT_AUDIT_RESOURCES: Final = AuditResources()

FILE_DEADLINE_SECONDS: Final = 900.0
"""Wall-clock seconds one file's audit may take, in a scan and in ``inspect`` (``--deadline``): a header
read of at most two requests, a sampled budget of 32, the templates' 30 s render budget, all with their
retries, fit in it many times over; a server sending two bytes a second would otherwise hold it for hours."""

SIZE_VERDICTS = frozenset({Code.DATA_TRUNCATED, Code.DATA_TRAILING_BYTES, Code.HEADER_TRUNCATED})
"""Findings that rest on the file's size: never given on a size the store's answers disagree about."""


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
    """Hash of the sampled bytes with their offsets (see decode.sampled.sample_fingerprint)."""
    templates: list[TemplateAudit] = field(default_factory=list)
    """One audit per chat template the file holds."""
    weights_fingerprint: str | None = None
    """See decode.fingerprints.weights_fingerprint; None without sampling."""
    sampled_tensors: int | None = None
    """Tensors with at least one block read; None when sampling was off (or never reached)."""
    sampled_strata: int | None = None
    """Which sixteenths of the data section the blocks read touch, bit ``k`` for the
    ``k``-th (0xFFFF: all); None when sampling was off."""
    upstream_url: str | None = None
    """Where the upstream configuration compared with came from; None when none was found or looked for."""

    @property
    def loadable(self) -> bool | None:
        """Would current llama.cpp on a little-endian host load this file."""
        if self.header is None and not self.findings:
            return None
        return is_loadable(self.findings)

    @property
    def llama_cpp(self) -> LlamaCpp | None:
        """What llama.cpp :data:`~gguf_audit.codes.LLAMA_CPP_BUILD` does with this file: loads, refuses,
        aborts (the worst of its findings), or None when the audit could not tell."""
        if self.header is None and not self.findings:
            return None
        return llama_cpp_verdict(self.findings)

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
    target: AuditTarget | str | os.PathLike[str],
    *,
    config: AuditConfig,
    resources: AuditResources | None = None,
) -> FileAudit:
    """Read ``target``'s header, judge it as ``config`` says, and return every finding. Never raises.

    ``target`` is what the file is (a bare URL or path is a target with nothing
    else known); ``resources`` what the process lends it (a filesystem, the CPU
    gate, the template and upstream caches), by default nothing shared but the
    process's template cache.
    """
    if not isinstance(target, AuditTarget):
        target = AuditTarget(os.fspath(target))
    lent = DEFAULT_AUDIT_RESOURCES if resources is None else resources
    with lent.gate.held() if lent.gate is not None else nullcontext():
        return _audit_file(target, config, lent)


def audit_file_within(
    target: AuditTarget | str | os.PathLike[str],
    *,
    config: AuditConfig = DEFAULT_AUDIT_CONFIG,
    resources: AuditResources | None = None,
    deadline_s: float | None = None,
) -> FileAudit:
    """:func:`audit_file` within ``deadline_s`` seconds of wall clock, or a result whose one finding is
    ``run.file_deadline`` (no header: the file was not judged); None is :data:`FILE_DEADLINE_SECONDS`.

    A thread cannot be stopped from outside, so the audit runs on a daemon thread that is left running
    past the deadline (its own read timeouts end it later; the process may exit before), as the scan's
    batches leave theirs.
    """
    if not isinstance(target, AuditTarget):
        target = AuditTarget(os.fspath(target))
    done: list[FileAudit | BaseException] = []

    def run() -> None:
        try:
            done.append(audit_file(target, config=config, resources=resources))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread, raised there
            done.append(exc)

    deadline_s = FILE_DEADLINE_SECONDS if deadline_s is None else deadline_s
    begun = time.perf_counter()
    worker = threading.Thread(target=run, name="gguf-audit file audit", daemon=True)
    worker.start()
    worker.join(deadline_s)
    if done:
        if isinstance(done[0], BaseException):
            raise done[0]
        return done[0]
    message = (
        f"{target.shown}: the audit passed its deadline of {deadline_s:g} s of wall clock and was left running; "
        "the store is slow, or the file or its server may be built to hold an auditor"
    )
    return FileAudit(
        url=target.shown,
        size=target.size,
        header=None,
        findings=[_redacted(finding(Code.RUN_FILE_DEADLINE, message), target.url, target.shown)],
        io=IOStats(),
        seconds=time.perf_counter() - begun,
        etag=target.etag,
    )


def _audit_file(target: AuditTarget, config: AuditConfig, lent: AuditResources) -> FileAudit:
    begun = time.perf_counter()
    stats = IOStats()
    header: Header | None = None
    findings: list[Finding] = []
    rows: list[SampleRow] = []
    fingerprint: str | None = None
    templates: list[TemplateAudit] = []
    sampled: SampleRead | None = None
    upstream_url: str | None = None
    source: RangeSource | None = None
    url, shown = target.url, target.shown
    try:
        source = _open(target, config, lent)
        stats = source.stats
        read = read_header(source, config=config.read, limits=config.limits)
        header = read.header
        # The order of the report, and of llama.cpp's loader: the structure first; then the chat templates
        # (parsed and rendered in a sandboxed child, so run here, not in the pure checks), whose renders the
        # semantic checks use for the tokens a turn ends with; then the semantics; the mapping of the weights
        # last. The child works while this thread checks the structure and the semantics up to those tokens.
        pending = _TemplateRun(header, config, lent.template_cache)
        structural = check_structural(header, source.size)
        refused = any(f.refused for f in structural)
        semantic = (
            list(check_semantics(header, url=shown, template_renders=pending.renders, structure_refused=refused))
            if config.semantics
            else []
        )
        templates, template_findings = pending.result()
        mapping = check_mapping(header, [*structural, *semantic])
        checks = [*structural, *template_findings, *semantic, *mapping]
        if any(f.code in SIZE_VERDICTS for f in checks):
            source.confirm_size()  # a size one answer told: asked again before a verdict rests on it
        findings.extend(checks)
        if config.samples is not None:
            from gguf_audit.samples import sample_file

            sampled = sample_file(source, read, config=config.samples).read
            findings.extend(sampled.findings)
            rows, fingerprint = list(sampled.rows), sampled.fingerprint
        if config.upstream is not None:
            upstream_url = _check_upstream(target, header, config, stats, lent.upstream_cache, findings)
            upstream_url = redact_url(upstream_url) if upstream_url is not None else None
    except FormatError as exc:
        confirmed = _size_confirmed(source, shown) if exc.code in SIZE_VERDICTS else None
        findings.append(confirmed or finding(exc.code, exc.message, offset=exc.offset))
    except SourceError as exc:
        findings.append(finding(exc.code, f"{shown}: {exc.message}"))
    except Exception as exc:  # noqa: BLE001 - the boundary: nothing escapes a file's audit
        code, _ = classify_error(exc)
        if isinstance(exc, OSError):
            findings.append(finding(code, f"{shown}: {type(exc).__name__}: {exc}"))
        else:
            findings.append(finding(Code.INTERNAL_UNEXPECTED, describe_exception(exc)))
    if source is not None:
        source.close()  # every read is done: a kept-alive connection is not left for the collector to close
    hub = target.hub_gguf
    if header is not None and hub is not None:  # what the listing knows of the file, against its header
        findings.extend(isolated("Hub card", lambda: check_hub_gguf(header, hub, shown)))
    size = source.size if source is not None and source.size is not None else target.size
    findings = _without_size_verdicts(cap_findings(findings), source, shown)
    findings = [_redacted(f, url, shown) for f in findings]
    return FileAudit(
        url=shown,
        size=size,
        header=header,
        findings=findings,
        io=stats,
        seconds=time.perf_counter() - begun,
        etag=target.etag,
        samples=rows,
        fingerprint=fingerprint,
        templates=templates,
        weights_fingerprint=sampled.weights_fingerprint if sampled is not None else None,
        sampled_tensors=sampled.sampled_tensors if sampled is not None else None,
        sampled_strata=sampled.sampled_strata if sampled is not None else None,
        upstream_url=upstream_url,
    )


def _open(target: AuditTarget, config: AuditConfig, lent: AuditResources) -> RangeSource:
    """The byte source of ``target``: the standard library's when lent ``stdlib_reads`` and it can read the
    URL (:func:`~gguf_audit.io.plain.open_plain_source`), else fsspec's; the target's own when it has one."""
    if target.source is not None:
        return target.source
    if lent.stdlib_reads and lent.fs is None:
        from gguf_audit.io.plain import open_plain_source

        plain = open_plain_source(
            target.url, storage_options=target.storage_options, size=target.size, config=config.read, gate=lent.gate
        )
        if plain is not None:
            return plain
    from gguf_audit.io.source import open_source

    return open_source(
        target.url,
        storage_options=target.storage_options,
        size=target.size,
        fs=lent.fs,
        config=config.read,
        revision=target.revision,
        gate=lent.gate,
    )


def _size_confirmed(source: RangeSource | None, shown: str) -> Finding | None:
    """The ``io.size_mismatch`` finding when asking again shows the size a header error rests on was a lie."""
    if source is None or source.size_from != "the first answer":
        return None
    try:
        source.confirm_size()
    except SourceError as exc:
        return finding(exc.code, f"{shown}: {exc.message}")
    return None


def _without_size_verdicts(findings: list[Finding], source: RangeSource | None, shown: str) -> list[Finding]:
    """``findings`` without the verdicts that rest on the size when the store's answers disagreed on it for good.

    A later read (a sampled range) that kept stating another total shows the
    size the checks used may be the wrong one: the file gets
    ``io.size_mismatch`` naming both sizes instead of a truncation verdict.
    """
    if source is None or source.size_conflict is None:
        return findings
    kept = [f for f in findings if f.code not in SIZE_VERDICTS]
    if not any(f.code == Code.IO_SIZE_MISMATCH for f in kept):
        known, told = source.size_conflict
        kept.append(
            finding(
                Code.IO_SIZE_MISMATCH,
                f"{shown}: {source.size_from or 'an earlier answer'} says the file has {known} bytes, "
                f"a later answer says {told}, after retries",
            )
        )
    return kept


def _redacted(found: Finding, url: str, shown: str) -> Finding:
    """``found`` with the URL read shown as ``shown`` and any other credential in its message redacted."""
    message = found.message.replace(url, shown) if url != shown else found.message
    message = redact_text(message)
    return found if message == found.message else dataclasses.replace(found, message=message)


def _check_upstream(
    target: AuditTarget,
    header: Header,
    config: AuditConfig,
    stats: IOStats,
    cache: UpstreamCache | None,
    findings: list[Finding],
) -> str | None:
    """Compare a model's metadata-carrying file with its upstream; where that was, or None."""
    facts = header_facts(header, target.url)
    if facts.continuation or not facts.model or config.upstream is None:
        return None
    from gguf_audit.io.upstream import locate_upstream

    upstream = locate_upstream(
        target.url,
        header,
        config=config.upstream,
        stats=stats,
        storage_options=target.storage_options,
        read=config.read,
        cache=cache,
    )
    if upstream is None:
        return None
    from gguf_audit.checks.upstream import check_upstream

    findings.extend(check_upstream(facts, upstream))
    return upstream.url


class _TemplateRun:
    """The chat-template audit of one header, on a kept thread (:mod:`~gguf_audit.io.kept`) from its start (it
    waits on the render child) until :meth:`result`; none for a file whose templates are not audited.

    On its own like each check (:func:`~gguf_audit.checks.header.isolated`): a failure gives
    ``internal.unexpected`` naming it, and the other checks still run."""

    def __init__(self, header: Header, config: AuditConfig, template_cache: TemplateCache) -> None:
        self._audits: list[TemplateAudit] = []
        self._renders: dict[str, str] | None = None
        self._findings: list[Finding] = []
        self._done: threading.Event | None = None
        # A projector (mmproj) has no chat template: its language model holds it.
        if config.templates and not _is_later_shard(header) and not is_projector(header):
            self._done = kept_threads.start(lambda: self._run(header, template_cache))

    def _run(self, header: Header, template_cache: TemplateCache) -> None:
        def step() -> list[Finding]:
            file_audits, file_findings = audit_header_templates(header, cache=template_cache)
            self._audits.extend(file_audits)
            self._renders = {a.key: a.rendered for a in file_audits if a.rendered is not None}
            return [*file_findings, *(f for a in file_audits for f in a.findings)]

        self._findings = isolated("chat template", step)

    def _wait(self) -> None:
        if self._done is not None:
            self._done.wait()

    def renders(self) -> dict[str, str] | None:
        """Each template's render of the standard conversation, once the audit is done (None: not audited)."""
        self._wait()
        return self._renders

    def result(self) -> tuple[list[TemplateAudit], list[Finding]]:
        """The template audits and their findings, once the audit is done."""
        self._wait()
        return self._audits, self._findings


def _is_later_shard(header: Header) -> bool:
    # Runtimes read the tokenizer and templates from the first shard only.
    split_no = header.get_int("split.no")
    return split_no is not None and split_no > 0
