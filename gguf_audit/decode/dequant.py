"""NumPy block dequantizers, bit for bit ggml's ``dequantize_row_*``, faster than gguf-py's.

Pure: (n_blocks, block_bytes) uint8 in, (n_blocks, block_elems) float32 out.
Each follows its type's layout in ``ggml/src/ggml-common.h`` and the order of
ggml's float operations in ``ggml/src/ggml-quants.c`` (a product, then a
difference, each rounded to float32; ggml-base is built without FMA
contraction), which numpy's float32 ufuncs repeat exactly.

Why they are faster than gguf-py's: the quants are unpacked with a few
whole-array integer operations straight into the output order, then cast to
float32 once and scaled in place (one more in-place pass for the types with
a minimum), where gguf-py builds several float temporaries.
:mod:`gguf_audit.decode.dequant_grid` holds the IQ types built on ggml's
lattice grids; :mod:`gguf_audit.decode.kernels` holds the table of decoders.
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt

__all__ = [
    "decode_iq4_nl",
    "decode_iq4_xs",
    "decode_mxfp4",
    "decode_nvfp4",
    "decode_q2_k",
    "decode_q3_k",
    "decode_q4_0",
    "decode_q4_1",
    "decode_q4_k",
    "decode_q5_0",
    "decode_q5_1",
    "decode_q5_k",
    "decode_q6_k",
    "decode_q8_0",
    "decode_tq1_0",
    "decode_tq2_0",
]

U8Array = npt.NDArray[np.uint8]
F32Array = npt.NDArray[np.float32]

_NIBBLE_SHIFTS: Final = np.array([0, 4], dtype=np.uint8).reshape(1, 1, 2, 1)
_CRUMB_SHIFTS: Final = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4, 1)
# The same fields taken from 64-bit words, eight bytes at once: numpy's loops then run 8x fewer times.
_LOW_NIBBLES: Final = np.uint64(0x0F0F0F0F0F0F0F0F)
_LOW_CRUMBS: Final = np.uint64(0x0303030303030303)
_LOW_BITS: Final = np.uint64(0x0101010101010101)
_WORD_CRUMB_SHIFTS: Final = np.array([0, 2, 4, 6], dtype=np.uint64).reshape(1, 1, 4, 1)
_PLANE_SHIFTS: Final = np.arange(8, dtype=np.uint64).reshape(8, 1)


def _fp16(blocks: U8Array, offset: int) -> F32Array:
    """The fp16 field at ``offset`` of every block, as float32, shape (n, 1) (see :func:`_half`)."""
    if blocks.flags.c_contiguous and blocks.shape[1] % 2 == 0 and offset % 2 == 0:
        # Read in place as a strided column of uint16: no copy of each 2-byte field first.
        h = blocks.view("<u2")[:, offset // 2].astype(np.uint16)
    else:
        h = np.ascontiguousarray(blocks[:, offset : offset + 2]).view("<u2").reshape(-1).astype(np.uint16)
    return _half(h)


def _half(h: npt.NDArray[np.uint16]) -> F32Array:
    """fp16 bit patterns ``h`` (n,) as float32, shape (n, 1).

    A NaN comes out quiet with its sign and payload, as ggml's conversion
    gives it (see :func:`gguf_audit.decode.kernels._fp16_to_f32`).
    """
    bits = h.view(np.float16).astype(np.float32).view(np.uint32)
    special = (h & np.uint16(0x7C00)) == np.uint16(0x7C00)
    if special.any():
        nan = special & ((h & np.uint16(0x03FF)) != 0)
        w = h[nan].astype(np.uint32)
        bits[nan] = ((w & np.uint32(0x8000)) << np.uint32(16)) | np.uint32(0x7FC00000) | ((w & 0x03FF) << 13)
    return bits.view(np.float32).reshape(-1, 1)


def _nibbles(qs: U8Array, groups: int) -> U8Array:
    """Each of ``groups`` runs of a block's bytes split into its low nibbles then its high ones.

    Worked on 64-bit words (eight nibbles of a kind at once), each half
    computed over the whole array in one flat pass; the halves are then
    interleaved run by run as opaque items of a run's size (one long copy
    loop, not one loop per run). Each run's length is a multiple of 8 bytes
    in every layout that uses this.
    """
    n = qs.shape[0]
    words = np.ascontiguousarray(qs).view(np.uint64)
    low = words & _LOW_NIBBLES
    high = words >> np.uint64(4)
    high &= _LOW_NIBBLES
    run = f"V{qs.shape[1] // groups}"
    return np.stack((low.view(run), high.view(run)), axis=2).view(np.uint8).reshape(n, -1)


def _words(raw: U8Array, *shape: int) -> npt.NDArray[np.uint64]:
    """Each block's bytes as 64-bit words (a contiguous copy), reshaped to ``(n, *shape)``."""
    return np.ascontiguousarray(raw).view(np.uint64).reshape(raw.shape[0], *shape)


