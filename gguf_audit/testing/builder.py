"""A byte-level GGUF writer for tests: valid files, and files broken on purpose.

:func:`build_gguf` writes the layout of the GGUF spec (ggml ``docs/gguf.md``)
field by field, so a test can change any one of them: the magic, the counts,
a key's bytes, a value's payload (:class:`~gguf_audit.testing.encoding.Raw`), a tensor's dims (negative,
more than four) or offset, the padding, the end of the file.

Layout written (v2 and v3; v1 writes every count, length and dim as u32)::

    b"GGUF"  u32 version  u64 n_tensors  u64 n_kv
    n_kv x   (string key, u32 value type, value)
    n_tensors x (string name, u32 n_dims, n_dims x u64 dim, u32 ggml type, u64 offset)
    zeros up to a multiple of ``alignment``
    data section: each tensor's bytes, each padded with zeros to ``alignment``

A string is a u64 byte length and the bytes; an array is a u32 item type, a
u64 count and the items (an item of an ARRAY array is itself an item type,
a count and items). With ``big_endian=True`` every multi-byte field is
big-endian, the version word included; the magic is the same four bytes.

A valid file built here is byte-identical to what gguf-py's ``GGUFWriter``
writes for the same keys and tensors: GGUFWriter writes ``general.architecture``
first (it adds it itself), adds ``general.alignment`` only through
``add_custom_alignment``, and pads after every tensor, the last included.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from gguf_audit.format.ggml_types import ggml_type_info
from gguf_audit.format.model import ValueType
from gguf_audit.format.wire import DEFAULT_ALIGNMENT
from gguf_audit.testing.encoding import Encoder, Raw

__all__ = [
    "KV",
    "MAX_ZERO_FILL_BYTES",
    "GGUFLayout",
    "KVLayout",
    "Tensor",
    "TensorLayout",
    "build_gguf",
    "build_gguf_layout",
    "kv_array",
    "kv_bool",
    "kv_f32",
    "kv_f64",
    "kv_i8",
    "kv_i16",
    "kv_i32",
    "kv_i64",
    "kv_raw",
    "kv_str",
    "kv_u8",
    "kv_u16",
    "kv_u32",
    "kv_u64",
    "tensor_data_bytes",
    "tiny_llama_like",
]

# Zero-filled tensor data is allocated; a forged shape must say data=b"" instead.
MAX_ZERO_FILL_BYTES: Final = 64 << 20


@dataclass(frozen=True, slots=True)
class KV:
    """One metadata record to write.

    ``key`` as bytes is written raw (for invalid UTF-8). ``vtype`` is any u32,
    known or not. ``value`` is encoded by ``vtype`` (see :func:`build_gguf`),
    or is a :class:`~gguf_audit.testing.encoding.Raw`. For arrays, ``item_type`` is the item type and
    ``count`` overrides the item count written.
    """

    key: str | bytes
    vtype: int
    value: object
    item_type: int | None = None
    count: int | None = None


@dataclass(frozen=True, slots=True)
class Tensor:
    """One tensor info (and its data) to write.

    ``dims`` are in ggml order (ne[0], the row length, first); negative dims
    are written as two's complement, and any number of them is allowed.
    ``n_dims`` overrides the count written before them. ``offset`` is the
    offset written, relative to the data section; None writes where the data
    actually goes. ``data`` None means zeros of the size the type and dims
    imply (:func:`tensor_data_bytes`).
    """

    name: str | bytes
    dims: Sequence[int]
    ggml_type: int
    offset: int | None = None
    data: bytes | None = None
    n_dims: int | None = None


@dataclass(frozen=True, slots=True)
class KVLayout:
    """Where one KV record landed (absolute offsets in the untruncated file)."""

    start_offset: int
    """The key's length field."""
    vtype_offset: int
    value_offset: int
    end_offset: int


