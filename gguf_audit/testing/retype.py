"""Real files with one metadata record replaced: a key stored as another GGUF type, or a value changed.

:func:`replace_kv` splices one record of a GGUF file's bytes and moves the
data section to the next aligned offset, so every tensor keeps its bytes and
its relative offset: the result differs from the original in that record
only. :data:`EXAMPLE_VALUES` holds one value of each GGUF type (arrays of
ints, floats, strings, bools), to store any key as any type.
"""

from __future__ import annotations

from typing import Final

from gguf_audit.format.model import Header, ValueType
from gguf_audit.format.parser import parse_header
from gguf_audit.testing.encoding import Array, Encoder

__all__ = ["EXAMPLE_VALUES", "append_kv", "replace_kv"]

EXAMPLE_VALUES: Final[tuple[tuple[str, int, object], ...]] = (
    ("uint8", ValueType.UINT8, 1),
    ("int8", ValueType.INT8, -1),
    ("uint16", ValueType.UINT16, 65535),
    ("int16", ValueType.INT16, -2),
    ("uint32", ValueType.UINT32, 4_000_000_000),
    ("int32", ValueType.INT32, -3),
    ("uint64", ValueType.UINT64, (1 << 64) - 1),
    ("int64", ValueType.INT64, -(1 << 63)),
    ("float32", ValueType.FLOAT32, 1.5),
    ("float64", ValueType.FLOAT64, float("nan")),
    ("bool", ValueType.BOOL, True),
    ("string", ValueType.STRING, "not what a check expects"),
    ("array[int32]", ValueType.ARRAY, Array(ValueType.INT32, [1, 2, 3])),
    ("array[float32]", ValueType.ARRAY, Array(ValueType.FLOAT32, [0.5, float("inf")])),
    ("array[string]", ValueType.ARRAY, Array(ValueType.STRING, ["a", "b"])),
    ("array[bool]", ValueType.ARRAY, Array(ValueType.BOOL, [True, False])),
    ("array[array]", ValueType.ARRAY, Array(ValueType.ARRAY, [Array(ValueType.UINT8, [1])])),
)
"""(name, GGUF type, value): one value of every GGUF type, the arrays of several item types."""


def _header(data: bytes) -> Header:
    header = parse_header(data, len(data))
    if not isinstance(header, Header):
        raise ValueError(f"the file's header does not parse whole. Got {header!r}.")
    return header


def _record(encoder: Encoder, key: str, vtype: int, value: object) -> bytes:
    return (
        encoder.string(key, "key")
        + encoder.u32(vtype, "value type")
        + encoder.value(vtype, value, None, None, f"the value of {key!r}")
    )


def _splice(data: bytes, header: Header, start: int, end: int, record: bytes, n_kv_delta: int) -> bytes:
    encoder = Encoder(header.version, header.byte_order == "big")
    head = bytearray(data[:start] + record + data[end : header.header_bytes])
    if n_kv_delta:
        at = 4 + 4 + (8 if header.version != 1 else 4)  # magic, version, n_tensors; then n_kv
        width = 8 if header.version != 1 else 4
        head[at : at + width] = encoder.count(header.n_kv + n_kv_delta, "n_kv")
    pad = -len(head) % header.alignment
    return bytes(head) + b"\0" * pad + data[header.data_offset :]


def replace_kv(data: bytes, key: str, vtype: int, value: object) -> bytes:
    """``data`` (a GGUF file) with the record of ``key`` stored as ``vtype`` holding ``value``."""
    header = _header(data)
    kvs = header.kvs
    index = next((i for i, kv in enumerate(kvs) if kv.key == key), None)
    if index is None:
        raise KeyError(f"the file has no key {key!r}")
    start = kvs[index].offset
    end = kvs[index + 1].offset if index + 1 < len(kvs) else _tensor_infos_offset(header)
    encoder = Encoder(header.version, header.byte_order == "big")
    return _splice(data, header, start, end, _record(encoder, key, vtype, value), 0)


def append_kv(data: bytes, key: str, vtype: int, value: object) -> bytes:
    """``data`` with one more record, ``key`` of ``vtype`` holding ``value``, after the last one."""
    header = _header(data)
    at = _tensor_infos_offset(header)
    encoder = Encoder(header.version, header.byte_order == "big")
    return _splice(data, header, at, at, _record(encoder, key, vtype, value), 1)


def _tensor_infos_offset(header: Header) -> int:
    if header.tensors:
        return min(t.info_offset for t in header.tensors)
    return header.header_bytes
