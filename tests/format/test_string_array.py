"""StringArray's bulk accessors agree with its per-item ones."""

from __future__ import annotations

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
