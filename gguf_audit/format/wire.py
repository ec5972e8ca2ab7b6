"""GGUF wire constants: the magic, alignment, record sizes, scalar codes and the parser's limits.

What the bytes of a GGUF header look like, in numbers: the reader, the
parser and the header-size estimate share them, and the structural checks
use :data:`GGML_MAX_DIMS`. Pure data, no I/O.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gguf_audit.format.model import ValueType

__all__ = [
    "DEFAULT_ALIGNMENT",
    "DEFAULT_LIMITS",
    "GGML_MAX_DIMS",
    "GGML_MAX_NAME",
    "GGUF_MAGIC",
    "MIN_KV_BYTES",
    "MIN_TENSOR_BYTES",
    "SCALAR_CODE",
    "SCALAR_SIZE",
    "VALUE_TYPES",
    "Limits",
]

GGUF_MAGIC: Final = b"GGUF"
DEFAULT_ALIGNMENT: Final = 32
"""The data alignment when ``general.alignment`` is absent or invalid (GGUF_DEFAULT_ALIGNMENT)."""
GGML_MAX_DIMS: Final = 4
"""Dimensions ggml gives a tensor (ggml.h's GGML_MAX_DIMS)."""
GGML_MAX_NAME: Final = 64
"""ggml's tensor name buffer, NUL included (ggml.h's GGML_MAX_NAME): gguf.cpp refuses a name of 64
bytes or more, so the parser reads no further than that into one."""


@dataclass(frozen=True, slots=True)
class Limits:
    """Hard limits on what a header may claim. Each stops one way a forged
    header could make the parser allocate or loop far beyond its own size."""

    max_kv_count: int = 1 << 20
    """Keys per file. Real files have under a few hundred; a forged count of
    2**63 must be refused before a loop or a list is sized by it (the attack:
    an 8-byte count that asks for exabytes of records)."""
    max_tensor_count: int = 1 << 20
    """Tensor infos per file (the largest real models have tens of thousands);
    the same forged-count attack as ``max_kv_count``, on the tensor table."""
    max_string_bytes: int = 1 << 30
    """One string: llama.cpp's GGUF_MAX_STRING_LENGTH (1 GiB). Past it a
    length field is forged, and llama.cpp refuses the file."""
    max_array_items: int = 1 << 30
    """Items of one array: llama.cpp's GGUF_MAX_ARRAY_ELEMENTS (1024**3)."""
    max_depth: int = 4
    """Arrays nested in arrays: bounds recursion on a forged file (the attack:
    arrays of arrays, a dozen bytes a level, that exhaust the stack)."""
    max_kv_read: int = 4096
    """Key-value records read when the header claims more. Real models have under a thousand; past this
    budget the parser stops at the first empty or repeated key (where gguf.cpp refuses the file) or, with
    none among the budget, gives up on the file (``header.too_many_entries``). The attack: a million
    tiny records, a dozen bytes each, that cost a Python object and a check apiece."""
    max_tensor_read: int = 1 << 17
    """Tensor infos read when the header claims more (the largest real models have tens of thousands): past
    it the parser gives up on the file, as with ``max_kv_read``."""
    max_dims: int = 64
    """Dimensions of a tensor read before giving up (ggml itself allows 4,
    :data:`GGML_MAX_DIMS`; more is reported by the structural checks, and a
    forged u32 count of billions must not size a read)."""


DEFAULT_LIMITS: Final = Limits()

# Smallest bytes one record can take, per version family (1: v1's u32 counts
# and lengths; 2: v2 and v3's u64), used to refuse counts that the rest of the
# file cannot hold. A KV: key length (an empty key), value type, one byte of
# value. A tensor info: name length (an empty name), n_dims (zero dims), ggml
# type, data offset (always u64).
MIN_KV_BYTES: Final = {1: 4 + 4 + 1, 2: 8 + 4 + 1}
MIN_TENSOR_BYTES: Final = {1: 4 + 4 + 4 + 8, 2: 8 + 4 + 4 + 8}

SCALAR_SIZE: Final = {
    ValueType.UINT8: 1,
    ValueType.INT8: 1,
    ValueType.UINT16: 2,
    ValueType.INT16: 2,
    ValueType.UINT32: 4,
    ValueType.INT32: 4,
    ValueType.FLOAT32: 4,
    ValueType.BOOL: 1,
    ValueType.UINT64: 8,
    ValueType.INT64: 8,
    ValueType.FLOAT64: 8,
}
"""Bytes of each fixed-size value type."""

SCALAR_CODE: Final = {
    ValueType.UINT8: "B",
    ValueType.INT8: "b",
    ValueType.UINT16: "H",
    ValueType.INT16: "h",
    ValueType.UINT32: "I",
    ValueType.INT32: "i",
    ValueType.FLOAT32: "f",
    ValueType.BOOL: "B",
    ValueType.UINT64: "Q",
    ValueType.INT64: "q",
    ValueType.FLOAT64: "d",
}
"""The :mod:`struct` (and numpy) code of each fixed-size value type, without byte order."""

VALUE_TYPES: Final = {int(t): t for t in ValueType}
"""Value-type words (u32) that name a GGUF type, 0 to 12."""
