"""The Hub's ``gguf`` card of a repository against a file's own header.

The Hub shows, for a repository holding GGUF files, what it read from one of
them (``GET /api/models?expand=gguf``): ``total`` (the parameter count),
``architecture``, ``context_length`` and ``chat_template``. The listing asks
for it in the call it already makes, so comparing costs no request. Every
quantization of one model shares these four, so a file that disagrees is a
different model uploaded under the card, a stale card, or a template edited
in one file only: ``hub.gguf_mismatch`` names the field and both values.

Pure: a frozen value and a check over a parsed header.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gguf_audit.codes import Code
from gguf_audit.findings import Finding, finding
from gguf_audit.format.model import Header

__all__ = ["HubGGUF", "check_hub_gguf", "parse_hub_gguf"]


@dataclass(frozen=True, slots=True)
class HubGGUF:
    """What the Hub's ``gguf`` field says of a repository (None where it says nothing)."""

    total: int | None = None
    architecture: str | None = None
    context_length: int | None = None
    chat_template_sha256: str | None = None
    """The template's digest: cards carry templates of kilobytes, a listing keeps only what compares them."""


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def parse_hub_gguf(doc: object) -> HubGGUF | None:
    """The Hub's ``gguf`` JSON object as a :class:`HubGGUF`; None when absent or not an object."""
    if not isinstance(doc, Mapping):
        return None
    template = doc.get("chat_template")
    architecture = doc.get("architecture")
    return HubGGUF(
        total=_int(doc.get("total")),
        architecture=architecture if isinstance(architecture, str) else None,
        context_length=_int(doc.get("context_length")),
        chat_template_sha256=_digest(template) if isinstance(template, str) else None,
    )


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _header_facts(header: Header) -> dict[str, Any]:
    architecture = header.get("general.architecture")
    arch = architecture if isinstance(architecture, str) else None
    template = header.get("tokenizer.chat_template")
    return {
        "total": sum(t.n_elements for t in header.tensors),
        "architecture": arch,
        "context_length": header.get_int(f"{arch}.context_length") if arch else None,
        "chat_template_sha256": _digest(template) if isinstance(template, str) else None,
    }


def check_hub_gguf(header: Header, hub: HubGGUF, url: str) -> Iterator[Finding]:
    """``hub.gguf_mismatch`` for each field the Hub's card and the file's header both give and disagree on.

    A file of a split set holds part of the parameters: its count is not compared.
    """
    split_count = header.get_int("split.count")
    mine = _header_facts(header)
    for name, theirs in (
        ("total", hub.total),
        ("architecture", hub.architecture),
        ("context_length", hub.context_length),
        ("chat_template_sha256", hub.chat_template_sha256),
    ):
        ours = mine[name]
        if theirs is None or ours is None or ours == theirs:
            continue
        if name == "total" and split_count is not None and split_count > 1:
            continue
        what = {
            "total": "parameter count",
            "architecture": "architecture",
            "context_length": "context length",
            "chat_template_sha256": "chat template (sha256)",
        }[name]
        shown_ours = ours[:12] if name == "chat_template_sha256" else ours
        shown_theirs = theirs[:12] if isinstance(theirs, str) and name == "chat_template_sha256" else theirs
        yield finding(
            Code.HUB_GGUF_MISMATCH,
            f"{url}: the Hub's gguf card says {what} {shown_theirs!r}, the file's header {shown_ours!r}",
        )
