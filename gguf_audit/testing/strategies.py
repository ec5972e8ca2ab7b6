"""Hypothesis strategies for GGUF headers: metadata values, KVs, tensor infos and whole files.

Shipped with the package the way ``zarr.testing.strategies`` is, so any test
suite can draw valid GGUF files and know what a parser must read back:

- :func:`metadata_values`: one value of any GGUF type (arrays of arrays too),
  with the value :func:`~gguf_audit.format.parser.parse_header` gives back;
- :func:`keys` and :func:`kvs`: metadata records with unique keys;
- :func:`tensor_infos`: tensors of supported ggml types and whole blocks;
- :func:`gguf_files`: the bytes of a file written by
  :func:`~gguf_audit.testing.builder.build_gguf_layout` (versions 2 and 3 and
  both byte orders by default) and its expected parse, a
  :class:`HeaderSummary` to compare with :func:`summarize` of the parsed header.

Everything drawn is valid: malformed files are made from these by mutating
the bytes. Floats are drawn without NaN, so expected and parsed values compare
with ``==``. Needs hypothesis (a test dependency); nothing else in
gguf-audit imports this module.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial
from typing import Final

import numpy as np
from hypothesis import strategies as st

from gguf_audit.format.ggml_types import GGML_TYPE_COUNT, TypeStatus, ggml_type_info
from gguf_audit.format.model import KV as ParsedKV
from gguf_audit.format.model import ByteOrder, Header, StringArray, Value, ValueType
from gguf_audit.format.wire import DEFAULT_ALIGNMENT, GGML_MAX_DIMS
from gguf_audit.testing.builder import KV, Tensor, build_gguf_layout, tensor_data_bytes
from gguf_audit.testing.encoding import Array

__all__ = [
    "SCALAR_TYPES",
    "SUPPORTED_GGML_TYPES",
    "GGUFFile",
    "HeaderSummary",
    "KVCase",
    "MetadataValue",
    "TensorSummary",
    "gguf_files",
    "keys",
    "kvs",
    "metadata_values",
    "plain_value",
    "summarize",
    "tensor_infos",
]

SCALAR_TYPES: Final = tuple(t for t in ValueType if t is not ValueType.ARRAY)
"""Every value type but ARRAY (STRING included)."""

SUPPORTED_GGML_TYPES: Final = tuple(
    i for i in range(GGML_TYPE_COUNT) if ggml_type_info(i).status is TypeStatus.SUPPORTED
)
"""The ggml type ids current ggml loads."""

_INT_RANGES: Final = {
    ValueType.UINT8: (0, (1 << 8) - 1),
    ValueType.INT8: (-(1 << 7), (1 << 7) - 1),
    ValueType.UINT16: (0, (1 << 16) - 1),
    ValueType.INT16: (-(1 << 15), (1 << 15) - 1),
    ValueType.UINT32: (0, (1 << 32) - 1),
    ValueType.INT32: (-(1 << 31), (1 << 31) - 1),
    ValueType.UINT64: (0, (1 << 64) - 1),
    ValueType.INT64: (-(1 << 63), (1 << 63) - 1),
}

# Where among the records general.alignment goes: a draw modulo their count.
_ALIGNMENT_AT_MAX: Final = 64

# The key the file's alignment is written under: gguf_files() owns it.
_ALIGNMENT_KEY: Final = "general.alignment"

# Keys as converters write them, and any UTF-8 text at all.
_KEY_WORDS: Final = ("general", "llama", "tokenizer", "ggml", "attention", "rope", "name", "count", "x")


@dataclass(frozen=True, slots=True)
class MetadataValue:
    """One metadata value: what the builder writes and what a parser reads back."""

    type: ValueType
    value: object
    """As :class:`~gguf_audit.testing.builder.KV` takes it (nested arrays as
    :class:`~gguf_audit.testing.encoding.Array` items)."""
    item_type: ValueType | None
    """The item type of an array; None for a scalar."""
    expected: object
    """The value parsed back, made plain (:func:`plain_value`): Python scalars, lists for arrays."""


@dataclass(frozen=True, slots=True)
class KVCase:
    """A key and its value, ready to build."""

    key: str
    value: MetadataValue

    def record(self) -> KV:
        """The builder's record for this key and value."""
        return KV(self.key, self.value.type, self.value.value, item_type=self.value.item_type)

    def expected(self) -> tuple[str, ValueType, ValueType | None, object]:
        """What :func:`summarize` gives for the parsed record: key, type, item type, plain value."""
        return (self.key, self.value.type, self.value.item_type, self.value.expected)


