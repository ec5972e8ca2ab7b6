"""Declared against observed: general.file_type and the file name's label against the tensor types,
and the quantization version."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from tiny_model import Model, Q, V, codes, only, parse, tiny, write

from gguf_audit.checks.filetype import file_name_quantization
from gguf_audit.checks.header import check_semantics
from gguf_audit.findings import Finding


def test_file_type_against_tensors(audit: Callable[..., list[Finding]]) -> None:
    found = audit(tiny(n_embd=256, n_ff=256).set("general.file_type", 15, V.UINT32))
    assert codes(found) == ["meta.file_type_mismatch"]
    assert "general.file_type is 15 (MOSTLY_Q4_K_M) but no weight matrix is Q4_K" in found[0].message
    assert audit(tiny(wtype=Q.Q8_0)) == []
    assert audit(tiny().set("general.file_type", 1024, V.UINT32)) == []  # "guessed": nothing declared
    found = audit(tiny().set("general.file_type", 33, V.UINT32))
    assert codes(found) == ["meta.file_type_mismatch"] and "not a llama ftype id" in found[0].message


def test_file_type_allows_fallbacks_for_narrow_rows(audit: Callable[..., list[Finding]]) -> None:
    # Rows of 32 cannot hold Q4_K blocks of 256: llama-quantize falls back, nothing to judge.
    m = tiny(wtype=Q.Q8_0).set("general.file_type", 15, V.UINT32)
    assert audit(m) == []


@pytest.mark.parametrize(("ftype", "name"), [(15, "MOSTLY_Q4_K_M"), (7, "MOSTLY_Q8_0"), (2, "MOSTLY_Q4_0")])
def test_all_f32_matrices_contradict_any_quantized_type(
    audit: Callable[..., list[Finding]], ftype: int, name: str
) -> None:
    # Rows of 32 fit no Q4_K block, yet llama-quantize's fallback would be another quantized type or F16.
    found = audit(tiny(wtype=Q.F32).set("general.file_type", ftype, V.UINT32))
    assert codes(found) == ["meta.file_type_mismatch"]
    assert f"general.file_type is {ftype} ({name}) but no weight matrix is" in found[0].message
    assert "are F32" in found[0].message
    # F16 is a fallback llama-quantize does use for narrow rows: no finding for a type whose blocks do not fit.
    assert audit(tiny(wtype=Q.F16).set("general.file_type", 15, V.UINT32)) == []


def test_file_name_label(audit: Callable[..., list[Finding]]) -> None:
    assert audit(tiny(wtype=Q.Q8_0), name="tiny-Q8_0.gguf") == []
    found = audit(tiny(wtype=Q.Q8_0), name="tiny.Q4_K_M.gguf")
    assert codes(found) == ["meta.file_type_mismatch"]
    assert "the file name says Q4_K_M but general.file_type is 7 (MOSTLY_Q8_0)" in found[0].message
    found = audit(tiny(wtype=Q.Q8_0).drop("general.file_type"), name="tiny-q4_0.gguf")
    assert codes(found) == ["meta.file_type_mismatch"] and "no weight matrix is Q4_0" in found[0].message


@pytest.mark.parametrize(
    ("url", "label"),
    [
        ("s3://b/m/Llama-3-8B-Instruct-Q4_K_M.gguf", "Q4_K_M"),
        ("llama-2-7b.Q4_K_M.gguf", "Q4_K_M"),
        ("https://h/x/model-q4_k_m-00001-of-00003.gguf?download=true", "Q4_K_M"),
        ("tiny-llama-Q8_0-BE.gguf", "Q8_0"),
        ("gemma-2-9b-it-bf16.gguf", "BF16"),
        ("ggml-model-f16.gguf", "F16"),
        ("model-IQ2_XXS.gguf", "IQ2_XXS"),
        ("Qwen3-8B-UD-Q4_K_XL.gguf", None),
        ("gemma-2-9b-it-Q6_K_L.gguf", None),
        ("ggml-vocab-llama-spm.gguf", None),
        ("Llama-3.2-1B.gguf", None),
    ],
)
def test_file_name_quantization(url: str, label: str | None) -> None:
    parsed = file_name_quantization(url)
    assert (parsed[0] if parsed else None) == label


def test_missing_quantization_version(audit: Callable[..., list[Finding]]) -> None:
    found = audit(tiny(wtype=Q.Q4_0).drop("general.quantization_version"))
    assert codes(found) == ["meta.missing_quantization_version"]
    assert "16 tensors are quantized (16 q4_0)" in found[0].message.lower()


def test_first_shard_file_type_needs_a_wholesale_contradiction(tmp_path: Path) -> None:
    """A first shard holding only the matrices a Q4_K_M mix bumps to Q6_K contradicts nothing."""
    m = Model("llama")
    m.kv.update(tiny().kv)
    m.set("general.file_type", 15, V.UINT32).set("general.quantization_version", 2, V.UINT32)
    m.tensors["blk.0.attn_v.weight"] = ((256, 128), Q.Q6_K)
    m.tensors["blk.0.ffn_down.weight"] = ((256, 256), Q.Q6_K)
    m.tensors["blk.1.attn_q.weight"] = ((256, 256), Q.Q4_K)
    m.tensors["blk.1.attn_k.weight"] = ((256, 128), Q.Q4_K)
    paths = write(m, tmp_path / "mix-Q4_K_M.gguf", split_max_tensors=2)
    assert len(paths) == 2
    for path in paths:
        assert only(list(check_semantics(parse(path), url=str(path))), "meta.file_type_mismatch") == []
    # The same two matrices as a whole file: Q4_K_M without a single Q4_K matrix.
    del m.tensors["blk.1.attn_q.weight"], m.tensors["blk.1.attn_k.weight"]
    whole = tmp_path / "whole-Q4_K_M.gguf"
    write(m, whole)
    found = only(list(check_semantics(parse(whole), url=str(whole))), "meta.file_type_mismatch")
    assert len(found) == 1 and "no weight matrix is Q4_K; they are 2 Q6_K" in found[0].message