def _bit_planes(qh: U8Array, at: int) -> U8Array:
    """32 bytes per block as 8 runs of 32: run ``s`` is bit ``s`` of each byte, moved to bit ``at``.

    Each plane is taken from the whole array's 64-bit words in one flat pass,
    then the planes are transposed into block order as opaque 32-byte items.
    """
    planes = np.ascontiguousarray(qh).view(np.uint64).reshape(1, -1) >> _PLANE_SHIFTS
    planes &= _LOW_BITS
    planes <<= np.uint64(at)
    return np.ascontiguousarray(planes.view("V32").T).view(np.uint8).reshape(qh.shape[0], -1)


def _scaled(q: npt.NDArray[np.generic], scale: F32Array, width: int) -> F32Array:
    """``scale * q`` in float32, ``scale`` (n, k) applied to each run of ``width`` quants."""
    n = q.shape[0]
    # A cast, then an in-place multiply: faster than one multiply casting as it goes.
    out = q.astype(np.float32).reshape(n, -1, width)
    out *= scale.reshape(n, -1, 1)
    return out.reshape(n, -1)


def decode_q4_0(blocks: U8Array) -> F32Array:
    """block_q4_0: fp16 d, 16 bytes of nibbles; ``(q - 8) * d``."""
    q = _nibbles(blocks[:, 2:], 1).view(np.int8)
    q -= np.int8(8)
    return _scaled(q, _fp16(blocks, 0), 32)


def decode_q8_0(blocks: U8Array) -> F32Array:
    """block_q8_0: fp16 d, 32 int8 quants; ``q * d``."""
    return _scaled(blocks[:, 2:].view(np.int8), _fp16(blocks, 0), 32)


def _k_scales(packed: U8Array) -> tuple[U8Array, U8Array]:
    """The eight 6-bit scales and mins of a Q4_K or Q5_K block (ggml's ``get_scale_min_k4``).

    The 12 bytes as three little-endian words, four scales a word: scales
    0-3 are the low 6 bits of bytes 0-3, scales 4-7 the low nibbles of bytes
    8-11 under the top 2 bits of bytes 0-3; the mins likewise from bytes
    4-7 and the high nibbles of bytes 8-11.
    """
    words = np.ascontiguousarray(packed).view("<u4").astype(np.uint32)
    lo, mid, hi = words[:, 0], words[:, 1], words[:, 2]
    sc = np.empty((packed.shape[0], 2), dtype=np.uint32)
    m = np.empty((packed.shape[0], 2), dtype=np.uint32)
    sc[:, 0] = lo & 0x3F3F3F3F
    sc[:, 1] = (hi & 0x0F0F0F0F) | ((lo >> 2) & 0x30303030)
    m[:, 0] = mid & 0x3F3F3F3F
    m[:, 1] = ((hi >> 4) & 0x0F0F0F0F) | ((mid >> 2) & 0x30303030)
    return sc.view(np.uint8), m.view(np.uint8)


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
    q = _nibbles(blocks[:, 48:], 4)
    q |= _bit_planes(blocks[:, 16:48], 4)
    return _with_min(q, blocks)


def decode_q6_k(blocks: U8Array) -> F32Array:
    """block_q6_K: ql[128] low nibbles, qh[64] two high bits each, int8 scales[16], fp16 d.

    Each half of the block: ql's 64 low nibbles then its 64 high ones, each
    quant's two high bits from qh's 32 bytes at shifts 0, 2, 4, 6; value
    ``(d * scale) * (q - 32)`` per 16 quants.
    """
    q = _nibbles(blocks[:, :128], 2)
    high = _crumbs(blocks[:, 128:192])
    high <<= np.uint8(4)
    q |= high
    qi = q.view(np.int8)
    qi -= np.int8(32)
    scale = _fp16(blocks, 208) * blocks[:, 192:208].view(np.int8)
    return _scaled(qi, scale, 16)


# --- the other legacy types: 32 quants, low nibbles then high ones -------------

_IQ4_VALUES: Final = np.array(
    [-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113], dtype=np.float32
)
"""ggml's kvalues_iq4nl (ggml-common.h): the non-linear 4-bit grid of IQ4_NL and IQ4_XS."""


def _fifth_bits(qh: U8Array) -> U8Array:
    """Q5_0/Q5_1's qh (a little-endian uint32): bit ``j`` is element ``j``'s fifth bit, as 0 or 16."""
    bits = np.unpackbits(qh, axis=1, bitorder="little")
    bits <<= np.uint8(4)
    return bits


def _plus_min(q: U8Array, blocks: U8Array) -> F32Array:
    """``q * d + m`` (Q4_1 and Q5_1: fp16 d and m lead the block)."""
    out = _scaled(q, _fp16(blocks, 0), 32)
    out += _fp16(blocks, 2)
    return out