@dataclass(frozen=True, slots=True)
class TensorSummary:
    """One tensor info as read: name, ggml shape and type, its relative and absolute data offsets, sizes."""

    name: str
    shape: tuple[int, ...]
    type_id: int
    offset: int
    data_offset: int
    n_elements: int
    n_bytes: int


@dataclass(frozen=True, slots=True)
class HeaderSummary:
    """What a parsed header says, as plain comparable values (see :func:`summarize`)."""

    version: int
    byte_order: ByteOrder
    alignment: int
    kvs: tuple[tuple[str, ValueType, ValueType | None, object], ...]
    """Every record in file order: key, type, item type (arrays), plain value."""
    tensors: tuple[TensorSummary, ...]
    header_bytes: int
    data_offset: int


@dataclass(frozen=True, slots=True)
class GGUFFile:
    """A drawn GGUF file: its bytes, what went in, and the parse expected of it."""

    content: bytes
    kvs: tuple[KVCase, ...]
    """Every record written, in file order (``general.alignment`` included when written)."""
    tensors: tuple[Tensor, ...]
    expected: HeaderSummary


def plain_value(value: Value | object) -> object:
    """A parsed metadata value as plain Python: numpy scalars and arrays, string arrays
    and arrays of arrays become ints, floats, bools, strs and (nested) lists."""
    if isinstance(value, StringArray):
        return list(value)
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, list):
        return [plain_value(item) for item in value]
    return value


def _written_key(kv: ParsedKV) -> str:
    """The key as the builder wrote it: :attr:`KV.key` stops at a NUL, as llama.cpp reads it."""
    return kv.raw_key.decode("utf-8", "backslashreplace") if kv.raw_key else kv.key


def summarize(header: Header) -> HeaderSummary:
    """The summary of a parsed header, to compare with :attr:`GGUFFile.expected`."""
    return HeaderSummary(
        version=header.version,
        byte_order=header.byte_order,
        alignment=header.alignment,
        kvs=tuple((_written_key(kv), kv.type, kv.item_type, plain_value(kv.value)) for kv in header.kvs),
        tensors=tuple(
            TensorSummary(t.name, t.shape, t.type_id, t.offset, t.data_offset, t.n_elements, t.n_bytes)
            for t in header.tensors
        ),
        header_bytes=header.header_bytes,
        data_offset=header.data_offset,
    )


# --------------------------------------------------------------------------- values


def _text(max_size: int) -> st.SearchStrategy[str]:
    return st.text(st.characters(codec="utf-8"), max_size=max_size)


def _scalars(vtype: ValueType, max_string: int) -> st.SearchStrategy[object]:
    """Values of one scalar type that read back equal (float32 ones exactly representable)."""
    if vtype in _INT_RANGES:
        low, high = _INT_RANGES[vtype]
        return st.integers(low, high)
    if vtype is ValueType.FLOAT32:
        return st.floats(allow_nan=False, width=32)
    if vtype is ValueType.FLOAT64:
        return st.floats(allow_nan=False)
    if vtype is ValueType.BOOL:
        return st.booleans()
    if vtype is ValueType.STRING:
        return _text(max_string)
    raise ValueError(f"not a scalar value type: {vtype!r}")


def _scalar_value(vtype: ValueType, max_string: int) -> st.SearchStrategy[MetadataValue]:
    return _scalars(vtype, max_string).map(partial(_scalar_of, vtype))


