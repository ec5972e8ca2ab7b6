"""Keys and tensor names as llama.cpp reads them (up to the first NUL), its element-count tests, and
the parser's bound on tensor names. Each verdict here was asked of the b11312 oracle (tests/conformance)."""

from __future__ import annotations

import time
from pathlib import Path

from gguf_audit.audit import AuditConfig, audit_file
from gguf_audit.bounded import MESSAGE_LIMIT, NAME_LIMIT
from gguf_audit.findings import LlamaCpp, finding, llama_cpp_verdict
from gguf_audit.format.model import Header
from gguf_audit.format.parser import parse_header
from gguf_audit.templates.audit import header_templates
from gguf_audit.testing.builder import KV, Tensor, build_gguf, kv_str, kv_u32, tiny_llama_like

HEADER_ONLY = AuditConfig(templates=False)


def _audit(tmp_path: Path, kvs: list[KV], tensors: list[Tensor]) -> tuple[list[str], LlamaCpp | None, Header | None]:
    path = tmp_path / "m.gguf"
    path.write_bytes(build_gguf(kvs, tensors))
    audit = audit_file(str(path), config=HEADER_ONLY)
    return [f.code for f in audit.findings], llama_cpp_verdict(audit.findings), audit.header


def test_a_string_alignment_behind_a_nul_is_the_alignment_llama_cpp_refuses(tmp_path: Path) -> None:
    kvs, tensors = tiny_llama_like()
    codes, verdict, header = _audit(tmp_path, [kv_str(b"general.alignment\0x", "64"), *kvs], tensors)
    assert {"header.nul_in_key", "header.bad_alignment"} <= set(codes)
    assert verdict is LlamaCpp.REFUSES
    # llama.cpp falls back to nothing here (it refuses); the data offset is the default-aligned one, as built.
    assert header is not None and header.alignment == 32 and header.data_offset % 32 == 0


def test_a_key_or_name_cut_at_nul_loads_and_is_named(tmp_path: Path) -> None:
    kvs, tensors = tiny_llama_like()
    kvs = [kv_str(b"general.architecture\0x", "llama") if kv.key == "general.architecture" else kv for kv in kvs]
    tensors = [
        Tensor(b"token_embd.weight\0zz", t.dims, t.ggml_type) if t.name == "token_embd.weight" else t for t in tensors
    ]
    codes, verdict, header = _audit(tmp_path, kvs, tensors)
    assert sorted(codes) == ["header.nul_in_key", "tensor.nul_in_name"]
    assert verdict is LlamaCpp.LOADS
    assert header is not None and header.architecture == "llama"
    assert header.tensors[0].name == "token_embd.weight" and header.tensors[0].raw_name.endswith(b"\0zz")


def test_keys_equal_up_to_a_nul_are_distinct_to_gguf_cpp(tmp_path: Path) -> None:
    kvs, tensors = tiny_llama_like()
    codes, verdict, _ = _audit(tmp_path, [*kvs, kv_u32(b"extra\0a", 1), kv_u32(b"extra\0b", 2)], tensors)
    assert "header.duplicate_key" not in codes and codes.count("header.nul_in_key") == 2
    assert verdict is LlamaCpp.LOADS


def test_tensor_names_equal_up_to_a_nul_are_duplicates_to_the_loader(tmp_path: Path) -> None:
    kvs, tensors = tiny_llama_like()
    tensors = [*tensors[:-1], Tensor(b"blk.0.attn_norm.weight\0b", tensors[-1].dims, tensors[-1].ggml_type)]
    codes, verdict, _ = _audit(tmp_path, kvs, tensors)
    assert "tensor.duplicate_name" in codes and verdict is LlamaCpp.REFUSES


def test_the_template_llama_cpp_renders_is_the_first_one_up_to_nul() -> None:
    kvs, tensors = tiny_llama_like()
    hidden = kv_str(b"tokenizer.chat_template\0x", "{{ hidden }}")
    data = build_gguf([hidden, *kvs, kv_str("tokenizer.chat_template", "{{ benign }}")], tensors)
    header = parse_header(data, len(data))
    assert isinstance(header, Header)
    assert header.get_str("tokenizer.chat_template") == "{{ hidden }}"
    # Both are audited: the one llama.cpp renders first, the one other runtimes may pick after.
    assert header_templates(header) == {
        "tokenizer.chat_template": "{{ hidden }}",
        "tokenizer.chat_template (occurrence 2)": "{{ benign }}",
    }