def decode_q4_1(blocks: U8Array) -> F32Array:
    """block_q4_1: fp16 d, fp16 m, 16 bytes of nibbles; ``q * d + m``."""
    return _plus_min(_nibbles(blocks[:, 4:], 1), blocks)


def decode_q5_0(blocks: U8Array) -> F32Array:
    """block_q5_0: fp16 d, qh[4], 16 bytes of nibbles; ``(q - 16) * d``."""
    q = _nibbles(blocks[:, 6:], 1)
    q |= _fifth_bits(blocks[:, 2:6])
    qi = q.view(np.int8)
    qi -= np.int8(16)
    return _scaled(qi, _fp16(blocks, 0), 32)


def decode_q5_1(blocks: U8Array) -> F32Array:
    """block_q5_1: fp16 d, fp16 m, qh[4], 16 bytes of nibbles; ``q * d + m``."""
    q = _nibbles(blocks[:, 8:], 1)
    q |= _fifth_bits(blocks[:, 4:8])
    return _plus_min(q, blocks)


def decode_iq4_nl(blocks: U8Array) -> F32Array:
    """block_iq4_nl: fp16 d, 16 bytes of nibbles indexing kvalues_iq4nl; ``d * value``."""
    values = _IQ4_VALUES[_nibbles(blocks[:, 2:], 1)]
    values *= _fp16(blocks, 0)
    return values


def decode_iq4_xs(blocks: U8Array) -> F32Array:
    """block_iq4_xs: fp16 d, scales_h (uint16), scales_l[4], qs[128]; eight runs of 32 quants.

    Run ``r``'s 6-bit scale is nibble ``r % 2`` of scales_l[r / 2] with bits
    ``2r, 2r + 1`` of scales_h above it; ``(d * (scale - 32)) * value``.
    """
    n = blocks.shape[0]
    low = (blocks[:, 4:8].reshape(n, 4, 1) >> _NIBBLE_SHIFTS.reshape(1, 1, 2)) & np.uint8(0x0F)
    high = np.ascontiguousarray(blocks[:, 2:4]).view("<u2").astype(np.uint16) >> (2 * np.arange(8, dtype=np.uint16))
    scale = (low.reshape(n, 8) | ((high & np.uint16(3)) << np.uint16(4)).astype(np.uint8)).view(np.int8)
    scale -= np.int8(32)
    values = _IQ4_VALUES[_nibbles(blocks[:, 8:], 8)]
    values = values.reshape(n, 8, 32)
    values *= (_fp16(blocks, 0) * scale).reshape(n, 8, 1)
    return values.reshape(n, 256)


# --- the other K-quants -----------------------------------------------------------


def _crumbs(qs: U8Array) -> U8Array:
    """2-bit fields of 32-byte runs: bits 0-1 of the run's bytes, then 2-3, 4-5, 6-7 (Q2_K, Q3_K, Q6_K, TQ2_0)."""
    q = _words(qs, -1, 1, 4) >> _WORD_CRUMB_SHIFTS
    q &= _LOW_CRUMBS
    return q.view(np.uint8).reshape(qs.shape[0], -1)


def decode_q2_k(blocks: U8Array) -> F32Array:
    """block_q2_K: scales[16] (scale nibble, min nibble), qs[64], fp16 d, fp16 dmin; 16 runs of 16.

    ``(d * scale) * q - dmin * min`` per run.
    """
    n = blocks.shape[0]
    scales = blocks[:, :16]
    out = _scaled(_crumbs(blocks[:, 16:80]), _fp16(blocks, 80) * (scales & np.uint8(0x0F)), 16)
    o = out.reshape(n, 16, 16)
    o -= (_fp16(blocks, 82) * (scales >> np.uint8(4))).reshape(n, 16, 1)
    return out


def decode_q3_k(blocks: U8Array) -> F32Array:
    """block_q3_K: hmask[32], qs[64], 12 bytes of 6-bit scales, fp16 d; 16 runs of 16.

    A quant is its 2 low bits less 4 when its hmask bit (bit ``k`` of hmask[l]
    for the ``k``-th 32 quants) is clear; ``(d * (scale - 32)) * q`` per run.
    """
    n = blocks.shape[0]
    packed = blocks[:, 96:108]
    low = (packed[:, :8].reshape(n, 1, 8) >> _NIBBLE_SHIFTS.reshape(1, 2, 1)) & np.uint8(0x0F)
    high = (packed[:, 8:].reshape(n, 1, 4) >> _CRUMB_SHIFTS.reshape(1, 4, 1)) & np.uint8(3)
    scale = (low.reshape(n, 16) | (high.reshape(n, 16) << np.uint8(4))).view(np.int8)
    scale -= np.int8(32)
    q = _crumbs(blocks[:, 32:96])
    q += _bit_planes(blocks[:, :32], 2)
    qi = q.view(np.int8)
    qi -= np.int8(4)
    return _scaled(qi, _fp16(blocks, 108) * scale, 16)


