"""gguf_audit.checks.data: statistics of decoded blocks and the data.* findings, from bytes."""

from __future__ import annotations

import struct

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gguf_audit.checks.data import (
    SampleStatus,
    block_stats,
    check_samples,
    combine_stats,
    decode_sample,
    sample_fingerprint,
    sample_rows,
    tensor_stats,
    zero_check_exempt,
)
from gguf_audit.findings import CODES, Severity
from gguf_audit.format.model import Header
from gguf_audit.format.parser import parse_header
from gguf_audit.plan import PlannedBlock, plan_blocks
from gguf_audit.testing.builder import Tensor, build_gguf, kv_str

F32, F16, Q8_0, Q4_1, Q4_K, MXFP4 = 0, 1, 8, 3, 12, 39
NAN16, INF16 = 0x7E00, 0x7C00


def q8_0_block(d: float | int, qs: list[int] | None = None) -> bytes:
    """A Q8_0 block: fp16 scale (a float, or raw bits as an int) and 32 int8 quants."""
    scale = struct.pack("<H", d) if isinstance(d, int) else struct.pack("<e", d)
    return scale + struct.pack("<32b", *(qs if qs is not None else [((i * 7) % 255) - 127 for i in range(32)]))


NAN_AND_INF_BLOCKS = b"".join([q8_0_block(0.01), q8_0_block(NAN16), q8_0_block(0.01), q8_0_block(INF16)])


def _header(tensors: list[Tensor], *, big_endian: bool = False) -> Header:
    data = build_gguf([kv_str("general.architecture", "llama")], tensors, big_endian=big_endian)
    header = parse_header(data, len(data))
    assert isinstance(header, Header)
    return header


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
    from gguf_audit.plan import tensor_geometry

    t = next(t for t in header.tensors if t.name == name)
    geo = tensor_geometry(t)
    assert geo is not None
    return geo.n_blocks


# --- statistics -----------------------------------------------------------------


def test_block_stats_counts_nonfinite_and_summarises_the_rest() -> None:
    v = np.array([0.0, -0.0, 1.0, -3.0, np.nan, np.inf, -np.inf, 2.0], dtype=np.float32)
    s = block_stats(v)
    assert (s.count, s.n_nan, s.n_inf, s.n_zero) == (8, 1, 2, 2)
    assert (s.min, s.max, s.max_abs) == (-3.0, 2.0, 3.0)
    assert s.mean == pytest.approx(0.0) and s.std == pytest.approx(np.std([0, 0, 1, -3, 2]))
    assert s.zero_fraction == 0.25
    empty = block_stats(np.array([np.nan, np.nan], dtype=np.float32))
    assert empty.min is None and empty.mean is None and empty.n_nan == 2


@given(
    st.lists(
        hnp.arrays(np.float32, st.integers(1, 40), elements=st.floats(-1e3, 1e3, width=32) | st.just(float("nan"))),
        min_size=1,
        max_size=6,
    )
)
def test_combined_stats_equal_the_stats_of_all_values(parts: list[np.ndarray]) -> None:
    whole = block_stats(np.concatenate(parts))
    combined = combine_stats(block_stats(p) for p in parts)
    assert combined is not None
    assert (combined.count, combined.n_nan, combined.n_inf, combined.n_zero) == (
        whole.count,
        whole.n_nan,
        whole.n_inf,
        whole.n_zero,
    )
    assert (combined.min, combined.max, combined.max_abs) == (whole.min, whole.max, whole.max_abs)
    if whole.mean is not None:
        assert combined.mean == pytest.approx(whole.mean, abs=1e-6)
        assert combined.std == pytest.approx(whole.std, rel=1e-6, abs=1e-6)


def test_rows_carry_the_samples_table_fields_and_rebuild_tensor_stats() -> None:
    blocks = [q8_0_block(0.01), q8_0_block(0.02)]
    header = _header([Tensor("blk.0.ffn_up.weight", (32, 2), Q8_0, data=b"".join(blocks))])
    plan = plan_blocks(header, {"blk.0.ffn_up.weight": [0, 1]})
    decoded = [decode_sample(b, blocks[b.block_index]) for b in plan.blocks]
    rows = sample_rows(decoded)
    assert list(rows[0].as_dict()) == [
        "tensor", "block_index", "offset", "n_bytes", "type", "count", "min", "max",
        "mean", "std", "max_abs", "n_nan", "n_inf", "zero_fraction",
    ]  # fmt: skip
    second = rows[1]
    assert (second.tensor, second.block_index, second.type, second.n_bytes) == ("blk.0.ffn_up.weight", 1, "Q8_0", 34)
    assert rows[1].offset == header.tensors[0].data_offset + 34
    per_tensor = tensor_stats(rows)["blk.0.ffn_up.weight"]
    all_values = np.concatenate([d.values for d in decoded if d.values is not None])
    assert per_tensor.count == 64 and per_tensor.max == float(all_values.max())


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
    header = _header([Tensor("w", (32, 4), Q8_0, data=data)])
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
    header = _header(
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
    header = _header([Tensor("w", (32, 2), Q8_0)])
    block = plan_blocks(header, {"w": [0]}).blocks[0]
    assert decode_sample(block, None).status is SampleStatus.UNREAD
    short = decode_sample(block, b"\0" * 10)
    assert short.status is SampleStatus.UNREAD and short.note == "read 10 bytes of 34"
    assert list(check_samples(header, [short])) == []


# --- fingerprint ----------------------------------------------------------------


def test_fingerprint_depends_on_bytes_and_offsets_not_order() -> None:
    def block(offset: int) -> PlannedBlock:
        return PlannedBlock(0, "w", Q8_0, 0, 0, 32, offset, 4)

    a = [(block(100), b"abcd"), (block(200), b"efgh")]
    fp = sample_fingerprint(a)
    assert fp is not None and len(fp) == 64
    assert sample_fingerprint(list(reversed(a))) == fp
    assert sample_fingerprint([(block(100), b"abcd"), (block(201), b"efgh")]) != fp
    assert sample_fingerprint([(block(100), b"abcd"), (block(200), b"efgX")]) != fp
    assert sample_fingerprint([]) is None