@dataclass(frozen=True, slots=True)
class TensorLayout:
    """Where one tensor info and its data landed (absolute offsets)."""

    start_offset: int
    """The name's length field."""
    n_dims_offset: int
    dims_offset: int
    type_offset: int
    offset_field_offset: int
    """The u64 data-offset field."""
    end_offset: int
    written_offset: int
    """The offset value written in the record (relative to the data section)."""
    data_offset: int
    """Absolute position of the bytes written for this tensor (its packed place)."""
    data_bytes: int


@dataclass(frozen=True, slots=True)
class GGUFLayout:
    """The bytes :func:`build_gguf` returns, and where everything in them is."""

    content: bytes
    kvs: tuple[KVLayout, ...]
    tensors: tuple[TensorLayout, ...]
    n_tensors_offset: int
    n_kv_offset: int
    header_bytes: int
    """End of the last tensor info: where the padding starts."""
    data_section_offset: int
    """``header_bytes`` rounded up to the alignment."""
    data_end_offset: int
    """End of the data section (before ``trailing`` and any truncation)."""


def tensor_data_bytes(tensor: Tensor) -> int:
    """Bytes written for ``tensor``: ``len(data)``, or what its type and dims imply.

    Removed and unknown types, and negative dims, imply 0 bytes.
    """
    if tensor.data is not None:
        return len(tensor.data)
    if any(d < 0 for d in tensor.dims):
        return 0
    info = ggml_type_info(tensor.ggml_type)
    if info.block_elems == 0:
        return 0
    return info.n_bytes(math.prod(tensor.dims))


def _pad_to(n: int, alignment: int) -> int:
    return (n + alignment - 1) // alignment * alignment


def build_gguf_layout(
    kvs: Sequence[KV] = (),
    tensors: Sequence[Tensor] = (),
    *,
    version: int = 3,
    big_endian: bool = False,
    alignment: int = DEFAULT_ALIGNMENT,
    magic: bytes = b"GGUF",
    n_kv: int | None = None,
    n_tensors: int | None = None,
    include_data: bool = True,
    data_section: bytes | None = None,
    truncate_at: int | None = None,
    trailing: bytes = b"",
) -> GGUFLayout:
    """Build a GGUF file and report where each record and tensor landed.

    Parameters are those of :func:`build_gguf`. The offsets describe the file
    before ``truncate_at`` cuts it; ``content`` is the file after.
    """
    if not isinstance(alignment, int) or alignment < 1:
        raise ValueError(f"alignment must be a positive int (padding uses it). Got {alignment!r}.")
    if truncate_at is not None and truncate_at < 0:
        raise ValueError(f"truncate_at must be >= 0. Got {truncate_at!r}.")
    enc = Encoder(version, big_endian)
    out = bytearray(magic)
    out += enc.u32(version, "version")
    n_tensors_offset = len(out)
    out += enc.count(len(tensors) if n_tensors is None else n_tensors, "n_tensors")
    n_kv_offset = len(out)
    out += enc.count(len(kvs) if n_kv is None else n_kv, "n_kv")

    kv_layouts: list[KVLayout] = []
    for i, kv in enumerate(kvs):
        what = f"kv {i} ({kv.key!r})"
        start = len(out)
        out += enc.string(kv.key, f"{what} key")
        vtype_offset = len(out)
        out += enc.u32(kv.vtype, f"{what} value type")
        value_offset = len(out)
        out += enc.value(kv.vtype, kv.value, kv.item_type, kv.count, what)
        kv_layouts.append(KVLayout(start, vtype_offset, value_offset, len(out)))

    # Data goes where writers put it: packed in order, each tensor padded.
    packed: list[int] = []
    sizes: list[int] = []
    running = 0
    for t in tensors:
        size = tensor_data_bytes(t)
        if t.data is None and size > MAX_ZERO_FILL_BYTES:
            raise ValueError(
                f"tensor {t.name!r} implies {size} bytes of zeros; pass data= (b'' for none)."
                f" Got dims {list(t.dims)!r}."
            )
        packed.append(running)
        sizes.append(size)
        running += _pad_to(size, alignment)

    fields: list[tuple[int, int, int, int, int, int, int]] = []
    for i, t in enumerate(tensors):
        what = f"tensor {i} ({t.name!r})"
        start = len(out)
        out += enc.string(t.name, f"{what} name")
        n_dims_offset = len(out)
        out += enc.u32(len(t.dims) if t.n_dims is None else t.n_dims, f"{what} n_dims")
        dims_offset = len(out)
        for d in t.dims:
            out += enc.count(d, f"{what} dim")
        type_offset = len(out)
        out += enc.u32(t.ggml_type, f"{what} ggml type")
        offset_field_offset = len(out)
        written = packed[i] if t.offset is None else t.offset
        out += enc.u64(written, f"{what} offset")
        fields.append((start, n_dims_offset, dims_offset, type_offset, offset_field_offset, len(out), written))

    header_bytes = len(out)
    data_section_offset = _pad_to(header_bytes, alignment)
    out += bytes(data_section_offset - header_bytes)
    tensor_layouts = tuple(
        TensorLayout(*f, data_offset=data_section_offset + packed[i], data_bytes=sizes[i]) for i, f in enumerate(fields)
    )

    if include_data:
        if data_section is not None:
            out += data_section
        else:
            for t, size in zip(tensors, sizes, strict=True):
                out += t.data if t.data is not None else bytes(size)
                out += bytes(_pad_to(size, alignment) - size)
    data_end_offset = len(out)
    out += trailing
    content = bytes(out if truncate_at is None else out[:truncate_at])
    return GGUFLayout(
        content,
        tuple(kv_layouts),
        tensor_layouts,
        n_tensors_offset,
        n_kv_offset,
        header_bytes,
        data_section_offset,
        data_end_offset,
    )


