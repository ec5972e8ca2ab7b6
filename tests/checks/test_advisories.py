"""The GGUF advisories of the field (issue 12 item 7): one crafted file each, its code, its verdict, its builds."""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

import pytest
from tiny_model import V, codes, only, tiny

from gguf_audit.audit import AuditConfig, FileAudit, audit_file
from gguf_audit.checks.data import check_samples
from gguf_audit.codes import ADVISORIES
from gguf_audit.decode.sampled import decode_sample
from gguf_audit.findings import CODES, Finding, LlamaCpp, Severity
from gguf_audit.format.model import Header
from gguf_audit.format.parser import parse_header
from gguf_audit.plan import plan_blocks
from gguf_audit.testing.builder import Tensor, build_gguf, build_gguf_layout, kv_str, kv_u32

F32 = 0
STRUCTURAL = AuditConfig(semantics=False, templates=False)


def _audit(tmp_path: Path, data: bytes) -> FileAudit:
    path = tmp_path / "m.gguf"
    path.write_bytes(data)
    return audit_file(str(path), config=STRUCTURAL)


def _kvs() -> list[object]:
    return [kv_str("general.architecture", "llama"), kv_u32("llama.block_count", 1)]


def _one(audit: FileAudit, code: str) -> Finding:
    found = [f for f in audit.findings if f.code == code]
    assert found, audit.findings
    return found[0]


# (tensors, code, advisory id in the message)
SIZE_CASES: dict[str, tuple[list[Tensor], str]] = {
    # 2**62 float32 elements fit int64; their 2**64 bytes do not fit a size_t.
    "byte size past SIZE_MAX": ([Tensor("a", (2**31, 2**31), F32, data=b"")], "CVE-2026-33298"),
    # Two packed tensors of 2**63 bytes each: the running sum wraps to 0.
    "padded sizes wrap": (
        [
            Tensor("a", (2**30, 2**31), F32, offset=0, data=b""),
            Tensor("b", (2**30, 2**31), F32, offset=2**63, data=b""),
        ],
        "CVE-2025-53630",
    ),
    # 2**64 - 32 bytes fit; with ggml's per-tensor overhead the context does not.
    "context size wraps": ([Tensor("a", (2**62 - 8,), F32, offset=0, data=b"")], "CVE-2026-27940"),
}


@pytest.mark.parametrize("case", list(SIZE_CASES))
def test_size_overflow_advisories(tmp_path: Path, case: str) -> None:
    tensors, advisory = SIZE_CASES[case]
    audit = _audit(tmp_path, build_gguf(_kvs(), tensors, include_data=False))  # type: ignore[arg-type]
    found = _one(audit, "tensor.size_overflow")
    assert advisory in found.message and "builds before" in found.message
    assert found.severity is Severity.ERROR
    assert CODES["tensor.size_overflow"].refused is True and advisory in CODES["tensor.size_overflow"].doc
    assert audit.loadable is False
    assert "tensor.bad_dims" not in codes(audit.findings)


def test_region_past_eof_with_packed_offsets_names_the_ollama_advisory(tmp_path: Path) -> None:
    tensors = [Tensor("a.weight", (64, 2), 8), Tensor("b.weight", (32,), F32)]
    layout = build_gguf_layout(_kvs(), tensors)  # type: ignore[arg-type]
    audit = _audit(tmp_path, layout.content[: layout.data_section_offset + 40])
    found = _one(audit, "data.truncated")
    assert "CVE-2026-7482" in found.message and ADVISORIES["region_past_eof"][1] in found.message
    assert CODES["data.truncated"].refused is True
    # Offsets that are not packed already fail the header checks: no advisory named.
    gapped = [Tensor("a.weight", (64, 2), 8, offset=0), Tensor("b.weight", (32,), F32, offset=4096)]
    cut = build_gguf(_kvs(), gapped, data_section=b"\0" * 200)  # type: ignore[arg-type]
    assert "CVE-2026-7482" not in _one(_audit(tmp_path, cut), "data.truncated").message


@pytest.mark.parametrize(("type_id", "hint"), [(43, "ik_llama.cpp"), (142, "fork"), (143, "fork")])
def test_unknown_type_ids_with_the_fork_hint(tmp_path: Path, type_id: int, hint: str) -> None:
    audit = _audit(tmp_path, build_gguf(_kvs(), [Tensor("a", (32,), type_id, data=b"\0" * 32)]))  # type: ignore[arg-type]
    found = _one(audit, "tensor.unknown_type")
    assert str(type_id) in found.message and hint in found.message
    assert audit.loadable is False


def _huge_string() -> bytes:
    # magic, version, 0 tensors, 1 key 'a' of type string whose length is 2**63.
    return b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"a" + struct.pack("<IQ", 8, 2**63)


def _huge_array() -> bytes:
    return b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", 1) + b"a" + struct.pack("<IIQ", 9, 0, 2**63)


