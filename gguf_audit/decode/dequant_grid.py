"""NumPy dequantizers of the IQ types built on ggml's lattice grids, bit for bit ggml's ``to_float``.

Pure, as :mod:`gguf_audit.decode.dequant`: (n_blocks, block_bytes) uint8 in,
(n_blocks, 256) float32 out. The grids (``iq1s_grid``, ``iq2xxs_grid`` ...
in ``ggml/src/ggml-common.h``) come from gguf-py's copies; each decoder
looks whole grid rows up at once, scales them in place and, where ggml
writes ``* (sign ? -1.f : 1.f)``, XORs the sign bits in, which is what
ggml's Release build compiles that multiply to (so a NaN's sign flips too).
"""

from __future__ import annotations

from typing import Final

import numpy as np
import numpy.typing as npt
from gguf.quants import IQ1_S, IQ2_S, IQ2_XS, IQ2_XXS, IQ3_S, IQ3_XXS

from gguf_audit.decode.dequant import F32Array, U8Array, _fp16, _half

__all__ = [
    "decode_iq1_m",
    "decode_iq1_s",
    "decode_iq2_s",
    "decode_iq2_xs",
    "decode_iq2_xxs",
    "decode_iq3_s",
    "decode_iq3_xxs",
]


# --- IQ1_S ------------------------------------------------------------------------------


def _iq1s_values() -> F32Array:
    """(4096, 8) float32: ggml's iq1s_grid rows (from gguf-py's copy) plus IQ1S_DELTA, then minus it.

    Row ``i + 2048`` is grid row ``i`` less 0.125; both sums are exact.
    """
    IQ1_S.init_grid()  # type: ignore[no-untyped-call]  # gguf-py leaves it unannotated
    grid = np.asarray(IQ1_S.grid, dtype=np.float32).reshape(2048, 8)
    delta = np.float32(0.125)
    return np.concatenate([grid + delta, grid - delta])


_IQ1S_VALUES: Final = _iq1s_values()
_GRID_HIGH_SHIFTS: Final = np.array([0, 3, 6, 9], dtype=np.uint16).reshape(1, 1, 4)


def decode_iq1_s(blocks: U8Array) -> F32Array:
    """block_iq1_s: fp16 d, qs[32], qh[8] (uint16); eight runs of 32 as four grid rows of 8.

    Run ``r``: ``dl = d * (2 * ((qh >> 12) & 7) + 1)``, delta -0.125 when
    qh's bit 15 is set, else 0.125; row ``l``'s index is qs[4r + l] with bits
    ``3l..3l+2`` of qh above it; ``dl * (grid + delta)``.
    """
    n = blocks.shape[0]
    qh = np.ascontiguousarray(blocks[:, 34:50]).view("<u2").astype(np.uint16)
    dl = _fp16(blocks, 0) * (2 * ((qh >> np.uint16(12)) & np.uint16(7)) + np.uint16(1))
    index = (qh.reshape(n, 8, 1) >> _GRID_HIGH_SHIFTS) & np.uint16(7)
    index <<= np.uint16(8)
    index |= (qh.reshape(n, 8, 1) >> np.uint16(4)) & np.uint16(0x0800)  # the delta's sign picks the table half
    index |= blocks[:, 2:34].reshape(n, 8, 4)
    values: F32Array = _IQ1S_VALUES[index].reshape(n, 8, 32)
    values *= dl.reshape(n, 8, 1)
    return values.reshape(n, 256)


def decode_iq1_m(blocks: U8Array) -> F32Array:
    """block_iq1_m: qs[32], qh[16], scales[8] (four uint16); sixteen runs of 16 as two grid rows of 8.

    d is the fp16 made of the top nibbles of the four scale words (word 0's
    lowest). Run ``k``'s 3-bit scale sits at bit ``3 * (k % 4)`` of word
    ``k / 4``: ``dl = d * (2 * s + 1)``. Grid row ``g``'s index is qs[g] with
    nibble ``g % 2`` of qh[g / 2] above it, whose bit 3 is the delta's sign.
    """
    n = blocks.shape[0]
    words = np.ascontiguousarray(blocks[:, 48:56]).view("<u2").astype(np.uint16)
    top = words >> np.uint16(12)
    d = _half(top[:, 0] | (top[:, 1] << np.uint16(4)) | (top[:, 2] << np.uint16(8)) | (top[:, 3] << np.uint16(12)))
    scale = (words.reshape(n, 4, 1) >> _GRID_HIGH_SHIFTS) & np.uint16(7)
    dl = d * (2 * scale.reshape(n, 16) + np.uint16(1))
    qh = blocks[:, 32:48]
    index = np.stack((qh & np.uint8(0x0F), qh >> np.uint8(4)), axis=2).reshape(n, 32).astype(np.uint16)
    index <<= np.uint16(8)
    index |= blocks[:, :32]
    values: F32Array = _IQ1S_VALUES[index].reshape(n, 16, 16)
    values *= dl.reshape(n, 16, 1)
    return values.reshape(n, 256)


# --- IQ2_XXS ----------------------------------------------------------------------------