def build_gguf(
    kvs: Sequence[KV] = (),
    tensors: Sequence[Tensor] = (),
    *,
    version: int = 3,
    big_endian: bool = False,
    alignment: int = DEFAULT_ALIGNMENT,
    magic: bytes = b"GGUF",
    n_kv: int | None = None,
    n_tensors: int | None = None,
    include_data: bool = True,
    data_section: bytes | None = None,
    truncate_at: int | None = None,
    trailing: bytes = b"",
) -> bytes:
    """The bytes of a GGUF file with these KVs and tensors, valid unless told otherwise.

    Values are encoded by their ``vtype``: ints for the integer types (range
    checked), numbers for FLOAT32/FLOAT64, a bool or any int 0..255 for BOOL,
    ``str`` (UTF-8) or ``bytes`` (raw) for STRING, a sequence of items (with
    ``item_type``) or an :class:`~gguf_audit.testing.encoding.Array` for ARRAY.
    A :class:`~gguf_audit.testing.encoding.Raw` value is written as is; for a
    type outside 0..12 the value must be ``Raw`` or bytes.

    Parameters
    ----------
    version:
        The version word. 1 writes counts, lengths and dims as u32; any other
        value writes them as u64.
    big_endian:
        Write every multi-byte field big-endian. Tensor ``data`` is written as
        given (zeros read the same either way).
    alignment:
        Used to pad the header and each tensor's data, and to place tensors
        with ``offset=None``. It does not add a ``general.alignment`` KV.
    magic:
        The first bytes (any length).
    n_kv, n_tensors:
        Counts written instead of ``len(kvs)`` / ``len(tensors)``.
    include_data:
        False stops after the header and its padding.
    data_section:
        Bytes written as the whole data section instead of the packed tensors.
    truncate_at:
        Cut the finished file (``trailing`` included) to this many bytes.
    trailing:
        Bytes appended after the data section.
    """
    return build_gguf_layout(
        kvs,
        tensors,
        version=version,
        big_endian=big_endian,
        alignment=alignment,
        magic=magic,
        n_kv=n_kv,
        n_tensors=n_tensors,
        include_data=include_data,
        data_section=data_section,
        truncate_at=truncate_at,
        trailing=trailing,
    ).content


