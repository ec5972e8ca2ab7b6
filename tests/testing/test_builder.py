"""build_gguf writes what the spec says: gguf-py reads it back, GGUFWriter agrees byte for byte,
and every malformation knob puts the expected bytes at the expected offsets."""

from __future__ import annotations

import dataclasses
import random
import struct
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
from gguf.quants import quant_shape_to_byte_shape
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gguf_audit.format.ggml_types import ggml_type_info
from gguf_audit.format.model import ValueType
from gguf_audit.testing.builder import (
    KV,
    MAX_ZERO_FILL_BYTES,
    Tensor,
    build_gguf,
    build_gguf_layout,
    kv_array,
    kv_bool,
    kv_f32,
    kv_f64,
    kv_i8,
    kv_i16,
    kv_i32,
    kv_i64,
    kv_raw,
    kv_str,
    kv_u8,
    kv_u16,
    kv_u32,
    kv_u64,
    tensor_data_bytes,
    tiny_llama_like,
)
from gguf_audit.testing.encoding import Array, Raw


def _reader(tmp_path: Path, data: bytes, name: str = "f.gguf") -> gguf.GGUFReader:
    path = tmp_path / name
    path.write_bytes(data)
    return gguf.GGUFReader(path)


def _user_fields(reader: gguf.GGUFReader) -> dict[str, Any]:
    return {k: f for k, f in reader.fields.items() if not k.startswith("GGUF.")}


def _with_random_data(tensors: Sequence[Tensor], seed: int = 0) -> list[Tensor]:
    rng = random.Random(seed)
    return [dataclasses.replace(t, data=rng.randbytes(tensor_data_bytes(t))) for t in tensors]


def _expected_contents(kv: KV) -> object:
    if kv.vtype == ValueType.FLOAT32:
        return float(np.float32(kv.value))  # type: ignore[arg-type]
    if kv.vtype == ValueType.ARRAY and kv.item_type == ValueType.FLOAT32:
        return [float(np.float32(x)) for x in kv.value]  # type: ignore[attr-defined]
    return kv.value


# ---------------------------------------------------------------- gguf-py reads it back


@pytest.mark.parametrize(("version", "big_endian"), [(3, False), (3, True), (2, False), (2, True)])
def test_tiny_llama_reads_back_with_gguf_py(tmp_path: Path, version: int, big_endian: bool) -> None:
    kvs, tensors = tiny_llama_like()
    tensors = _with_random_data(tensors)
    layout = build_gguf_layout(kvs, tensors, version=version, big_endian=big_endian)
    reader = _reader(tmp_path, layout.content)

    assert reader.fields["GGUF.version"].contents() == version
    assert reader.endianess == (gguf.GGUFEndian.BIG if big_endian else gguf.GGUFEndian.LITTLE)
    fields = _user_fields(reader)
    assert list(fields) == [kv.key for kv in kvs]
    for kv in kvs:
        field = fields[str(kv.key)]
        assert field.types[0] == kv.vtype
        if kv.item_type is not None:
            assert field.types[-1] == kv.item_type
        assert field.contents() == _expected_contents(kv), kv.key
        assert field.offset == layout.kvs[kvs.index(kv)].start_offset

    assert reader.data_offset == layout.data_section_offset
    assert [t.name for t in reader.tensors] == [t.name for t in tensors]
    for got, want, where in zip(reader.tensors, tensors, layout.tensors, strict=True):
        assert got.tensor_type == want.ggml_type
        assert got.shape.tolist() == list(want.dims)
        assert got.data_offset == where.data_offset
        assert got.n_bytes == where.data_bytes == len(want.data or b"")
        assert got.field.offset == where.start_offset
        assert got.data.tobytes() == want.data  # raw memory, whatever the view's byte order
    assert len(layout.content) == layout.data_end_offset