def _iq2xxs_values() -> F32Array:
    """(256, 8) float32: ggml's iq2xxs_grid rows, from gguf-py's copy."""
    IQ2_XXS.init_grid()  # type: ignore[no-untyped-call]  # gguf-py leaves it unannotated
    return np.asarray(IQ2_XXS.grid, dtype=np.float32).reshape(256, 8)


def _iq2xs_values() -> F32Array:
    """(512, 8) float32: ggml's iq2xs_grid rows, from gguf-py's copy."""
    IQ2_XS.init_grid()  # type: ignore[no-untyped-call]  # gguf-py leaves it unannotated
    return np.asarray(IQ2_XS.grid, dtype=np.float32).reshape(512, 8)


def _iq3xxs_values() -> F32Array:
    """(256, 4) float32: ggml's iq3xxs_grid rows, from gguf-py's copy."""
    IQ3_XXS.init_grid()  # type: ignore[no-untyped-call]  # gguf-py leaves it unannotated
    return np.asarray(IQ3_XXS.grid, dtype=np.float32).reshape(256, 4)


def _iq3s_values() -> F32Array:
    """(512, 4) float32: ggml's iq3s_grid rows, from gguf-py's copy."""
    IQ3_S.init_grid()  # type: ignore[no-untyped-call]  # gguf-py leaves it unannotated
    return np.asarray(IQ3_S.grid, dtype=np.float32).reshape(512, 4)


def _iq2s_values() -> F32Array:
    """(1024, 8) float32: ggml's iq2s_grid rows, from gguf-py's copy."""
    IQ2_S.init_grid()  # type: ignore[no-untyped-call]  # gguf-py leaves it unannotated
    return np.asarray(IQ2_S.grid, dtype=np.float32).reshape(1024, 8)


def _byte_sign_rows() -> npt.NDArray[np.uint32]:
    """(256, 8) uint32: bit ``j`` of byte ``i`` as the float sign bit of element ``j``.

    ggml writes ``* (sign ? -1.f : 1.f)``, which its Release build compiles to
    a flip of the sign bit: XORed in, a NaN's sign flips too, as in ggml.
    """
    bits = (np.arange(256).reshape(-1, 1) >> np.arange(8)) & 1
    rows: npt.NDArray[np.uint32] = bits.astype(np.uint32) << np.uint32(31)
    return rows


def _ksigns() -> npt.NDArray[np.int64]:
    """ggml's ksigns_iq2xs: each 7-bit ``i`` with an even-parity bit 7 above it."""
    i = np.arange(128)
    parity: npt.NDArray[np.int64] = np.bitwise_xor.reduce((i.reshape(-1, 1) >> np.arange(7)) & 1, axis=1)
    return i | (parity << 7)


_IQ2XXS_VALUES: Final = _iq2xxs_values()
_IQ2XS_VALUES: Final = _iq2xs_values()
_IQ3XXS_VALUES: Final = _iq3xxs_values()
_IQ3S_VALUES: Final = _iq3s_values()
_IQ2S_VALUES: Final = _iq2s_values()
_BYTE_SIGN_ROWS: Final = _byte_sign_rows()
_SIGN_ROWS: Final = _BYTE_SIGN_ROWS[_ksigns()]
_BYTE_BITS: Final = np.arange(8, dtype=np.uint8).reshape(1, 1, 8)
_SIGN_SHIFTS: Final = np.array([0, 7, 14, 21], dtype=np.uint32).reshape(1, 1, 4)


def decode_iq2_xxs(blocks: U8Array) -> F32Array:
    """block_iq2_xxs: fp16 d, then eight runs of 32 as two little-endian uint32 each.

    The first word's bytes index iq2xxs_grid (four rows of 8); the second's
    7-bit fields at 0, 7, 14, 21 pick each row's signs, its top 4 bits ``s``
    the scale ``db = d * (0.5 + s) * 0.25``; a value is ``db * grid`` with the sign bit flipped.
    """
    n = blocks.shape[0]
    qs = np.ascontiguousarray(blocks[:, 2:66])
    high = qs.view("<u4").reshape(n, 8, 2)[:, :, 1]
    db = _fp16(blocks, 0) * (np.float32(0.5) + (high >> np.uint32(28)).astype(np.float32))
    db *= np.float32(0.25)
    values: F32Array = _IQ2XXS_VALUES[qs.reshape(n, 8, 8)[:, :, :4]]
    values *= db.reshape(n, 8, 1, 1)
    values.view(np.uint32)[...] ^= _SIGN_ROWS[(high.reshape(n, 8, 1) >> _SIGN_SHIFTS) & np.uint32(127)]
    return values.reshape(n, 256)


