"""gguf_audit.decode.kernels: ggml-exact block decoding (and, on the corpus, ggml's scale validation).

Expected values come from the shared corpus (decoded by ggml itself) or are
worked out here from the block layouts in ggml-common.h with plain Python
arithmetic, never from the decoder under test.
"""

from __future__ import annotations

import json
import math
import pickle
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from corpus import corpus_dir, truth_files
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType
from gguf.scripts import gguf_convert_endian

from gguf_audit.decode.kernels import BIG_ENDIAN_TYPE_IDS, NoDecoder, decode_blocks, has_decoder
from gguf_audit.decode.scales import ScaleProblems, block_scale_problems
from gguf_audit.errors import GGUFAuditError
from gguf_audit.format.ggml_types import GGML_TYPE_COUNT, REMOVED_TYPE_IDS, TypeStatus, ggml_type_info

Q = GGMLQuantizationType
Q2_0 = 42  # not in gguf-py's enum yet

# --- helpers -------------------------------------------------------------------


def f16(x: float) -> bytes:
    return struct.pack("<e", x)


def f16_value(x: float) -> float:
    """``x`` rounded to fp16, as a Python float (exact)."""
    value: float = struct.unpack("<e", f16(x))[0]
    return value


def u16(bits: int) -> bytes:
    return struct.pack("<H", bits)


def as_bits(values: Any) -> npt.NDArray[np.uint32]:
    return np.asarray(values, dtype=np.float32).view(np.uint32)


def assert_bits_equal(got: npt.NDArray[np.float32], want: Any) -> None:
    want_arr = np.asarray(want, dtype=np.float32)
    assert got.dtype == np.float32
    assert got.shape == want_arr.shape
    mismatch = np.flatnonzero(got.view(np.uint32) != want_arr.view(np.uint32))
    assert mismatch.size == 0, (
        f"{mismatch.size} values differ, first at {mismatch[0]}: "
        f"got {got[mismatch[0]]!r} ({got.view(np.uint32)[mismatch[0]]:#010x}), "
        f"want {want_arr[mismatch[0]]!r} ({want_arr.view(np.uint32)[mismatch[0]]:#010x})"
    )


def round_int_to_f32(n: int) -> float:
    """The float32 nearest to the integer ``n`` (ties to even), computed exactly."""
    m = abs(n)
    shift = max(m.bit_length() - 24, 0)
    q, r = divmod(m, 1 << shift)
    if shift:
        half = 1 << (shift - 1)
        if r > half or (r == half and q & 1):
            q += 1
    return math.copysign(float(q << shift), n) if n else 0.0


# --- the corpus: ggml's own decoded values --------------------------------------


@dataclass(frozen=True)
class Sample:
    name: str
    ggml_type: int
    raw: bytes
    big_endian: bool
    values: list[float]
    tensor: str
    block_index: int


def _samples() -> list[Sample]:
    out: list[Sample] = []
    for path in truth_files():
        doc = json.loads(path.read_text(encoding="utf-8"))
        big_endian = doc.get("endian") == "big"
        for s in doc["samples"]:
            out.append(
                Sample(
                    name=f"{path.name.removesuffix('.truth.json')}:{s['tensor']}:{s['block_index']}",
                    ggml_type=s["ggml_type"],
                    raw=bytes.fromhex(s["raw_hex"]),
                    big_endian=big_endian,
                    values=s["values"],
                    tensor=s["tensor"],
                    block_index=s["block_index"],
                )
            )
    return out


SAMPLES = _samples()


def _sample_file(sample: Sample) -> str:
    return sample.name.split(":", 1)[0]


def test_corpus_is_present_or_skipped() -> None:
    if not corpus_dir().is_dir():
        pytest.skip(f"no corpus at {corpus_dir()} (set GGUF_AUDIT_CORPUS)")
    assert SAMPLES, f"corpus at {corpus_dir()} has no truth samples"
    assert any(s.big_endian for s in SAMPLES)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.name)
def test_corpus_sample_decodes_like_ggml(sample: Sample) -> None:
    got = decode_blocks(sample.raw, sample.ggml_type, big_endian=sample.big_endian)
    assert_bits_equal(got, sample.values)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.name)
