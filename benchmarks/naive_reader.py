"""The GGUF header reader a person would write first: the benchmark's baseline.

One value at a time with ``struct.unpack_from`` (precompiled ``Struct``
objects, the fast way to do that), each string decoded as it is met, each
array read item by item into a Python list. Little-endian v2/v3 only, and no
checks of any kind: a forged count would make it loop or allocate without
bound. It exists to be timed against, and to show that the benchmark's
readers all read the same thing.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["NaiveHeader", "read_naive"]

STRING: Final = 8
ARRAY: Final = 9
BOOL: Final = 7

_U32: Final = struct.Struct("<I")
_U64: Final = struct.Struct("<Q")
_SCALARS: Final = {
    0: struct.Struct("<B"),
    1: struct.Struct("<b"),
    2: struct.Struct("<H"),
    3: struct.Struct("<h"),
    4: struct.Struct("<I"),
    5: struct.Struct("<i"),
    6: struct.Struct("<f"),
    7: struct.Struct("<B"),
    10: struct.Struct("<Q"),
    11: struct.Struct("<q"),
    12: struct.Struct("<d"),
}


@dataclass(frozen=True, slots=True)
class NaiveHeader:
    version: int
    kvs: dict[str, tuple[int, Any, int | None]]
    """key -> (value type, value, item type for arrays)."""
    tensors: list[tuple[str, tuple[int, ...], int, int]]
    """(name, dims, ggml type, offset relative to the data section)."""
    header_bytes: int


def _string(buf: bytes, pos: int) -> tuple[str, int]:
    (n,) = _U64.unpack_from(buf, pos)
    pos += 8
    return buf[pos : pos + n].decode("utf-8"), pos + n


def _value(buf: bytes, pos: int, vtype: int) -> tuple[Any, int]:
    if vtype == STRING:
        return _string(buf, pos)
    if vtype == ARRAY:
        (item_type,) = _U32.unpack_from(buf, pos)
        (n,) = _U64.unpack_from(buf, pos + 4)
        pos += 12
        items = []
        for _ in range(n):
            item, pos = _value(buf, pos, item_type)
            items.append(item)
        return items, pos
    fmt = _SCALARS[vtype]
    (value,) = fmt.unpack_from(buf, pos)
    return (bool(value) if vtype == BOOL else value), pos + fmt.size


def read_naive(buf: bytes) -> NaiveHeader:
    """Read the header at the start of ``buf`` (which must hold all of it)."""
    (version,) = _U32.unpack_from(buf, 4)
    (n_tensors,) = _U64.unpack_from(buf, 8)
    (n_kv,) = _U64.unpack_from(buf, 16)
    pos = 24
    kvs: dict[str, tuple[int, Any, int | None]] = {}
    for _ in range(n_kv):
        key, pos = _string(buf, pos)
        (vtype,) = _U32.unpack_from(buf, pos)
        pos += 4
        item_type = _U32.unpack_from(buf, pos)[0] if vtype == ARRAY else None
        value, pos = _value(buf, pos, vtype)
        kvs[key] = (vtype, value, item_type)
    tensors: list[tuple[str, tuple[int, ...], int, int]] = []
    for _ in range(n_tensors):
        name, pos = _string(buf, pos)
        (n_dims,) = _U32.unpack_from(buf, pos)
        pos += 4
        dims = []
        for _ in range(n_dims):
            (d,) = _U64.unpack_from(buf, pos)
            dims.append(d)
            pos += 8
        (ggml_type,) = _U32.unpack_from(buf, pos)
        (offset,) = _U64.unpack_from(buf, pos + 4)
        pos += 12
        tensors.append((name, tuple(dims), ggml_type, offset))
    return NaiveHeader(version, kvs, tensors, pos)