def decode_tq2_0(blocks: U8Array) -> F32Array:
    """block_tq2_0: qs[64] of 2-bit codes, fp16 d; ``(q - 1) * d``."""
    q = _crumbs(blocks[:, :64]).view(np.int8)
    q -= np.int8(1)
    return _scaled(q, _fp16(blocks, 64), 256)


# --- TQ1_0 -------------------------------------------------------------------------

_POW3: Final = np.array([1, 3, 9, 27, 81], dtype=np.uint8).reshape(5, 1)


def _trits(raw: U8Array, count: int) -> npt.NDArray[np.int8]:
    """(count, raw.size) int8: digit ``k`` of each byte's base-3 fraction, less 1 (-1, 0 or 1).

    ggml's ``((uint8_t)(b * 3**k) * 3) >> 8`` is 0 below 86, 2 above 170 and
    1 between: two comparisons of the wrapped byte instead of a widening multiply.
    """
    q = np.ascontiguousarray(raw).reshape(1, -1) * _POW3[:count]
    t = (q > np.uint8(170)).view(np.int8)
    t -= (q < np.uint8(86)).view(np.int8)
    return t


def decode_tq1_0(blocks: U8Array) -> F32Array:
    """block_tq1_0: qs[48] of five trits a byte, qh[4] of four, fp16 d; ``(t - 1) * d``.

    Block order: trit ``k`` of qs[0:32] for k = 0..4, then of qs[32:48], then
    trit ``k`` of qh[0:4] for k = 0..3. The trits are computed digit-major over
    all blocks, then moved into block order as opaque 16- and 4-byte items.
    """
    n = blocks.shape[0]
    out = np.empty((n, 16), dtype="V16")
    head = _trits(blocks[:, :48], 5).view("V16").reshape(5, n, 3)
    out[:, :10].reshape(n, 5, 2)[...] = head[:, :, :2].transpose(1, 0, 2)
    out[:, 10:15] = head[:, :, 2].T
    tail = _trits(blocks[:, 48:52], 4).view("V4").reshape(4, n)
    out[:, 15] = np.ascontiguousarray(tail.T).view("V16").reshape(n)
    return _scaled(out.view(np.int8).reshape(n, 256), _fp16(blocks, 52), 256)


# --- MXFP4 ---------------------------------------------------------------------------

_FP4_VALUES: Final = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=np.float32)
"""ggml's kvalues_mxfp4 (ggml-common.h): twice the E2M1 values, which the halved scale makes whole."""


def decode_mxfp4(blocks: U8Array) -> F32Array:
    """block_mxfp4: an E8M0 exponent e, 16 bytes of E2M1 nibbles; ``value * d``.

    d is ``GGML_E8M0_TO_FP32_HALF(e)``, 2**(e - 128) built from its bits (a
    subnormal for e < 2; e = 0xFF gives 2**127, not NaN).
    """
    e = blocks[:, 0].astype(np.uint32)
    bits = np.where(e < 2, np.uint32(0x00200000) << e, (e - np.uint32(1)) << np.uint32(23))
    values = _FP4_VALUES[_nibbles(blocks[:, 1:], 1)]
    values *= bits.astype(np.uint32).view(np.float32).reshape(-1, 1)
    return values


def _ue4m3_halves() -> F32Array:
    """ggml's ``ggml_ue4m3_to_fp32`` of every byte: half the UE4M3 value (bias 7), bit 7 ignored.

    0x00 and 0x7F give 0; exponent field 0 is subnormal, ``m * 2**-9``. All
    256 values are exact in float32.
    """
    x = np.arange(256)
    e = (x >> 3) & 0xF
    m = x & 7
    value = np.where(e == 0, m * 2.0**-9, (1 + m / 8) * 2.0 ** (e - 7)) * 0.5
    value[(x == 0) | (x == 0x7F)] = 0.0
    return value.astype(np.float32)


_UE4M3_HALVES: Final = _ue4m3_halves()


def decode_nvfp4(blocks: U8Array) -> F32Array:
    """block_nvfp4: d[4] UE4M3 scales, qs[32] of E2M1 nibbles; four runs of 16, ``value * d[s]``.

    Run ``s`` is the low nibbles of qs[8s:8s + 8] then their high nibbles.
    """
    n = blocks.shape[0]
    values = _FP4_VALUES[_nibbles(blocks[:, 4:], 4)].reshape(n, 4, 16)
    values *= _UE4M3_HALVES[blocks[:, :4]].reshape(n, 4, 1)
    return values.reshape(n, 64)
