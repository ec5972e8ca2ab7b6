"""The ``internal.*`` codes: gguf-audit itself failed."""

from __future__ import annotations

from typing import Final

from gguf_audit.codes.code import Code
from gguf_audit.codes.model import CodeInfo, Severity

__all__ = ["ENTRIES"]

ENTRIES: Final[tuple[CodeInfo, ...]] = (
    CodeInfo(
        Code.INTERNAL_UNEXPECTED,
        Severity.ERROR,
        None,
        "gguf-audit itself failed on this file; the message names the exception. Please report it.",
    ),
)
