"""Frozen values a parsed GGUF header is made of."""

from __future__ import annotations

import codecs
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Literal, TypeAlias, overload

import numpy as np
import numpy.typing as npt

from gguf_audit.findings import Finding
from gguf_audit.format.ggml_types import GGMLTypeInfo, ggml_type_info

__all__ = [
    "KV",
    "ByteOrder",
    "Header",
    "NeedMore",
    "StringArray",
    "TensorInfo",
    "Value",
    "ValueType",
    "decode_lenient",
    "decode_utf8",
    "escape_invalid",
    "json_scalar",
]

ByteOrder: TypeAlias = Literal["little", "big"]

ESCAPED_TEXT_BYTES = 16384
"""Bytes of a string that is not UTF-8 decoded with escapes; a longer one keeps that head and its length.

Python decodes text with an error handler a character at a time: 8 MB of random
bytes take about 3 s with ``backslashreplace``, 50 ms even with one bad byte in
zeros. A corrupt length turns a key or value into megabytes of such bytes, and
every consumer cuts it to a few hundred characters anyway (:mod:`gguf_audit.bounded`).
"""


_CHECK_CHUNK_BYTES = 1 << 16
"""Bytes decoded at a time when a long string is not ASCII: a decoding error copies what it was given."""


def decode_utf8(raw: bytes) -> str | int:
    """``raw`` decoded as UTF-8, or the offset of its first byte that is not UTF-8.

    Cost linear in ``len(raw)`` and small at any size: ASCII is decoded at
    memory speed, and other long text a chunk at a time, so the error raised
    at the first bad byte holds one chunk rather than a copy of megabytes.
    """
    if len(raw) <= _CHECK_CHUNK_BYTES or raw.isascii():
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            return int(exc.start)
    view, pos, size = memoryview(raw), 0, len(raw)
    pieces: list[str] = []
    while pos < size:
        end = min(pos + _CHECK_CHUNK_BYTES, size)
        try:
            # Not final before the last chunk: a character cut by the chunk's end is carried over.
            text, used = codecs.utf_8_decode(view[pos:end], "strict", end == size)
        except UnicodeDecodeError as exc:
            return pos + int(exc.start)
        pieces.append(text)
        pos += used
    return "".join(pieces)


def decode_lenient(raw: bytes) -> str:
    """``raw`` as UTF-8 text, any invalid bytes escaped (see :func:`escape_invalid`)."""
    text = decode_utf8(raw)
    return text if isinstance(text, str) else escape_invalid(raw)


def escape_invalid(raw: bytes) -> str:
    """Text of ``raw``, known not to be UTF-8: invalid bytes as ``\\xNN``, cut after :data:`ESCAPED_TEXT_BYTES`."""
    if len(raw) <= ESCAPED_TEXT_BYTES:
        return raw.decode("utf-8", "backslashreplace")
    head = raw[:ESCAPED_TEXT_BYTES].decode("utf-8", "backslashreplace")
    return f"{head}… ({len(raw):,} bytes, not UTF-8)"


class ValueType(IntEnum):
    """GGUF metadata value types (the spec's ``gguf_metadata_value_type``)."""

    UINT8 = 0
    INT8 = 1
    UINT16 = 2
    INT16 = 3
    UINT32 = 4
    INT32 = 5
    FLOAT32 = 6
    BOOL = 7
    STRING = 8
    ARRAY = 9
    UINT64 = 10
    INT64 = 11
    FLOAT64 = 12

    @property
    def spelling(self) -> str:
        """The name gguf-audit reports: ``uint32``, ``string``, ``array``."""
        return self.name.lower()


def _join(buf: bytes | memoryview, starts: npt.NDArray[np.int64], lengths: npt.NDArray[np.int64]) -> bytes:
    """The bytes ``buf[starts[i]:starts[i] + lengths[i]]`` of every item, concatenated: one numpy gather, no
    per-item loop."""
    total = int(lengths.sum())
    if total == 0:
        return b""
    # Position of every wanted byte: each item's start, repeated over its length, plus the byte's index
    # within the item. (Measured against a mask over the items' span: the gather is faster.)
    firsts = np.cumsum(lengths) - lengths
    positions = np.repeat(starts - firsts, lengths) + np.arange(total, dtype=np.int64)
    return np.frombuffer(buf, dtype=np.uint8)[positions].tobytes()


