"""Text from a file cut to a named size before anything else (escape, redaction, JSON) sees it.

A corrupt count or type can make the parser hand over a key or tensor name of
megabytes (llama.cpp's generic string limit is 1 GiB). Quoted whole, one such
name would make every message, cell, report and log line that shows it as
large, and every escape and redaction pass over it as slow. Every consumer
cuts file-controlled text with :func:`clip` or :func:`quote` first, and says
how long the whole was, so the output stays small and still honest.

Pure and cheap: slicing, never a scan of the whole string.
"""

from __future__ import annotations

from typing import Final

__all__ = ["ITEM_LIMIT", "MESSAGE_LIMIT", "NAME_LIMIT", "VALUE_LIMIT", "clip", "clip_message", "quote"]

NAME_LIMIT: Final = 256
"""Characters shown of a key, a tensor name or a quoted value (llama.cpp's tensor names stop at 63 bytes)."""
ITEM_LIMIT: Final = 1024
"""Characters shown of one item of a string array (a token, a merge)."""
VALUE_LIMIT: Final = 65536
"""Characters shown of one string value in a full dump (a chat template of a real model is a few KiB)."""
MESSAGE_LIMIT: Final = 1200
"""Characters kept of a finding's message; a longer one keeps its head and its tail."""
_MESSAGE_TAIL: Final = 300


def clip(text: str, limit: int = NAME_LIMIT) -> str:
    """``text`` itself when it holds at most ``limit`` characters, else its head and its full length.

    ``'abc… (16,777,216 characters)'``: the mark and the length tell a reader
    the value was longer, and two long values that differ in length stay apart.
    """
    if len(text) <= limit:
        return text
    return f"{text[:limit]}… ({len(text):,} characters)"


def quote(value: object, limit: int = NAME_LIMIT) -> str:
    """``repr`` of ``value`` for a message, cut to ``limit`` characters with its full length stated.

    ``'blk.0.attn_q.weight'``, or ``'AAAA…' (16,777,216 characters)`` for a long one. A value
    other than a string is shown by its ``repr``, cut the same way.
    """
    if isinstance(value, (bytes, bytearray)) and len(value) > limit:
        # repr of the whole would be up to four times its size: cut the bytes first.
        return f"{repr(bytes(value[:limit]))[:limit]}… ({len(value):,} bytes)"
    if not isinstance(value, str):
        return clip(repr(value), limit)
    if len(value) <= limit:
        return repr(value)
    return f"{value[:limit] + '…'!r} ({len(value):,} characters)"


def clip_message(message: str, limit: int = MESSAGE_LIMIT) -> str:
    """A message cut to about ``limit`` characters: its head and its tail (where the figures usually are)."""
    if len(message) <= limit:
        return message
    head = max(limit - _MESSAGE_TAIL, 0)
    return f"{message[:head]}… ({len(message) - head - _MESSAGE_TAIL:,} characters cut) …{message[-_MESSAGE_TAIL:]}"
