"""NumPy block dequantizers, bit for bit ggml's ``dequantize_row_*``, faster than gguf-py's.

Pure: (n_blocks, block_bytes) uint8 in, (n_blocks, block_elems) float32 out.
Each follows its type's layout in ``ggml/src/ggml-common.h`` and the order of
ggml's float operations in ``ggml/src/ggml-quants.c`` (a product, then a
difference, each rounded to float32; ggml-base is built without FMA
contraction), which numpy's float32 ufuncs repeat exactly.

Why they are faster than gguf-py's: the quants are unpacked with a few
whole-array integer operations straight into the output order, and the
scales are applied in one cast-and-multiply pass (and one subtraction for
the types with a minimum), where gguf-py builds several float temporaries.
:mod:`gguf_audit.decode.kernels` holds the table of decoders.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = ["decode_q4_0", "decode_q4_k", "decode_q5_k", "decode_q6_k", "decode_q8_0"]

U8Array = npt.NDArray[np.uint8]
F32Array = npt.NDArray[np.float32]

_NIBBLE_SHIFTS: Final = np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
_CRUMB_SHIFTS: Final = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
_BIT_SHIFTS: Final = np.arange(8, dtype=np.uint8).reshape(1, 8, 1)


def _fp16(blocks: U8Array, offset: int) -> F32Array:
    """The fp16 field at ``offset`` of every block, as float32, shape (n, 1).

    A NaN comes out quiet with its sign and payload, as ggml's conversion
    gives it (see :func:`gguf_audit.decode.kernels._fp16_to_f32`).
    """
    h = np.ascontiguousarray(blocks[:, offset : offset + 2]).view("<u2").astype(np.uint16)
    bits = h.view(np.float16).astype(np.float32).view(np.uint32)
    nan = (h & np.uint16(0x7C00)) == np.uint16(0x7C00)
    nan &= (h & np.uint16(0x03FF)) != 0
    if nan.any():
        w = h[nan].astype(np.uint32)
        bits[nan] = ((w & np.uint32(0x8000)) << np.uint32(16)) | np.uint32(0x7FC00000) | ((w & 0x03FF) << 13)
    return bits.view(np.float32)


def _nibbles(qs: U8Array, groups: int) -> U8Array:
    """Bytes split into their low then their high nibbles, per run of ``qs.shape[1] // groups`` bytes."""
    n = qs.shape[0]
    q = qs.reshape(n, groups, 1, -1) >> _NIBBLE_SHIFTS
    q &= np.uint8(0x0F)
    return q.reshape(n, -1)


def _scaled(q: npt.NDArray[np.generic], scale: F32Array, width: int) -> F32Array:
    """``scale * q`` in float32, ``scale`` (n, k) applied to each run of ``width`` quants."""
    n = q.shape[0]
    # A cast, then an in-place multiply: faster than one multiply casting as it goes.
    out = q.astype(np.float32).reshape(n, -1, width)
    out *= scale.reshape(n, -1, 1)
    return out.reshape(n, -1)


def decode_q4_0(blocks: U8Array) -> F32Array:
    """block_q4_0: fp16 d, 16 bytes of nibbles; ``(q - 8) * d``."""
    n = blocks.shape[0]
    q = np.empty((n, 2, 16), dtype=np.uint8)
    np.bitwise_and(blocks[:, 2:], np.uint8(0x0F), out=q[:, 0])
    np.right_shift(blocks[:, 2:], np.uint8(4), out=q[:, 1])
    q = q.view(np.int8)
    q -= np.int8(8)
    return _scaled(q, _fp16(blocks, 0), 32)


def decode_q8_0(blocks: U8Array) -> F32Array:
    """block_q8_0: fp16 d, 32 int8 quants; ``q * d``."""
    return _scaled(blocks[:, 2:].view(np.int8), _fp16(blocks, 0), 32)


def _k_scales(packed: U8Array) -> tuple[U8Array, U8Array]:
    """The eight 6-bit scales and mins of a Q4_K or Q5_K block (ggml's ``get_scale_min_k4``)."""
    lo, mid, hi = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    sc = np.concatenate([lo & np.uint8(63), (hi & np.uint8(15)) | ((lo >> np.uint8(2)) & np.uint8(48))], axis=1)
    m = np.concatenate([mid & np.uint8(63), (hi >> np.uint8(4)) | ((mid >> np.uint8(2)) & np.uint8(48))], axis=1)
    return sc, m


def _with_min(q: U8Array, blocks: U8Array) -> F32Array:
    """``d * sc * q - dmin * m`` per 32 quants, for Q4_K and Q5_K (d, dmin and the scales lead the block)."""
    sc, m = _k_scales(blocks[:, 4:16])
    out = _scaled(q, _fp16(blocks, 0) * sc, 32)
    n = out.shape[0]
    o = out.reshape(n, 8, 32)
    o -= (_fp16(blocks, 2) * m).reshape(n, 8, 1)
    return out


def decode_q4_k(blocks: U8Array) -> F32Array:
    """block_q4_K: fp16 d, fp16 dmin, 12 bytes of scales and mins, 128 bytes of nibbles."""
    return _with_min(_nibbles(blocks[:, 16:], 4), blocks)


def decode_q5_k(blocks: U8Array) -> F32Array:
    """block_q5_K: as Q4_K, with a fifth bit per quant in qh[32]: bit ``s`` of qh[l] for run ``s``."""
    n = blocks.shape[0]
    q = _nibbles(blocks[:, 48:], 4)
    high = blocks[:, 16:48].reshape(n, 1, 32) >> _BIT_SHIFTS
    high &= np.uint8(1)
    q |= high.reshape(n, -1) << np.uint8(4)
    return _with_min(q, blocks)


def decode_q6_k(blocks: U8Array) -> F32Array:
    """block_q6_K: ql[128] low nibbles, qh[64] two high bits each, int8 scales[16], fp16 d.

    Each half of the block: ql's 64 low nibbles then its 64 high ones, each
    quant's two high bits from qh's 32 bytes at shifts 0, 2, 4, 6; value
    ``(d * scale) * (q - 32)`` per 16 quants.
    """
    n = blocks.shape[0]
    q = _nibbles(blocks[:, :128], 2)
    high = blocks[:, 128:192].reshape(n, 2, 1, 32) >> _CRUMB_SHIFTS
    high &= np.uint8(3)
    q |= high.reshape(n, -1) << np.uint8(4)
    qi = q.view(np.int8)
    qi -= np.int8(32)
    scale = _fp16(blocks, 208) * blocks[:, 192:208].view(np.int8)
    return _scaled(qi, scale, 16)
