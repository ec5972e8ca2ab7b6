"""The chat-template audit of a file: parse, inspect statically, render in a limited child process.

A GGUF file carries its chat templates as Jinja source in
``tokenizer.chat_template`` and ``tokenizer.chat_template.<name>``. llama.cpp
renders them with its own Jinja subset, but many runtimes render them with
Python's jinja2; one that forgets the sandbox (CVE-2024-34359 in
llama-cpp-python, the same again in SGLang in 2026) runs whatever Python the
template reaches. So every template is

1. parsed with the environment transformers uses (syntax errors are
   ``template.syntax_error``);
2. inspected statically, without rendering (``template.unsafe``, the rule in
   :mod:`gguf_audit.templates.inspect.inspector`);
3. rendered, sandboxed, on a standard conversation and then on every probe of
   what runtimes send (:func:`~gguf_audit.templates.conversations.probe_conversations`;
   ``template.resource_limit``, ``template.render_error``, and ``template.unsafe``
   for what the sandbox refused).

All three run in a separate process with CPU, wall-clock, memory and output
limits: the parser is what a hostile megabyte of Jinja attacks, and this
process then never imports jinja2 (a one-file ``inspect`` starts 50 ms sooner).
All templates of a file share one child (:mod:`gguf_audit.templates.sandbox.runner`),
within a per-file budget of templates judged, templates rendered and seconds
(``template.too_many``).

Every occurrence of every template key is audited, and each string of one
stored as an array (:func:`header_templates`).

A collection holds many quantizations of each model, all with the same
templates: :class:`TemplateCache` audits each distinct set once, also when
many threads ask for it at the same time.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from gguf_audit.codes import Code
from gguf_audit.findings import Finding, finding
from gguf_audit.format.model import Header, StringArray
from gguf_audit.templates.limits import (
    DEFAULT_LIMITS,
    MAX_TEMPLATE_CHARS,
    MAX_TOTAL_TEMPLATE_CHARS,
    TAIL_CHARS,
    TemplateLimits,
)
from gguf_audit.templates.sandbox.runner import TemplateWorkerError, limit_message, render_all

__all__ = [
    "DEFAULT_TEMPLATE_CACHE",
    "FileTemplates",
    "TemplateAudit",
    "TemplateCache",
    "TemplateCacheStats",
    "audit_header_templates",
    "audit_templates",
    "header_templates",
    "template_ends_turn",
]

# refused=False for all: llama.cpp loads a file whatever its template says.


@dataclass(frozen=True, slots=True)
class TemplateAudit:
    """The audit of one chat template."""

    key: str
    """``tokenizer.chat_template`` or ``tokenizer.chat_template.<name>``."""
    digest: str
    """sha256 hex of the template's UTF-8 bytes."""
    findings: tuple[Finding, ...]
    rendered_tail: str | None
    """The last ``TAIL_CHARS`` characters of the standard conversation as rendered
    (``add_generation_prompt=False``); None if it was not rendered."""
    rendered: str | None
    """The full render (at most ``output_chars``); None if not rendered."""
    conversation: str | None = None
    """Which standard conversation rendered (``full``, ``no_tools``, ``no_system``,
    ``single_turn``); the first ones a template rejects are skipped."""


def template_ends_turn(audit: TemplateAudit, end_text: str) -> bool | None:
    """Whether the rendered standard conversation ends with ``end_text`` (e.g. the EOS token's text).

    The conversation ends with an assistant turn, so this tells whether the
    template closes assistant turns with that text. Trailing whitespace is
    ignored. None when the template was not rendered or ``end_text`` is empty.
    """
    if audit.rendered_tail is None or not end_text:
        return None
    return audit.rendered_tail.rstrip().endswith(end_text.strip() or end_text)


# --- one file's templates ----------------------------------------------------


@dataclass(frozen=True, slots=True)
class _RenderResult:
    findings: tuple[Finding, ...]
    rendered: str | None
    conversation: str | None