def test_corpus_sample_has_no_scale_problems(sample: Sample) -> None:
    problems = block_scale_problems(sample.raw, sample.ggml_type, big_endian=sample.big_endian)
    info = ggml_type_info(sample.ggml_type)
    assert problems == ScaleProblems(len(sample.raw) // info.block_bytes, 0, 0, None)
    assert problems.ok


def test_corpus_big_endian_raw_is_the_little_endian_block_with_d_swapped() -> None:
    big = [s for s in SAMPLES if s.big_endian]
    if not big:
        pytest.skip("no big-endian corpus samples")
    little = {
        (_sample_file(s), s.tensor, s.block_index): s
        for s in SAMPLES
        if not s.big_endian and _sample_file(s).endswith("-Q8_0.gguf")
    }
    for s in big:
        twin = little.get((_sample_file(s).replace("-BE", ""), s.tensor, s.block_index))
        if twin is None:
            continue
        assert s.ggml_type == Q.Q8_0
        assert s.raw[2:] == twin.raw[2:] and s.raw[:2] == twin.raw[1::-1]
        # Read as little-endian the swapped scale gives different values.
        assert not np.array_equal(decode_blocks(s.raw, s.ggml_type), np.array(s.values, dtype=np.float32))


# --- big-endian: exactly what gguf_convert_endian.py converts ---------------------


class _ReaderTensor:
    """The one attribute gguf_convert_endian's byteswap functions use."""

    def __init__(self, data: npt.NDArray[np.uint8]) -> None:
        self.data = data


def to_big_endian_like_gguf_py(raw: bytes, type_id: int) -> bytes:
    """Swap ``raw`` the way gguf_convert_endian.py converts a tensor of ``type_id``."""
    data = np.frombuffer(raw, dtype=np.uint8).copy()
    qtype = Q(type_id)
    if qtype in gguf_convert_endian.byteswap_tensors:
        block_bytes = GGML_QUANT_SIZES[qtype][1]
        tensor = _ReaderTensor(data)
        for offset in range(0, data.size, block_bytes):
            gguf_convert_endian.byteswap_tensors[qtype](tensor, offset)  # type: ignore[no-untyped-call]
    elif qtype in (Q.F16, Q.BF16):
        data.view(np.uint16).byteswap(inplace=True)
    elif qtype == Q.F32:
        data.view(np.uint32).byteswap(inplace=True)
    else:
        raise AssertionError(f"gguf_convert_endian.py refuses {qtype.name}")
    return data.tobytes()


def test_big_endian_types_are_the_ones_gguf_convert_endian_converts() -> None:
    converted = {int(t) for t in gguf_convert_endian.byteswap_tensors} | {Q.F32, Q.F16, Q.BF16}
    assert converted == BIG_ENDIAN_TYPE_IDS


@pytest.mark.parametrize("type_id", sorted(BIG_ENDIAN_TYPE_IDS), ids=lambda t: ggml_type_info(t).name)
def test_big_endian_blocks_decode_like_their_little_endian_source(type_id: int) -> None:
    little = [s for s in SAMPLES if s.ggml_type == type_id and not s.big_endian]
    raws = [s.raw for s in little]
    if not raws:
        # Types the corpus lacks: random blocks with tame fp16 fields are enough,
        # since only byte order is under test here.
        info = ggml_type_info(type_id)
        rng = np.random.default_rng(type_id)
        block = rng.integers(0, 256, 4 * info.block_bytes, dtype=np.uint8)
        block[1::2] &= 0x3B
        raws = [block.tobytes()]
    for raw in raws:
        big = to_big_endian_like_gguf_py(raw, type_id)
        assert_bits_equal(decode_blocks(big, type_id, big_endian=True), decode_blocks(raw, type_id))
        assert block_scale_problems(big, type_id, big_endian=True) == block_scale_problems(raw, type_id)


@pytest.mark.parametrize(
    "type_id",
    [t for t in range(GGML_TYPE_COUNT) if has_decoder(t) and t not in BIG_ENDIAN_TYPE_IDS],
    ids=lambda t: ggml_type_info(t).name,
)
def test_big_endian_types_gguf_py_cannot_convert_have_no_decoder(type_id: int) -> None:
    raw = bytes(ggml_type_info(type_id).block_bytes)
    assert not has_decoder(type_id, big_endian=True)
    with pytest.raises(NoDecoder, match=r"big-endian") as exc:
        decode_blocks(raw, type_id, big_endian=True)
    assert exc.value.type_id == type_id
    with pytest.raises(NoDecoder):
        block_scale_problems(raw, type_id, big_endian=True)


def test_big_endian_scale_is_read_after_the_swap() -> None:
    nan_d_big_endian = bytes([0x7E, 0x00]) + bytes(16)
    assert block_scale_problems(nan_d_big_endian, Q.Q4_0, big_endian=True).nonfinite_scale_blocks == 1
    # The same bytes read little-endian are 0x007E, a small finite subnormal.
    assert block_scale_problems(nan_d_big_endian, Q.Q4_0).ok


# --- types with no corpus: hand-built blocks ------------------------------------


def test_q1_0_is_plus_or_minus_d_per_bit() -> None:
    # block_q1_0: fp16 d, then 16 bytes of bits; element j is bit j%8 of byte j//8.
    blocks = [(0.3, bytes(range(0, 256, 16))), (-0.5, bytes([0xFF, 0x00, 0xA5, 0x5A] * 4))]
    raw = b"".join(f16(d) + qs for d, qs in blocks)
    want = []
    for d, qs in blocks:
        dh = f16_value(d)
        want += [dh if (qs[j // 8] >> (j % 8)) & 1 else -dh for j in range(128)]
    assert_bits_equal(decode_blocks(raw, Q.Q1_0), want)


def test_q1_0_flips_the_sign_of_a_nan_scale() -> None:
    # ggml picks d or -d; it does not multiply, so a NaN d keeps its payload.
    raw = u16(0x7E00) + bytes([0b01]) + bytes(15)
    got = decode_blocks(raw, Q.Q1_0).view(np.uint32)
    assert got[0] == 0x7FC00000 and got[1] == 0xFFC00000


def test_q2_0_codes_are_minus_one_to_two_times_d() -> None:
    # block_q2_0: fp16 d, then 16 bytes of 2-bit codes, element j in bits 2*(j%4) of byte j//4.
    qs = bytes([0b11100100, 0b00011011, 0xFF, 0x00] * 4)
    raw = f16(0.1) + qs + f16(-3.0) + bytes(reversed(qs))
    want = []
    for d, q in ((0.1, qs), (-3.0, bytes(reversed(qs)))):
        dh = f16_value(d)
        want += [(((q[j // 4] >> (2 * (j % 4))) & 3) - 1) * dh for j in range(64)]
    assert_bits_equal(decode_blocks(raw, Q2_0), want)
    assert ggml_type_info(Q2_0).block_bytes == len(raw) // 2


def test_q8_1_is_d_times_quant_and_ignores_s() -> None:
    # block_q8_1: fp16 d, fp16 s (d * sum of quants), 32 int8 quants.
    quants = list(range(-16, 16))
    raw = f16(0.07) + u16(0x7E00) + struct.pack("<32b", *quants)
    dh = f16_value(0.07)
    assert_bits_equal(decode_blocks(raw, Q.Q8_1), [q * dh for q in quants])
    problems = block_scale_problems(raw, Q.Q8_1)
    # ggml_validate_row_data has no Q8_1 case, so it refuses the row whatever it holds.
    assert problems == ScaleProblems(1, 1, 0, 0, type_rejected=True)
    assert not problems.ok
    assert block_scale_problems(f16(0.07) + f16(1.0) + bytes(32), Q.Q8_1).type_rejected


def test_q8_k_is_float32_d_times_quant() -> None:
    # block_q8_K: float32 d, 256 int8 quants, 16 int16 block sums (not used to decode).
    quants = [(i * 37) % 256 - 128 for i in range(256)]
    d = struct.unpack("<f", struct.pack("<f", 0.01))[0]
    raw = struct.pack("<f", 0.01) + struct.pack("<256b", *quants) + bytes(32)
    # d has 24 significant bits and a quant 8: the double product is exact.
    assert_bits_equal(decode_blocks(raw, Q.Q8_K), [d * q for q in quants])


def test_q4_0_keeps_negative_zero() -> None:
    # x = (nibble - 8) * d; with d = +0.0 a negative code gives -0.0.
    qs = bytes([0x80, 0xF0, 0x07] + [0x88] * 13)
    raw = f16(0.0) + qs
    codes = [b & 0x0F for b in qs] + [b >> 4 for b in qs]
    assert_bits_equal(decode_blocks(raw, Q.Q4_0), [(c - 8) * 0.0 for c in codes])


def test_f16_every_bit_pattern() -> None:
    patterns = np.arange(1 << 16, dtype=np.uint32)
    raw = patterns.astype("<u2").tobytes()
    got = decode_blocks(raw, Q.F16).view(np.uint32)
    values = struct.unpack(f"<{1 << 16}e", raw)
    is_nan = ((patterns & 0x7C00) == 0x7C00) & ((patterns & 0x03FF) != 0)
    finite_or_inf = [struct.unpack("<I", struct.pack("<f", v))[0] for v, n in zip(values, is_nan, strict=True) if not n]
    assert np.array_equal(got[~is_nan], np.array(finite_or_inf, dtype=np.uint32))
    # NaNs keep sign and payload and come out quiet, as ggml's conversion does
    # (its final multiply by 2**-112 quiets a signalling NaN).
    nan = patterns[is_nan]
    want_nan = ((nan & 0x8000) << 16) | 0x7F800000 | ((nan & 0x03FF) << 13) | 0x00400000
    assert np.array_equal(got[is_nan], want_nan)


def test_bf16_is_the_top_half_of_float32() -> None:
    patterns = [0x3F80, 0xBF80, 0x7F80, 0xFF80, 0x7F81, 0x7FC1, 0x0001, 0x8000, 0x4049]
    raw = struct.pack(f"<{len(patterns)}H", *patterns)
    assert list(decode_blocks(raw, Q.BF16).view(np.uint32)) == [p << 16 for p in patterns]


def test_f32_is_its_own_bits() -> None:
    patterns = [0x3F800000, 0x7F800001, 0xFFC00123, 0x00000001, 0x80000000, 0x7F7FFFFF]
    raw = struct.pack(f"<{len(patterns)}I", *patterns)
    assert list(decode_blocks(raw, Q.F32).view(np.uint32)) == patterns


@pytest.mark.parametrize(
    ("type_id", "fmt", "ints"),
    [
        (Q.I8, "b", list(range(-128, 128))),
        (Q.I16, "h", [-32768, -1, 0, 1, 32767, 12345]),
        (Q.I32, "i", [-(2**31), 2**31 - 1, 2**24 + 1, 2**24 + 3, -(2**24) - 1, 7]),
        (Q.I64, "q", [-(2**63), 2**63 - 1, 2**60 + 2**36 + 1, 2**60 + 2**36, 2**53 + 1, -5]),
    ],
    ids=["I8", "I16", "I32", "I64"],
)
def test_integers_decode_as_a_rounded_value_cast(type_id: int, fmt: str, ints: list[int]) -> None:
    # ggml has no to_float for integer types; gguf-audit gives what a C (float)
    # cast gives: one rounding to nearest, ties to even. 2**60 + 2**36 + 1 is
    # the case a detour through float64 would round the wrong way.
    raw = struct.pack(f"<{len(ints)}{fmt}", *ints)
    assert_bits_equal(decode_blocks(raw, type_id), [round_int_to_f32(n) for n in ints])


def test_f64_decodes_as_a_rounded_value_cast() -> None:
    # 3.4028235e38 rounds down to FLT_MAX; 3.4028235677973366e38 is the tie
    # just above it, which rounds to even: infinity.
    finite = [1.0, -2.5, 1 / 3, 2.0**-149, 2.0**-151, -0.0, 3.4028235e38]
    overflowing = [3.4028235677973366e38, 1e300, -1e300, math.inf]
    raw = struct.pack(f"<{len(finite) + len(overflowing)}d", *finite, *overflowing)
    rounded = [struct.unpack("<f", struct.pack("<f", x))[0] for x in finite]
    assert_bits_equal(decode_blocks(raw, Q.F64), [*rounded, math.inf, math.inf, -math.inf, math.inf])
    assert np.isnan(decode_blocks(struct.pack("<d", math.nan), Q.F64)).all()


@pytest.mark.parametrize("type_id", [Q.IQ2_XXS, Q.IQ2_XS, Q.IQ2_S, Q.IQ3_XXS, Q.IQ3_S], ids=lambda t: Q(t).name)
def test_signed_grid_nan_scale_takes_the_element_sign(type_id: int) -> None:
    # ggml computes db * grid * (sign ? -1.f : 1.f); built at -O2/-O3 that is a
    # sign-bit flip, so a NaN block scale comes out with each element's sign.
    info = ggml_type_info(type_id)
    body = np.random.default_rng(type_id).integers(0, 256, info.block_bytes - 2, dtype=np.uint8).tobytes()
    signs = np.signbit(decode_blocks(f16(1.0) + body, type_id))
    assert signs.any() and not signs.all()
    got = decode_blocks(u16(0x7E01) + body, type_id).view(np.uint32)
    assert np.array_equal(got, np.where(signs, 0xFFC02000, 0x7FC02000).astype(np.uint32))


# --- every type id: decoders, errors ---------------------------------------------


CURRENT_TYPE_IDS = [t for t in range(GGML_TYPE_COUNT) if ggml_type_info(t).status is TypeStatus.SUPPORTED]


def test_has_decoder_for_exactly_the_current_types() -> None:
    assert [t for t in range(-1, 2 * GGML_TYPE_COUNT) if has_decoder(t)] == CURRENT_TYPE_IDS
    assert len(CURRENT_TYPE_IDS) == GGML_TYPE_COUNT - len(REMOVED_TYPE_IDS)


@pytest.mark.parametrize("type_id", CURRENT_TYPE_IDS, ids=lambda t: ggml_type_info(t).name)
def test_every_current_type_decodes_whole_blocks(type_id: int) -> None:
    info = ggml_type_info(type_id)
    zeros = decode_blocks(bytes(3 * info.block_bytes), type_id)
    assert zeros.shape == (3 * info.block_elems,) and zeros.dtype == np.float32
    assert np.all(zeros == 0)
    # Random bytes hold NaN and Inf scales: decoding them must not warn or fail.
    rng = np.random.default_rng(type_id)
    noise = rng.integers(0, 256, 64 * info.block_bytes, dtype=np.uint8)
    assert decode_blocks(noise, type_id).shape == (64 * info.block_elems,)
    assert block_scale_problems(noise, type_id).n_blocks == 64


@pytest.mark.parametrize("type_id", [*sorted(REMOVED_TYPE_IDS), GGML_TYPE_COUNT, 99, -1, 1 << 32])
def test_removed_and_unknown_ids_have_no_decoder(type_id: int) -> None:
    assert not has_decoder(type_id)
    with pytest.raises(NoDecoder) as exc:
        decode_blocks(bytes(36), type_id)
    assert exc.value.type_id == type_id
    assert isinstance(exc.value, LookupError) and isinstance(exc.value, GGUFAuditError)
    assert str(exc.value).endswith(f"Got {type_id}.")
    again = pickle.loads(pickle.dumps(exc.value))
    assert (type(again), again.type_id, str(again)) == (NoDecoder, type_id, str(exc.value))
    with pytest.raises(NoDecoder):
        block_scale_problems(bytes(36), type_id)


@pytest.mark.parametrize(("type_id", "n_bytes"), [(Q.Q8_0, 35), (Q.Q4_K, 143), (Q.F32, 6), (Q2_0, 19), (Q.Q8_1, 40)])
def test_ragged_length_is_a_value_error(type_id: int, n_bytes: int) -> None:
    with pytest.raises(ValueError, match=rf"Got {n_bytes}\.$"):
        decode_blocks(bytes(n_bytes), type_id)
    with pytest.raises(ValueError, match=rf"Got {n_bytes}\.$"):
        block_scale_problems(bytes(n_bytes), type_id)


def test_every_buffer_kind_decodes_the_same() -> None:
    halves = np.array([1.0, -2.0, 0.5, 65504.0], dtype="<f2")
    raw = halves.tobytes()
    want = decode_blocks(raw, Q.F16)
    assert_bits_equal(want, [1.0, -2.0, 0.5, 65504.0])
    for buf in (bytearray(raw), memoryview(raw), np.frombuffer(raw, dtype=np.uint8), halves):
        assert_bits_equal(decode_blocks(buf, Q.F16), want)


def test_empty_input_is_zero_blocks() -> None:
    assert decode_blocks(b"", Q.Q4_K).shape == (0,)
    assert block_scale_problems(b"", Q.Q4_K) == ScaleProblems(0, 0, 0, None)


def test_corpus_path_helper_honours_the_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GGUF_AUDIT_CORPUS", str(tmp_path))
    assert corpus_dir() == tmp_path
    # An empty corpus fails loudly instead of turning its tests into no tests.
    with pytest.raises(FileNotFoundError):
        truth_files()
