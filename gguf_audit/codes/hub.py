"""The ``hub.*`` codes: the Hub's gguf card of a repository (``checks/hub_gguf.py``); llama.cpp never reads
it, so such a file loads.
"""

from __future__ import annotations

from typing import Final

from gguf_audit.codes.code import Code
from gguf_audit.codes.model import CodeInfo, LlamaCpp, Severity

__all__ = ["ENTRIES"]

ENTRIES: Final[tuple[CodeInfo, ...]] = (
    CodeInfo(
        Code.HUB_GGUF_MISMATCH,
        Severity.WARNING,
        LlamaCpp.LOADS,
        (
            "The Hub's gguf card of the repository (parameter count, architecture, context length or chat template, "
            "from the listing's expand=gguf) disagrees with the file's header: another model under the card, a stale "
            "card, or a template changed in one file only."
        ),
    ),
)