def _interpret(key: str, result: Mapping[str, object], limits: TemplateLimits, unsafe_known: bool) -> _RenderResult:
    found: list[Finding] = []
    status = result.get("status")
    conversation = result.get("conversation")
    conv = conversation if isinstance(conversation, str) and conversation else None
    refused = result.get("refused")
    blocked = result.get("blocked_events")
    sandbox_refused = isinstance(refused, list) and bool(refused)
    if not unsafe_known and isinstance(refused, list) and refused:
        # The static rule missed it but the sandbox caught it: still an escape attempt.
        names = ", ".join(list(dict.fromkeys(str(r) for r in refused))[:3])
        found.append(finding(Code.TEMPLATE_UNSAFE, f"{key}: the sandbox refused access to {names} during the render"))
    if isinstance(blocked, list) and blocked:
        events = ", ".join(str(e) for e in blocked[:3])
        found.append(finding(Code.TEMPLATE_UNSAFE, f"{key}: the render attempted {events}, which the child refuses"))
    rendered: str | None = None
    if status == "ok":
        text = result.get("rendered")
        rendered = text if isinstance(text, str) else None
    elif status == "limit":
        limit = result.get("limit")
        found.append(finding(Code.TEMPLATE_RESOURCE_LIMIT, limit_message(key, str(limit), limits, conv)))
        conv = None
    elif status == "error":
        attempts = result.get("attempts")
        last = attempts[-1] if isinstance(attempts, list) and attempts else {}
        error = str(last.get("error", "unknown error")) if isinstance(last, dict) else "unknown error"
        # A render stopped by the sandbox refusing a private attribute is the
        # unsafe finding already made, not a second problem. (A refused
        # list.append is a SecurityError too, but a plain render error.)
        if not (error.startswith("SecurityError") and (unsafe_known or sandbox_refused)):
            message = f"{key}: fails to render even a single user/assistant turn: {error}"
            found.append(finding(Code.TEMPLATE_RENDER_ERROR, message))
        conv = None
    elif status == "compile_error":
        found.append(finding(Code.TEMPLATE_RENDER_ERROR, f"{key}: does not compile: {result.get('error')}"))
        conv = None
    elif status == "budget":
        conv = None
    elif status != "blocked":
        raise TemplateWorkerError(f"the render child answered status {status!r}")
    else:
        conv = None
    return _RenderResult(tuple(found), rendered, conv)


def _digest(source: str) -> str:
    try:
        raw = source.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raw = source.encode("utf-8", "surrogatepass")
    return hashlib.sha256(raw).hexdigest()


def _size_gate(key: str, source: str, budget: int) -> list[Finding] | None:
    """Why ``source`` is not parsed at all (too long, or past the file's budget of characters); None: it is."""
    if len(source) > MAX_TEMPLATE_CHARS:
        message = f"{key}: the template is {len(source)} characters, over the {MAX_TEMPLATE_CHARS}-character limit"
        return [finding(Code.TEMPLATE_RESOURCE_LIMIT, message)]
    if len(source) > budget:
        message = f"{key}: not inspected: the file's chat templates pass {MAX_TOTAL_TEMPLATE_CHARS} characters in all"
        return [finding(Code.TEMPLATE_RESOURCE_LIMIT, message)]
    return None


def _reasons(verdict: Mapping[str, object], field: str) -> list[str]:
    value = verdict.get(field)
    return [str(r) for r in value] if isinstance(value, list) else []