# ------------------------------------------------------------ KV shorthands


def kv_u8(key: str | bytes, n: int) -> KV:
    return KV(key, ValueType.UINT8, n)


def kv_i8(key: str | bytes, n: int) -> KV:
    return KV(key, ValueType.INT8, n)


def kv_u16(key: str | bytes, n: int) -> KV:
    return KV(key, ValueType.UINT16, n)


def kv_i16(key: str | bytes, n: int) -> KV:
    return KV(key, ValueType.INT16, n)


def kv_u32(key: str | bytes, n: int) -> KV:
    return KV(key, ValueType.UINT32, n)


def kv_i32(key: str | bytes, n: int) -> KV:
    return KV(key, ValueType.INT32, n)


def kv_u64(key: str | bytes, n: int) -> KV:
    return KV(key, ValueType.UINT64, n)


def kv_i64(key: str | bytes, n: int) -> KV:
    return KV(key, ValueType.INT64, n)


def kv_f32(key: str | bytes, x: float) -> KV:
    return KV(key, ValueType.FLOAT32, x)


def kv_f64(key: str | bytes, x: float) -> KV:
    return KV(key, ValueType.FLOAT64, x)


def kv_bool(key: str | bytes, b: bool | int) -> KV:
    """A BOOL; an int other than 0 and 1 forges an invalid bool byte."""
    return KV(key, ValueType.BOOL, b)


def kv_str(key: str | bytes, s: str | bytes) -> KV:
    """A STRING; bytes are written raw (for invalid UTF-8)."""
    return KV(key, ValueType.STRING, s)


def kv_array(key: str | bytes, item_type: int, items: Sequence[object], *, count: int | None = None) -> KV:
    """An ARRAY of ``item_type``.

    For ARRAY items give :class:`~gguf_audit.testing.encoding.Array` or ``(type, items)``.
    """
    return KV(key, ValueType.ARRAY, list(items), item_type=item_type, count=count)


def kv_raw(key: str | bytes, vtype: int, payload: bytes) -> KV:
    """A record whose payload after the value type is exactly ``payload``."""
    return KV(key, vtype, Raw(payload))


# ------------------------------------------------------------ a tiny model

# ggml type ids (GGMLQuantizationType) used by tiny_llama_like.
_F32, _F16, _Q8_0, _Q4_K = 0, 1, 8, 12

_N_VOCAB: Final = 32
_N_EMBD: Final = 256  # Q4_K rows are whole 256-element super-blocks
_N_FF: Final = 256
_N_HEAD: Final = 2
_N_HEAD_KV: Final = 1
_N_LAYER: Final = 2


def _tiny_vocab() -> tuple[list[str], list[float], list[int]]:
    # token_type values follow llama.cpp's llama_token_type: 1 normal, 2 unknown, 3 control, 6 byte.
    specials = ["<unk>", "<s>", "</s>"]
    byte_tokens = [f"<0x{b:02X}>" for b in (0x0A, 0x20)]
    pieces = ["▁", "▁t", "he", "▁a", "in", "er", "on", "▁the", "re", "at", "en", "▁s", "or", "es", "▁o", "is"]
    pieces += ["▁w", "ed", "an", "▁c", "it", "ar", "▁f", "al", "▁p", "ing", "ou"]
    tokens = (specials + byte_tokens + pieces)[:_N_VOCAB]
    types = [2, 3, 3] + [6] * len(byte_tokens) + [1] * (len(tokens) - 3 - len(byte_tokens))
    scores = [0.0] * (3 + len(byte_tokens)) + [-float(i) for i in range(len(tokens) - 3 - len(byte_tokens))]
    return tokens, scores, types


