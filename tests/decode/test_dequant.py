"""gguf_audit.decode.dequant: the NumPy dequantizers, bit for bit ggml's ``to_float`` and gguf-py's.

ggml's own decoder comes from the oracle's ``libggml-base`` (ctypes); gguf-py's
``dequantize`` is the second reference (it matches ggml on these types). Blocks
are random bytes (so NaN, Inf and subnormal scales occur), blocks with tame
scales, and the all-zero and all-0xFF blocks.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pytest
from gguf.constants import GGMLQuantizationType
from gguf.quants import dequantize as gguf_dequantize

from gguf_audit.decode import dequant, dequant_grid
from gguf_audit.decode.kernels import decode_blocks
from gguf_audit.format.ggml_types import ggml_type_info
from gguf_audit.testing.ggml_decode import GgmlDecode, ggml_to_float

Q = GGMLQuantizationType
FAST_TYPES = [
    Q.Q4_0,
    Q.Q4_1,
    Q.Q5_0,
    Q.Q5_1,
    Q.Q8_0,
    Q.Q2_K,
    Q.Q3_K,
    Q.Q4_K,
    Q.Q5_K,
    Q.Q6_K,
    Q.IQ4_NL,
    Q.IQ4_XS,
    Q.TQ1_0,
    Q.TQ2_0,
    Q.MXFP4,
    Q.NVFP4,
    Q.IQ1_S,
    Q.IQ1_M,
    Q.IQ2_XXS,
    Q.IQ2_XS,
    Q.IQ3_XXS,
    Q.IQ3_S,
    Q.IQ2_S,
]

# Offsets of each type's fp16 fields (ggml-common.h), made tame in half of the blocks.
FP16_FIELDS: dict[int, tuple[int, ...]] = {
    Q.Q4_0: (0,),
    Q.Q4_1: (0, 2),
    Q.Q5_0: (0,),
    Q.Q5_1: (0, 2),
    Q.Q8_0: (0,),
    Q.Q2_K: (80, 82),
    Q.Q3_K: (108,),
    Q.Q4_K: (0, 2),
    Q.Q5_K: (0, 2),
    Q.Q6_K: (208,),
    Q.IQ4_NL: (0,),
    Q.IQ4_XS: (0,),
    Q.TQ1_0: (52,),
    Q.TQ2_0: (64,),
    Q.MXFP4: (),
    Q.NVFP4: (),
    Q.IQ1_S: (0,),
    Q.IQ1_M: (),
    Q.IQ2_XXS: (0,),
    Q.IQ2_XS: (0,),
    Q.IQ3_XXS: (0,),
    Q.IQ3_S: (0,),
    Q.IQ2_S: (0,),
}

DECODERS: dict[int, Callable[[npt.NDArray[np.uint8]], npt.NDArray[np.float32]]] = {
    Q.Q4_0: dequant.decode_q4_0,
    Q.Q4_1: dequant.decode_q4_1,
    Q.Q5_0: dequant.decode_q5_0,
    Q.Q5_1: dequant.decode_q5_1,
    Q.Q8_0: dequant.decode_q8_0,
    Q.Q2_K: dequant.decode_q2_k,
    Q.Q3_K: dequant.decode_q3_k,
    Q.Q4_K: dequant.decode_q4_k,
    Q.Q5_K: dequant.decode_q5_k,
    Q.Q6_K: dequant.decode_q6_k,
    Q.IQ4_NL: dequant.decode_iq4_nl,
    Q.IQ4_XS: dequant.decode_iq4_xs,
    Q.TQ1_0: dequant.decode_tq1_0,
    Q.TQ2_0: dequant.decode_tq2_0,
    Q.MXFP4: dequant.decode_mxfp4,
    Q.NVFP4: dequant.decode_nvfp4,
    Q.IQ1_S: dequant_grid.decode_iq1_s,
    Q.IQ1_M: dequant_grid.decode_iq1_m,
    Q.IQ2_XXS: dequant_grid.decode_iq2_xxs,
    Q.IQ2_XS: dequant_grid.decode_iq2_xs,
    Q.IQ3_XXS: dequant_grid.decode_iq3_xxs,
    Q.IQ3_S: dequant_grid.decode_iq3_s,
    Q.IQ2_S: dequant_grid.decode_iq2_s,
}


def _blocks(type_id: int, seed: int) -> bytes:
    info = ggml_type_info(type_id)
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, (600, info.block_bytes), dtype=np.uint8)
    for offset in FP16_FIELDS[type_id]:
        blocks[:300, offset : offset + 2] = rng.uniform(-2.0, 2.0, 300).astype("<f2").view(np.uint8).reshape(300, 2)
    blocks[300] = 0
    blocks[301] = 0xFF
    return blocks.tobytes()


def _ggml(type_id: int) -> GgmlDecode:
    decode = ggml_to_float(type_id)
    if decode is None:
        if os.environ.get("GGUF_AUDIT_REQUIRE_ORACLE") == "1":
            pytest.fail("llama.cpp's libggml-base is missing (../shared/llama.cpp)")
        pytest.skip("llama.cpp's libggml-base is missing (../shared/llama.cpp or GGUF_AUDIT_LLAMA_CPP)")
    return decode


def _assert_same_bits(got: npt.NDArray[np.float32], want: npt.NDArray[np.float32], what: str) -> None:
    assert got.shape == want.shape
    differ = np.flatnonzero(got.view(np.uint32) != want.view(np.uint32))
    assert differ.size == 0, (
        f"{differ.size} values differ from {what}, first at {differ[0]}: {got[differ[0]]!r} != {want[differ[0]]!r}"
    )


@pytest.mark.parametrize("type_id", FAST_TYPES, ids=lambda t: t.name)
@pytest.mark.parametrize("seed", [0, 1])
def test_decodes_like_ggml(type_id: int, seed: int) -> None:
    raw = _blocks(type_id, seed)
    _assert_same_bits(decode_blocks(raw, type_id), _ggml(type_id)(raw), "ggml's to_float")


# ggml's Release build flips these types' sign bits where gguf-py multiplies by -1: the two differ on a NaN scale only.
SIGN_FLIP_TYPES = {Q.IQ2_XXS, Q.IQ2_XS, Q.IQ2_S, Q.IQ3_XXS, Q.IQ3_S}


@pytest.mark.parametrize("type_id", FAST_TYPES, ids=lambda t: t.name)
def test_decodes_like_gguf_py(type_id: Q) -> None:
    raw = _blocks(type_id, 2)
    with np.errstate(all="ignore"):
        want = np.asarray(gguf_dequantize(np.frombuffer(raw, dtype=np.uint8), type_id), dtype=np.float32)
    got = decode_blocks(raw, type_id)
    if type_id in SIGN_FLIP_TYPES:
        d = np.frombuffer(raw, dtype=np.uint8).reshape(600, -1)[:, :2].copy().view("<f2").reshape(-1)
        keep = np.repeat(~np.isnan(d), got.size // 600)
        assert 300 <= keep.sum() < keep.size  # both kinds of block are there
        got, want = got[keep], want.reshape(-1)[keep]
    _assert_same_bits(got, want.reshape(-1), "gguf-py's dequantize")


@pytest.mark.parametrize("type_id", FAST_TYPES, ids=lambda t: t.name)
def test_a_block_decodes_the_same_alone_and_in_a_batch(type_id: int) -> None:
    raw = _blocks(type_id, 3)
    size = ggml_type_info(type_id).block_bytes
    together = decode_blocks(raw, type_id)
    elems = together.size // (len(raw) // size)
    for i in (0, 299, 300, 301, 599):
        _assert_same_bits(
            decode_blocks(raw[i * size : (i + 1) * size], type_id), together[i * elems : (i + 1) * elems], "the batch"
        )


@pytest.mark.parametrize("type_id", FAST_TYPES, ids=lambda t: t.name)
def test_a_strided_block_array_decodes_like_a_contiguous_one(type_id: int) -> None:
    # The kernels read fp16 fields in place when the block array is contiguous; a strided one takes the copy path.
    size = ggml_type_info(type_id).block_bytes
    blocks = np.frombuffer(_blocks(type_id, 4), dtype=np.uint8).reshape(-1, size)
    wide = np.zeros((blocks.shape[0], size + 3), dtype=np.uint8)
    wide[:, 1 : size + 1] = blocks
    strided = wide[:, 1 : size + 1]
    assert not strided.flags.c_contiguous
    decode = DECODERS[type_id]
    with np.errstate(all="ignore"):
        _assert_same_bits(decode(strided).reshape(-1), decode(blocks).reshape(-1), "the contiguous blocks")