def _static_findings(key: str, verdict: Mapping[str, object] | None, source: str) -> tuple[list[Finding], bool]:
    """The findings of a static verdict (the child's, see :mod:`gguf_audit.templates.inspect.verdict`) and
    whether the template may be rendered. A source no child reached is inspected here."""
    if verdict is None:
        # The file's render budget ran out before a child inspected it: this process does, as it parses no
        # template otherwise (jinja2 is imported only then).
        from gguf_audit.templates.inspect.verdict import static_verdict

        verdict = dict(static_verdict(source))
    if "unsafe" in verdict:
        found = [finding(Code.TEMPLATE_UNSAFE, f"{key}: {reason}") for reason in _reasons(verdict, "unsafe")]
        # Still rendered: the render of the standard conversation is what the tokenizer checks read.
        costs = _reasons(verdict, "costs")
        return found + [finding(Code.TEMPLATE_RESOURCE_LIMIT, f"{key}: {reason}") for reason in costs], True
    if "syntax" in verdict:
        return [finding(Code.TEMPLATE_SYNTAX_ERROR, f"{key}: {verdict['syntax']}")], False
    if "refused" in verdict:
        return [finding(Code.TEMPLATE_RESOURCE_LIMIT, f"{key}: {verdict['refused']}")], False
    limit = str(verdict.get("limit", "unknown"))
    return [finding(Code.TEMPLATE_RESOURCE_LIMIT, f"{key}: inspecting it met the render child's {limit} limit")], False


def audit_templates(
    templates: Mapping[str, str],
    *,
    bos_token: str = "",
    eos_token: str = "",
    limits: TemplateLimits = DEFAULT_LIMITS,
) -> tuple[tuple[TemplateAudit, ...], tuple[Finding, ...]]:
    """Audit every chat template of one file.

    ``templates`` maps the metadata key (``tokenizer.chat_template`` or
    ``tokenizer.chat_template.<name>``) to the template source; ``bos_token``
    and ``eos_token`` are the texts of the file's BOS and EOS tokens, passed to
    the render as transformers does. Returns one :class:`TemplateAudit` per
    template judged, in the mapping's order (at most ``limits.max_templates``), and
    the file-level findings (``template.missing`` when there is no template,
    ``template.too_many`` when the per-file budget left some unjudged or unrendered).

    All parsing, inspection and rendering runs in one child process (restarted
    only when a limit killed it). Raises :class:`TemplateWorkerError` when that
    process cannot run.
    """
    if not templates:
        return (), (finding(Code.TEMPLATE_MISSING, "the file has no tokenizer.chat_template"),)
    all_keys = list(templates)
    judged = {key: templates[key] for key in all_keys[: limits.max_templates]}
    gated: dict[str, list[Finding] | None] = {}
    budget = MAX_TOTAL_TEMPLATE_CHARS
    for key, src in judged.items():
        gated[key] = _size_gate(key, src, budget)
        budget -= min(len(src), MAX_TEMPLATE_CHARS)
    # Identical sources (a default copied under a name) are inspected and rendered once, all in one child.
    parsed = list(dict.fromkeys(src for key, src in judged.items() if gated[key] is None))
    done = render_all(parsed, bos_token=bos_token, eos_token=eos_token, limits=limits)
    answers = dict(zip(parsed, done, strict=True))
    static: dict[str, tuple[list[Finding], bool]] = {}
    for key, src in judged.items():
        gate = gated[key]
        static[key] = (gate, False) if gate is not None else _static_findings(key, answers[src].get("static"), src)
    renderable = list(dict.fromkeys(src for key, src in judged.items() if static[key][1]))
    rendered = {src: answers[src] for src in renderable if answers[src].get("status") != "skipped"}
    audits: list[TemplateAudit] = []
    for key, source in judged.items():
        found, can_render = static[key]
        text: str | None = None
        conversation: str | None = None
        if can_render and source in rendered:
            unsafe_known = any(f.code == Code.TEMPLATE_UNSAFE for f in found)
            result = _interpret(key, rendered[source], limits, unsafe_known)
            if any(f.code == Code.TEMPLATE_RESOURCE_LIMIT for f in result.findings):
                # the render met the limit itself: its finding names the conversation, the static one adds nothing
                found = [f for f in found if f.code != Code.TEMPLATE_RESOURCE_LIMIT]
            found = found + list(result.findings)
            text, conversation = result.rendered, result.conversation
        audits.append(
            TemplateAudit(
                key=key,
                digest=_digest(source),
                findings=tuple(found),
                rendered_tail=text[-TAIL_CHARS:] if text is not None else None,
                rendered=text,
                conversation=conversation if text is not None else None,
            )
        )
    over = _budget_finding(templates, len(judged), renderable, rendered, limits)
    return tuple(audits), (over,) if over is not None else ()