def decode_iq2_xs(blocks: U8Array) -> F32Array:
    """block_iq2_xs: fp16 d, qs[32] (uint16), scales[8]; sixteen runs of 16 as two grid rows of 8.

    A qs word's low 9 bits index iq2xs_grid, its top 7 pick the row's signs
    (ksigns_iq2xs); run ``k``'s scale is nibble ``k % 2`` of scales[k / 2],
    ``db = d * (0.5 + s) * 0.25``; a value is ``db * grid`` with the sign bit flipped.
    """
    n = blocks.shape[0]
    q = np.ascontiguousarray(blocks[:, 2:66]).view("<u2").astype(np.uint16)
    scales = blocks[:, 66:74]
    nibble = np.stack((scales & np.uint8(0x0F), scales >> np.uint8(4)), axis=2).reshape(n, 16)
    db = _fp16(blocks, 0) * (np.float32(0.5) + nibble.astype(np.float32))
    db *= np.float32(0.25)
    values: F32Array = _IQ2XS_VALUES[q & np.uint16(511)]
    values.reshape(n, 16, 16)[...] *= db.reshape(n, 16, 1)
    values.view(np.uint32)[...] ^= _SIGN_ROWS[q >> np.uint16(9)]
    return values.reshape(n, 256)


def decode_iq3_xxs(blocks: U8Array) -> F32Array:
    """block_iq3_xxs: fp16 d, qs[64] indexing iq3xxs_grid (rows of 4), then eight uint32 of scales and signs.

    Run ``r`` (32 values) is grid rows qs[8r:8r + 8]; its word's 7-bit fields
    at 0, 7, 14, 21 pick the signs of each 8, its top 4 bits ``s`` the scale
    ``db = d * (0.5 + s) * 0.5``; a value is ``db * grid`` with the sign bit flipped.
    """
    n = blocks.shape[0]
    words = np.ascontiguousarray(blocks[:, 66:98]).view("<u4").reshape(n, 8, 1)
    db = _fp16(blocks, 0) * (np.float32(0.5) + (words.reshape(n, 8) >> np.uint32(28)).astype(np.float32))
    db *= np.float32(0.5)
    values: F32Array = _IQ3XXS_VALUES[blocks[:, 2:66]].reshape(n, 8, 32)
    values *= db.reshape(n, 8, 1)
    values.view(np.uint32).reshape(n, 8, 4, 8)[...] ^= _SIGN_ROWS[(words >> _SIGN_SHIFTS) & np.uint32(127)]
    return values.reshape(n, 256)


def decode_iq3_s(blocks: U8Array) -> F32Array:
    """block_iq3_s: fp16 d, qs[64], qh[8], signs[32], scales[4]; eight runs of 32, eight grid rows of 4 each.

    Row ``m`` of run ``r`` indexes iq3s_grid with qs[8r + m] and bit ``m`` of
    qh[r] above it; signs[k] holds the signs of values ``8k..8k + 7``; run
    ``r``'s scale is nibble ``r % 2`` of scales[r / 2], ``db = d * (1 + 2 * s)``.
    """
    n = blocks.shape[0]
    scales = blocks[:, 106:110]
    nibble = np.stack((scales & np.uint8(0x0F), scales >> np.uint8(4)), axis=2).reshape(n, 8)
    db = _fp16(blocks, 0) * (2 * nibble.astype(np.float32) + np.float32(1))
    index = (blocks[:, 66:74].reshape(n, 8, 1) >> _BYTE_BITS) & np.uint8(1)
    index = index.astype(np.uint16) << np.uint16(8)
    index |= blocks[:, 2:66].reshape(n, 8, 8)
    values: F32Array = _IQ3S_VALUES[index].reshape(n, 8, 32)
    values *= db.reshape(n, 8, 1)
    values.view(np.uint32).reshape(n, 32, 8)[...] ^= _BYTE_SIGN_ROWS[blocks[:, 74:106]]
    return values.reshape(n, 256)


_CRUMB_SHIFTS: Final = np.array([0, 2, 4, 6], dtype=np.uint8).reshape(1, 1, 4)


def decode_iq2_s(blocks: U8Array) -> F32Array:
    """block_iq2_s: fp16 d, qs[64] (32 grid indices, then 32 sign bytes), qh[8], scales[8]; runs of 16.

    Grid row ``g`` (of 8 values) indexes iq2s_grid with qs[g] and bits
    ``2(g % 4)``, ``2(g % 4) + 1`` of qh[g / 4] above it; qs[32 + g] holds its
    signs; run ``k``'s scale is nibble ``k % 2`` of scales[k / 2],
    ``db = d * (0.5 + s) * 0.25``.
    """
    n = blocks.shape[0]
    scales = blocks[:, 74:82]
    nibble = np.stack((scales & np.uint8(0x0F), scales >> np.uint8(4)), axis=2).reshape(n, 16)
    db = _fp16(blocks, 0) * (np.float32(0.5) + nibble.astype(np.float32))
    db *= np.float32(0.25)
    index = ((blocks[:, 66:74].reshape(n, 8, 1) >> _CRUMB_SHIFTS) & np.uint8(3)).astype(np.uint16)
    index <<= np.uint16(8)
    index |= blocks[:, 2:34].reshape(n, 8, 4)
    values: F32Array = _IQ2S_VALUES[index].reshape(n, 16, 16)
    values *= db.reshape(n, 16, 1)
    values.view(np.uint32).reshape(n, 32, 8)[...] ^= _BYTE_SIGN_ROWS[blocks[:, 34:66]]
    return values.reshape(n, 256)