class StringArray(Sequence[str]):
    """A GGUF array of strings, decoded on access.

    Holds the header buffer and the start and end of every item, so a 256k
    token vocabulary costs two int64 arrays instead of a quarter million
    Python strings until someone asks for them. The items' bytes joined
    (:meth:`joined_bytes`) and the items cut at their first NUL
    (:meth:`up_to_nul`) are made once, on first use, and kept: the checks,
    the fingerprints and the table cells of a file all walk the vocabulary
    through them, so it is gathered once per file.
    """

    __slots__ = ("_buf", "_cut", "_ends", "_joined", "_lengths", "_starts")

    def __init__(self, buf: bytes | memoryview, starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64]) -> None:
        self._buf = buf
        self._starts = starts
        self._ends = ends
        self._joined: bytes | None = None
        self._cut: StringArray | None = None
        self._lengths: npt.NDArray[np.int64] | None = None

    def __reduce__(self) -> tuple[type[StringArray], tuple[bytes | memoryview, Any, Any]]:
        # The kept join and cut are derived: a copy rebuilds them when asked.
        return (StringArray, (self._buf, self._starts, self._ends))

    def __len__(self) -> int:
        return len(self._starts)

    @overload
    def __getitem__(self, index: int) -> str: ...
    @overload
    def __getitem__(self, index: slice) -> list[str]: ...
    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        start = int(self._starts[index])
        end = int(self._ends[index])
        return decode_lenient(bytes(self._buf[start:end]))

    def __iter__(self) -> Iterator[str]:
        buf = self._buf
        for start, end in zip(self._starts.tolist(), self._ends.tolist(), strict=True):
            yield decode_lenient(bytes(buf[start:end]))

    def raw(self, index: int) -> bytes:
        """The undecoded bytes of item ``index``."""
        return bytes(self._buf[int(self._starts[index]) : int(self._ends[index])])

    def lengths(self) -> npt.NDArray[np.int64]:
        """Byte length of every item (made once and kept, read-only)."""
        if self._lengths is None:
            lengths = self._ends - self._starts
            lengths.setflags(write=False)
            self._lengths = lengths
        return self._lengths

    def up_to_nul(self) -> StringArray:
        """The items as a C reader sees them: each cut at its first NUL byte (llama.cpp builds its token
        texts with ``gguf_get_arr_str``, a ``const char *``). The same array when no item holds a NUL."""
        if self._cut is None:
            self._cut = self._cut_at_nul()
        return self._cut

    def _cut_at_nul(self) -> StringArray:
        joined = self.joined_bytes()
        if b"\0" not in joined:
            return self
        lengths = self.lengths()
        firsts = np.cumsum(lengths) - lengths
        # Each NUL's item (the last item starting at or before it), then the first NUL of each item.
        nuls = np.flatnonzero(np.frombuffer(joined, dtype=np.uint8) == 0)
        owner = np.searchsorted(firsts, nuls, side="right") - 1
        # An empty item shares its first position with the next one: the NUL is the later item's.
        items, first_of_each = np.unique(owner, return_index=True)
        ends = self._ends.copy()
        ends[items] = self._starts[items] + (nuls[first_of_each] - firsts[items])
        return StringArray(self._buf, self._starts, ends)

    def joined_bytes(self) -> bytes:
        """Every item's undecoded bytes, concatenated in order (gathered once, then kept)."""
        if self._joined is None:
            self._joined = _join(self._buf, self._starts, self.lengths())
        return self._joined

    def edge_words(self) -> tuple[npt.NDArray[np.uint64], npt.NDArray[np.uint64]]:
        """Every item's first and last 8 bytes as little-endian integers (an item shorter than 8 bytes:
        its bytes, zero-filled, both times): keys to tell items apart without copying them."""
        buf = np.frombuffer(self._buf, dtype=np.uint8)
        if len(self) and int(self._starts.max()) > len(buf) - 8:
            buf = np.concatenate((buf, np.zeros(8, dtype=np.uint8)))
        # A uint64 starting at every byte: a strided view, no copy.
        words = np.ndarray((max(len(buf) - 7, 0),), dtype="<u8", buffer=buf, strides=(1,))
        lengths = self.lengths()
        short = lengths < 8
        bits = np.minimum(lengths, 7).astype(np.uint64) * np.uint64(8)
        mask = np.where(short, (np.uint64(1) << bits) - np.uint64(1), np.uint64(0xFFFFFFFFFFFFFFFF))
        head = words[self._starts] & mask
        tail = np.where(short, head, words[np.maximum(self._ends - 8, 0)])
        return head.astype(np.uint64), tail.astype(np.uint64)

    def to_list(self) -> list[str]:
        return list(self)

    def __repr__(self) -> str:
        return f"StringArray(len={len(self)})"


Value: TypeAlias = "int | float | bool | str | npt.NDArray[np.generic] | StringArray | list[Value]"
"""A metadata value: a scalar, a numpy array (numeric and bool arrays),
a :class:`StringArray`, or a list of arrays (arrays of arrays)."""


