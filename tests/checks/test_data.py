"""gguf_audit.checks.data: the data.* findings of decoded blocks, from bytes."""

from __future__ import annotations

import struct

import numpy as np
from ggml_blocks import INF16, NAN16, built_header, q8_0_block

from gguf_audit.checks.data import check_samples, zero_check_exempt
from gguf_audit.decode.sampled import SampleStatus, decode_sample
from gguf_audit.findings import CODES, Severity
from gguf_audit.format.model import Header
from gguf_audit.format.parser import parse_header
from gguf_audit.plan import plan_blocks, tensor_geometry
from gguf_audit.testing.builder import Tensor, build_gguf, kv_str

F32, F16, Q8_0, Q4_1, Q4_K, MXFP4 = 0, 1, 8, 3, 12, 39

NAN_AND_INF_BLOCKS = b"".join([q8_0_block(0.01), q8_0_block(NAN16), q8_0_block(0.01), q8_0_block(INF16)])


def _check(tensors: list[Tensor], *, big_endian: bool = False) -> list[tuple[str, str | None]]:
    """Decode every block of every tensor straight from the built bytes, and check them."""
    data = build_gguf([kv_str("general.architecture", "llama")], tensors, big_endian=big_endian)
    header = parse_header(data, len(data))
    assert isinstance(header, Header)
    plan = plan_blocks(header, {t.name: list(range(_n_blocks(header, t.name))) for t in header.tensors})
    decoded = [decode_sample(b, data[b.offset : b.end_offset], big_endian=big_endian) for b in plan.blocks]
    findings = list(check_samples(header, decoded))
    for f in findings:
        assert f.code in CODES and "\n" not in f.message and f.refused is False
    return [(f.code, f.tensor) for f in findings]


def _n_blocks(header: Header, name: str) -> int:
    t = next(t for t in header.tensors if t.name == name)
    geo = tensor_geometry(t)
    assert geo is not None
    return geo.n_blocks


# --- findings -------------------------------------------------------------------


def test_nan_and_inf_scales_and_values_are_nonfinite() -> None:
    found = _check(
        [
            Tensor("blk.0.attn_q.weight", (32, 4), Q8_0, data=NAN_AND_INF_BLOCKS),
            # Inf scale times zero quants is NaN in ggml too; an Inf scale alone is enough.
            Tensor("blk.0.attn_k.weight", (32, 2), Q8_0, data=q8_0_block(0.01) + q8_0_block(INF16, [0] * 32)),
            Tensor("blk.0.attn_v.weight", (32, 2), F16, data=np.r_[np.ones(63), np.inf].astype("<f2").tobytes()),
            Tensor("blk.0.ffn_up.weight", (32, 2), F32, data=np.r_[np.nan, np.ones(63)].astype("<f4").tobytes()),
            Tensor("blk.0.ffn_down.weight", (32, 2), Q8_0, data=q8_0_block(0.01) + q8_0_block(0.02)),
        ]
    )
    assert sorted(found) == sorted(
        [
            ("data.nonfinite", "blk.0.attn_q.weight"),
            ("data.nonfinite", "blk.0.attn_k.weight"),
            ("data.nonfinite", "blk.0.attn_v.weight"),
            ("data.nonfinite", "blk.0.ffn_up.weight"),
        ]
    )
    assert CODES["data.nonfinite"].severity is Severity.ERROR


def test_nonfinite_message_names_counts_and_first_block() -> None:
    data = NAN_AND_INF_BLOCKS
    header = built_header([Tensor("w", (32, 4), Q8_0, data=data)])
    plan = plan_blocks(header, {"w": [0, 1, 2, 3]})
    raw = build_gguf([kv_str("general.architecture", "llama")], [Tensor("w", (32, 4), Q8_0, data=data)])
    (f,) = check_samples(header, [decode_sample(b, raw[b.offset : b.end_offset]) for b in plan.blocks])
    assert f.code == "data.nonfinite" and f.tensor == "w"
    assert "2 of 4 sampled blocks" in f.message and "first at block 1" in f.message
    assert "2 with a NaN or Inf scale" in f.message
    assert f.offset == plan.blocks[1].offset


def test_zero_filled_matrices_are_flagged_but_not_norms_biases_or_vectors() -> None:
    found = _check(
        [
            Tensor("blk.0.ffn_up.weight", (256, 4), Q4_K),  # zeros
            Tensor("blk.0.attn_q.weight", (32, 4), Q8_0),  # zeros
            Tensor("blk.0.attn_norm.weight", (256,), F32),
            Tensor("blk.0.attn_q_norm.weight", (32, 4), F32),
            Tensor("blk.0.attn_q.bias", (32, 4), F32),
            Tensor("output.weight", (256,), F32),  # a vector
            Tensor("blk.0.attn_q.weight.lora_b", (32, 4), F32),
            # One non-zero block is enough to clear a tensor.
            Tensor("blk.0.attn_k.weight", (32, 4), Q8_0, data=bytes(34 * 3) + q8_0_block(0.01)),
        ]
    )
    assert sorted(found) == [
        ("data.zero_filled", "blk.0.attn_q.weight"),
        ("data.zero_filled", "blk.0.ffn_up.weight"),
    ]
    assert CODES["data.zero_filled"].refused is False


def test_zero_check_exemptions() -> None:
    header = built_header(
        [
            Tensor("blk.0.ffn_norm.weight", (32, 2), F32),
            Tensor("blk.3.ssm_conv1d.weight", (32, 4), F32),
            Tensor("rope_freqs.weight", (32, 2), F32),
            Tensor("blk.0.exp_probs_b.bias", (32, 2), F32),
            Tensor("blk.0.ffn_gate_exps.weight", (32, 4, 2), Q8_0),
            Tensor("token_embd.weight", (32, 4), Q8_0),
        ]
    )
    assert [zero_check_exempt(t) for t in header.tensors] == [True, True, True, True, False, False]


def test_mxfp4_exponent_ff_is_a_bad_scale() -> None:
    good = bytes([127]) + bytes(range(16))
    bad = bytes([0xFF]) + bytes(range(16))
    found = _check([Tensor("blk.0.ffn_down_exps.weight", (32, 3), MXFP4, data=good + bad + good)])
    assert found == [("data.bad_scale", "blk.0.ffn_down_exps.weight")]
    assert CODES["data.bad_scale"].refused is False


def test_a_type_without_decoder_is_reported_not_checked() -> None:
    # gguf_convert_endian.py does not convert Q4_1, so big-endian Q4_1 has no known layout.
    block = struct.pack(">ee", 0.1, 0.0) + bytes(range(16))
    found = _check([Tensor("blk.0.attn_q.weight", (32, 2), Q4_1, data=block * 2)], big_endian=True)
    assert found == [("data.no_decoder", "blk.0.attn_q.weight")]
    assert CODES["data.no_decoder"].severity is Severity.INFO


def test_unread_and_short_blocks_are_not_judged() -> None:
    header = built_header([Tensor("w", (32, 2), Q8_0)])
    block = plan_blocks(header, {"w": [0]}).blocks[0]
    assert decode_sample(block, None).status is SampleStatus.UNREAD
    short = decode_sample(block, b"\0" * 10)
    assert short.status is SampleStatus.UNREAD and short.note == "read 10 bytes of 34"
    assert list(check_samples(header, [short])) == []
