"""What a ranged answer must be: the checks every source applies before a byte is used.

A ``206`` must carry a ``Content-Range`` for exactly the bytes asked (fewer
only where the file ends) and a body of exactly that length; anything else
is a :class:`~gguf_audit.io.errors.RangeAnswerError`, retried and never
decoded. A ``200`` to a Range request is the whole body from byte 0 (the
server ignores Range, RFC 9110 allows it): the asked bytes are taken from
its start when they lie within ``max_ignored_range_bytes``
(:func:`whole_body_end`), and past that the answer is refused with
``io.range_ignored`` without reading it. Header reads and sampled reads go
through the same checks.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable
from typing import Final, NamedTuple

from gguf_audit.codes import Code
from gguf_audit.errors import SourceError
from gguf_audit.io.errors import RangeAnswerError

__all__ = ["ContentRange", "check_body", "check_partial", "parse_content_range", "read_upto", "whole_body_end"]

_CONTENT_RANGE: Final = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")
_UNSATISFIED_RANGE: Final = re.compile(r"bytes\s+\*/(\d+)")
_READ_CHUNK_BYTES: Final = 1 << 20


class ContentRange(NamedTuple):
    """``Content-Range: bytes first-last/total`` (``total`` None for ``*``; ``first`` None for ``*/total``)."""

    first: int | None
    last: int | None
    total: int | None


def parse_content_range(text: str | None) -> ContentRange | None:
    """The parts of a ``Content-Range`` header, or None when absent or not a byte range."""
    if not text:
        return None
    match = _CONTENT_RANGE.fullmatch(text.strip())
    if match:
        total = match.group(3)
        return ContentRange(int(match.group(1)), int(match.group(2)), None if total == "*" else int(total))
    match = _UNSATISFIED_RANGE.fullmatch(text.strip())
    if match:
        return ContentRange(None, None, int(match.group(1)))
    return None


def check_partial(start: int, end: int, content_range: str | None) -> int:
    """The body length a ``206`` for ``[start, end)`` must have; raises RangeAnswerError when it answers other bytes.

    The range may stop short of ``end`` only where the file ends (``last + 1 == total``).
    """
    asked = f"bytes={start}-{end - 1}"
    parsed = parse_content_range(content_range)
    if parsed is None or parsed.first is None or parsed.last is None:
        raise RangeAnswerError(f"asked {asked}, the answer's Content-Range is {content_range!r}")
    expected_last = end - 1 if parsed.total is None else min(end, parsed.total) - 1
    if parsed.first != start or parsed.last != expected_last:
        raise RangeAnswerError(f"asked {asked}, the answer holds {content_range!r}")
    return parsed.last - parsed.first + 1


def check_body(body: bytes, expected: int, asked: str) -> bytes:
    """``body`` when it has ``expected`` bytes; raises RangeAnswerError for a short or long one."""
    if len(body) != expected:
        raise RangeAnswerError(f"asked {asked}, the body has {len(body)} of {expected} bytes")
    return body


def whole_body_end(start: int, end: int, total: int | None, limit: int) -> int:
    """How far into a whole-body answer to read for ``[start, end)``; raises ``io.range_ignored`` past ``limit``.

    ``total`` is the body's length when told (``Content-Length``).
    """
    stop = end if total is None else min(end, total)
    if stop > limit:
        size = "of unknown length" if total is None else f"of {total} bytes"
        raise SourceError(
            Code.IO_RANGE_IGNORED,
            f"the server ignores Range: asked bytes={start}-{end - 1}, it answered 200 with the whole body "
            f"({size}); reading to byte {stop} is past max_ignored_range_bytes ({limit})",
        )
    return stop


async def read_upto(read: Callable[[int], Awaitable[bytes]], n: int) -> bytes:
    """Up to ``n`` bytes from a body stream (``read(k)`` returns at most ``k``, empty at its end)."""
    chunks: list[bytes] = []
    got = 0
    while got < n:
        chunk = await read(min(n - got, _READ_CHUNK_BYTES))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
