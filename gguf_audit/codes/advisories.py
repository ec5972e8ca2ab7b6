"""The security advisories finding messages quote, and the llama.cpp builds or changes that fixed them.

A finding whose file meets an advisory's trigger names the advisory and the builds it endangers, so a
mirror can tell which files endanger users of older runtimes. The verdicts of those codes were read from
llama.cpp's sources (``src/llama-vocab.cpp``, ``src/llama-model-loader.cpp``) and ggml's ``src/gguf.cpp``.
"""

from __future__ import annotations

from typing import Final

__all__ = ["ADVISORIES", "Advisory", "endangers"]

Advisory = tuple[str, str]
"""An advisory's id and the llama.cpp build or change that fixed it."""

ADVISORIES: Final[dict[str, Advisory]] = {
    "byte_size": ("CVE-2026-33298", "llama.cpp PR #19072"),
    "padded_sum": ("CVE-2025-53630", "llama.cpp commit 26a48ad6"),
    "context_wrap": ("CVE-2026-27940", "llama.cpp PR #19856"),
    "region_past_eof": ("CVE-2026-7482", "Ollama's fix for CVE-2026-7482"),
    "huge_length": (
        "the 43-byte file that hangs gguf-py 0.19",
        "llama.cpp PR #19856 (limits on string and array sizes)",
    ),
    "plamo2_byte": ("the PLaMo-2 byte-token out-of-bounds write", "llama.cpp commit cf06ad7d (#26511)"),
    "vocab_arrays": ("token arrays read past their end", "llama.cpp PR #27075"),
}
"""Advisory facts quoted in finding messages: which builds a file endangers."""


def endangers(advisory: str) -> str:
    """The message tail naming the advisory and the builds a file meeting its trigger endangers."""
    ident, fixed = ADVISORIES[advisory]
    return f"({ident}: builds before {fixed} are endangered)"
