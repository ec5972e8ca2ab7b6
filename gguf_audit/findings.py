"""The finding value every check yields, and the loadable verdict over findings.

Every problem gguf-audit reports is a :class:`Finding` whose ``code`` is one of
:data:`gguf_audit.codes.CODES`; :func:`finding` refuses any other.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gguf_audit.codes import CODES, CORE_CODES, SEVERITY_RANK, CodeInfo, Severity

__all__ = [
    "CODES",
    "CORE_CODES",
    "SEVERITY_RANK",
    "CodeInfo",
    "Finding",
    "Severity",
    "finding",
    "is_loadable",
]


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem found in a file or a model."""

    code: str
    severity: Severity
    message: str
    tensor: str | None = None
    offset: int | None = None

    @property
    def refused(self) -> bool | None:
        return CODES[self.code].refused

    def as_dict(self) -> dict[str, object]:
        return {
            "code": self.code,
            "severity": str(self.severity),
            "message": self.message,
            "tensor": self.tensor,
            "offset": self.offset,
        }


def finding(
    code: str,
    message: str,
    *,
    tensor: str | None = None,
    offset: int | None = None,
    severity: Severity | None = None,
) -> Finding:
    """Build a finding with the code's registered severity unless one is given."""
    info = CODES.get(code)
    if info is None:
        raise KeyError(f"unregistered finding code {code!r}")
    return Finding(code, severity or info.severity, _one_line(message), tensor, offset)


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


def _one_line(message: str) -> str:
    return " ".join(message.split()) if "\n" in message or "\r" in message else message
