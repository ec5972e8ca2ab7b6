"""What one registered code says: its :class:`Severity`, what llama.cpp does with such a file, its doc.

The area modules (:mod:`gguf_audit.codes.header`, ``tensor``, ``data``, ...) are tables of
:class:`CodeInfo`; :mod:`gguf_audit.codes.registry` gathers them into the one registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Final

from gguf_audit.codes.code import Code

__all__ = ["LLAMA_CPP_BUILD", "SEVERITY_RANK", "VERDICT_RANK", "CodeInfo", "LlamaCpp", "Severity"]


class Severity(StrEnum):
    """How bad a finding is. ``error`` means the file is broken or refused."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


SEVERITY_RANK: Final = {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2}

LLAMA_CPP_BUILD: Final = "b11312"
"""The llama.cpp build every verdict describes: the oracle in ``../shared/llama.cpp`` (commit 0c1e57098)."""


class LlamaCpp(StrEnum):
    """What the pinned llama.cpp does with a file that has a finding: its verdict, worst last."""

    LOADS = "loads"
    REFUSES = "refuses"
    """The loader reports an error and returns no model: the calling program goes on."""
    ABORTS = "aborts"
    """A failed ``GGML_ASSERT`` or an uncaught exception kills the process that loads the file (SIGABRT)."""


VERDICT_RANK: Final = {LlamaCpp.LOADS: 0, LlamaCpp.REFUSES: 1, LlamaCpp.ABORTS: 2}


@dataclass(frozen=True, slots=True)
class CodeInfo:
    """One registered finding code."""

    code: Code
    severity: Severity
    llama_cpp: LlamaCpp | None
    """What llama.cpp :data:`LLAMA_CPP_BUILD` (little-endian host) does with a file that has this finding;
    None when the finding means gguf-audit could not tell (the verdict is then unknown)."""
    doc: str

    @property
    def refused(self) -> bool | None:
        """True when llama.cpp refuses or aborts on such a file, False when it loads it, None when unknown."""
        return None if self.llama_cpp is None else self.llama_cpp is not LlamaCpp.LOADS