def tiny_llama_like() -> tuple[list[KV], list[Tensor]]:
    """KVs and tensors of a small valid llama model (2 blocks, 256 wide, 32 tokens).

    Metadata follows what ``convert_hf_to_gguf.py`` and ``llama-quantize``
    write (``general.architecture`` first, ``llama.*`` hyperparameters, a
    sentencepiece-style tokenizer with tokens, scores and token types); the
    tensors mix F32 norms, an F16 embedding, Q8_0 and Q4_K weights with the
    shapes llama.cpp expects. No ``general.alignment`` (the default 32).
    Data is zeros. The lists are fresh: change one thing and build.
    """
    tokens, scores, token_types = _tiny_vocab()
    n_embd_kv = _N_EMBD // _N_HEAD * _N_HEAD_KV
    kvs = [
        kv_str("general.architecture", "llama"),
        kv_str("general.type", "model"),
        kv_str("general.name", "Tiny Llama Like"),
        kv_u32("general.file_type", 15),  # LLAMA_FTYPE_MOSTLY_Q4_K_M
        kv_u32("general.quantization_version", 2),
        kv_u32("llama.block_count", _N_LAYER),
        kv_u32("llama.context_length", 256),
        kv_u32("llama.embedding_length", _N_EMBD),
        kv_u32("llama.feed_forward_length", _N_FF),
        kv_u32("llama.attention.head_count", _N_HEAD),
        kv_u32("llama.attention.head_count_kv", _N_HEAD_KV),
        kv_f32("llama.rope.freq_base", 10000.0),
        kv_f32("llama.attention.layer_norm_rms_epsilon", 1e-5),
        kv_u32("llama.rope.dimension_count", _N_EMBD // _N_HEAD),
        kv_u32("llama.vocab_size", _N_VOCAB),
        kv_str("tokenizer.ggml.model", "llama"),
        kv_str("tokenizer.ggml.pre", "default"),
        kv_array("tokenizer.ggml.tokens", ValueType.STRING, tokens),
        kv_array("tokenizer.ggml.scores", ValueType.FLOAT32, scores),
        kv_array("tokenizer.ggml.token_type", ValueType.INT32, token_types),
        kv_u32("tokenizer.ggml.bos_token_id", 1),
        kv_u32("tokenizer.ggml.eos_token_id", 2),
        kv_u32("tokenizer.ggml.unknown_token_id", 0),
        kv_bool("tokenizer.ggml.add_bos_token", True),
        kv_bool("tokenizer.ggml.add_eos_token", False),
    ]
    tensors = [
        Tensor("token_embd.weight", (_N_EMBD, _N_VOCAB), _F16),
    ]
    for i in range(_N_LAYER):
        blk = f"blk.{i}."
        tensors += [
            Tensor(blk + "attn_norm.weight", (_N_EMBD,), _F32),
            Tensor(blk + "attn_q.weight", (_N_EMBD, _N_EMBD), _Q4_K),
            Tensor(blk + "attn_k.weight", (_N_EMBD, n_embd_kv), _Q4_K),
            Tensor(blk + "attn_v.weight", (_N_EMBD, n_embd_kv), _Q8_0),
            Tensor(blk + "attn_output.weight", (_N_EMBD, _N_EMBD), _Q4_K),
            Tensor(blk + "ffn_norm.weight", (_N_EMBD,), _F32),
            Tensor(blk + "ffn_gate.weight", (_N_EMBD, _N_FF), _Q4_K),
            Tensor(blk + "ffn_up.weight", (_N_EMBD, _N_FF), _Q4_K),
            Tensor(blk + "ffn_down.weight", (_N_FF, _N_EMBD), _Q8_0),
        ]
    tensors += [
        Tensor("output_norm.weight", (_N_EMBD,), _F32),
        Tensor("output.weight", (_N_EMBD, _N_VOCAB), _Q8_0),
    ]
    return kvs, tensors
