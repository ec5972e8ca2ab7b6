"""Where the items of a GGUF string array start, found in bulk with numpy rather than one length at a time.

Each item is a little-endian u64 length and that many bytes, so where item
``i + 1`` starts depends on item ``i``'s length: a plain loop reads them one
after the other, about 0.3 us an item in Python. Vocabulary items are short,
so the top six bytes of each length are zero, and few other places in a
vocabulary hold six zero bytes in a row. :func:`walk_short_items` takes every
such place in a window as a candidate length, drops candidates no other
candidate leads to (the bytes just before a length, a run of zeros inside a
token), and then keeps only what it proves: the chain that starts at the
array's first length, each position exactly the previous one plus 8 plus its
length. The first place the proof breaks (a long item, a stray candidate, the
end of the buffer) ends the walk; the caller's exact loop reads on from there,
so the answer is always the loop's, only sooner. Pure: no I/O.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = ["walk_short_items"]

_PREFIX: Final = 8
_MAX_JUMPS: Final = 256
"""Stray candidates skipped in one window before the walk stops there (real vocabularies have a few)."""
_MIN_WINDOW: Final = 1 << 12
_MAX_WINDOW: Final = 1 << 22
_SLACK_BYTES: Final = 1 << 20
"""Bytes scanned past what was proven before the walk hands over to the loop: keeps a forged array (all
zeros: a candidate at every byte) linear in its size."""


def walk_short_items(buf: bytes | memoryview, first: int, n: int) -> tuple[npt.NDArray[np.int64], int]:
    """The positions of the length prefixes of the first ``k <= n`` items from ``first``, and where item ``k``'s
    prefix starts (the end of item ``k - 1``'s text, never past ``buf``).

    Only little-endian u64 prefixes (GGUF v2/v3 on a little-endian file). ``k`` may be anything from 0 to ``n``:
    the caller reads items ``k`` to ``n - 1`` one at a time.
    """
    u8 = np.frombuffer(buf, dtype=np.uint8)
    found: list[npt.NDArray[np.int64]] = []
    pos, left, waste = first, n, 0
    while left > 0 and waste <= (pos - first) + _SLACK_BYTES:
        end = min(len(u8), pos + min(max(left * 16, _MIN_WINDOW), _MAX_WINDOW))
        chain = _proven_chain(u8[pos:end], left) + pos
        if len(chain) == 0:
            # An item the walk cannot see (empty, 64 KiB or longer, or text that starts with a zero byte):
            # one exact step over it.
            if pos + _PREFIX > len(u8):
                break
            chain = np.array([pos], dtype=np.int64)
        last = int(chain[-1])
        after = last + _PREFIX + _length(u8, last)
        if after > len(u8):
            # The last item's text runs past the buffer: the caller's loop says why.
            found.append(chain[:-1])
            return _joined(found), last
        found.append(chain)
        left -= len(chain)
        waste += max(end - after, 0)
        pos = after
    return _joined(found), pos


def _joined(parts: list[npt.NDArray[np.int64]]) -> npt.NDArray[np.int64]:
    return np.concatenate(parts) if parts else np.empty(0, dtype=np.int64)


def _length(u8: npt.NDArray[np.uint8], at: int) -> int:
    return int(u8[at : at + _PREFIX].view("<u8")[0])


def _proven_chain(seg: npt.NDArray[np.uint8], limit: int) -> npt.NDArray[np.int64]:
    """Offsets in ``seg`` of up to ``limit`` items proven to follow one another from offset 0, each
    length under 2^16 (the last one's text may run past ``seg``)."""
    empty = np.empty(0, dtype=np.int64)
    if len(seg) < _PREFIX:
        return empty
    # A length under 2^16 followed by text ends a run of at least six zero bytes exactly at its own end:
    # one candidate per such run, 8 bytes before the run's end.
    zero = seg == 0
    last = np.flatnonzero(zero[:-1] > zero[1:])
    if zero[-1]:
        last = np.append(last, len(seg) - 1)
    last = last[last >= _PREFIX - 1]
    run = zero[last - 1] & zero[last - 2] & zero[last - 3] & zero[last - 4] & zero[last - 5]
    cand = last[run].astype(np.int64) - (_PREFIX - 1)
    if len(cand) == 0 or cand[0] != 0:
        return empty
    # Each candidate's successor, when it is a candidate too; -1 when not.
    nxt = cand + _PREFIX + (seg[cand].astype(np.int64) | (seg[cand + 1].astype(np.int64) << 8))
    index_of = np.full(len(seg) + 1, -1, dtype=np.int32)
    index_of[cand] = np.arange(len(cand), dtype=np.int32)
    succ = index_of[np.minimum(nxt, len(seg))]
    # Mostly each candidate leads to the next one; the chain is followed in Python only across the
    # places where it does not (a stray candidate skipped, or the end).
    breaks = np.flatnonzero(succ != np.arange(1, len(cand) + 1))
    pieces: list[npt.NDArray[np.int64]] = []
    i, count = 0, 0
    while count < limit and len(pieces) < _MAX_JUMPS:
        b = int(breaks[np.searchsorted(breaks, i)])
        pieces.append(cand[i : b + 1])
        count += b + 1 - i
        i = int(succ[b])
        if i < 0:
            break
    return np.concatenate(pieces)[:limit]