@dataclass(frozen=True, slots=True)
class KV:
    """One metadata key-value pair, as it stands in the file."""

    key: str
    type: ValueType
    value: Value
    offset: int
    """Absolute offset of the record (its key length field)."""
    item_type: ValueType | None = None
    """For arrays: the element type (ARRAY for arrays of arrays)."""
    raw_key: bytes = b""
    """The key's bytes as written. :attr:`key` is what llama.cpp matches (``strcmp``): the bytes before
    the first NUL; the two differ only when the key holds a NUL."""

    @property
    def length(self) -> int | None:
        """Number of items for arrays, None for scalars."""
        if self.type is not ValueType.ARRAY:
            return None
        return len(self.value)  # type: ignore[arg-type]

    @property
    def type_name(self) -> str:
        """``uint32``, ``string``, ``array[string]``, ``array[array]``."""
        if self.type is ValueType.ARRAY and self.item_type is not None:
            return f"array[{self.item_type.spelling}]"
        return self.type.spelling


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """One tensor-info record, with the sizes that follow from it."""

    name: str
    shape: tuple[int, ...]
    """Dimensions in ggml order (ne[0] first: the row length)."""
    type_id: int
    offset: int
    """Offset of the data relative to the data section, as written in the file."""
    data_offset: int
    """Absolute offset of the data in the file."""
    n_elements: int
    n_bytes: int
    """Bytes of data the type and shape imply (0 when the type is unknown)."""
    info_offset: int
    """Absolute offset of the tensor-info record."""
    raw_name: bytes = b""
    """The name's bytes as written; :attr:`name` is what ggml keeps (``ggml_set_name``): the bytes
    before the first NUL."""

    @property
    def type_info(self) -> GGMLTypeInfo:
        return ggml_type_info(self.type_id)

    @property
    def type_name(self) -> str:
        return self.type_info.name

    @property
    def end_offset(self) -> int:
        """Absolute end (exclusive) of the tensor's data."""
        return self.data_offset + self.n_bytes


@dataclass(frozen=True, slots=True)
class Header:
    """A parsed GGUF header: everything before the tensor data."""

    version: int
    byte_order: ByteOrder
    alignment: int
    """The alignment in force: general.alignment when valid, else the default 32."""
    kvs: tuple[KV, ...]
    tensors: tuple[TensorInfo, ...]
    header_bytes: int
    """Bytes from the start of the file to the end of the last tensor info."""
    data_offset: int
    """Absolute start of the data section (header_bytes padded to the alignment)."""
    min_file_size: int
    """The smallest file size the header implies (the end of the furthest tensor)."""
    file_size: int | None
    n_kv: int
    n_tensors: int
    findings: tuple[Finding, ...] = ()
    """Problems seen while decoding (invalid UTF-8, invalid bools)."""
    metadata: Mapping[str, KV] = field(default_factory=dict)
    """The first KV of every key (up to its first NUL, as ``gguf_find_key`` compares), in file order."""

    def get(self, key: str, default: Value | None = None) -> Value | None:
        kv = self.metadata.get(key)
        return default if kv is None else kv.value

    def get_int(self, key: str) -> int | None:
        """The value of an integer-typed key as a Python int; None when absent or of another type."""
        kv = self.metadata.get(key)
        if kv is None or kv.type in (ValueType.BOOL, ValueType.FLOAT32, ValueType.FLOAT64):
            return None
        value = kv.value
        return int(value) if isinstance(value, int | np.integer) and not isinstance(value, bool) else None

    def get_str(self, key: str) -> str | None:
        """The value of a string-typed key; None when absent or of another type."""
        kv = self.metadata.get(key)
        return kv.value if kv is not None and kv.type is ValueType.STRING and isinstance(kv.value, str) else None

    def get_bool(self, key: str) -> bool | None:
        """The value of a bool-typed key; None when absent or of another type."""
        kv = self.metadata.get(key)
        return bool(kv.value) if kv is not None and kv.type is ValueType.BOOL else None

    @property
    def architecture(self) -> str | None:
        value = self.get("general.architecture")
        return value if isinstance(value, str) else None


@dataclass(frozen=True, slots=True)
class NeedMore:
    """The buffer ended before the header did.

    ``needed_bytes`` is the absolute end the buffer must reach for parsing to
    progress; ``estimated_bytes`` is the parser's guess of the whole header's
    length from what it has seen. Pass ``resume`` back with the longer buffer
    to carry on instead of starting over.
    """

    needed_bytes: int
    estimated_bytes: int
    resume: object | None = None


def json_scalar(value: Any) -> Any:
    """A scalar as JSON data: numpy scalars as Python ones, non-finite floats as the strings
    ``"NaN"``, ``"Infinity"`` and ``"-Infinity"`` (JSON has no spelling for them)."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    return value
