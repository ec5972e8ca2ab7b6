"""What every report shares: the one escape of untrusted text, the one finding line, byte sizes.

Text from the file (keys, names, templates, messages quoting them) is
untrusted: every control character, escape sequence and bidirectional
override is shown escaped, so a file cannot drive the terminal that prints
its report. Non-finite floats in JSON follow
:func:`gguf_audit.format.model.json_scalar`, the one rule for them.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Final

from gguf_audit.bounded import clip
from gguf_audit.findings import Finding
from gguf_audit.redact import redact_url

__all__ = [
    "INSPECT_CODE_WIDTH",
    "MEASURE_CODE_WIDTH",
    "UNSAFE",
    "counted",
    "escape",
    "finding_line",
    "fmt_bytes",
    "fmt_stat",
    "shown_url",
]

INSPECT_CODE_WIDTH: Final = 32
"""The code column of ``inspect``'s problem lines."""
MEASURE_CODE_WIDTH: Final = 24
"""The code column of ``sample``'s and ``compare``'s problem lines (their codes are shorter)."""

# C0 and C1 controls (0x9B is the 8-bit CSI that starts a terminal escape), DEL,
# the line and paragraph separators (JavaScript and some viewers end lines there),
# and the Unicode format characters that reorder or hide text (bidi embeddings and
# isolates, zero-width marks, BOM, the invisible tag characters).
UNSAFE: Final = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\U000e0000-\U000e007f]"
)


def escape(text: str, limit: int | None = None) -> str:
    """``text`` with every unsafe character shown as an escape, cut to ``limit`` first (its length stated)."""
    if limit is not None:
        text = clip(text, limit)
    return UNSAFE.sub(_escape_char, text)


def shown_url(url: str) -> str:
    """A URL as a terminal line may show it: its secrets redacted, its control characters escaped."""
    return escape(redact_url(url))


def _escape_char(match: re.Match[str]) -> str:
    ch = match.group()
    code = ord(ch)
    if ch == "\n":
        return "\\n"
    if ch == "\t":
        return "\\t"
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def finding_line(f: Finding, *, code_width: int = INSPECT_CODE_WIDTH, place: bool = True) -> str:
    """One problem line: ``  SEVERITY code  message``, and with ``place`` its ``[tensor t, @offset]``."""
    where = []
    if place and f.tensor:
        where.append(f"tensor {escape(f.tensor)}")  # already cut by finding()
    if place and f.offset is not None:
        where.append(f"@{f.offset}")
    suffix = f"  [{', '.join(where)}]" if where else ""
    return f"  {f.severity.upper():7} {f.code:{code_width}} {escape(f.message, 400)}{suffix}"


def fmt_bytes(n: int | None, *, exact: bool = False) -> str:
    """``1.6 MiB``; with ``exact``, ``1.6 MiB (1719840 B)``."""
    if n is None:
        return "?"
    size = Decimal(n)  # not float: a forged count past 2**1024 would raise OverflowError
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            if unit == "B":
                return f"{n} B"
            return f"{size:.1f} {unit} ({n} B)" if exact else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def fmt_stat(x: float | None) -> str:
    """A statistic in four significant digits, ``-`` when there is none."""
    return "-" if x is None else f"{x:.4g}"


def counted(n: int, one: str, many: str | None = None) -> str:
    """``1 file``, ``2 files``: ``n`` with the word in the right number (``many`` when adding an s is wrong)."""
    return f"{n} {one if n == 1 else many or one + 's'}"