def test_every_value_type_reads_back(tmp_path: Path) -> None:
    kvs = [
        kv_u8("t.u8", 255),
        kv_i8("t.i8", -128),
        kv_u16("t.u16", 65535),
        kv_i16("t.i16", -32768),
        kv_u32("t.u32", 2**32 - 1),
        kv_i32("t.i32", -(2**31)),
        kv_f32("t.f32", 0.5),
        kv_bool("t.bool", True),
        kv_str("t.str", "héllo ▁ wörld"),
        kv_u64("t.u64", 2**64 - 1),
        kv_i64("t.i64", -(2**63)),
        kv_f64("t.f64", 1e300),
        kv_array("t.a_str", ValueType.STRING, ["", "a", "✓"]),
        kv_array("t.a_bool", ValueType.BOOL, [True, False]),
        kv_array("t.a_i64", ValueType.INT64, [-1, 2**62]),
        kv_array("t.a_empty", ValueType.UINT8, []),
    ]
    for big_endian in (False, True):
        fields = _user_fields(_reader(tmp_path, build_gguf(kvs, big_endian=big_endian), f"v{big_endian}.gguf"))
        assert [f.types[0] for f in fields.values()] == [kv.vtype for kv in kvs]
        for kv in kvs:
            assert fields[str(kv.key)].contents() == kv.value, kv.key


def test_nested_arrays_read_back(tmp_path: Path) -> None:
    kv = kv_array("t.nested", ValueType.ARRAY, [(ValueType.INT32, [1, 2]), Array(ValueType.INT32, [3])])
    field = _user_fields(_reader(tmp_path, build_gguf([kv])))["t.nested"]
    assert field.types == [gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.ARRAY, gguf.GGUFValueType.INT32]
    assert field.contents() == [1, 2, 3]  # gguf-py flattens arrays of arrays
    payload = build_gguf_layout([kv])
    start = payload.kvs[0].value_offset
    assert payload.content[start : start + 12] == struct.pack("<IQ", ValueType.ARRAY, 2)
    assert payload.content[start + 12 : start + 24] == struct.pack("<IQ", ValueType.INT32, 2)


_KEYS = st.text(min_size=1, max_size=12).filter(lambda k: k != "general.alignment")
_SCALARS = st.one_of(
    st.tuples(st.just(ValueType.UINT32), st.integers(0, 2**32 - 1)),
    st.tuples(st.just(ValueType.INT64), st.integers(-(2**63), 2**63 - 1)),
    st.tuples(st.just(ValueType.BOOL), st.booleans()),
    st.tuples(st.just(ValueType.STRING), st.text(max_size=20)),
    st.tuples(st.just(ValueType.FLOAT64), st.floats(allow_nan=False)),
)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    items=st.dictionaries(_KEYS, _SCALARS, max_size=6),
    big_endian=st.booleans(),
    alignment=st.sampled_from([1, 8, 32, 64]),
)
def test_round_trip_property(items: dict[str, tuple[ValueType, object]], big_endian: bool, alignment: int) -> None:
    kvs = [KV(key, vtype, value) for key, (vtype, value) in items.items()]
    kvs.append(kv_u32("general.alignment", alignment))
    tensors = _with_random_data([Tensor("a", (64, 2), 8), Tensor("b", (3,), 0)])
    layout = build_gguf_layout(kvs, tensors, big_endian=big_endian, alignment=alignment)
    with tempfile.TemporaryDirectory() as tmp:
        reader = _reader(Path(tmp), layout.content)
        fields = _user_fields(reader)
        assert {k: (f.types[0], f.contents()) for k, f in fields.items()} == {
            str(kv.key): (kv.vtype, kv.value) for kv in kvs
        }
        assert reader.data_offset == layout.data_section_offset
        assert reader.data_offset % alignment == 0
        assert [t.data_offset for t in reader.tensors] == [t.data_offset for t in layout.tensors]
        assert reader.tensors[0].data.tobytes() == tensors[0].data


# ---------------------------------------------------------------- GGUFWriter agrees byte for byte