def _budget_finding(
    templates: Mapping[str, str],
    judged: int,
    renderable: list[str],
    rendered: Mapping[str, Mapping[str, object]],
    limits: TemplateLimits,
) -> Finding | None:
    """``template.too_many`` when the file's templates pass the per-file count or render budget."""
    parts: list[str] = []
    if len(templates) > judged:
        parts.append(f"templates past the first {judged} not inspected: {len(templates) - judged}")
    unrendered = len(renderable) - len(rendered)
    if unrendered > 0:
        parts.append(f"distinct templates past the first {limits.max_renders} not rendered: {unrendered}")
    out_of_time = sum(1 for answer in rendered.values() if answer.get("status") == "budget")
    if out_of_time:
        parts.append(f"templates not rendered within the file's {limits.file_seconds:g} s render budget: {out_of_time}")
    if not parts:
        return None
    chars = sum(len(src) for src in templates.values())
    message = (
        f"the file carries {len(templates)} chat templates ({chars} characters in all); gguf-audit judges at "
        f"most {limits.max_templates} and renders at most {limits.max_renders} per file: " + "; ".join(parts)
    )
    return finding(Code.TEMPLATE_TOO_MANY, message)


# --- each template set once, across files and threads ---------------------------

FileTemplates = tuple[tuple[TemplateAudit, ...], tuple[Finding, ...]]
"""A file's template audits, in its key order, and its file-level findings (see :func:`audit_templates`)."""

_CacheKey = tuple[tuple[tuple[str, str], ...], str, str]


@dataclass(frozen=True, slots=True)
class TemplateCacheStats:
    """How a :class:`TemplateCache` answered so far."""

    hits: int
    """Answers from the cache."""
    misses: int
    """Audits run (each starts at most one render child, unless a limit kills it)."""
    waits: int
    """Answers that waited for the audit of the same set already in flight."""
    entries: int
    """Template sets held now."""


@dataclass(eq=False, slots=True)
class _InFlight:
    """The audit of one template set while it runs: its outcome, once ``done`` is set."""

    done: threading.Event = field(default_factory=threading.Event)
    result: FileTemplates | None = None
    error: Exception | None = None


