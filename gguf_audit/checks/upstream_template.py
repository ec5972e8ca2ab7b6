"""The GGUF's chat templates against the upstream's (``chat_template.jinja`` or ``tokenizer_config.json``).

The upstream's default template is ``chat_template.jinja`` when present (newer
transformers save it there), else ``tokenizer_config.json``'s ``chat_template``:
a string, or a list of ``{name, template}`` whose ``default`` entry is the
default and whose other entries are compared with ``tokenizer.chat_template.NAME``.

Templates are compared after normalising line ends to ``\\n`` and trimming the
ends. Equal then: nothing. Equal once every whitespace character is removed:
``upstream.template_whitespace`` (info; whitespace inside a template's literal
text does reach the prompt, but rarely changes what a model does). Otherwise
``upstream.template_differs`` (warning), with a one-line unified-diff summary:
the changed line counts and the first difference, in context. A template the
upstream has and the GGUF lacks: ``upstream.template_missing`` (warning for the
default, info for a named one).
"""

from __future__ import annotations

import difflib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Final

from gguf_audit.codes import Code
from gguf_audit.findings import Finding, Severity, finding
from gguf_audit.format.model import Header

if TYPE_CHECKING:
    from gguf_audit.checks.upstream import Upstream

__all__ = ["check_templates", "diff_summary", "normalise_template", "upstream_templates"]

SNIPPET: Final = 40
"""Characters of each side shown around a template's first difference."""


def normalise_template(text: str) -> str:
    return text.replace("\r\n", "\n").replace("\r", "\n").strip()


def upstream_templates(upstream: Upstream) -> tuple[dict[str, str], str]:
    """The upstream's templates by name (``default`` for the default) and the file they came from."""
    out: dict[str, str] = {}
    where = "tokenizer_config.json chat_template"
    raw = upstream.json("tokenizer_config.json").get("chat_template")
    if isinstance(raw, str):
        out["default"] = raw
    elif isinstance(raw, list):
        for item in raw:
            if (
                isinstance(item, Mapping)
                and isinstance(item.get("name"), str)
                and isinstance(item.get("template"), str)
            ):
                out[str(item["name"])] = str(item["template"])
    jinja = upstream.documents.get("chat_template.jinja")
    if isinstance(jinja, str):
        out["default"] = jinja
        where = "chat_template.jinja"
    return out, where


def check_templates(header: Header, upstream: Upstream) -> Iterator[Finding]:
    theirs, where = upstream_templates(upstream)
    for name, template in sorted(theirs.items()):
        key = "tokenizer.chat_template" if name == "default" else f"tokenizer.chat_template.{name}"
        source = where if name == "default" else f"tokenizer_config.json chat_template {name!r}"
        kv = header.metadata.get(key)
        ours = header.get_str(key)
        if ours is None:
            yield finding(
                Code.UPSTREAM_TEMPLATE_MISSING,
                f"{key} is absent but {source} has a template ({len(template)} characters)",
                severity=None if name == "default" else Severity.INFO,
            )
            continue
        a, b = normalise_template(ours), normalise_template(template)
        if a == b:
            continue
        offset = kv.offset if kv is not None else None
        if "".join(a.split()) == "".join(b.split()):
            yield finding(
                Code.UPSTREAM_TEMPLATE_WHITESPACE,
                f"{key} differs from {source} in whitespace only: {diff_summary(a, b)}",
                offset=offset,
            )
        else:
            yield finding(
                Code.UPSTREAM_TEMPLATE_DIFFERS, f"{key} differs from {source}: {diff_summary(a, b)}", offset=offset
            )


def diff_summary(ours: str, theirs: str) -> str:
    """``+N/-M lines``, and the first difference: where, and each side's text around it."""
    added = removed = 0
    for line in difflib.unified_diff(ours.split("\n"), theirs.split("\n"), lineterm="", n=0):
        if line.startswith("+") and not line.startswith("+++"):
            added += 1
        elif line.startswith("-") and not line.startswith("---"):
            removed += 1
    at = next((i for i, (x, y) in enumerate(zip(ours, theirs, strict=False)) if x != y), min(len(ours), len(theirs)))
    line_no = ours.count("\n", 0, at) + 1
    start = max(0, at - SNIPPET // 2)
    return (
        f"+{added}/-{removed} lines (+ upstream, - GGUF); first difference at line {line_no}, char {at}: "
        f"GGUF {_snip(ours, start)} vs upstream {_snip(theirs, start)}"
    )


def _snip(text: str, start: int) -> str:
    part = text[start : start + SNIPPET]
    return ("..." if start else "") + repr(part) + ("..." if start + SNIPPET < len(text) else "")
