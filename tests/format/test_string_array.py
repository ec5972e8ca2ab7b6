"""StringArray's bulk accessors agree with its per-item ones."""

from __future__ import annotations

import pickle
import random

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from gguf_audit.format.model import StringArray


def _laid_out(items: list[bytes], gap: int) -> StringArray:
    """Items as a GGUF string array lays them out: each behind a u64 length, with ``gap`` bytes before."""
    buf = bytearray(b"\xff" * gap)
    starts, ends = [], []
    for item in items:
        buf += len(item).to_bytes(8, "little")
        starts.append(len(buf))
        buf += item
        ends.append(len(buf))
    return StringArray(bytes(buf), np.array(starts, dtype=np.int64), np.array(ends, dtype=np.int64))


@given(st.lists(st.binary(max_size=40), max_size=60), st.integers(0, 16))
def test_joined_bytes_is_the_items_concatenated(items: list[bytes], gap: int) -> None:
    array = _laid_out(items, gap)
    assert array.joined_bytes() == b"".join(array.raw(i) for i in range(len(array))) == b"".join(items)
    assert array.lengths().tolist() == [len(i) for i in items]


def _reordered(items: list[bytes], order: list[int]) -> StringArray:
    """The items of :func:`_laid_out` listed in another order (the fallback gather, not the in-order join)."""
    laid = _laid_out(items, 3)
    starts = np.array([laid._starts[i] for i in order], dtype=np.int64)
    ends = np.array([laid._ends[i] for i in order], dtype=np.int64)
    return StringArray(laid._buf, starts, ends)


@given(st.lists(st.binary(max_size=12), min_size=1, max_size=40), st.randoms(use_true_random=False))
def test_joined_bytes_in_any_order(items: list[bytes], rnd: random.Random) -> None:
    order = list(range(len(items)))
    rnd.shuffle(order)
    array = _reordered(items, order)
    assert array.joined_bytes() == b"".join(items[i] for i in order)


_WITH_NULS = st.lists(st.binary(max_size=12) | st.sampled_from([b"", b"\0", b"a\0b", b"\0\0x", b"ab\0"]), max_size=50)


@given(_WITH_NULS, st.integers(0, 9))
def test_up_to_nul_cuts_each_item_at_its_first_nul(items: list[bytes], gap: int) -> None:
    array = _laid_out(items, gap)
    cut = array.up_to_nul()
    assert [cut.raw(i) for i in range(len(cut))] == [item.split(b"\0", 1)[0] for item in items]
    # The same array when no item holds a NUL (length words full of zero bytes do not count).
    assert (cut is array) == all(b"\0" not in item for item in items)
    assert cut.joined_bytes() == b"".join(item.split(b"\0", 1)[0] for item in items)


def test_join_and_cut_are_kept_but_not_pickled() -> None:
    array = _laid_out([b"a\0", b"bc", b"d"], 5)
    assert array.up_to_nul() is array.up_to_nul()
    assert array.joined_bytes() is array.joined_bytes()
    copy = pickle.loads(pickle.dumps(array))
    assert copy._joined is None and copy._cut is None
    assert list(copy) == ["a\0", "bc", "d"] and copy.up_to_nul().raw(0) == b"a"


@given(_WITH_NULS)
def test_adjacent_items_join_and_cut(items: list[bytes]) -> None:
    """Items with nothing between them (an item's end is the next one's start), empty ones among them."""
    ends = np.cumsum([len(i) for i in items], dtype=np.int64)
    array = StringArray(b"".join(items), ends - np.array([len(i) for i in items], dtype=np.int64), ends)
    assert array.joined_bytes() == b"".join(items)
    assert [array.up_to_nul().raw(i) for i in range(len(items))] == [i.split(b"\0", 1)[0] for i in items]