class TemplateCache:
    """A thread-safe LRU of template-set audits: each set is audited once, also across threads in flight.

    Keyed by the templates (by metadata key), the BOS text and the EOS text. A
    thread asking for a set that another thread is auditing waits for that
    audit and shares its outcome: the result, or the exception it raised.
    Exceptions are not cached (the next caller audits again), and when the
    auditing thread is interrupted (``KeyboardInterrupt``, cancellation) one
    of the waiters audits instead.
    """

    def __init__(self, max_entries: int = 256, *, limits: TemplateLimits = DEFAULT_LIMITS) -> None:
        if not isinstance(max_entries, int) or isinstance(max_entries, bool) or max_entries < 1:
            raise ValueError(f"max_entries must be a positive int. Got {max_entries!r}.")
        self._max_entries = max_entries
        self._limits = limits
        self._lock = threading.Lock()
        self._entries: OrderedDict[_CacheKey, FileTemplates] = OrderedDict()
        self._in_flight: dict[_CacheKey, _InFlight] = {}
        self._hits = 0
        self._misses = 0
        self._waits = 0

    def audit(self, templates: Mapping[str, str], *, bos_token: str = "", eos_token: str = "") -> FileTemplates:
        """:func:`audit_templates` of this set with the cache's limits, run once per distinct set.

        Raises what :func:`audit_templates` raises, in every thread that waited for it.
        """
        key: _CacheKey = (tuple(sorted(templates.items())), bos_token, eos_token)
        while True:
            with self._lock:
                cached = self._entries.get(key)
                if cached is not None:
                    self._entries.move_to_end(key)
                    self._hits += 1
                    return cached
                flight = self._in_flight.get(key)
                owner = flight is None
                if flight is None:
                    flight = self._in_flight[key] = _InFlight()
                    self._misses += 1
                else:
                    self._waits += 1
            if owner:
                return self._run(key, flight, templates, bos_token, eos_token)
            flight.done.wait()
            if flight.error is not None:
                raise flight.error
            if flight.result is not None:
                return flight.result
            # The auditing thread was interrupted before an outcome: look again.

    def _run(
        self, key: _CacheKey, flight: _InFlight, templates: Mapping[str, str], bos_token: str, eos_token: str
    ) -> FileTemplates:
        """Audit the set as the one thread doing so; publish the outcome to the waiters, whatever it is."""
        try:
            result = audit_templates(templates, bos_token=bos_token, eos_token=eos_token, limits=self._limits)
        except Exception as exc:
            flight.error = exc
            raise
        else:
            flight.result = result
        finally:
            with self._lock:
                del self._in_flight[key]
                if flight.result is not None:
                    self._entries[key] = flight.result
                    while len(self._entries) > self._max_entries:
                        self._entries.popitem(last=False)
            flight.done.set()
        return result

    def stats(self) -> TemplateCacheStats:
        """The counts so far."""
        with self._lock:
            return TemplateCacheStats(self._hits, self._misses, self._waits, len(self._entries))


#: The cache :func:`gguf_audit.audit.audit_file` uses unless given another.
DEFAULT_TEMPLATE_CACHE: Final = TemplateCache()


def audit_header_templates(header: Header, *, cache: TemplateCache = DEFAULT_TEMPLATE_CACHE) -> FileTemplates:
    """Audit the header's chat templates with its BOS and EOS token texts, once per distinct set.

    A collection holds many quantizations of each model, all with the same
    template: through ``cache``, the child process that renders them starts
    once per set.
    """
    templates = header_templates(header)
    bos, eos = _token_text(header, "tokenizer.ggml.bos_token_id"), _token_text(header, "tokenizer.ggml.eos_token_id")
    return cache.audit(templates, bos_token=bos, eos_token=eos)


#: Items of an array-typed template key taken (the per-file limit judges far fewer).
_MAX_ARRAY_TEMPLATES: Final = 1_000


def header_templates(header: Header) -> dict[str, str]:
    """Every chat template of the header, by a name that tells each occurrence apart.

    ``tokenizer.chat_template`` and every ``tokenizer.chat_template.<name>``, each
    occurrence of a key that appears more than once (``KEY (occurrence 2)``;
    runtimes differ in which one they use), and each string of a key stored as an
    array of strings (``KEY[0]``, ``KEY[1]``; a runtime may join or pick them).
    """
    templates: dict[str, str] = {}
    seen: dict[str, int] = {}
    for kv in header.kvs:
        if kv.key != "tokenizer.chat_template" and not kv.key.startswith("tokenizer.chat_template."):
            continue
        seen[kv.key] = seen.get(kv.key, 0) + 1
        name = kv.key if seen[kv.key] == 1 else f"{kv.key} (occurrence {seen[kv.key]})"
        if isinstance(kv.value, str):
            templates[name] = kv.value
        elif isinstance(kv.value, StringArray):
            for index in range(min(len(kv.value), _MAX_ARRAY_TEMPLATES)):
                templates[f"{name}[{index}]"] = kv.value[index]
    return templates


def _token_text(header: Header, id_key: str) -> str:
    token_id = header.get_int(id_key)  # typed: a bool or a float is no id (a bool would index as a mask)
    tokens = header.get("tokenizer.ggml.tokens")
    if token_id is not None and isinstance(tokens, StringArray) and 0 <= token_id < len(tokens):
        return tokens[token_id]
    return ""
