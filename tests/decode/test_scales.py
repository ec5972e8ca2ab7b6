"""gguf_audit.decode.scales: the blocks ggml_validate_row_data would reject, and why.

Expected counts are worked out here from the block layouts in ggml-common.h.
"""

from __future__ import annotations

import math
import struct

import numpy as np
import pytest
from gguf.constants import GGMLQuantizationType

from gguf_audit.decode.kernels import has_decoder
from gguf_audit.decode.scales import ScaleProblems, block_scale_problems, part_scale_problems
from gguf_audit.format.ggml_types import GGML_TYPE_COUNT, ggml_type_info

Q = GGMLQuantizationType


def u16(bits: int) -> bytes:
    return struct.pack("<H", bits)


# --- block_scale_problems: what ggml_validate_row_data checks ------------------------

FP16_NAN, FP16_SNAN, FP16_INF, FP16_NINF, FP16_ONE = 0x7E00, 0x7C01, 0x7C00, 0xFC00, 0x3C00


def test_q4_0_nan_and_inf_scales() -> None:
    ds = [FP16_ONE, FP16_NAN, FP16_INF, FP16_NINF, FP16_ONE]
    raw = b"".join(u16(d) + bytes(16) for d in ds)
    assert block_scale_problems(raw, Q.Q4_0) == ScaleProblems(5, 3, 0, 1)


def test_q8_0_signalling_nan_scale() -> None:
    raw = b"".join(u16(d) + bytes(32) for d in (FP16_ONE, 0x0001, FP16_SNAN))
    assert block_scale_problems(raw, Q.Q8_0) == ScaleProblems(3, 1, 0, 2)


def test_q4_k_checks_d_and_dmin() -> None:
    def block(d: int, dmin: int) -> bytes:
        return u16(d) + u16(dmin) + bytes(140)

    raw = block(FP16_ONE, FP16_ONE) + block(FP16_ONE, FP16_NAN) + block(FP16_INF, FP16_ONE)
    assert block_scale_problems(raw, Q.Q4_K) == ScaleProblems(3, 2, 0, 1)


def test_q6_k_checks_only_the_trailing_d() -> None:
    def block(head: int, d: int) -> bytes:
        # ql[128], qh[64], scales[16], then d at byte 208.
        return u16(head) + bytes(206) + u16(d)

    raw = block(FP16_NAN, FP16_ONE) + block(0, FP16_INF) + block(0, FP16_ONE)
    assert block_scale_problems(raw, Q.Q6_K) == ScaleProblems(3, 1, 0, 1)


def test_q2_k_and_q3_k_scales_sit_after_the_quants() -> None:
    # block_q2_K: scales[16], qs[64], d, dmin. block_q3_K: hmask[32], qs[64], scales[12], d.
    q2k = bytes(80) + u16(FP16_ONE) + u16(FP16_NINF)
    assert block_scale_problems(q2k, Q.Q2_K) == ScaleProblems(1, 1, 0, 0)
    q3k = u16(FP16_NAN) + bytes(106) + u16(FP16_ONE)
    assert block_scale_problems(q3k, Q.Q3_K).ok


def test_iq1_m_scale_is_gathered_from_four_nibbles() -> None:
    # The fp16 scale's nibbles are the top nibbles of the four uint16 words of
    # scales[8] (bytes 48..56), lowest nibble first: 0x7E00 -> 0, 0, E, 7.
    words = (0x0FFF, 0x0FFF, 0xEFFF, 0x7FFF)
    raw = bytes(48) + struct.pack("<4H", *words)
    assert block_scale_problems(raw, Q.IQ1_M) == ScaleProblems(1, 1, 0, 0)
    fine = bytes(48) + struct.pack("<4H", 0xFFFF, 0xFFFF, 0xBFFF, 0x3FFF)  # 0x3BFF, finite
    assert block_scale_problems(fine, Q.IQ1_M).ok


def test_mxfp4_exponent_0xff_is_bad() -> None:
    raw = b"".join(bytes([e]) + bytes(16) for e in (0x7F, 0xFF, 0xFE, 0x00))
    problems = block_scale_problems(raw, Q.MXFP4)
    assert problems == ScaleProblems(4, 0, 1, 1)
    assert not problems.ok


def test_nvfp4_nan_scale_bytes_are_nonfinite() -> None:
    # 0x7F (and 0xFF read as E4M3) is NaN in the NVFP4 spec; ggml decodes 0x7F as
    # zero and ggml_validate_row_data never looks, so only this check tells.
    raw = b"".join(bytes([s] * 4) + bytes(32) for s in (0x7F, 0xFF, 0x80, 0x00))
    assert block_scale_problems(raw, Q.NVFP4) == ScaleProblems(4, 2, 0, 0)
    one = bytes([0x38, 0x38, 0x7F, 0x38]) + bytes(32)
    assert block_scale_problems(one, Q.NVFP4).nonfinite_scale_blocks == 1
    assert block_scale_problems(bytes([0x38] * 4) + bytes(32), Q.NVFP4).ok


def test_float_types_check_every_element() -> None:
    f16_raw = struct.pack("<4H", FP16_ONE, FP16_NAN, 0x0400, FP16_NINF)
    assert block_scale_problems(f16_raw, Q.F16) == ScaleProblems(4, 2, 0, 1)
    bf16_raw = struct.pack("<3H", 0x3F80, 0x7F80, 0xFFC1)
    assert block_scale_problems(bf16_raw, Q.BF16) == ScaleProblems(3, 2, 0, 1)
    f32_raw = struct.pack("<3f", 1.0, math.nan, 3.0)
    assert block_scale_problems(f32_raw, Q.F32) == ScaleProblems(3, 1, 0, 1)
    f64_raw = struct.pack("<3d", math.inf, 1e300, 0.0)
    assert block_scale_problems(f64_raw, Q.F64) == ScaleProblems(3, 1, 0, 0)


def test_q8_k_checks_its_float32_scale() -> None:
    raw = struct.pack("<f", 1.0) + bytes(288) + struct.pack("<f", math.inf) + bytes(288)
    assert block_scale_problems(raw, Q.Q8_K) == ScaleProblems(2, 1, 0, 1)


def test_integer_types_have_nothing_to_check() -> None:
    raw = struct.pack("<4I", 0x7F800000, 0x7FC00000, 0xFFFFFFFF, 0)
    assert block_scale_problems(raw, Q.I32) == ScaleProblems(4, 0, 0, None)


@pytest.mark.parametrize(
    "type_id", [t for t in range(GGML_TYPE_COUNT) if has_decoder(t)], ids=lambda t: ggml_type_info(t).name
)
def test_part_scale_problems_are_each_parts_own(type_id: int) -> None:
    # The vectorised per-part counts against block_scale_problems of each part alone, on random
    # bytes (NaN and Inf scales, MXFP4 exponents 0xFF) and on tame all-zero parts.
    info = ggml_type_info(type_id)
    per_part = 32 if info.block_elems == 1 else 1
    rng = np.random.default_rng(type_id)
    parts = rng.integers(0, 256, (400, per_part * info.block_bytes), dtype=np.uint8)
    parts[::3] = 0
    if type_id == Q.MXFP4:
        parts[1::4, 0] = 0xFF
    raw = parts.tobytes()
    got = part_scale_problems(raw, type_id, len(parts))
    assert got == [block_scale_problems(part.tobytes(), type_id) for part in parts]
    assert any(not p.ok for p in got) or type_id in (Q.I8, Q.I16, Q.I32, Q.I64)
