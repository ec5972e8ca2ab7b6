"""The ``template.*`` codes: chat templates, treated as untrusted code (llama.cpp never runs them while
loading, so it loads every such file).
"""

from __future__ import annotations

from typing import Final

from gguf_audit.codes.code import Code
from gguf_audit.codes.model import CodeInfo, LlamaCpp, Severity

__all__ = ["ENTRIES"]

ENTRIES: Final[tuple[CodeInfo, ...]] = (
    CodeInfo(
        Code.TEMPLATE_SYNTAX_ERROR,
        Severity.ERROR,
        LlamaCpp.LOADS,
        "A chat template is not valid Jinja; chat front-ends fail on it.",
    ),
    CodeInfo(
        Code.TEMPLATE_UNSAFE,
        Severity.ERROR,
        LlamaCpp.LOADS,
        (
            "A chat template reaches for private attributes or sandbox-escape gadgets: code execution in any runtime "
            "rendering it without jinja2's sandbox (CVE-2024-34359)."
        ),
    ),
    CodeInfo(
        Code.TEMPLATE_RESOURCE_LIMIT,
        Severity.ERROR,
        LlamaCpp.LOADS,
        (
            "Rendering a chat template for a short conversation hit a CPU, wall-clock, memory, output, recursion or "
            "range limit: a denial of service for whoever renders it."
        ),
    ),
    CodeInfo(
        Code.TEMPLATE_RENDER_ERROR,
        Severity.WARNING,
        LlamaCpp.LOADS,
        "A chat template fails to render even a plain user/assistant conversation.",
    ),
    CodeInfo(
        Code.TEMPLATE_MISSING,
        Severity.INFO,
        LlamaCpp.LOADS,
        "The file has no tokenizer.chat_template; runtimes fall back to a built-in or guessed format.",
    ),
    CodeInfo(
        Code.TEMPLATE_TOO_MANY,
        Severity.WARNING,
        LlamaCpp.LOADS,
        (
            "A file carries more chat templates (keys, repeated keys, array items) than gguf-audit judges per file "
            "(16), more distinct ones than it renders (8), or their renders passed the per-file budget (30 s of wall "
            "clock): the rest were not judged. Each render may take seconds, so a file of thousands of templates "
            "would otherwise hold an auditor for hours."
        ),
    ),
)
