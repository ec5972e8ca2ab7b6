"""The bulk walk over a string array's length prefixes finds exactly what reading them one by one finds."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from gguf_audit.format.model import Header, StringArray
from gguf_audit.format.parser import parse_header
from gguf_audit.format.walk import walk_short_items
from gguf_audit.testing.builder import build_gguf, kv_array, kv_str, tiny_llama_like

# Items shaped to trip a walk that guesses: empty ones, runs of zero bytes (six zeros look like a length's
# top bytes), bytes that read as lengths, long items past the walk's 2^16, plain text.
_ITEM = st.one_of(
    st.binary(max_size=12),
    st.sampled_from([b"", b"\0" * 6, b"\0" * 7, b"\0" * 9, b"\x05" + b"\0" * 7, b"\0\x01" + b"\0" * 6]),
    st.text(max_size=10).map(lambda s: s.encode("utf-8")),
    st.integers(1, 4).map(lambda k: b"\0" * (8 * k)),
)


def _exact(buf: bytes, first: int, n: int) -> tuple[list[int], int]:
    """Prefix positions of the items whose text lies in ``buf``, read one at a time, and where the next one starts."""
    prefixes, pos = [], first
    for _ in range(n):
        if pos + 8 > len(buf):
            break
        after = pos + 8 + struct.unpack_from("<Q", buf, pos)[0]
        if after > len(buf):
            break
        prefixes.append(pos)
        pos = after
    return prefixes, pos


def _array(items: list[bytes], gap: bytes) -> bytes:
    return gap + b"".join(struct.pack("<Q", len(i)) + i for i in items)


@settings(max_examples=400)
@given(st.lists(_ITEM, max_size=80), st.binary(max_size=9), st.binary(max_size=40), st.integers(0, 8))
def test_walk_agrees_with_the_loop(items: list[bytes], gap: bytes, tail: bytes, fewer: int) -> None:
    buf = _array(items, gap) + tail
    n = max(len(items) - fewer, 0)
    prefixes, pos = walk_short_items(buf, len(gap), n)
    exact, exact_pos = _exact(buf, len(gap), n)
    # The walk may stop early (the caller's loop reads on), never elsewhere than the loop.
    assert prefixes.tolist() == exact[: len(prefixes)]
    assert pos == [*exact, exact_pos][len(prefixes)]


@given(st.lists(_ITEM, min_size=1, max_size=40), st.integers(1, 30))
def test_walk_on_a_cut_buffer_agrees_with_the_loop(items: list[bytes], cut: int) -> None:
    buf = _array(items, b"")
    buf = buf[: max(len(buf) - cut, 0)]
    prefixes, pos = walk_short_items(buf, 0, len(items))
    exact, exact_pos = _exact(buf, 0, len(items))
    assert prefixes.tolist() == exact[: len(prefixes)]
    assert pos == [*exact, exact_pos][len(prefixes)] <= len(buf)


def test_walk_reads_a_vocabulary_in_bulk() -> None:
    items = [f"tok{i}".encode() * (1 + i % 5) for i in range(20_000)]
    prefixes, pos = walk_short_items(_array(items, b"xyz"), 3, len(items))
    assert len(prefixes) == len(items) and pos == len(_array(items, b"xyz"))


def test_zeros_cost_no_more_than_the_loop() -> None:
    """A forged array of empty items (all zeros: a candidate length at every byte) is read exactly."""
    n = 300_000
    prefixes, pos = walk_short_items(bytes(8 * n + 100), 0, n)
    assert prefixes.tolist() == list(range(0, 8 * len(prefixes), 8)) and pos == 8 * len(prefixes)


@given(st.lists(_ITEM, max_size=50))
def test_parsed_string_array_is_the_items(items: list[bytes]) -> None:
    kvs, tensors = tiny_llama_like()
    raw = build_gguf([*kvs, kv_array("x.items", 8, items), kv_str("x.after", "end")], tensors)
    header = parse_header(raw, len(raw))
    assert isinstance(header, Header)
    array = header.metadata["x.items"].value
    assert isinstance(array, StringArray)
    assert [array.raw(i) for i in range(len(array))] == items
    assert header.get_str("x.after") == "end"