def _scalar_of(vtype: ValueType, value: object) -> MetadataValue:
    return MetadataValue(vtype, value, None, value)


def _array_of(item_type: ValueType, items: list[object]) -> MetadataValue:
    return MetadataValue(ValueType.ARRAY, items, item_type, list(items))


def _array_of_arrays(arrays: list[MetadataValue]) -> MetadataValue:
    return MetadataValue(ValueType.ARRAY, [_as_item(a) for a in arrays], ValueType.ARRAY, [a.expected for a in arrays])


def _array_value(
    item_types: Sequence[ValueType], max_items: int, max_string: int, depth: int, max_depth: int
) -> st.SearchStrategy[MetadataValue]:
    # Built once per call, a fixed tree of strategies: drawing builds none (flatmap would, slowly).
    options = [st.lists(_scalars(t, max_string), max_size=max_items).map(partial(_array_of, t)) for t in item_types]
    if depth < max_depth:
        inner = _array_value(item_types, max_items, max_string, depth + 1, max_depth)
        options.append(st.lists(inner, max_size=max(1, max_items // 2)).map(_array_of_arrays))
    return st.one_of(options)


def _as_item(value: MetadataValue) -> Array:
    """An array value as an item of an ARRAY array."""
    if value.item_type is None or not isinstance(value.value, list):
        raise ValueError(f"not an array value: {value!r}")
    return Array(value.item_type, value.value)


def metadata_values(
    *,
    types: Sequence[ValueType] = (*SCALAR_TYPES, ValueType.ARRAY),
    max_items: int = 8,
    max_string: int = 24,
    max_depth: int = 3,
) -> st.SearchStrategy[MetadataValue]:
    """One metadata value of one of ``types``.

    Arrays hold up to ``max_items`` items of any scalar type in ``types`` (all
    of them when ``types`` is only ARRAY), and nest up to ``max_depth`` array
    levels (the parser's default limit is 4). Strings are any UTF-8 text of up
    to ``max_string`` characters.
    """
    if max_depth < 1:
        raise ValueError(f"max_depth counts array levels and must be >= 1. Got {max_depth!r}.")
    scalar_types = [t for t in types if t is not ValueType.ARRAY] or list(SCALAR_TYPES)
    options: list[st.SearchStrategy[MetadataValue]] = [
        _scalar_value(t, max_string) for t in types if t is not ValueType.ARRAY
    ]
    if ValueType.ARRAY in types:
        options.append(_array_value(scalar_types, max_items, max_string, 1, max_depth))
    if not options:
        raise ValueError("types must name at least one value type.")
    return st.one_of(options)


def keys() -> st.SearchStrategy[str]:
    """Metadata keys: dotted names as converters write them, and any UTF-8 text.

    ``general.alignment`` is never drawn: :func:`gguf_files` decides the alignment.
    """
    dotted = st.lists(st.sampled_from(_KEY_WORDS), min_size=1, max_size=4).map(".".join)
    return st.one_of(dotted, _text(32)).filter(lambda k: k != _ALIGNMENT_KEY)


def kvs(
    *, min_size: int = 0, max_size: int = 8, values: st.SearchStrategy[MetadataValue] | None = None
) -> st.SearchStrategy[list[KVCase]]:
    """Lists of metadata records with unique keys (values from :func:`metadata_values` by default)."""
    drawn_values = metadata_values() if values is None else values
    return st.lists(
        st.builds(KVCase, keys(), drawn_values),
        min_size=min_size,
        max_size=max_size,
        unique_by=lambda kv: kv.key,
    )


# --------------------------------------------------------------------------- tensors


def _shaped(types: Sequence[int], max_blocks: int) -> st.SearchStrategy[tuple[int, tuple[int, ...]]]:
    """A ggml type and dims: ne[0] a whole number of blocks (each row whole blocks, as ggml
    requires), then up to three more dims of 1 to 3."""
    return st.builds(
        _shape_of,
        st.sampled_from(types),
        st.integers(1, max_blocks),
        st.lists(st.integers(1, 3), max_size=GGML_MAX_DIMS - 1),
    )


def _shape_of(type_id: int, blocks: int, rest: list[int]) -> tuple[int, tuple[int, ...]]:
    return type_id, (ggml_type_info(type_id).block_elems * blocks, *rest)


def tensor_infos(
    *, min_size: int = 0, max_size: int = 6, types: Sequence[int] = SUPPORTED_GGML_TYPES, max_blocks: int = 2
) -> st.SearchStrategy[list[Tensor]]:
    """Lists of tensors with unique names, of ``types``, 1 to 4 dims, rows of 1 to ``max_blocks`` blocks.

    Their data is left to the builder (zeros, placed where writers place it).
    """
    names = st.one_of(
        st.builds("blk.{}.{}.weight".format, st.integers(0, 99), st.sampled_from(["attn_q", "ffn_up", "attn_norm"])),
        # Names ggml keeps whole: no NUL (ggml cuts there) and under GGML_MAX_NAME bytes (the parser stops there).
        _text(24).filter(lambda s: bool(s) and "\0" not in s and len(s.encode("utf-8")) < 64),
    )
    return st.lists(
        st.tuples(names, _shaped(types, max_blocks)), min_size=min_size, max_size=max_size, unique_by=lambda t: t[0]
    ).map(lambda drawn: [Tensor(name, dims, type_id) for name, (type_id, dims) in drawn])


# --------------------------------------------------------------------------- files


def gguf_files(
    *,
    versions: Sequence[int] = (2, 3),
    byte_orders: Sequence[ByteOrder] = ("little", "big"),
    alignments: Sequence[int | None] = (None, 1, 8, 16, 32, 64),
    records: st.SearchStrategy[list[KVCase]] | None = None,
    tensors: st.SearchStrategy[list[Tensor]] | None = None,
    include_data: bool = True,
) -> st.SearchStrategy[GGUFFile]:
    """Valid GGUF files built by the builder, each with the parse expected of it.

    ``alignments`` None writes no ``general.alignment`` (the default 32 holds);
    an int writes it as a UINT32 record at a drawn place among the others.
    ``records`` and ``tensors`` default to :func:`kvs` and :func:`tensor_infos`.
    ``include_data`` False ends the file after the header's padding.
    """
    return st.builds(
        partial(_build_file, include_data=include_data),
        st.sampled_from(versions),
        st.sampled_from(byte_orders),
        st.sampled_from(alignments),
        st.integers(0, _ALIGNMENT_AT_MAX),
        kvs() if records is None else records,
        tensor_infos() if tensors is None else tensors,
    )


def _build_file(
    version: int,
    byte_order: ByteOrder,
    alignment: int | None,
    alignment_at: int,
    cases: list[KVCase],
    tensors: list[Tensor],
    *,
    include_data: bool,
) -> GGUFFile:
    if alignment is not None:
        at = alignment_at % (len(cases) + 1)
        value = MetadataValue(ValueType.UINT32, alignment, None, alignment)
        cases = [*cases[:at], KVCase(_ALIGNMENT_KEY, value), *cases[at:]]
    effective = DEFAULT_ALIGNMENT if alignment is None else alignment
    layout = build_gguf_layout(
        [c.record() for c in cases],
        tensors,
        version=version,
        big_endian=byte_order == "big",
        alignment=effective,
        include_data=include_data,
    )
    expected = HeaderSummary(
        version=version,
        byte_order=byte_order,
        alignment=effective,
        kvs=tuple(c.expected() for c in cases),
        tensors=tuple(
            TensorSummary(
                str(t.name),
                tuple(t.dims),
                t.ggml_type,
                where.written_offset,
                layout.data_section_offset + where.written_offset,
                math.prod(t.dims),
                tensor_data_bytes(t),
            )
            for t, where in zip(tensors, layout.tensors, strict=True)
        ),
        header_bytes=layout.header_bytes,
        data_offset=layout.data_section_offset,
    )
    return GGUFFile(layout.content, tuple(cases), tuple(tensors), expected)
