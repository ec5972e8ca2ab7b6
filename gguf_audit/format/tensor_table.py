"""Where a GGUF's tensor table lies, as a few integers, and the table parsed back from just those bytes.

A scan's audit reads every header whole (the vocabulary makes most of it);
its compare phase, later in the same night, needs only the tensor infos. The
audit keeps a :class:`TensorTableAt` per file (under a hundred bytes), and
the comparison reads ``[info_offset, header_bytes)`` and parses it with
:func:`parse_tensor_table`, which gives a :class:`~gguf_audit.format.Header`
with the same tensors and data offsets and no key-value pairs.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, replace
from typing import Final

from gguf_audit.codes import Code
from gguf_audit.errors import FormatError
from gguf_audit.format.model import ByteOrder, Header, TensorInfo
from gguf_audit.format.parser import _read_tensor_info, _tensor_info
from gguf_audit.format.reader import Reader, Short
from gguf_audit.format.wire import DEFAULT_LIMITS

__all__ = ["KnownTable", "TableRef", "TensorTableAt", "parse_tensor_table", "tensor_table_at"]

IMATRIX_PREFIX: Final = "quantize.imatrix."
"""llama-quantize writes these keys when an importance matrix made the quant."""


@dataclass(frozen=True, slots=True)
class TensorTableAt:
    """What it takes to parse a header's tensor infos without its key-value pairs."""

    version: int
    byte_order: ByteOrder
    alignment: int
    info_offset: int
    """Absolute offset of the first tensor info (the end of the key-value pairs)."""
    header_bytes: int
    """Absolute end of the last tensor info the header holds."""
    n_infos: int
    """Tensor infos parsed (gguf.cpp stops at the first it refuses: they may be fewer than ``n_tensors``)."""
    n_kv: int
    n_tensors: int
    file_size: int | None
    imatrix: bool
    """Whether the header holds ``quantize.imatrix.*`` keys."""

    @property
    def table_bytes(self) -> int:
        return self.header_bytes - self.info_offset

    def packed(self) -> bytes:
        """The value in 62 bytes: a scan's driver holds one per file read until the compare phase."""
        size = -1 if self.file_size is None else self.file_size
        return _PACKED.pack(
            self.version,
            self.byte_order == "big",
            self.imatrix,
            self.alignment,
            self.info_offset,
            self.header_bytes,
            self.n_infos,
            self.n_kv,
            self.n_tensors,
            size,
        )

    @classmethod
    def unpacked(cls, data: bytes) -> TensorTableAt:
        """The value :meth:`packed` gave ``data`` of."""
        version, big, imatrix, alignment, info, end, n_infos, n_kv, n_tensors, size = _PACKED.unpack(data)
        order: ByteOrder = "big" if big else "little"
        file_size = None if size < 0 else size
        return cls(version, order, alignment, info, end, n_infos, n_kv, n_tensors, file_size, imatrix)


_PACKED: Final = struct.Struct("<I??QQQQQQq")


