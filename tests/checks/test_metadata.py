"""Metadata keys: the architecture, the keys llama.cpp requires and the types it reads them as."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from corpus import corpus_dir
from tiny_model import Q, V, codes, only, parse, tiny

from gguf_audit.checks.arch import arch_spec
from gguf_audit.findings import Finding, Severity


def test_missing_architecture(audit: Callable[..., list[Finding]]) -> None:
    m = tiny()
    m.drop_arch = True
    found = audit(m)
    assert codes(found) == ["meta.missing_key"]
    assert "'general.architecture'" in found[0].message


@pytest.mark.parametrize(
    "key",
    [
        "{arch}.context_length",
        "{arch}.embedding_length",
        "{arch}.block_count",
        "{arch}.attention.head_count",
        "{arch}.attention.layer_norm_rms_epsilon",
        "{arch}.feed_forward_length",
        "tokenizer.ggml.model",
        "tokenizer.ggml.tokens",
    ],
)
def test_missing_required_key(key: str, audit: Callable[..., list[Finding]]) -> None:
    found = audit(tiny().drop(key))
    missing = only(found, "meta.missing_key")
    assert len(missing) == 1 and repr(key.format(arch="llama")) in missing[0].message
    assert all(f.severity is Severity.ERROR for f in missing)


def test_missing_head_count_kv_defaults_to_head_count(audit: Callable[..., list[Finding]]) -> None:
    # llama.cpp: "n_head_kv is optional, default to n_head"; with 4 kv heads the shapes agree again.
    m = tiny(n_head_kv=4).drop("{arch}.attention.head_count_kv")
    assert audit(m) == []


def test_moe_llama_sizes_its_experts_by_the_ff_length(audit: Callable[..., list[Finding]]) -> None:
    # llama's loader sizes the expert tensors by n_ff: without feed_forward_length it expects [32, 0, 4] and
    # b11312 refuses the file ("blk.0.ffn_gate_exps.weight has wrong shape", asked); with 48 it loads.
    m = tiny().set("llama.feed_forward_length", 48, V.UINT32)
    m.set("llama.expert_count", 4, V.UINT32).set("llama.expert_used_count", 2, V.UINT32)
    for i in range(2):
        for base in ("ffn_gate", "ffn_up", "ffn_down"):
            del m.tensors[f"blk.{i}.{base}.weight"]
        m.tensors[f"blk.{i}.ffn_gate_inp.weight"] = ((32, 4), Q.F32)
        m.tensors[f"blk.{i}.ffn_gate_exps.weight"] = ((32, 48, 4), Q.F32)
        m.tensors[f"blk.{i}.ffn_up_exps.weight"] = ((32, 48, 4), Q.F32)
        m.tensors[f"blk.{i}.ffn_down_exps.weight"] = ((48, 32, 4), Q.F32)
    assert audit(m) == []
    del m.tensors["blk.1.ffn_gate_inp.weight"]
    found = audit(m)
    assert codes(found) == ["tensor.missing"] and "'blk.1.ffn_gate_inp.weight'" in found[0].message
    m.tensors["blk.1.ffn_gate_inp.weight"] = ((32, 5), Q.F32)
    found = audit(m)
    assert codes(found) == ["tensor.wrong_shape"] and "n_expert 4" in found[0].message
    found = audit(m.drop("{arch}.feed_forward_length"))
    assert "tensor.wrong_shape" in codes(found)
    assert any("expects [32, 0, 4]" in f.message for f in found if f.tensor == "blk.0.ffn_gate_exps.weight")


@pytest.mark.parametrize(
    ("key", "value", "vtype", "sub", "says"),
    [
        ("llama.context_length", "2048", V.STRING, None, "stored as string"),
        ("llama.embedding_length", 32, V.UINT64, None, "stored as uint64"),
        ("tokenizer.ggml.eos_token_id", 2, V.INT32, None, "stored as int32"),
        ("tokenizer.ggml.add_bos_token", 1, V.UINT8, None, "reads it as bool"),
        ("llama.attention.layer_norm_rms_epsilon", 1e-5, V.FLOAT64, None, "stored as float64"),
        ("llama.attention.head_count", [4, 4, 4], V.ARRAY, V.INT32, "array of 3 values"),
        ("llama.feed_forward_length", [64.0, 64.0], V.ARRAY, V.FLOAT32, "array[float32]"),
    ],
)
def test_wrong_type(
    key: str, value: Any, vtype: V, sub: V | None, says: str, audit: Callable[..., list[Finding]]
) -> None:
    found = only(audit(tiny().set(key, value, vtype, sub)), "meta.wrong_type")
    assert len(found) == 1 and repr(key) in found[0].message and says in found[0].message


def test_unknown_architecture_is_refused_and_nothing_else(audit: Callable[..., list[Finding]]) -> None:
    found = audit(tiny("llama9000").drop("{arch}.context_length"))
    assert codes(found) == ["meta.unknown_architecture"]
    assert "'llama9000'" in found[0].message and found[0].severity is Severity.ERROR
    assert "b11312 knows" in found[0].message


def test_an_architecture_named_without_a_model_is_unknown(audit: Callable[..., list[Finding]]) -> None:
    """b11312 names gptj in LLM_ARCH_NAMES but has no model for it ('unsupported model architecture')."""
    found = audit(tiny("gptj"))
    assert codes(found) == ["meta.unknown_architecture"]
    assert "builds a model of" in found[0].message


def test_2026_architectures_are_known(audit: Callable[..., list[Finding]]) -> None:
    """Architectures b11312 loads that the gguf 0.19 wheel does not name."""
    for arch in ("deepseek4", "kimi-k3", "glm5-next", "qwen4exp"):
        assert "meta.unknown_architecture" not in codes(audit(tiny(arch))), arch


def corpus_vocab_files() -> Iterator[Path]:
    yield from sorted((corpus_dir() / "vocab").glob("*.gguf"))


@pytest.mark.parametrize("path", list(corpus_vocab_files()), ids=lambda p: p.name)
def test_required_keys_match_real_converters(path: Path) -> None:
    """The vocab files keep their models' hyperparameters: each carries every key the table requires."""
    header = parse(path)
    arch = header.architecture
    assert arch is not None
    spec = arch_spec(arch)
    assert spec is not None
    if spec.norm_eps_key is not None:
        assert spec.norm_eps_key.format(arch=arch) in header.metadata
    assert f"{arch}.context_length" in header.metadata and f"{arch}.block_count" in header.metadata
