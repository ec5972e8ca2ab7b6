"""The finding value every check yields, and the loadable verdict over findings.

Every problem gguf-audit reports is a :class:`Finding` whose ``code`` is one of
:data:`gguf_audit.codes.CODES`; :func:`finding` takes a :class:`~gguf_audit.codes.Code` and refuses any other.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final

from gguf_audit.bounded import NAME_LIMIT, clip, clip_message
from gguf_audit.codes import (
    CODES,
    CORE_CODES,
    LLAMA_CPP_BUILD,
    SEVERITY_RANK,
    VERDICT_RANK,
    Code,
    CodeInfo,
    LlamaCpp,
    Severity,
)

__all__ = [
    "CODES",
    "CORE_CODES",
    "FINDINGS_PER_CODE",
    "LLAMA_CPP_BUILD",
    "SEVERITY_RANK",
    "Code",
    "CodeInfo",
    "Finding",
    "LeftOut",
    "LlamaCpp",
    "Severity",
    "cap_findings",
    "finding",
    "is_loadable",
    "llama_cpp_label",
    "llama_cpp_of_codes",
    "llama_cpp_verdict",
]


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem found in a file or a model; ``code`` is a :class:`Code` member's text, as stored rows hold it."""

    code: str
    severity: Severity
    message: str
    tensor: str | None = None
    offset: int | None = None

    @property
    def refused(self) -> bool | None:
        return CODES[self.code].refused

    @property
    def llama_cpp(self) -> LlamaCpp | None:
        return CODES[self.code].llama_cpp

    def as_dict(self) -> dict[str, object]:
        return {
            "code": self.code,
            "severity": str(self.severity),
            "message": self.message,
            "tensor": self.tensor,
            "offset": self.offset,
        }


FINDINGS_PER_CODE: Final = 1000
"""Findings of one code kept per file (a 70B model has about 720 tensors, so a per-tensor finding fits);
the rest become one :class:`LeftOut` row. A forged header of a million empty keys would otherwise give a
million rows: 135 MB of JSON, a gigabyte of memory and every report as slow."""


@dataclass(frozen=True, slots=True)
class LeftOut(Finding):
    """The row that stands for ``left_out`` findings of its code that :func:`cap_findings` did not keep."""

    left_out: int = 0


def cap_findings(found: Iterable[Finding], limit: int = FINDINGS_PER_CODE) -> list[Finding]:
    """The first ``limit`` findings of each code in ``found``, in order, then one :class:`LeftOut` row per
    code that had more, saying how many (the worst severity among them). Consumes ``found`` as a stream,
    so a check yielding millions holds at most ``limit`` of a code at a time; capping twice (a check's
    findings, then the file's) adds up the rows left out, never counts a :class:`LeftOut` row as one."""
    kept: list[Finding] = []
    seen: dict[str, int] = {}
    left: dict[str, int] = {}
    worst: dict[str, Severity] = {}
    for f in found:
        n = seen.get(f.code, 0)
        if n < limit and not isinstance(f, LeftOut):
            seen[f.code] = n + 1
            kept.append(f)
            continue
        left[f.code] = left.get(f.code, 0) + (f.left_out if isinstance(f, LeftOut) else 1)
        known = worst.get(f.code)
        if known is None or SEVERITY_RANK[f.severity] > SEVERITY_RANK[known]:
            worst[f.code] = f.severity
    for code, n in left.items():
        shown = min(seen.get(code, 0), limit)
        message = f"{n:,} more {code} findings left out: the first {shown:,} of this file are listed"
        kept.append(LeftOut(code, worst[code], message, left_out=n))
    return kept


def finding(
    code: Code,
    message: str,
    *,
    tensor: str | None = None,
    offset: int | None = None,
    severity: Severity | None = None,
) -> Finding:
    """Build a finding with the code's registered severity unless one is given.

    The message and the tensor name are cut to :data:`~gguf_audit.bounded.MESSAGE_LIMIT` and
    :data:`~gguf_audit.bounded.NAME_LIMIT` characters (their full length stated).
    """
    info = CODES.get(code)
    if info is None:
        raise KeyError(f"unregistered finding code {code!r}")
    # Cut before anything else: a corrupt header can hand over a name of megabytes (gguf_audit.bounded).
    shown_tensor = clip(tensor, NAME_LIMIT) if tensor is not None else None
    return Finding(str(code), severity or info.severity, _one_line(clip_message(message)), shown_tensor, offset)


def is_loadable(findings: Iterable[Finding]) -> bool | None:
    """Whether current llama.cpp on a little-endian host would load a file with these findings.

    False when any finding is one llama.cpp refuses; None when none is but one
    means the audit could not reach a verdict; True otherwise.
    """
    verdict: bool | None = True
    for f in findings:
        refused = CODES[f.code].refused
        if refused:
            return False
        if refused is None:
            verdict = None
    return verdict


def llama_cpp_verdict(findings: Iterable[Finding]) -> LlamaCpp | None:
    """What llama.cpp :data:`LLAMA_CPP_BUILD` does with a file that has these findings: the worst of them.

    ``aborts`` over ``refuses`` over unknown (None: a finding the audit could not
    judge, and nothing worse) over ``loads``.
    """
    worst = LlamaCpp.LOADS
    unknown = False
    for f in findings:
        verdict = CODES[f.code].llama_cpp
        if verdict is None:
            unknown = True
        elif VERDICT_RANK[verdict] > VERDICT_RANK[worst]:
            worst = verdict
    if worst is LlamaCpp.LOADS and unknown:
        return None
    return worst


def llama_cpp_of_codes(codes: Iterable[str], loadable: bool | None = True) -> LlamaCpp | None:
    """:func:`llama_cpp_verdict` of a stored row: the worst verdict of its ``codes`` (a code this release
    does not register counts as unknown), never better than its ``loadable`` says (false: at least
    ``refuses``; null: unknown unless a code is worse)."""
    worst = LlamaCpp.LOADS
    unknown = loadable is None
    for code in codes:
        info = CODES.get(code)
        verdict = info.llama_cpp if info is not None else None
        if verdict is None:
            unknown = True
        elif VERDICT_RANK[verdict] > VERDICT_RANK[worst]:
            worst = verdict
    if loadable is False and worst is LlamaCpp.LOADS:
        return LlamaCpp.REFUSES
    if worst is LlamaCpp.LOADS and unknown:
        return None
    return worst


def llama_cpp_label(verdict: LlamaCpp | str | None) -> str:
    """A verdict as the reports print it: ``loads``, ``refuses``, ``aborts``, or ``unknown`` for None."""
    return "unknown" if verdict is None else str(verdict)


def _one_line(message: str) -> str:
    return " ".join(message.split()) if "\n" in message or "\r" in message else message