@dataclass(frozen=True, slots=True)
class KnownTable:
    """A GGUF's tensor table known without reading a byte of it: a scan's stored rows of an unchanged file.

    ``header`` has the file's tensors, data offsets, byte order and sizes and no
    key-value pairs; its tensors' ``info_offset`` is 0 (the rows do not keep
    where each record lies, and a comparison needs none).
    """

    header: Header
    imatrix: bool
    """Whether the header holds ``quantize.imatrix.*`` keys."""

    @property
    def file_size(self) -> int | None:
        return self.header.file_size

    def packed(self) -> bytes:
        """The value as bytes, about 60 a tensor plus its name: what a scan's driver holds and ships per file.

        Raises ``struct.error`` for a value the format cannot hold (a count past
        int64, more than 255 dimensions, a name past 65,535 bytes).
        """
        h = self.header
        size = -1 if h.file_size is None else h.file_size
        facts = (h.alignment, h.header_bytes, h.data_offset, h.min_file_size, h.n_kv, h.n_tensors, size)
        parts = [_KNOWN.pack(h.version, h.byte_order == "big", self.imatrix, *facts, len(h.tensors))]
        for t in h.tensors:
            name = t.name.encode("utf-8", "surrogatepass")
            parts.append(
                _INFO.pack(t.type_id, t.offset, t.data_offset, t.n_elements, t.n_bytes, len(t.shape), len(name))
            )
            parts.append(struct.pack(f"<{len(t.shape)}q", *t.shape))
            parts.append(name)
        return b"".join(parts)

    @classmethod
    def unpacked(cls, data: bytes) -> KnownTable:
        """The value :meth:`packed` gave ``data`` of."""
        version, big, imatrix, alignment, header_bytes, data_offset, min_size, n_kv, n_tensors, size, count = (
            _KNOWN.unpack_from(data)
        )
        pos = _KNOWN.size
        tensors: list[TensorInfo] = []
        for _ in range(count):
            type_id, offset, at, n_elements, n_bytes, n_dims, n_name = _INFO.unpack_from(data, pos)
            pos += _INFO.size
            shape = struct.unpack_from(f"<{n_dims}q", data, pos)
            pos += 8 * n_dims
            name = data[pos : pos + n_name].decode("utf-8", "surrogatepass")
            pos += n_name
            tensors.append(TensorInfo(name, shape, type_id, offset, at, n_elements, n_bytes, info_offset=0))
        order: ByteOrder = "big" if big else "little"
        header = Header(
            version=version,
            byte_order=order,
            alignment=alignment,
            kvs=(),
            tensors=tuple(tensors),
            header_bytes=header_bytes,
            data_offset=data_offset,
            min_file_size=min_size,
            file_size=None if size < 0 else size,
            n_kv=n_kv,
            n_tensors=n_tensors,
        )
        return cls(header, imatrix)


_KNOWN: Final = struct.Struct("<I??qqqqqqqI")
_INFO: Final = struct.Struct("<iqqqqBH")


TableRef = TensorTableAt | KnownTable
"""What a comparison may know of a file's tensor table before reading it: where it lies, or the table itself."""


def tensor_table_at(header: Header) -> TensorTableAt | None:
    """Where ``header``'s tensor infos lie; None for a header with none (nothing to compare)."""
    if not header.tensors:
        return None
    first = header.tensors[0].info_offset
    return TensorTableAt(
        version=header.version,
        byte_order=header.byte_order,
        alignment=header.alignment,
        info_offset=first,
        header_bytes=header.header_bytes,
        n_infos=len(header.tensors),
        n_kv=header.n_kv,
        n_tensors=header.n_tensors,
        file_size=header.file_size,
        imatrix=any(kv.key.startswith(IMATRIX_PREFIX) for kv in header.kvs),
    )


def parse_tensor_table(buf: bytes | memoryview, at: TensorTableAt) -> Header:
    """The header whose tensor infos are ``buf`` (the bytes ``[at.info_offset, at.header_bytes)``).

    Raises FormatError when the bytes do not hold ``at.n_infos`` infos ending
    exactly at ``at.header_bytes`` (the file changed since ``at`` was taken).
    """
    # No size: a table cut short is a Short, reported below with the offsets of the file, not of ``buf``.
    r = Reader(buf, None, at.version, at.byte_order, DEFAULT_LIMITS)
    try:
        raw = [_read_tensor_info(r, i) for i in range(at.n_infos)]
    except Short as short:
        raise FormatError(
            Code.HEADER_TRUNCATED,
            f"the tensor table ends before its {at.n_infos} infos do (needs {short.needed} bytes). Got {len(buf)}.",
            offset=at.info_offset,
        ) from None
    if r.pos != len(buf):
        raise FormatError(
            Code.HEADER_TRUNCATED,
            f"the tensor table's {at.n_infos} infos end at {at.info_offset + r.pos}, "
            f"not at {at.header_bytes}. Got {at.info_offset + r.pos}.",
            offset=at.info_offset,
        )
    data_offset = -(-at.header_bytes // at.alignment) * at.alignment
    tensors = tuple(_tensor_info(t, data_offset) for t in raw)
    min_size = data_offset
    for t in tensors:
        min_size = max(min_size, t.end_offset)
    return Header(
        version=at.version,
        byte_order=at.byte_order,
        alignment=at.alignment,
        kvs=(),
        tensors=tuple(_shifted(t, at.info_offset) for t in tensors),
        header_bytes=at.header_bytes,
        data_offset=data_offset,
        min_file_size=min_size,
        file_size=at.file_size,
        n_kv=at.n_kv,
        n_tensors=at.n_tensors,
    )


def _shifted(t: TensorInfo, by: int) -> TensorInfo:
    return replace(t, info_offset=t.info_offset + by)
