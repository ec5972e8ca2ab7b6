"""Block kernels: decode whole ggml blocks to float32, bit for bit as ggml's ``to_float`` does.

Pure: bytes in, numpy arrays out, no I/O. :mod:`gguf_audit.decode.scales`
checks the same blocks' scale fields the way ggml's validator does.

The legacy types (Q4_0 to Q8_0), the K-quants Q2_K to Q6_K, IQ4_NL, IQ4_XS,
TQ1_0, TQ2_0, MXFP4 and NVFP4 are decoded by :mod:`gguf_audit.decode.dequant`,
IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS and IQ3_S by
:mod:`gguf_audit.decode.dequant_grid`, several times faster than gguf-py.
For the others, where gguf-py has a dequantizer that matches ggml bit for
bit (checked against ggml's ``to_float`` on random blocks, NaN and Inf
scales included), it is used. The rest are written here from the block
layouts in ``ggml/src/ggml-common.h``:

- F16: gguf-py casts through numpy, which keeps a signalling NaN signalling;
  ggml's ``ggml_compute_fp16_to_fp32`` scales by 2**-112 after building the
  bits, and that multiply quiets it. We copy ggml.
- Q1_0, Q2_0 (gguf-py has no dequantizer for them) and Q8_K
  (``dequantize_row_q8_K`` exists but is not in the ``to_float`` table).
- F32, F64, I8, I16, I32, I64 and Q8_1, for which ggml has no ``to_float``
  at all. F32 is its own bits; the others are what a C cast to ``float``
  gives (round to nearest even, overflow to infinity), and Q8_1 is
  ``qs * d`` in float32, the value ggml's Q8_1 dot products give each quant.

Big-endian files come from gguf-py's ``gguf_convert_endian.py``, which swaps
exactly the fp16 scale fields of Q4_0, Q8_0, Q4_K and Q6_K blocks and whole
F32/F16/BF16 elements, leaves MXFP4 and NVFP4 alone (all single bytes), and
refuses every other type. We undo those swaps and refuse the rest, since
nothing says which of their fields a big-endian writer swapped.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

import numpy as np
import numpy.typing as npt
from gguf.quants import dequantize as gguf_dequantize

from gguf_audit.decode import dequant, dequant_grid
from gguf_audit.errors import GGUFAuditError
from gguf_audit.format.ggml_types import GGML_TYPE_COUNT, TypeStatus, ggml_type_info
from gguf_audit.gguf_constants import GGMLQuantizationType as Q

__all__ = [
    "BIG_ENDIAN_TYPE_IDS",
    "Q2_0",
    "F32Array",
    "NoDecoder",
    "RawBlocks",
    "U8Array",
    "decode_blocks",
    "elements",
    "has_decoder",
    "u16le",
    "whole_blocks",
]

U8Array = npt.NDArray[np.uint8]
F32Array = npt.NDArray[np.float32]
RawBlocks = bytes | bytearray | memoryview | npt.NDArray[np.generic]

Q2_0: Final = 42
"""The id of Q2_0: gguf-py 0.19 has no enum member for it yet."""

# Bytes of blocks handed to one gguf-py call. Its dequantizers build several
# temporaries per block (the IQ grids are 8 floats per index), so capping the
# call bounds peak memory without costing throughput.
_CHUNK_BYTES: Final = 1 << 20


class NoDecoder(GGUFAuditError, LookupError):
    """gguf-audit cannot decode blocks of this ggml type (or this byte order)."""

    def __init__(self, type_id: int, message: str) -> None:
        super().__init__(message)
        self.type_id = type_id
        self.message = message

    def __reduce__(self) -> tuple[type[NoDecoder], tuple[int, str]]:
        return (type(self), (self.type_id, self.message))


# --- byte-level helpers ------------------------------------------------------


def _as_u8(raw: RawBlocks) -> U8Array:
    """A flat uint8 view of ``raw`` (its bytes in memory order for arrays)."""
    if isinstance(raw, np.ndarray):
        return np.ascontiguousarray(raw).reshape(-1).view(np.uint8)
    return np.frombuffer(raw, dtype=np.uint8)


def u16le(blocks: U8Array, offset: int) -> npt.NDArray[np.uint16]:
    """The little-endian uint16 at ``offset`` of every block, shape (n, 1)."""
    lo = blocks[:, offset].astype(np.uint16)
    hi = blocks[:, offset + 1].astype(np.uint16)
    return (lo | (hi << np.uint16(8))).reshape(-1, 1)


def _fp16_to_f32(h: npt.NDArray[np.uint16]) -> F32Array:
    """IEEE half to float32 as ggml_compute_fp16_to_fp32 does it.

    Exact for every finite value and infinity, so numpy's (hardware) cast
    serves. A NaN keeps sign and payload and comes out quiet, because ggml's
    conversion multiplies the widened bits by 2**-112 and arithmetic quiets a
    signalling NaN; numpy may or may not quiet it, so NaNs are rebuilt here.
    """
    bits = h.astype(np.uint16).view(np.float16).astype(np.float32).view(np.uint32)
    nan = ((h & np.uint16(0x7C00)) == np.uint16(0x7C00)) & ((h & np.uint16(0x03FF)) != 0)
    if nan.any():
        w = h[nan].astype(np.uint32)
        sign = (w & np.uint32(0x8000)) << np.uint32(16)
        bits[nan] = sign | np.uint32(0x7FC00000) | ((w & np.uint32(0x03FF)) << np.uint32(13))
    return bits.view(np.float32)


def _fp16_field(blocks: U8Array, offset: int) -> F32Array:
    return _fp16_to_f32(u16le(blocks, offset))


def elements(blocks: U8Array, dtype: str) -> npt.NDArray[Any]:
    """Reinterpret a (n, itemsize) block array as n elements of ``dtype``."""
    return np.ascontiguousarray(blocks).reshape(-1).view(np.dtype(dtype))


# --- decoders: (n_blocks, block_bytes) uint8 -> n_blocks * block_elems float32 ----

_Decoder = Callable[[U8Array], F32Array]


def _via_gguf(qtype: Q) -> _Decoder:
    def decode(blocks: U8Array) -> F32Array:
        rows_per_call = max(1, _CHUNK_BYTES // blocks.shape[1])
        parts = [
            np.asarray(gguf_dequantize(blocks[i : i + rows_per_call].reshape(-1), qtype))
            for i in range(0, blocks.shape[0], rows_per_call)
        ]
        return np.concatenate(parts).astype(np.float32, copy=False)

    return decode


def _decode_f32(blocks: U8Array) -> F32Array:
    # ggml has no to_float for F32: the stored bits are the value.
    return elements(blocks, "<u4").astype(np.uint32).view(np.float32)


def _decode_f16(blocks: U8Array) -> F32Array:
    return _fp16_to_f32(elements(blocks, "<u2").astype(np.uint16))


def _cast(dtype: str) -> _Decoder:
    # ggml has no to_float for these; a C (float) cast rounds to nearest even
    # and overflows to infinity, which is what numpy's astype does too.
    def decode(blocks: U8Array) -> F32Array:
        return elements(blocks, dtype).astype(np.float32)

    return decode


def _decode_q1_0(blocks: U8Array) -> F32Array:
    # block_q1_0: fp16 d, then 128 sign bits, element j in bit j%8 of byte j/8;
    # a set bit is +d, a clear one -d (a sign flip, not a multiply).
    d = _fp16_field(blocks, 0)
    bits = np.unpackbits(blocks[:, 2:], axis=1, bitorder="little")
    return np.where(bits != 0, d, -d)


def _decode_q2_0(blocks: U8Array) -> F32Array:
    # block_q2_0: fp16 d, then 64 2-bit codes, element j in bits 2*(j%4) of byte
    # j/4; code q stands for q - 1, so {-1, 0, 1, 2} * d.
    d = _fp16_field(blocks, 0)
    shifts = np.array([0, 2, 4, 6], dtype=np.uint8)
    codes = (blocks[:, 2:, np.newaxis] >> shifts) & np.uint8(3)
    q = codes.reshape(blocks.shape[0], -1).astype(np.float32) - np.float32(1)
    return q * d


def _decode_q8_1(blocks: U8Array) -> F32Array:
    # block_q8_1: fp16 d, fp16 s (= d * sum(qs), redundant), then 32 int8 quants.
    d = _fp16_field(blocks, 0)
    qs = blocks[:, 4:].view(np.int8).astype(np.float32)
    return qs * d


def _decode_q8_k(blocks: U8Array) -> F32Array:
    # block_q8_K: float32 d, 256 int8 quants, 16 int16 bsums (unused here).
    d = np.ascontiguousarray(blocks[:, 0:4]).view("<u4").astype(np.uint32).view(np.float32)
    qs = blocks[:, 4:260].view(np.int8).astype(np.float32)
    return d * qs


_DECODERS: Final[dict[int, _Decoder]] = {
    Q.F32: _decode_f32,
    Q.F16: _decode_f16,
    Q.BF16: _via_gguf(Q.BF16),
    Q.F64: _cast("<f8"),
    Q.I8: _cast("i1"),
    Q.I16: _cast("<i2"),
    Q.I32: _cast("<i4"),
    Q.I64: _cast("<i8"),
    Q.Q1_0: _decode_q1_0,
    Q2_0: _decode_q2_0,
    Q.Q4_0: dequant.decode_q4_0,
    Q.Q4_1: dequant.decode_q4_1,
    Q.Q5_0: dequant.decode_q5_0,
    Q.Q5_1: dequant.decode_q5_1,
    Q.Q8_0: dequant.decode_q8_0,
    Q.Q8_1: _decode_q8_1,
    Q.Q2_K: dequant.decode_q2_k,
    Q.Q3_K: dequant.decode_q3_k,
    Q.Q4_K: dequant.decode_q4_k,
    Q.Q5_K: dequant.decode_q5_k,
    Q.Q6_K: dequant.decode_q6_k,
    Q.Q8_K: _decode_q8_k,
    Q.IQ2_XXS: dequant_grid.decode_iq2_xxs,
    Q.IQ2_XS: dequant_grid.decode_iq2_xs,
    Q.IQ2_S: dequant_grid.decode_iq2_s,
    Q.IQ3_XXS: dequant_grid.decode_iq3_xxs,
    Q.IQ3_S: dequant_grid.decode_iq3_s,
    Q.IQ1_S: dequant_grid.decode_iq1_s,
    Q.IQ1_M: dequant_grid.decode_iq1_m,
    Q.IQ4_NL: dequant.decode_iq4_nl,
    Q.IQ4_XS: dequant.decode_iq4_xs,
    Q.TQ1_0: dequant.decode_tq1_0,
    Q.TQ2_0: dequant.decode_tq2_0,
    Q.MXFP4: dequant.decode_mxfp4,
    Q.NVFP4: dequant.decode_nvfp4,
}

# (offset, width) of each multi-byte field gguf_convert_endian.py swaps, per
# block (per element for the float types). An empty tuple: nothing to swap.
_BIG_ENDIAN_FIELDS: Final[dict[int, tuple[tuple[int, int], ...]]] = {
    Q.F32: ((0, 4),),
    Q.F16: ((0, 2),),
    Q.BF16: ((0, 2),),
    Q.Q4_0: ((0, 2),),  # d
    Q.Q8_0: ((0, 2),),  # d
    Q.Q4_K: ((0, 2), (2, 2)),  # d, dmin
    Q.Q6_K: ((208, 2),),  # d, after ql[128], qh[64], scales[16]
    Q.MXFP4: (),
    Q.NVFP4: (),
}

BIG_ENDIAN_TYPE_IDS: Final[frozenset[int]] = frozenset(_BIG_ENDIAN_FIELDS)
"""Type ids whose big-endian blocks can be decoded."""


def _to_little_endian(blocks: U8Array, type_id: int) -> U8Array:
    fields = _BIG_ENDIAN_FIELDS[type_id]
    if not fields:
        return blocks
    out = blocks.copy()
    for offset, width in fields:
        out[:, offset : offset + width] = blocks[:, offset : offset + width][:, ::-1]
    return out


def whole_blocks(raw: RawBlocks, type_id: int, big_endian: bool) -> U8Array:
    """Validate ``raw`` as whole blocks of ``type_id``; shape (n_blocks, block_bytes)."""
    info = ggml_type_info(type_id)
    if info.status is TypeStatus.REMOVED:
        raise NoDecoder(
            type_id,
            f"ggml type {type_id} ({info.name}) was removed from ggml; "
            f"its blocks have no layout to decode. Got {type_id}.",
        )
    if info.status is not TypeStatus.SUPPORTED or type_id not in _DECODERS:
        raise NoDecoder(type_id, f"ggml has no type with this id (it knows 0 to {GGML_TYPE_COUNT - 1}). Got {type_id}.")
    if big_endian and type_id not in _BIG_ENDIAN_FIELDS:
        raise NoDecoder(
            type_id,
            f"big-endian {info.name} blocks cannot be decoded: gguf_convert_endian.py "
            f"does not convert {info.name}, so which fields are swapped is unknown. "
            f"Got {type_id}.",
        )
    data = _as_u8(raw)
    if data.size % info.block_bytes != 0:
        raise ValueError(
            f"{info.name} data must be a whole number of {info.block_bytes}-byte blocks; "
            f"its length in bytes is not. Got {data.size}."
        )
    blocks = data.reshape(-1, info.block_bytes)
    return _to_little_endian(blocks, type_id) if big_endian else blocks


# --- public API ----------------------------------------------------------------


def has_decoder(type_id: int, *, big_endian: bool = False) -> bool:
    """Whether :func:`decode_blocks` can decode ``type_id`` in that byte order."""
    if ggml_type_info(type_id).status is not TypeStatus.SUPPORTED or type_id not in _DECODERS:
        return False
    return not big_endian or type_id in _BIG_ENDIAN_FIELDS


def decode_blocks(raw: RawBlocks, type_id: int, *, big_endian: bool = False) -> F32Array:
    """Decode whole blocks of ggml type ``type_id`` to a 1-D float32 array.

    ``raw`` holds a whole number of blocks (for F32, F16, BF16, F64 and the
    integer types a block is one element). ``big_endian`` says the bytes come
    from a big-endian GGUF file.

    Raises NoDecoder for removed or unknown type ids and for big-endian types
    gguf-py's converter does not handle; ValueError when the length is not a
    whole number of blocks.
    """
    blocks = whole_blocks(raw, type_id, big_endian)
    if blocks.shape[0] == 0:
        return np.empty(0, dtype=np.float32)
    # NaN/Inf scales are data to report, not errors: decode them the way ggml
    # does and keep numpy from warning (warnings are errors in our tests).
    with np.errstate(all="ignore"):
        out = _DECODERS[type_id](blocks)
    return np.ascontiguousarray(out, dtype=np.float32).reshape(-1)
