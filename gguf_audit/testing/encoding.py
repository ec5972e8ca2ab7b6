"""Field encoders for the test GGUF builder: one version's and byte order's integers, strings and values.

:class:`Encoder` turns one field at a time into bytes the way the GGUF spec
lays it out (ggml ``docs/gguf.md``), with no judgement: any u32 value type,
any count, negative dims as two's complement. :class:`Raw` stands in for an
encoded value or item, and :class:`Array` is an array value with an optional
forged count. :mod:`gguf_audit.testing.builder` assembles whole files from
these.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from gguf_audit.format.model import ValueType
from gguf_audit.format.wire import SCALAR_CODE

__all__ = ["Array", "Encoder", "Raw"]


@dataclass(frozen=True, slots=True)
class Raw:
    """Bytes written verbatim in place of an encoded value.

    As a :class:`KV` value it replaces the whole payload after the u32 value
    type (for an array: item type, count and items). As an array item, or an
    item of a nested :class:`Array`, it replaces that one item.
    """

    data: bytes


@dataclass(frozen=True, slots=True)
class Array:
    """An array value: an item type and items, optionally with a forged count.

    Use it for the items of an ARRAY-of-ARRAY (a ``(item_type, items)`` tuple
    works too), or as a :class:`KV` value of type ARRAY.
    """

    item_type: int
    items: Sequence[object]
    count: int | None = None
    """The item count written; None writes ``len(items)``."""


class Encoder:
    """Field encoders for one version and byte order."""

    def __init__(self, version: int, big_endian: bool) -> None:
        self.order = ">" if big_endian else "<"
        # v1 wrote counts, lengths and dims as u32; v2 widened them to u64.
        self.wide = version != 1

    def uint(self, n: int, bits: int, what: str) -> bytes:
        """An unsigned field; negatives in range are written as two's complement."""
        if not -(1 << (bits - 1)) <= n < (1 << bits):
            raise ValueError(f"{what} does not fit in {bits} bits. Got {n!r}.")
        return struct.pack(self.order + ("I" if bits == 32 else "Q"), n & ((1 << bits) - 1))

    def u32(self, n: int, what: str) -> bytes:
        return self.uint(n, 32, what)

    def u64(self, n: int, what: str) -> bytes:
        return self.uint(n, 64, what)

    def count(self, n: int, what: str) -> bytes:
        return self.uint(n, 64 if self.wide else 32, what)

    def string(self, s: object, what: str) -> bytes:
        if isinstance(s, Raw):
            return s.data
        if isinstance(s, str):
            data = s.encode("utf-8")
        elif isinstance(s, bytes | bytearray | memoryview):
            data = bytes(s)
        else:
            raise TypeError(f"{what} must be str, bytes or Raw. Got {s!r}.")
        return self.count(len(data), f"{what} length") + data

    def value(self, vtype: int, value: object, item_type: int | None, count: int | None, what: str) -> bytes:
        if isinstance(value, Raw):
            return value.data
        if vtype == ValueType.ARRAY:
            if isinstance(value, Array):
                return self.array(value.item_type, value.items, value.count, what)
            if item_type is None:
                raise ValueError(f"{what}: an ARRAY value needs item_type. Got {value!r}.")
            if not isinstance(value, Sequence) or isinstance(value, str | bytes):
                raise TypeError(f"{what}: an ARRAY value must be a sequence of items. Got {value!r}.")
            return self.array(item_type, value, count, what)
        if vtype == ValueType.STRING:
            return self.string(value, what)
        if vtype == ValueType.BOOL:
            # Any int 0..255 is written as the byte, so a test can forge bool 2.
            if not isinstance(value, int) or not 0 <= int(value) <= 255:
                raise ValueError(f"{what}: a BOOL value must be a bool or an int 0..255. Got {value!r}.")
            return bytes([int(value)])
        fmt = SCALAR_CODE.get(ValueType(vtype)) if 0 <= vtype <= max(ValueType) else None
        if fmt is None:
            if isinstance(value, bytes):
                return value
            raise ValueError(f"{what}: value type {vtype} has no encoding; give the payload as Raw. Got {value!r}.")
        if fmt in "fd":
            if not isinstance(value, int | float):
                raise TypeError(f"{what}: a {ValueType(vtype).name} value must be a number. Got {value!r}.")
            return struct.pack(self.order + fmt, float(value))
        if not isinstance(value, int):
            raise TypeError(f"{what}: a {ValueType(vtype).name} value must be an int. Got {value!r}.")
        try:
            return struct.pack(self.order + fmt, value)
        except struct.error as exc:
            raise ValueError(f"{what}: {value!r} does not fit a {ValueType(vtype).name}.") from exc

    def array(self, item_type: int, items: Sequence[object], count: int | None, what: str) -> bytes:
        parts = [
            self.u32(item_type, f"{what} item type"),
            self.count(len(items) if count is None else count, f"{what} count"),
        ]
        for i, item in enumerate(items):
            item_what = f"{what}[{i}]"
            if item_type == ValueType.ARRAY:
                parts.append(self.nested(item, item_what))
            else:
                parts.append(self.value(item_type, item, None, None, item_what))
        return b"".join(parts)

    def nested(self, item: object, what: str) -> bytes:
        if isinstance(item, Raw):
            return item.data
        if isinstance(item, Array):
            return self.array(item.item_type, item.items, item.count, what)
        if isinstance(item, tuple) and len(item) == 2 and isinstance(item[0], int):
            sub_type, sub_items = item
            if isinstance(sub_items, Sequence) and not isinstance(sub_items, str | bytes):
                return self.array(sub_type, sub_items, None, what)
        raise TypeError(f"{what}: an item of an ARRAY array must be Array, (item_type, items) or Raw. Got {item!r}.")
