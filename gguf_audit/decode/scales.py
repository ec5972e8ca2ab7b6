"""Scale checks: which blocks ggml's ``ggml_validate_row_data`` would reject, and why.

Pure, like :mod:`gguf_audit.decode.kernels`, whose block layouts and input
rules it shares: a NaN or infinite fp16/fp32 scale, or MXFP4's e8m0 exponent
0xFF, makes a block one the validator refuses (``--check-tensors``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from gguf_audit.decode.kernels import Q2_0, RawBlocks, U8Array, elements, u16le, whole_blocks
from gguf_audit.gguf_constants import GGMLQuantizationType as Q

__all__ = ["ScaleProblems", "block_scale_problems", "part_scale_problems"]


@dataclass(frozen=True, slots=True)
class ScaleProblems:
    """What ggml's ``ggml_validate_row_data`` would object to, counted per block.

    For F16, BF16, F32 and F64 every element is a block and ggml checks the
    values themselves; for quantized types it checks the scale fields only.
    """

    n_blocks: int
    nonfinite_scale_blocks: int
    """Blocks with a NaN or infinite fp16/fp32 scale (d, m, dmin, ...), or an NVFP4 UE4M3 scale byte
    that is NaN in the NVFP4 spec (0x7F; ggml reads it as zero and never validates it)."""
    bad_exponent_blocks: int
    """MXFP4 blocks whose e8m0 exponent byte is 0xFF (NaN in the OCP MX spec)."""
    first_bad_block: int | None
    """Index of the first block counted in either of the above, or None."""
    type_rejected: bool = False
    """ggml_validate_row_data has no case for the type and refuses any row of it
    (Q8_1 today), whatever the scales hold."""

    @property
    def ok(self) -> bool:
        """True when ggml_validate_row_data would accept every block."""
        return self.nonfinite_scale_blocks == 0 and self.bad_exponent_blocks == 0 and not self.type_rejected


# Byte offsets of the fp16 scale fields ggml_validate_row_data checks, per block.
# Q8_1 is not validated by ggml (see ScaleProblems.type_rejected); its d and s
# are still counted, since a NaN there is a NaN in every value.
_FP16_SCALES: Final[dict[int, tuple[int, ...]]] = {
    Q.F16: (0,),
    Q.Q1_0: (0,),
    Q2_0: (0,),
    Q.Q4_0: (0,),
    Q.Q4_1: (0, 2),  # d, m
    Q.Q5_0: (0,),
    Q.Q5_1: (0, 2),  # d, m
    Q.Q8_0: (0,),
    Q.Q8_1: (0, 2),  # d, s
    Q.Q2_K: (80, 82),  # d, dmin after scales[16], qs[64]
    Q.Q3_K: (108,),  # d after hmask[32], qs[64], scales[12]
    Q.Q4_K: (0, 2),  # d, dmin
    Q.Q5_K: (0, 2),  # d, dmin
    Q.Q6_K: (208,),
    Q.TQ1_0: (52,),  # d after qs[48], qh[4]
    Q.TQ2_0: (64,),  # d after qs[64]
    Q.IQ2_XXS: (0,),
    Q.IQ2_XS: (0,),
    Q.IQ2_S: (0,),
    Q.IQ3_XXS: (0,),
    Q.IQ3_S: (0,),
    Q.IQ1_S: (0,),
    Q.IQ4_NL: (0,),
    Q.IQ4_XS: (0,),
}

# ggml_validate_row_data has no case for these and returns false for any row.
_REJECTED_BY_VALIDATOR: Final = frozenset({int(Q.Q8_1)})


def _fp16_nonfinite(h: npt.NDArray[np.uint16]) -> npt.NDArray[np.bool_]:
    return np.asarray((h & np.uint16(0x7C00)) == np.uint16(0x7C00), dtype=np.bool_)


def _nonfinite_blocks(blocks: U8Array, type_id: int) -> npt.NDArray[np.bool_]:
    n = blocks.shape[0]
    if type_id in _FP16_SCALES:
        bad = np.zeros((n, 1), dtype=np.bool_)
        for offset in _FP16_SCALES[type_id]:
            bad |= _fp16_nonfinite(u16le(blocks, offset))
        return bad.reshape(-1)
    if type_id == Q.BF16:
        return np.asarray((elements(blocks, "<u2") & 0x7F80) == 0x7F80, dtype=np.bool_)
    if type_id in (Q.F32, Q.Q8_K):
        # F32 elements, and Q8_K's float32 d at offset 0.
        bits = np.ascontiguousarray(blocks[:, 0:4]).view("<u4").reshape(-1)
        return np.asarray((bits & 0x7F800000) == 0x7F800000, dtype=np.bool_)
    if type_id == Q.F64:
        bits = elements(blocks, "<u8")
        return np.asarray((bits & 0x7FF0000000000000) == 0x7FF0000000000000, dtype=np.bool_)
    if type_id == Q.IQ1_M:
        # The fp16 scale is spread over the top nibbles of the four uint16
        # words of scales[8], which follow qs[32] and qh[16].
        sc = [u16le(blocks, 48 + 2 * k) for k in range(4)]
        h = (
            (sc[0] >> np.uint16(12))
            | ((sc[1] >> np.uint16(8)) & np.uint16(0x00F0))
            | ((sc[2] >> np.uint16(4)) & np.uint16(0x0F00))
            | (sc[3] & np.uint16(0xF000))
        )
        return _fp16_nonfinite(h).reshape(-1)
    if type_id == Q.NVFP4:
        # d[4], one UE4M3 byte per 16 values: 0x7F is NaN in the NVFP4 spec (as
        # is 0xFF read as E4M3). ggml reads 0x7F as zero and its validator never
        # looks at NVFP4 scales; a runtime decoding the spec's way gets NaN.
        d = blocks[:, 0:4]
        return np.asarray(((d & 0x7F) == 0x7F).any(axis=1), dtype=np.bool_)
    # I8..I64 hold no scale; MXFP4's e8m0 is checked separately.
    return np.zeros(n, dtype=np.bool_)


def _flags(blocks: U8Array, type_id: int) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Per block: a NaN or infinite scale; MXFP4's exponent 0xFF."""
    nonfinite = _nonfinite_blocks(blocks, type_id)
    # ggml reads e8m0 0xFF as 2**127 when decoding, but its validator refuses
    # it: the OCP MX spec makes it NaN.
    bad_exponent = (blocks[:, 0] == 0xFF) if type_id == Q.MXFP4 else np.zeros(blocks.shape[0], dtype=np.bool_)
    return nonfinite, bad_exponent


