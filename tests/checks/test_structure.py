"""One file per structural defect: each must give its code and the right verdict."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import gguf
import numpy as np
import pytest

from gguf_audit.audit import AuditConfig, FileAudit
from gguf_audit.audit import audit_file as _audit_file
from gguf_audit.findings import CODES, CORE_CODES
from gguf_audit.format.model import ValueType
from gguf_audit.testing.builder import (
    KV,
    Tensor,
    build_gguf,
    build_gguf_layout,
    kv_array,
    kv_bool,
    kv_str,
    kv_u32,
    kv_u64,
    tiny_llama_like,
)
from gguf_audit.testing.encoding import Array, Raw

Q4_0, Q8_0, F32 = 2, 8, 0

# The structural checks alone: the files here are minimal, not real models.
STRUCTURAL = AuditConfig(semantics=False, templates=False)


def audit_file(url: str, *, config: AuditConfig = STRUCTURAL) -> FileAudit:
    return _audit_file(url, config=config)


def _audit(tmp_path: Path, data: bytes, name: str = "m.gguf") -> FileAudit:
    path = tmp_path / name
    path.write_bytes(data)
    return audit_file(str(path))


def _codes(audit: FileAudit) -> list[str]:
    return [f.code for f in audit.findings]


def _small(**changes: object) -> tuple[list[KV], list[Tensor]]:
    kvs = [kv_str("general.architecture", "llama"), kv_u32("llama.block_count", 1)]
    tensors = [Tensor("a.weight", (64, 2), Q8_0), Tensor("b.weight", (32,), F32)]
    return kvs, tensors


def _build(kvs: list[KV] | None = None, tensors: list[Tensor] | None = None, **kw: object) -> bytes:
    base_kvs, base_tensors = _small()
    return build_gguf(base_kvs if kvs is None else kvs, base_tensors if tensors is None else tensors, **kw)  # type: ignore[arg-type]


# Each case: a builder of the defective bytes, the code it must give, whether
# llama.cpp loads such a file, and whether a header is still decoded.
CASES: dict[str, tuple[Callable[[], bytes], str, bool, bool]] = {
    "bad magic": (lambda: _build(magic=b"GGML"), "header.bad_magic", False, False),
    "git lfs pointer": (
        lambda: b"version https://git-lfs.github.com/spec/v1\noid sha256:" + b"ab" * 32 + b"\nsize 1024\n",
        "header.lfs_pointer",
        False,
        False,
    ),
    "version 0": (lambda: _build(version=0), "header.unsupported_version", False, False),
    "version 4": (lambda: _build(version=4), "header.unsupported_version", False, False),
    "version 1": (lambda: _build(version=1), "header.obsolete_version", False, True),
    "big endian": (lambda: _build(big_endian=True), "header.big_endian", False, True),
    "cut in the metadata": (lambda: _build(truncate_at=40), "header.truncated", False, False),
    "cut in the tensor infos": (
        lambda: build_gguf_layout(*_small()).content[: build_gguf_layout(*_small()).tensors[1].start_offset + 5],
        "header.truncated",
        False,
        False,
    ),
    "n_kv past the file": (lambda: _build(n_kv=2**40), "header.count_too_large", False, False),
    "n_tensors negative as int64": (lambda: _build(n_tensors=2**63 + 5), "header.count_too_large", False, False),
    "array count past the file": (
        lambda: _build([KV("a.b", ValueType.ARRAY, Array(ValueType.UINT32, [1, 2], count=2**33))]),
        "header.count_too_large",
        False,
        False,
    ),
    "string past 1 GiB": (
        lambda: _build([KV("a.b", ValueType.STRING, Raw(struct.pack("<Q", 2**31) + b"abc"))]),
        "header.string_too_long",
        False,
        False,
    ),
    "string past the end of the file": (
        lambda: _build([KV("a.b", ValueType.STRING, Raw(struct.pack("<Q", 10**6) + b"abc"))]),
        "header.truncated",
        False,
        False,
    ),
    "plausible tensor count in a file cut short": (
        lambda: _build(n_tensors=1000),
        "header.truncated",
        False,
        False,
    ),
    "value type 13": (lambda: _build([KV("a.b", 13, Raw(b"\0" * 8))]), "header.bad_value_type", False, False),
    "array of arrays": (
        lambda: _build(
            [KV("a.b", ValueType.ARRAY, [Array(ValueType.UINT8, [1, 2]), Array(ValueType.UINT8, [3])], ValueType.ARRAY)]
        ),
        "header.nested_array",
        False,
        True,
    ),
    "arrays too deep": (
        lambda: _build(
            [
                KV(
                    "a.b",
                    ValueType.ARRAY,
                    [
                        Array(
                            ValueType.ARRAY,
                            [Array(ValueType.ARRAY, [Array(ValueType.ARRAY, [Array(ValueType.UINT8, [1])])])],
                        )
                    ],
                    ValueType.ARRAY,
                )
            ]
        ),
        "header.too_deep",
        False,
        False,
    ),
    "empty key": (lambda: _build([kv_u32("", 1)]), "header.empty_key", False, True),
    "duplicate key": (lambda: _build([kv_u32("a.b", 1), kv_u32("a.b", 2)]), "header.duplicate_key", False, True),
    "alignment as u64": (lambda: _build([kv_u64("general.alignment", 32)]), "header.bad_alignment", False, True),
    "alignment zero": (lambda: _build([kv_u32("general.alignment", 0)]), "header.bad_alignment", False, True),
    "alignment 48": (lambda: _build([kv_u32("general.alignment", 48)]), "header.bad_alignment", False, True),
    "invalid UTF-8 key": (lambda: _build([kv_u32(b"a.\xff\xfe", 1)]), "header.invalid_utf8", True, True),
    "invalid UTF-8 in a token": (
        lambda: _build([kv_array("t.tokens", ValueType.STRING, ["ok", b"\xc3\x28", "fine"])]),
        "header.invalid_utf8",
        True,
        True,
    ),
    "bool stored as 2": (lambda: _build([kv_bool("a.b", 2)]), "header.invalid_bool", True, True),
    "name of 64 bytes": (
        lambda: _build(tensors=[Tensor("x" * 64, (32,), F32)]),
        "tensor.name_too_long",
        False,
        False,
    ),
    "NUL in a key": (
        lambda: _build([kv_str("general.architecture", "llama"), kv_u32(b"llama.block_count\0x", 1)]),
        "header.nul_in_key",
        True,
        True,
    ),
    "NUL in a tensor name": (
        lambda: _build(tensors=[Tensor(b"a.weight\0zz", (64, 2), Q8_0), Tensor("b.weight", (32,), F32)]),
        "tensor.nul_in_name",
        True,
        True,
    ),
    "I8 tensor of shape [2^62 - 1, 2]": (
        lambda: _build(tensors=[Tensor("a.weight", (2**62 - 1, 2), 24, data=b"")]),
        "tensor.shape_aborts",
        False,
        True,
    ),
    "general.alignment 16 with the data off 32 bytes": (
        lambda: _build(_small()[0] + [kv_u32("general.alignment", 16), kv_u32("x", 0)], alignment=16),
        "tensor.unaligned_buffer",
        False,
        True,
    ),
    "block-quantized tensor of no dimensions": (
        lambda: _build(tensors=[Tensor("a.weight", (), Q8_0, data=b"\0" * 34)]),
        "tensor.row_not_block_multiple",
        False,
        True,
    ),
    "duplicate tensor": (
        lambda: _build(tensors=[Tensor("a", (32,), F32), Tensor("a", (32,), F32)]),
        "tensor.duplicate_name",
        False,
        True,
    ),
    "five dims": (lambda: _build(tensors=[Tensor("a", (32, 1, 1, 1, 1), F32)]), "tensor.bad_dims", False, True),
    "negative dim": (lambda: _build(tensors=[Tensor("a", (32, -2), F32, data=b"")]), "tensor.bad_dims", False, True),
    "element count overflow": (
        lambda: _build(tensors=[Tensor("a", (2**32, 2**31), F32, data=b"")]),
        "tensor.bad_dims",
        False,
        True,
    ),
    "type 99": (lambda: _build(tensors=[Tensor("a", (32,), 99, data=b"\0" * 32)]), "tensor.unknown_type", False, True),
    "type 4 (Q4_2)": (
        lambda: _build(tensors=[Tensor("a", (32,), 4, data=b"\0" * 32)]),
        "tensor.removed_type",
        False,
        True,
    ),
    "type 36": (lambda: _build(tensors=[Tensor("a", (32,), 36, data=b"\0" * 32)]), "tensor.removed_type", False, True),
    "row of 48 in Q4_0": (
        lambda: _build(tensors=[Tensor("a", (48, 2), Q4_0, data=b"\0" * 64)]),
        "tensor.row_not_block_multiple",
        False,
        True,
    ),
    "offset 16": (
        lambda: _build(tensors=[Tensor("a", (32,), F32, offset=16)], data_section=b"\0" * 160),
        "tensor.misaligned_offset",
        False,
        True,
    ),
    "a gap before a tensor": (
        lambda: _build(
            tensors=[Tensor("a", (32,), F32, offset=0), Tensor("b", (32,), F32, offset=256)], data_section=b"\0" * 384
        ),
        "tensor.offset_not_packed",
        False,
        True,
    ),
    "two tensors on the same bytes": (
        lambda: _build(
            tensors=[Tensor("a", (32,), F32, offset=0), Tensor("b", (32,), F32, offset=0)], data_section=b"\0" * 128
        ),
        "tensor.overlap",
        False,
        True,
    ),
    "next tensor starts inside": (
        lambda: _build(
            tensors=[Tensor("a", (64,), F32, offset=0), Tensor("b", (64,), F32, offset=128)], data_section=b"\0" * 384
        ),
        "tensor.undersized_region",
        False,
        True,
    ),
    "interrupted download": (
        lambda: _build()[: build_gguf_layout(*_small()).data_section_offset + 100],
        "data.truncated",
        False,
        True,
    ),
    "cut inside the padding before the data": (
        lambda: _build()[: build_gguf_layout(*_small()).header_bytes + 1],
        "data.truncated",
        False,
        True,
    ),
    "trailing bytes": (lambda: _build(trailing=b"\0" * 4096), "data.trailing_bytes", True, True),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_each_defect_gives_its_code(tmp_path: Path, case: str) -> None:
    make, code, loads, decoded = CASES[case]
    audit = _audit(tmp_path, make())
    assert code in _codes(audit), audit.findings
    assert audit.loadable is loads, audit.findings
    assert (audit.header is not None) is decoded
    finding = next(f for f in audit.findings if f.code == code)
    assert finding.message and "\n" not in finding.message
    assert finding.severity == CODES[code].severity


def test_cases_cover_every_header_tensor_and_data_code() -> None:
    covered = {code for _, code, _, _ in CASES.values()}
    expected = {c for c in CORE_CODES if c.split(".")[0] in ("header", "tensor", "data")}
    # Codes that need something other than a crafted file: a read limit, an
    # unknown size, and the naming rule (its own test below).
    expected -= {"header.too_large", "header.noncanonical_key"}
    assert expected - covered == set()


def test_valid_files_from_gguf_writer_are_clean(tmp_path: Path) -> None:
    path = tmp_path / "w.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(1)
    writer.add_uint32("llama.context_length", 128)
    writer.add_array("tokenizer.ggml.tokens", ["a", "b", "ü", "日本"])
    writer.add_tensor("token_embd.weight", np.ones((4, 32), dtype=np.float32))
    writer.add_tensor("blk.0.attn_q.weight", np.zeros((32, 32), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    audit = audit_file(str(path))
    assert audit.findings == []
    assert audit.loadable is True
    assert audit.header is not None and [t.name for t in audit.header.tensors] == [
        "token_embd.weight",
        "blk.0.attn_q.weight",
    ]


def test_tiny_llama_like_is_clean_and_v2_too(tmp_path: Path) -> None:
    kvs, tensors = tiny_llama_like()
    for version in (2, 3):
        audit = _audit(tmp_path, build_gguf(kvs, tensors, version=version), f"v{version}.gguf")
        assert audit.findings == [] and audit.loadable is True


def test_v1_file_parses_all_of_its_fields(tmp_path: Path) -> None:
    kvs, tensors = tiny_llama_like()
    v1 = _audit(tmp_path, build_gguf(kvs, tensors, version=1), "v1.gguf")
    v3 = _audit(tmp_path, build_gguf(kvs, tensors, version=3), "v3.gguf")
    assert _codes(v1) == ["header.obsolete_version"]
    assert v1.header is not None and v3.header is not None
    assert [(k.key, k.type_name, k.length) for k in v1.header.kvs] == [
        (k.key, k.type_name, k.length) for k in v3.header.kvs
    ]
    assert [(t.name, t.shape, t.type_id, t.n_bytes) for t in v1.header.tensors] == [
        (t.name, t.shape, t.type_id, t.n_bytes) for t in v3.header.tensors
    ]


def test_every_value_type_round_trips(tmp_path: Path) -> None:
    values = {
        ValueType.UINT8: 255,
        ValueType.INT8: -128,
        ValueType.UINT16: 65535,
        ValueType.INT16: -32768,
        ValueType.UINT32: 2**32 - 1,
        ValueType.INT32: -(2**31),
        ValueType.FLOAT32: 1.5,
        ValueType.BOOL: True,
        ValueType.STRING: "ünïcode ✓",
        ValueType.UINT64: 2**64 - 1,
        ValueType.INT64: -(2**63),
        ValueType.FLOAT64: -2.25,
    }
    kvs = [KV(f"t.{t.name.lower()}", t, v) for t, v in values.items()]
    kvs += [kv_array(f"a.{t.name.lower()}", t, [v, v]) for t, v in values.items()]
    for big in (False, True):
        audit = _audit(tmp_path, build_gguf(kvs, [], big_endian=big), f"types-{big}.gguf")
        assert audit.header is not None
        got = {kv.key: kv for kv in audit.header.kvs}
        for t, v in values.items():
            assert got[f"t.{t.name.lower()}"].value == v
            assert got[f"t.{t.name.lower()}"].type_name == t.name.lower()
            array = got[f"a.{t.name.lower()}"]
            assert array.type_name == f"array[{t.name.lower()}]"
            assert list(array.value) == [v, v]  # type: ignore[arg-type]


def test_noncanonical_key_is_reported_but_loads(tmp_path: Path) -> None:
    audit = _audit(tmp_path, _build([kv_u32("General.Weird Key", 1)]))
    assert "header.noncanonical_key" in _codes(audit)
    assert audit.loadable is True


def test_header_past_the_read_limit_is_not_read(tmp_path: Path) -> None:
    from gguf_audit.io.source import ReadConfig

    data = _build([kv_array("t.tokens", ValueType.STRING, ["x" * 100] * 2000)])
    path = tmp_path / "big.gguf"
    path.write_bytes(data)
    config = AuditConfig(read=ReadConfig(initial_bytes=4096, max_header_bytes=64 * 1024), semantics=False)
    audit = audit_file(str(path), config=config)
    assert _codes(audit) == ["header.too_large"]
    assert audit.loadable is None
    assert audit.io.bytes_read <= 64 * 1024


def test_missing_file_is_a_row_not_an_exception(tmp_path: Path) -> None:
    audit = audit_file(str(tmp_path / "nope.gguf"))
    assert _codes(audit) == ["io.not_found"]
    assert audit.header is None and audit.loadable is None  # the store said so, not the file
    assert str(audit.status) == "unreadable"


def test_a_bug_of_ours_is_a_row_too(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import gguf_audit.audit as audit_module

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("deliberately broken check")

    # Fault injection at the boundary: the point is that audit_file turns any
    # exception into a row.
    monkeypatch.setattr(audit_module, "check_structural", broken)
    path = tmp_path / "m.gguf"
    path.write_bytes(_build())
    audit = audit_file(str(path))
    assert _codes(audit) == ["internal.unexpected"]
    assert "deliberately broken check" in audit.findings[0].message
    assert audit.loadable is None


def test_truncation_message_names_the_numbers(tmp_path: Path) -> None:
    layout = build_gguf_layout(*_small())
    cut = layout.data_section_offset + 100
    audit = _audit(tmp_path, layout.content[:cut])
    (f,) = [f for f in audit.findings if f.code == "data.truncated"]
    assert f.tensor == "a.weight"
    assert str(cut) in f.message and str(layout.tensors[0].data_offset + layout.tensors[0].data_bytes) in f.message


def test_replace_is_available() -> None:
    # dataclasses.replace works on the builder's frozen values (used by other tests).
    kvs, _ = tiny_llama_like()
    assert replace(kvs[0], key="x").key == "x"


def test_a_v3_body_behind_a_v1_version_word_is_obsolete_not_garbage(tmp_path: Path) -> None:
    kvs, tensors = tiny_llama_like()
    data = bytearray(build_gguf(kvs, tensors, version=3))
    struct.pack_into("<I", data, 4, 1)  # the version word says 1; the body stays in the v3 layout
    audit = _audit(tmp_path, bytes(data), "v1-word.gguf")
    assert _codes(audit) == ["header.obsolete_version"]
    (only,) = audit.findings
    assert only.offset == 4
    assert "version word is likely wrong" in only.message
    assert audit.loadable is False


def test_a_v1_file_that_breaks_says_obsolete_first(tmp_path: Path) -> None:
    kvs, tensors = tiny_llama_like()
    data = bytearray(build_gguf(kvs, tensors, version=1))
    # A tensor with five dimensions (more than ggml's four): the v1 parse stops there.
    at = data.index(b"token_embd.weight") + len(b"token_embd.weight")
    struct.pack_into("<I", data, at, 5)
    audit = _audit(tmp_path, bytes(data), "v1-bad.gguf")
    assert _codes(audit) == ["header.obsolete_version"]
    assert "read as v1 it also fails at offset" in audit.findings[0].message