def _gguf_writer_bytes(path: Path, kvs: Sequence[KV], tensors: Sequence[Tensor], *, big_endian: bool) -> bytes:
    """What gguf-py's GGUFWriter writes for the same KVs and tensors.

    GGUFWriter adds ``general.architecture`` itself (first), so ``kvs[0]`` must
    be that key; ``general.alignment`` goes through ``add_custom_alignment``.
    """
    assert kvs[0].key == "general.architecture"
    endian = gguf.GGUFEndian.BIG if big_endian else gguf.GGUFEndian.LITTLE
    writer = gguf.GGUFWriter(path, str(kvs[0].value), endianess=endian)
    for kv in kvs[1:]:
        if kv.key == "general.alignment":
            writer.add_custom_alignment(int(kv.value))  # type: ignore[call-overload]
            continue
        sub_type = gguf.GGUFValueType(kv.item_type) if kv.item_type is not None else None
        writer.add_key_value(str(kv.key), kv.value, gguf.GGUFValueType(kv.vtype), sub_type=sub_type)
    for t in tensors:
        qtype = gguf.GGMLQuantizationType(t.ggml_type)
        byte_shape = quant_shape_to_byte_shape(tuple(reversed(t.dims)), qtype)
        array = np.frombuffer(t.data or b"", dtype=np.uint8).reshape(byte_shape)
        writer.add_tensor(str(t.name), array, raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path.read_bytes()


@pytest.mark.parametrize("big_endian", [False, True])
def test_byte_identical_to_gguf_writer(tmp_path: Path, big_endian: bool) -> None:
    kvs, tensors = tiny_llama_like()
    tensors = _with_random_data(tensors, seed=1)
    ours = build_gguf(kvs, tensors, big_endian=big_endian)
    theirs = _gguf_writer_bytes(tmp_path / "w.gguf", kvs, tensors, big_endian=big_endian)
    assert len(ours) == len(theirs)
    assert ours == theirs


def test_byte_identical_with_custom_alignment(tmp_path: Path) -> None:
    kvs, tensors = tiny_llama_like()
    kvs.insert(1, kv_u32("general.alignment", 64))
    tensors = _with_random_data(tensors[:4], seed=2)
    ours = build_gguf(kvs, tensors, alignment=64)
    assert ours == _gguf_writer_bytes(tmp_path / "w.gguf", kvs, tensors, big_endian=False)
    assert _reader(tmp_path, ours).alignment == 64


# ---------------------------------------------------------------- the layout, field by field


def test_header_fields_v3() -> None:
    layout = build_gguf_layout([kv_u32("k", 7)], [Tensor("t", (4, 2), 0)])
    b = layout.content
    assert b[:4] == b"GGUF"
    assert struct.unpack_from("<IQQ", b, 4) == (3, 1, 1)
    assert (layout.n_tensors_offset, layout.n_kv_offset) == (8, 16)
    kv = layout.kvs[0]
    assert (kv.start_offset, kv.vtype_offset, kv.value_offset, kv.end_offset) == (24, 33, 37, 41)
    assert b[24:33] == struct.pack("<Q", 1) + b"k"
    assert struct.unpack_from("<II", b, 33) == (ValueType.UINT32, 7)
    t = layout.tensors[0]
    assert t.start_offset == 41
    assert b[41:50] == struct.pack("<Q", 1) + b"t"
    assert struct.unpack_from("<I", b, t.n_dims_offset) == (2,)
    assert struct.unpack_from("<QQ", b, t.dims_offset) == (4, 2)
    assert struct.unpack_from("<IQ", b, t.type_offset) == (0, 0)
    assert t.end_offset == layout.header_bytes == t.offset_field_offset + 8
    assert layout.data_section_offset == 96
    assert b[layout.header_bytes : 96] == bytes(96 - layout.header_bytes)
    assert (t.data_offset, t.data_bytes) == (96, 32)
    assert len(b) == 128


def test_version_1_uses_u32_counts_lengths_and_dims() -> None:
    layout = build_gguf_layout(
        [kv_str("k", "ab"), kv_array("a", ValueType.UINT8, [1, 2])], [Tensor("t", (3,), 0)], version=1
    )
    b = layout.content
    assert struct.unpack_from("<III", b, 4) == (1, 1, 2)  # version, n_tensors, n_kv as u32
    assert b[16:21] == struct.pack("<I", 1) + b"k"  # u32 key length
    assert b[21:31] == struct.pack("<II", ValueType.STRING, 2) + b"ab"  # u32 string length
    a = layout.kvs[1]
    assert b[a.value_offset : a.end_offset] == struct.pack("<II", ValueType.UINT8, 2) + b"\x01\x02"
    t = layout.tensors[0]
    assert struct.unpack_from("<II", b, t.n_dims_offset) == (1, 3)  # n_dims, then a u32 dim
    assert t.type_offset == t.dims_offset + 4
    assert struct.unpack_from("<IQ", b, t.type_offset) == (0, 0)  # the offset stays u64


def test_big_endian_fields() -> None:
    layout = build_gguf_layout([kv_u32("k", 7)], [Tensor("t", (4,), 0)], big_endian=True)
    b = layout.content
    assert b[:8] == b"GGUF\x00\x00\x00\x03"
    assert struct.unpack_from(">QQ", b, 8) == (1, 1)
    assert struct.unpack_from(">II", b, layout.kvs[0].vtype_offset) == (ValueType.UINT32, 7)
    assert struct.unpack_from(">Q", b, layout.tensors[0].dims_offset) == (4,)


def test_auto_offsets_pack_and_pad() -> None:
    tensors = [Tensor("a", (3,), 0), Tensor("b", (32,), 8), Tensor("c", (5,), 1), Tensor("d", (256,), 12)]
    layout = build_gguf_layout([], tensors, alignment=32)
    assert [t.written_offset for t in layout.tensors] == [0, 32, 96, 128]
    assert [t.data_bytes for t in layout.tensors] == [12, 34, 10, 144]
    assert layout.data_end_offset == layout.data_section_offset + 128 + 160
    assert build_gguf_layout([], tensors, alignment=1).tensors[3].written_offset == 56


# ---------------------------------------------------------------- malformation knobs


def test_magic_and_count_overrides() -> None:
    b = build_gguf([kv_u32("k", 1)], magic=b"GGML", n_kv=2**63, n_tensors=5)
    assert b[:4] == b"GGML"
    assert struct.unpack_from("<QQ", b, 8) == (5, 2**63)
    assert build_gguf(magic=b"GG")[:6] == b"GG\x03\x00\x00\x00"
    assert struct.unpack_from("<Q", build_gguf(n_kv=-1), 16) == (2**64 - 1,)


def test_truncate_trailing_and_include_data() -> None:
    kvs, tensors = tiny_llama_like()
    full = build_gguf_layout(kvs, tensors, trailing=b"JUNK")
    assert full.content.endswith(b"JUNK")
    assert len(full.content) == full.data_end_offset + 4
    cut = build_gguf(kvs, tensors, trailing=b"JUNK", truncate_at=100)
    assert cut == full.content[:100]
    header_only = build_gguf(kvs, tensors, include_data=False)
    assert header_only == full.content[: full.data_section_offset]
    swapped = build_gguf_layout([], [Tensor("t", (8,), 0)], data_section=b"\xff" * 3)
    assert swapped.content[swapped.data_section_offset :] == b"\xff" * 3


def test_raw_keys_values_and_items() -> None:
    layout = build_gguf_layout(
        [
            KV(b"bad\xffkey", ValueType.UINT8, 1),
            kv_str("s", b"\xc3\x28"),  # invalid UTF-8, written raw with its length
            kv_raw("r", ValueType.STRING, struct.pack("<Q", 2**40)),  # a string claiming 1 TiB
            kv_bool("b", 2),
            KV("u", 99, b"\x01\x02"),  # an unknown value type with a raw payload
            kv_array("a", ValueType.UINT32, [1, 2], count=1000),
            kv_array("i", ValueType.STRING, ["ok", Raw(b"\xff" * 8)]),
        ]
    )
    b, kv = layout.content, layout.kvs
    assert b[kv[0].start_offset : kv[0].vtype_offset] == struct.pack("<Q", 7) + b"bad\xffkey"
    assert b[kv[1].value_offset : kv[1].end_offset] == struct.pack("<Q", 2) + b"\xc3\x28"
    assert b[kv[2].value_offset : kv[2].end_offset] == struct.pack("<Q", 2**40)
    assert b[kv[3].value_offset : kv[3].end_offset] == b"\x02"
    assert struct.unpack_from("<I", b, kv[4].vtype_offset) == (99,)
    assert b[kv[4].value_offset : kv[4].end_offset] == b"\x01\x02"
    assert struct.unpack_from("<IQII", b, kv[5].value_offset) == (ValueType.UINT32, 1000, 1, 2)
    assert kv[5].end_offset - kv[5].value_offset == 4 + 8 + 8
    assert b[kv[6].end_offset - 8 : kv[6].end_offset] == b"\xff" * 8


def test_forged_tensor_infos() -> None:
    layout = build_gguf_layout(
        [],
        [
            Tensor("neg", (4, -1), 0, data=b""),
            Tensor("five", (1, 1, 1, 1, 2), 0),
            Tensor("liar", (4,), 0, n_dims=100),
            Tensor("far", (4,), 0, offset=2**50),
            Tensor(b"\xff\xfe", (32,), 4),  # invalid UTF-8 name, removed type Q4_2
            Tensor("unknown", (32,), 200),
        ],
    )
    b, t = layout.content, layout.tensors
    assert struct.unpack_from("<QQ", b, t[0].dims_offset) == (4, 2**64 - 1)
    assert struct.unpack_from("<I", b, t[1].n_dims_offset) == (5,)
    assert struct.unpack_from("<5Q", b, t[1].dims_offset) == (1, 1, 1, 1, 2)
    assert t[1].data_bytes == 8
    assert struct.unpack_from("<IQ", b, t[2].n_dims_offset) == (100, 4)
    assert struct.unpack_from("<Q", b, t[3].offset_field_offset) == (2**50,)
    assert t[3].written_offset == 2**50
    assert t[3].data_offset == layout.data_section_offset + t[2].written_offset + 32  # still packed in place
    assert b[t[4].start_offset : t[4].start_offset + 10] == struct.pack("<Q", 2) + b"\xff\xfe"
    assert (t[4].data_bytes, t[5].data_bytes) == (0, 0)
    assert struct.unpack_from("<I", b, t[5].type_offset) == (200,)


def test_v1_dims_wrap_at_32_bits() -> None:
    b = build_gguf_layout([], [Tensor("t", (-2,), 0, data=b"")], version=1)
    assert struct.unpack_from("<I", b.content, b.tensors[0].dims_offset) == (2**32 - 2,)


@pytest.mark.parametrize(
    ("kvs", "tensors", "message"),
    [
        ([kv_u8("k", 256)], [], "does not fit a UINT8"),
        ([kv_i32("k", 1.5)], [], "must be an int"),  # type: ignore[arg-type]
        ([kv_bool("k", 256)], [], "BOOL value"),
        ([KV("k", ValueType.ARRAY, [1])], [], "needs item_type"),
        ([KV("k", 42, 7)], [], "give the payload as Raw"),
        ([kv_array("k", ValueType.ARRAY, [[1]])], [], "an item of an ARRAY array"),
        ([], [Tensor("t", (MAX_ZERO_FILL_BYTES // 4 + 1,), 0)], "pass data="),
        ([], [Tensor("t", (2**64,), 0, data=b"")], "does not fit in 64 bits"),
    ],
)
def test_encoding_errors(kvs: list[KV], tensors: list[Tensor], message: str) -> None:
    with pytest.raises((ValueError, TypeError), match=message):
        build_gguf(kvs, tensors)


def test_rejects_bad_alignment() -> None:
    with pytest.raises(ValueError, match="alignment must be a positive int"):
        build_gguf(alignment=0)


def test_tiny_llama_is_well_formed() -> None:
    kvs, tensors = tiny_llama_like()
    meta = {kv.key: kv.value for kv in kvs}
    assert kvs[0] == kv_str("general.architecture", "llama")
    assert "general.alignment" not in meta
    n_vocab = meta["llama.vocab_size"]
    for key in ("tokenizer.ggml.tokens", "tokenizer.ggml.scores", "tokenizer.ggml.token_type"):
        assert len(meta[key]) == n_vocab  # type: ignore[arg-type]
    names = [t.name for t in tensors]
    assert len(names) == len(set(names)) == 3 + 9 * int(meta["llama.block_count"])  # type: ignore[call-overload]
    assert {t.ggml_type for t in tensors} == {0, 1, 8, 12}
    for t in tensors:
        info = ggml_type_info(t.ggml_type)
        assert t.dims[0] % info.block_elems == 0, t.name
        assert tensor_data_bytes(t) > 0
    assert tiny_llama_like()[0] is not kvs  # fresh lists every call