def test_zero_dim_before_overflowing_ones_passes_gguf_cpp_and_aborts_in_ggml(tmp_path: Path) -> None:
    kvs, _ = tiny_llama_like()
    codes, verdict, _ = _audit(tmp_path, kvs, [Tensor("a.weight", (2**40, 0, 2**40, 2**40), 0, data=b"")])
    assert "tensor.bad_dims" not in codes and "tensor.shape_aborts" in codes
    assert verdict is LlamaCpp.ABORTS
    codes, verdict, _ = _audit(tmp_path, kvs, [Tensor("a.weight", (2**40, 2**40, 0), 0, data=b"")])
    assert "tensor.bad_dims" in codes and "tensor.shape_aborts" not in codes
    assert verdict is LlamaCpp.REFUSES


def test_a_mib_long_tensor_name_is_refused_unread_and_quoted_short(tmp_path: Path) -> None:
    kvs, tensors = tiny_llama_like()
    long_name = b"n" * (16 << 20)
    data = build_gguf(kvs, [Tensor(long_name, (32,), 0), *tensors[1:]])
    began = time.perf_counter()
    path = tmp_path / "long.gguf"
    path.write_bytes(data)
    audit = audit_file(str(path), config=HEADER_ONLY)
    assert [f.code for f in audit.findings] == ["tensor.name_too_long"]
    assert (
        len(audit.findings[0].message) < NAME_LIMIT + 100
    )  # cut by gguf_audit.bounded.quote and "16777216 bytes" in audit.findings[0].message
    assert time.perf_counter() - began < 5


def test_a_mib_long_key_is_quoted_short(tmp_path: Path) -> None:
    kvs, tensors = tiny_llama_like()
    key = "K" * (2 << 20)
    codes, verdict, _ = _audit(tmp_path, [*kvs, kv_u32(key, 1)], tensors)
    assert codes == ["header.noncanonical_key"] and verdict is LlamaCpp.LOADS
    path = tmp_path / "m.gguf"
    audit = audit_file(str(path), config=HEADER_ONLY)
    assert len(audit.findings[0].message) < NAME_LIMIT + 100  # cut by gguf_audit.bounded.quote


def test_a_mib_long_key_of_a_bad_value_type_is_quoted_short(tmp_path: Path) -> None:
    kvs, tensors = tiny_llama_like()
    path = tmp_path / "m.gguf"
    path.write_bytes(build_gguf([*kvs, KV("k" * (1 << 20), 99, b"")], tensors))
    audit = audit_file(str(path), config=HEADER_ONLY)
    assert [f.code for f in audit.findings] == ["header.bad_value_type"]
    assert (
        len(audit.findings[0].message) < NAME_LIMIT + 100
    )  # cut by gguf_audit.bounded.quote and "1048576 characters" in audit.findings[0].message


def test_a_one_dimensional_output_has_one_row_as_ggml_pads_it(tmp_path: Path) -> None:
    kvs, tensors = tiny_llama_like()
    tensors = [Tensor("output.weight", (0,), t.ggml_type, data=b"") if t.name == "output.weight" else t
               for t in tensors]  # fmt: skip
    codes, verdict, _ = _audit(tmp_path, kvs, tensors)
    assert "tokenizer.vocab_mismatch" in codes and verdict is LlamaCpp.REFUSES


def test_a_message_quoting_megabytes_is_cut_with_its_length() -> None:
    message = finding("meta.unknown_architecture", "architecture " + "x" * 1_000_000).message
    assert len(message) < MESSAGE_LIMIT + 100 and "(998,813 characters cut)" in message


def test_tensor_infos_are_read_up_to_the_first_duplicate_name_as_gguf_cpp_reads_them(tmp_path: Path) -> None:
    kvs, _ = tiny_llama_like()
    path = tmp_path / "m.gguf"
    path.write_bytes(build_gguf(kvs, [Tensor("a.weight", (32,), 0) for _ in range(40)]))
    audit = audit_file(str(path), config=HEADER_ONLY)
    duplicates = [f for f in audit.findings if f.code == "tensor.duplicate_name"]
    assert audit.header is not None and len(audit.header.tensors) == 2 and audit.header.n_tensors == 40
    assert len(duplicates) == 1 and "38 of 40 infos unread" in duplicates[0].message
    assert llama_cpp_verdict(audit.findings) is LlamaCpp.REFUSES


def test_names_equal_only_up_to_a_nul_are_read_on_and_reported_ten_at_a_time(tmp_path: Path) -> None:
    # gguf.cpp compares whole names, so it reads them all; the loader then sees one name (ggml cuts at the NUL).
    kvs, _ = tiny_llama_like()
    tensors = [Tensor(b"a.weight\0" + bytes([65 + i]), (32,), 0) for i in range(40)]
    codes, verdict, header = _audit(tmp_path, kvs, tensors)
    assert header is not None and len(header.tensors) == 40
    assert codes.count("tensor.duplicate_name") == 11 and verdict is LlamaCpp.REFUSES