@pytest.mark.parametrize(
    ("make", "code"), [(_huge_string, "header.string_too_long"), (_huge_array, "header.count_too_large")]
)
def test_lengths_of_2_63_are_answered_at_once(tmp_path: Path, make: Callable[[], bytes], code: str) -> None:
    data = make()
    assert len(data) <= 49
    audit = _audit(tmp_path, data)
    found = _one(audit, code)
    assert str(2**63) in found.message and "gguf-py 0.19" in found.message
    assert audit.loadable is False


def test_block_count_past_512(audit: Callable[..., list[Finding]]) -> None:
    found = only(audit(tiny().set("llama.block_count", 513, V.UINT32)), "hparams.block_count_out_of_range")
    assert found and "513" in found[0].message and "512" in found[0].message
    assert CODES["hparams.block_count_out_of_range"].llama_cpp is LlamaCpp.ABORTS


def _with_byte_tokens(kind: str, texts: list[str]) -> object:
    m = tiny()
    tokens = ["<unk>", "<s>", "</s>", *texts] + [f"t{i}" for i in range(3 + len(texts), 64)]
    types = [2, 3, 3] + [6] * len(texts) + [1] * (64 - 3 - len(texts))
    m.set("tokenizer.ggml.model", kind, V.STRING)
    m.set("tokenizer.ggml.tokens", tokens, V.ARRAY, V.STRING)
    m.set("tokenizer.ggml.token_type", types, V.ARRAY, V.INT32)
    return m


def test_bad_byte_token_is_an_error_for_plamo2_and_a_warning_for_spm(audit: Callable[..., list[Finding]]) -> None:
    good = audit(_with_byte_tokens("llama", ["<0x00>", "<0x0A>", "<0xFF>"]))
    assert only(good, "tokenizer.bad_byte_token") == []
    spm = only(audit(_with_byte_tokens("llama", ["<0x00>", "<0x-1>", "<0x1FF>"])), "tokenizer.bad_byte_token")
    assert len(spm) == 1 and spm[0].severity is Severity.WARNING
    assert "2 BYTE tokens" in spm[0].message and "'<0x-1>'" in spm[0].message and "cf06ad7d" in spm[0].message
    plamo = only(audit(_with_byte_tokens("plamo2", ["<0x-1>"])), "tokenizer.bad_byte_token")
    assert len(plamo) == 1 and plamo[0].severity is Severity.ERROR and "PLaMo-2" in plamo[0].message
    assert CODES["tokenizer.bad_byte_token"].refused is False


def test_vocab_array_verdicts_moved(audit: Callable[..., list[Finding]]) -> None:
    assert CODES["tokenizer.wrong_array_type"].refused is True
    assert CODES["tokenizer.array_length_mismatch"].refused is True
    assert "#27075" in CODES["tokenizer.wrong_array_type"].doc
    uint32_types = tiny().set("tokenizer.ggml.token_type", [2, 3, 3] + [1] * 61, V.ARRAY, V.UINT32)
    found = only(audit(uint32_types), "tokenizer.wrong_array_type")
    assert len(found) == 1 and "array[uint32]" in found[0].message and "#27075" in found[0].message
    int_scores = tiny().set("tokenizer.ggml.scores", [0] * 64, V.ARRAY, V.INT32)
    assert only(audit(int_scores), "tokenizer.wrong_array_type") == []
    longer = tiny().set("tokenizer.ggml.scores", [0.0] * 70, V.ARRAY, V.FLOAT32)
    assert only(audit(longer), "tokenizer.array_length_mismatch") == []


def test_every_advisory_is_named_in_the_codes() -> None:
    docs = " ".join(info.doc for info in CODES.values())
    for ident in ("CVE-2026-33298", "CVE-2025-53630", "CVE-2026-27940", "CVE-2026-7482", "cf06ad7d", "#27075", "NVFP4"):
        assert ident in docs


NVFP4 = 40


def test_nan_nvfp4_scale_is_nonfinite_when_sampled() -> None:
    # Two NVFP4 blocks (64 values, d[4] UE4M3 then 32 nibble bytes); the second has
    # a scale byte 0x7F, NaN in the NVFP4 spec, which ggml reads as zero.
    blocks = bytes([0x38] * 4) + bytes([0x11] * 32) + bytes([0x38, 0x7F, 0x38, 0x38]) + bytes([0x11] * 32)
    data = build_gguf(
        [kv_str("general.architecture", "llama")], [Tensor("blk.0.attn_q.weight", (64, 2), NVFP4, data=blocks)]
    )
    header = parse_header(data, len(data))
    assert isinstance(header, Header)
    plan = plan_blocks(header, {"blk.0.attn_q.weight": [0, 1]})
    decoded = [decode_sample(b, data[b.offset : b.end_offset]) for b in plan.blocks]
    (found,) = check_samples(header, decoded)
    assert found.code == "data.nonfinite" and "0x7F" in found.message and "NVFP4" in found.message
    assert "1 of 2 sampled blocks" in found.message
