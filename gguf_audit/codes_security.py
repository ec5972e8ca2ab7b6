"""The finding codes of the security work (issue 12), as data: :mod:`gguf_audit.codes` registers them.

Each entry is ``(code, severity, refused, doc)`` with the severity as its
string value (``"error"``, ``"warning"``, ``"info"``). Nothing is registered
by importing this module; the registry builds its table from
:data:`SECURITY_CODES` explicitly. Verdicts were read from llama.cpp's
sources (``src/llama-vocab.cpp``, ``src/llama-model-loader.cpp``) and ggml's
``src/gguf.cpp``; each doc names the build or change that fixed the advisory,
so a mirror can tell which files endanger users of older runtimes.
"""

from __future__ import annotations

from typing import Final

__all__ = ["ADVISORIES", "SECURITY_CODES", "Advisory", "endangers"]

SecurityCode = tuple[str, str, bool | None, str]

SECURITY_CODES: Final[tuple[SecurityCode, ...]] = (
    (
        "template.too_many",
        "warning",
        False,
        "A file carries more chat templates (keys, repeated keys, array items) than gguf-audit judges per file "
        "(16), more distinct ones than it renders (8), or their renders passed the per-file budget (30 s of wall "
        "clock): the rest were not judged. Each render may take seconds, so a file of thousands of templates "
        "would otherwise hold an auditor for hours.",
    ),
    (
        "run.file_deadline",
        "error",
        None,
        "The file's audit passed the scan's per-file deadline (15 minutes of wall clock from its start) and was "
        "left running: the file got this row instead of holding its batch. A file may be built to exhaust an "
        "auditor.",
    ),
    (
        "tensor.size_overflow",
        "error",
        True,
        "Sizes that wrap 64-bit arithmetic although each element count fits int64: a tensor's byte size past "
        "SIZE_MAX (CVE-2026-33298, fixed by llama.cpp PR #19072), padded tensor sizes whose running sum overflows 64 "
        "bits (CVE-2025-53630, fixed in llama.cpp commit 26a48ad6), or a data section so large that ggml's "
        "context size wraps (CVE-2026-27940, ggml_context size checks of llama.cpp PR #19856). Current "
        "llama.cpp refuses the file; older builds read or write out of bounds.",
    ),
    (
        "tokenizer.bad_byte_token",
        "warning",
        False,
        "A token of type BYTE whose text is not '<0xNN>' with NN two hex digits. llama.cpp before commit "
        "cf06ad7d parsed any BYTE token of a PLaMo-2 vocabulary as a byte index and wrote past a 256-entry table "
        "(out-of-bounds write); current builds skip such tokens (and refuse a PLaMo-2 vocabulary left without "
        "all 256 bytes). An error for PLaMo-2 vocabularies, a warning for the others (SPM reads two hex digits "
        "from it).",
    ),
)
"""The codes this module adds: ``(code, severity, refused, doc)``."""


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