def part_scale_problems(raw: RawBlocks, type_id: int, n_parts: int, *, big_endian: bool = False) -> list[ScaleProblems]:
    """:func:`block_scale_problems` of each of ``n_parts`` equal parts of ``raw``, in one vectorised pass.

    A part is a sampled block (32 elements of a one-element type, one block
    of a quantized type); ``raw`` holds a whole number of blocks per part.
    """
    blocks = whole_blocks(raw, type_id, big_endian)
    if n_parts < 1 or blocks.shape[0] % n_parts:
        raise ValueError(f"{blocks.shape[0]} blocks do not divide into {n_parts} equal parts. Got {n_parts}.")
    nonfinite, bad_exponent = (flags.reshape(n_parts, -1) for flags in _flags(blocks, type_id))
    flagged = nonfinite | bad_exponent
    per_part, rejected = int(flagged.shape[1]), type_id in _REJECTED_BY_VALIDATOR
    clean = ScaleProblems(per_part, 0, 0, None, rejected)
    out = [clean] * n_parts
    for i in np.flatnonzero(flagged.any(axis=1)).tolist():
        first = int(np.argmax(flagged[i]))
        out[i] = ScaleProblems(per_part, int(nonfinite[i].sum()), int(bad_exponent[i].sum()), first, rejected)
    return out


def block_scale_problems(raw: RawBlocks, type_id: int, *, big_endian: bool = False) -> ScaleProblems:
    """Count the blocks ggml_validate_row_data would reject, and why.

    Same input rules and errors as :func:`~gguf_audit.decode.kernels.decode_blocks`. ggml stops at the
    first bad block; this counts them all.
    """
    blocks = whole_blocks(raw, type_id, big_endian)
    nonfinite, bad_exponent = _flags(blocks, type_id)
    flagged = np.flatnonzero(nonfinite | bad_exponent)
    return ScaleProblems(
        n_blocks=int(blocks.shape[0]),
        nonfinite_scale_blocks=int(np.count_nonzero(nonfinite)),
        bad_exponent_blocks=int(np.count_nonzero(bad_exponent)),
        first_bad_block=int(flagged[0]) if flagged.size else None,
        type_rejected=type_id in _REJECTED_BY_VALIDATOR,
    )
