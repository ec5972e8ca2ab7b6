"""Semantic checks: files written by gguf-py's GGUFWriter, one defect each, and the real corpus."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gguf
import numpy as np
import pytest
from corpus import corpus_dir
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from gguf_audit.checks.arch import arch_spec, is_known_tensor_name
from gguf_audit.checks.semantic import check_semantics, file_name_quantization
from gguf_audit.findings import CODES, Finding, Severity
from gguf_audit.format.model import Header
from gguf_audit.format.parser import parse_header

Q = GGMLQuantizationType
V = GGUFValueType

SEMANTIC_CODES = {
    "meta.missing_key": (Severity.ERROR, True),
    "meta.wrong_type": (Severity.ERROR, True),
    "meta.unknown_architecture": (Severity.WARNING, None),
    "tensor.missing": (Severity.ERROR, True),
    "tensor.unexpected": (Severity.ERROR, True),
    "tensor.wrong_shape": (Severity.ERROR, True),
    "meta.block_count_mismatch": (Severity.ERROR, True),
    "tokenizer.vocab_mismatch": (Severity.ERROR, True),
    "tokenizer.array_length_mismatch": (Severity.ERROR, False),
    "tokenizer.wrong_array_type": (Severity.WARNING, False),
    "tokenizer.special_id_out_of_range": (Severity.ERROR, False),
    "tokenizer.bad_token_type": (Severity.WARNING, False),
    "tokenizer.missing_pre": (Severity.WARNING, False),
    "tokenizer.eos_not_in_template": (Severity.WARNING, False),
    "tokenizer.double_bos": (Severity.INFO, False),
    "meta.file_type_mismatch": (Severity.WARNING, False),
    "meta.missing_quantization_version": (Severity.WARNING, False),
    "meta.control_characters": (Severity.WARNING, False),
}

# The standard conversation as the template audit renders a Llama-2 template (add_generation_prompt=False).
LLAMA2_RENDER = (
    "<s>[INST] <<SYS>>\nYou are a helpful assistant.\n<</SYS>>\n\nHello! Who are you? [/INST] "
    "I am an assistant. How can I help? </s><s>[INST] What is the weather in Paris? [/INST] "
    "Let me check: it is sunny in Paris. </s>"
)
CHATML_RENDER = (
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello! Who are you?<|im_end|>\n"
    "<|im_start|>assistant\nI am an assistant. How can I help?<|im_end|>\n"
)

# --- a tiny model written by GGUFWriter -------------------------------------------


@dataclass
class Model:
    """Keys and tensor infos to hand to GGUFWriter; tests edit them before writing."""

    arch: str
    kv: dict[str, tuple[Any, V, V | None]] = field(default_factory=dict)
    tensors: dict[str, tuple[tuple[int, ...], Q]] = field(default_factory=dict)
    drop_arch: bool = False

    def set(self, key: str, value: Any, vtype: V, sub: V | None = None) -> Model:
        self.kv[key] = (value, vtype, sub)
        return self

    def drop(self, *keys: str) -> Model:
        for key in keys:
            self.kv.pop(key.format(arch=self.arch), None)
            self.tensors.pop(key, None)
        return self


def tokenizer_kvs(model: Model, n_vocab: int, kind: str = "llama") -> None:
    tokens = ["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(3, n_vocab)]
    model.set("tokenizer.ggml.model", kind, V.STRING)
    model.set("tokenizer.ggml.pre", "default", V.STRING)
    model.set("tokenizer.ggml.tokens", tokens, V.ARRAY, V.STRING)
    model.set("tokenizer.ggml.scores", [0.0] * n_vocab, V.ARRAY, V.FLOAT32)
    model.set("tokenizer.ggml.token_type", [2, 3, 3] + [1] * (n_vocab - 3), V.ARRAY, V.INT32)
    model.set("tokenizer.ggml.bos_token_id", 1, V.UINT32)
    model.set("tokenizer.ggml.eos_token_id", 2, V.UINT32)
    model.set("tokenizer.ggml.unknown_token_id", 0, V.UINT32)
    if kind == "gpt2":
        model.set("tokenizer.ggml.merges", ["t 3", "t 4"], V.ARRAY, V.STRING)


def tiny(
    arch: str = "llama",
    *,
    n_embd: int = 32,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 64,
    n_layer: int = 2,
    n_vocab: int = 64,
    wtype: Q = Q.F32,
    tied: bool = False,
) -> Model:
    """A llama-like model: the shapes llama.cpp's llama case creates (head_dim = n_embd / n_head)."""
    m = Model(arch)
    hd = n_embd // n_head
    m.set(f"{arch}.context_length", 128, V.UINT32)
    m.set(f"{arch}.embedding_length", n_embd, V.UINT32)
    m.set(f"{arch}.feed_forward_length", n_ff, V.UINT32)
    m.set(f"{arch}.block_count", n_layer, V.UINT32)
    m.set(f"{arch}.attention.head_count", n_head, V.UINT32)
    m.set(f"{arch}.attention.head_count_kv", n_head_kv, V.UINT32)
    m.set(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5, V.FLOAT32)
    m.set("general.file_type", 0 if wtype == Q.F32 else {Q.Q8_0: 7, Q.F16: 1, Q.Q4_0: 2}[wtype], V.UINT32)
    if wtype != Q.F32:
        m.set("general.quantization_version", 2, V.UINT32)
    tokenizer_kvs(m, n_vocab)
    m.tensors["token_embd.weight"] = ((n_embd, n_vocab), wtype)
    m.tensors["output_norm.weight"] = ((n_embd,), Q.F32)
    if not tied:
        m.tensors["output.weight"] = ((n_embd, n_vocab), wtype)
    for i in range(n_layer):
        b = f"blk.{i}."
        m.tensors[b + "attn_norm.weight"] = ((n_embd,), Q.F32)
        m.tensors[b + "attn_q.weight"] = ((n_embd, n_head * hd), wtype)
        m.tensors[b + "attn_k.weight"] = ((n_embd, n_head_kv * hd), wtype)
        m.tensors[b + "attn_v.weight"] = ((n_embd, n_head_kv * hd), wtype)
        m.tensors[b + "attn_output.weight"] = ((n_head * hd, n_embd), wtype)
        m.tensors[b + "ffn_norm.weight"] = ((n_embd,), Q.F32)
        m.tensors[b + "ffn_gate.weight"] = ((n_embd, n_ff), wtype)
        m.tensors[b + "ffn_up.weight"] = ((n_embd, n_ff), wtype)
        m.tensors[b + "ffn_down.weight"] = ((n_ff, n_embd), wtype)
    return m


def _raw(shape: tuple[int, ...], qtype: Q) -> np.ndarray[Any, Any]:
    """Zero bytes for a tensor of ``shape`` (ggml order) and ``qtype``, in GGUFWriter's byte shape."""
    block, size = GGML_QUANT_SIZES[qtype]
    np_shape = tuple(reversed(shape))
    return np.zeros((*np_shape[:-1], np_shape[-1] // block * size), dtype=np.uint8)


def write(model: Model, path: Path, *, split_max_tensors: int = 0) -> list[Path]:
    writer = gguf.GGUFWriter(path, model.arch, split_max_tensors=split_max_tensors)
    if model.drop_arch:
        del writer.kv_data[0]["general.architecture"]
    for key, (value, vtype, sub) in model.kv.items():
        writer.add_key_value(key, value, vtype, sub)
    for name, (shape, qtype) in model.tensors.items():
        writer.add_tensor(name, _raw(shape, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return writer.format_shard_names(path)


def parse(path: Path) -> Header:
    data = path.read_bytes()
    header = parse_header(data, len(data))
    assert isinstance(header, Header)
    return header


@pytest.fixture
def audit(tmp_path: Path) -> Callable[..., list[Finding]]:
    def run(model: Model, name: str = "model.gguf", renders: dict[str, str] | None = None) -> list[Finding]:
        path = tmp_path / name
        write(model, path)
        return list(check_semantics(parse(path), url=str(path), template_renders=renders))

    return run


def codes(findings: list[Finding]) -> list[str]:
    return [f.code for f in findings]


def only(findings: list[Finding], code: str) -> list[Finding]:
    return [f for f in findings if f.code == code]


# --- the registry ---------------------------------------------------------------


def test_codes_are_registered_with_their_verdicts() -> None:
    for code, (severity, refused) in SEMANTIC_CODES.items():
        info = CODES[code]
        assert (info.severity, info.refused) == (severity, refused), code
        assert info.doc and "\n" not in info.doc


# --- a valid model ----------------------------------------------------------------


def test_valid_tiny_llama_has_no_finding(audit: Callable[..., list[Finding]]) -> None:
    assert audit(tiny()) == []


def test_tied_output_is_not_missing(audit: Callable[..., list[Finding]]) -> None:
    assert audit(tiny(tied=True)) == []


@pytest.mark.parametrize("arch", ["qwen2", "qwen3", "gemma", "gemma3"])
def test_llama_like_architectures_accept_llama_shapes(arch: str, audit: Callable[..., list[Finding]]) -> None:
    m = tiny(arch)
    if arch == "gemma":
        del m.tensors["output.weight"]  # gemma 1 always ties it: llama.cpp never creates output
    assert audit(m) == []


# --- architecture keys --------------------------------------------------------------


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


def test_bpe_needs_merges_and_warns_without_pre(audit: Callable[..., list[Finding]]) -> None:
    m = tiny()
    tokenizer_kvs(m, 64, kind="gpt2")
    assert audit(m) == []
    m.drop("tokenizer.ggml.merges", "tokenizer.ggml.pre")
    found = audit(m)
    assert sorted(codes(found)) == ["meta.missing_key", "tokenizer.missing_pre"]
    assert "'tokenizer.ggml.merges'" in only(found, "meta.missing_key")[0].message


def test_moe_llama_needs_no_ff_length(audit: Callable[..., list[Finding]]) -> None:
    m = tiny().drop("{arch}.feed_forward_length")
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


def test_per_layer_arrays_are_accepted_and_used(audit: Callable[..., list[Finding]]) -> None:
    m = tiny().set("llama.feed_forward_length", [64, 96], V.ARRAY, V.INT32)
    m.tensors["blk.1.ffn_gate.weight"] = ((32, 96), Q.F32)
    m.tensors["blk.1.ffn_up.weight"] = ((32, 96), Q.F32)
    m.tensors["blk.1.ffn_down.weight"] = ((96, 32), Q.F32)
    assert audit(m) == []
    m.tensors["blk.1.ffn_down.weight"] = ((64, 32), Q.F32)
    found = audit(m)
    assert codes(found) == ["tensor.wrong_shape"] and "n_ff 96" in found[0].message


def test_unknown_architecture_is_a_warning_and_nothing_else(audit: Callable[..., list[Finding]]) -> None:
    found = audit(tiny("llama9000").drop("{arch}.context_length"))
    assert codes(found) == ["meta.unknown_architecture"]
    assert "'llama9000'" in found[0].message and found[0].severity is Severity.WARNING


# --- tensors ----------------------------------------------------------------------


def test_missing_block_tensor_is_grouped(audit: Callable[..., list[Finding]]) -> None:
    m = tiny(n_layer=3)
    for i in range(3):
        del m.tensors[f"blk.{i}.attn_q.weight"]
    del m.tensors["output_norm.weight"]
    found = audit(m)
    assert codes(found) == ["tensor.missing", "tensor.missing"]
    assert "'output_norm.weight'" in found[0].message
    assert "'blk.0.attn_q.weight'" in found[1].message and "blocks 1, 2" in found[1].message
    assert found[1].tensor == "blk.0.attn_q.weight"


def test_non_curated_architecture_requires_token_embd_only(audit: Callable[..., list[Finding]]) -> None:
    m = tiny("starcoder2")
    m.set("starcoder2.attention.layer_norm_epsilon", 1e-5, V.FLOAT32)
    m.drop("{arch}.attention.layer_norm_rms_epsilon")
    for name in [n for n in m.tensors if n.endswith(("attn_q.weight", "ffn_gate.weight"))]:
        del m.tensors[name]
    assert audit(m) == []
    del m.tensors["token_embd.weight"]
    found = audit(m)
    assert codes(found) == ["tensor.missing"] and "'token_embd.weight'" in found[0].message


def test_unexpected_tensors(audit: Callable[..., list[Finding]]) -> None:
    m = tiny()
    m.tensors["blk.0.attn_qq.weight"] = ((32, 32), Q.F32)
    m.tensors["model.layers.0.self_attn.rotary_emb.inv_freq"] = ((4,), Q.F32)
    # Optional tensors llama.cpp knows for llama: biases, rope_freqs, attn_rot_embd.
    m.tensors["blk.0.attn_q.bias"] = ((32,), Q.F32)
    m.tensors["rope_freqs.weight"] = ((4,), Q.F32)
    m.tensors["blk.1.attn_rot_embd"] = ((4,), Q.F32)
    found = audit(m)
    assert codes(found) == ["tensor.unexpected", "tensor.unexpected"]
    assert {f.tensor for f in found} == {"blk.0.attn_qq.weight", "model.layers.0.self_attn.rotary_emb.inv_freq"}


def test_many_unexpected_tensors_are_capped(audit: Callable[..., list[Finding]]) -> None:
    m = tiny()
    for i in range(25):
        m.tensors[f"leftover.{i}.weight"] = ((4,), Q.F32)
    found = audit(m)
    assert codes(found) == ["tensor.unexpected"] * 11
    assert found[-1].message.startswith("15 more tensors")


def test_wrong_shapes(audit: Callable[..., list[Finding]]) -> None:
    m = tiny()
    m.tensors["blk.0.attn_k.weight"] = ((32, 32), Q.F32)  # 4 kv heads' worth, but head_count_kv is 2
    m.tensors["blk.0.ffn_up.weight"] = ((32, 65), Q.F32)
    m.tensors["output_norm.weight"] = ((33,), Q.F32)
    found = audit(m)
    assert codes(found) == ["tensor.wrong_shape"] * 3
    by_tensor = {f.tensor: f.message for f in found}
    assert "expects [32, 16] (n_embd 32, n_head_kv 2 x head_dim 8)" in by_tensor["blk.0.attn_k.weight"]
    assert "has shape [32, 65]" in by_tensor["blk.0.ffn_up.weight"]
    assert "expects [32]" in by_tensor["output_norm.weight"]


def test_wrong_embedding_length_groups_blocks(audit: Callable[..., list[Finding]]) -> None:
    found = audit(tiny(n_layer=4).set("llama.embedding_length", 64, V.UINT32))
    shapes = only(found, "tensor.wrong_shape")
    q = [f for f in shapes if f.tensor == "blk.0.attn_q.weight"]
    assert len(q) == 1 and "(the same in 3 more blocks)" in q[0].message
    assert all("blk.1." not in (f.tensor or "") for f in shapes)


def test_key_length_sets_head_dim(audit: Callable[..., list[Finding]]) -> None:
    # qwen3-style: head_dim 16 with n_embd 32 and 4 heads (q is wider than n_embd).
    m = tiny("qwen3")
    m.set("qwen3.attention.key_length", 16, V.UINT32).set("qwen3.attention.value_length", 16, V.UINT32)
    for i in range(2):
        m.tensors[f"blk.{i}.attn_q.weight"] = ((32, 64), Q.F32)
        m.tensors[f"blk.{i}.attn_k.weight"] = ((32, 32), Q.F32)
        m.tensors[f"blk.{i}.attn_v.weight"] = ((32, 32), Q.F32)
        m.tensors[f"blk.{i}.attn_output.weight"] = ((64, 32), Q.F32)
        m.tensors[f"blk.{i}.attn_q_norm.weight"] = ((16,), Q.F32)
        m.tensors[f"blk.{i}.attn_k_norm.weight"] = ((16,), Q.F32)
    assert audit(m) == []
    m.tensors["blk.0.attn_q_norm.weight"] = ((8,), Q.F32)
    found = audit(m)
    assert codes(found) == ["tensor.wrong_shape"] and "head_dim 16" in found[0].message


def test_phi3_fused_shapes(audit: Callable[..., list[Finding]]) -> None:
    m = tiny("phi3")
    for i in range(2):
        for base in ("attn_q", "attn_k", "attn_v", "ffn_gate"):
            del m.tensors[f"blk.{i}.{base}.weight"]
        m.tensors[f"blk.{i}.attn_qkv.weight"] = ((32, 32 + 2 * 16), Q.F32)
        m.tensors[f"blk.{i}.ffn_up.weight"] = ((32, 2 * 64), Q.F32)
    assert audit(m) == []
    m.tensors["blk.1.ffn_up.weight"] = ((32, 64), Q.F32)
    found = audit(m)
    assert codes(found) == ["tensor.wrong_shape"] and "2 x n_ff 64" in found[0].message


def test_block_count_mismatch(audit: Callable[..., list[Finding]]) -> None:
    found = audit(tiny().set("llama.block_count", 3, V.UINT32))
    assert codes(found) == ["meta.block_count_mismatch"]
    assert "llama.block_count is 3, but blocks 2 have no tensor" in found[0].message
    found = audit(tiny(n_layer=3).set("llama.block_count", 2, V.UINT32))
    assert codes(found) == ["meta.block_count_mismatch"]
    assert "tensors of blocks 2 exist" in found[0].message
    found = audit(tiny().set("llama.block_count", 100000, V.UINT32))
    assert codes(found) == ["meta.block_count_mismatch"] and "512" in found[0].message


# --- tokenizer --------------------------------------------------------------------


def test_vocab_mismatch(audit: Callable[..., list[Finding]]) -> None:
    m = tiny()
    m.tensors["token_embd.weight"] = ((32, 65), Q.F32)
    m.tensors["output.weight"] = ((32, 60), Q.F32)
    found = audit(m)
    assert codes(found) == ["tokenizer.vocab_mismatch"] * 2
    assert "'token_embd.weight' has 65 rows" in found[0].message and "64 tokens" in found[0].message


def test_array_length_mismatch(audit: Callable[..., list[Finding]]) -> None:
    m = tiny().set("tokenizer.ggml.scores", [0.0] * 63, V.ARRAY, V.FLOAT32)
    found = audit(m)
    assert codes(found) == ["tokenizer.array_length_mismatch"]
    assert "tokenizer.ggml.scores has 63 entries but tokenizer.ggml.tokens has 64" in found[0].message


def test_wrong_array_types(audit: Callable[..., list[Finding]]) -> None:
    m = tiny().set("tokenizer.ggml.scores", [0.0] * 64, V.ARRAY, V.FLOAT64)
    m.set("tokenizer.ggml.token_type", [1] * 64, V.ARRAY, V.UINT8)
    assert codes(audit(m)) == ["tokenizer.wrong_array_type"] * 2


def test_special_ids_out_of_range(audit: Callable[..., list[Finding]]) -> None:
    m = tiny().set("tokenizer.ggml.eos_token_id", 64, V.UINT32)
    m.set("tokenizer.ggml.padding_token_id", 1000, V.UINT32)
    found = audit(m)
    assert codes(found) == ["tokenizer.special_id_out_of_range"] * 2
    eos, pad = found
    assert "tokenizer.ggml.eos_token_id is 64" in eos.message and eos.severity is Severity.ERROR
    assert "padding_token_id is 1000" in pad.message and pad.severity is Severity.WARNING


def test_bad_token_types(audit: Callable[..., list[Finding]]) -> None:
    types = [2, 3, 3] + [1] * 61
    types[10], types[20] = 0, 9
    found = audit(tiny().set("tokenizer.ggml.token_type", types, V.ARRAY, V.INT32))
    assert codes(found) == ["tokenizer.bad_token_type"]
    assert "2 values outside 1 to 6, the first 0 at token 10" in found[0].message


# --- templates --------------------------------------------------------------------


def test_template_checks_skipped_without_renders(audit: Callable[..., list[Finding]]) -> None:
    assert audit(tiny(), renders=None) == []


def test_llama2_template_closes_turns_with_eos(audit: Callable[..., list[Finding]]) -> None:
    found = audit(tiny(), renders={"tokenizer.chat_template": LLAMA2_RENDER})
    # The only remark: the template writes <s> and add_bos_token defaults to true for SPM.
    assert codes(found) == ["tokenizer.double_bos"] and found[0].severity is Severity.INFO
    m = tiny().set("tokenizer.ggml.add_bos_token", False, V.BOOL)
    assert audit(m, renders={"tokenizer.chat_template": LLAMA2_RENDER}) == []


def test_template_without_eos(audit: Callable[..., list[Finding]]) -> None:
    render = LLAMA2_RENDER.replace("</s>", "")
    m = tiny().set("tokenizer.ggml.add_bos_token", False, V.BOOL)
    found = audit(m, renders={"tokenizer.chat_template": render})
    assert codes(found) == ["tokenizer.eos_not_in_template"]
    assert "not closed by EOS '</s>'" in found[0].message


def test_template_eos_must_be_control(audit: Callable[..., list[Finding]]) -> None:
    m = tiny().set("tokenizer.ggml.add_bos_token", False, V.BOOL)
    m.set("tokenizer.ggml.token_type", [2, 3, 1] + [1] * 61, V.ARRAY, V.INT32)
    found = audit(m, renders={"tokenizer.chat_template": LLAMA2_RENDER})
    assert codes(found) == ["tokenizer.eos_not_in_template"]
    assert "'</s>' (id 2), a normal token, not a control token" in found[0].message


def chatml(eos_id: int | None, im_end_type: int = 3) -> Model:
    m = tiny()
    tokens = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"] + [f"t{i}" for i in range(5, 64)]
    m.set("tokenizer.ggml.tokens", tokens, V.ARRAY, V.STRING)
    m.set("tokenizer.ggml.token_type", [2, 3, 3, 3, im_end_type] + [1] * 59, V.ARRAY, V.INT32)
    m.set("tokenizer.ggml.add_bos_token", False, V.BOOL)
    if eos_id is not None:
        m.set("tokenizer.ggml.eos_token_id", eos_id, V.UINT32)
    return m


def test_chatml_template_with_im_end_as_eos(audit: Callable[..., list[Finding]]) -> None:
    assert audit(chatml(eos_id=4), renders={"tokenizer.chat_template": CHATML_RENDER}) == []
    m = chatml(eos_id=2).set("tokenizer.ggml.eot_token_id", 4, V.UINT32)
    assert audit(m, renders={"tokenizer.chat_template": CHATML_RENDER}) == []


def test_chatml_template_with_another_eos_is_info(audit: Callable[..., list[Finding]]) -> None:
    # llama.cpp stops on <|im_end|> by its text, so only a remark.
    found = audit(chatml(eos_id=2), renders={"tokenizer.chat_template": CHATML_RENDER})
    assert codes(found) == ["tokenizer.eos_not_in_template"] and found[0].severity is Severity.INFO
    assert "ends with '<|im_end|>' (id 4), not EOS '</s>'" in found[0].message


def test_chatml_user_defined_im_end(audit: Callable[..., list[Finding]]) -> None:
    found = audit(chatml(eos_id=4, im_end_type=4), renders={"tokenizer.chat_template": CHATML_RENDER})
    assert codes(found) == ["tokenizer.eos_not_in_template"] and found[0].severity is Severity.WARNING
    assert "a user-defined token, not a control token (llama.cpp warns" in found[0].message


def test_eos_equal_to_bos_is_not_found_in_the_bos(audit: Callable[..., list[Finding]]) -> None:
    # gpt-2 style: bos = eos = <|endoftext|>; a render that only starts with it does not close turns.
    m = chatml(eos_id=3).set("tokenizer.ggml.bos_token_id", 3, V.UINT32)
    render = "<|im_start|>user Hello! Who are you? assistant I am an assistant. How can I help?"
    found = audit(m, renders={"tokenizer.chat_template": render})
    assert codes(found) == ["tokenizer.eos_not_in_template"]


def test_lookup_by_text_is_bounded_and_then_silent(audit: Callable[..., list[Finding]]) -> None:
    # 10000 tokens of 10 bytes, none of them <|im_end|>: past the compare budget nothing is claimed.
    n = 10_000
    m = tiny(n_vocab=n).set("tokenizer.ggml.add_bos_token", False, V.BOOL)
    m.set("tokenizer.ggml.tokens", ["<unk>", "<s>", "</s>"] + [f"x{i:09d}" for i in range(3, n)], V.ARRAY, V.STRING)
    m.tensors.clear()
    assert audit(m, renders={"tokenizer.chat_template": CHATML_RENDER}) == []
    # A short vocabulary is searched to the end: the text is not a token, so the turn is not closed.
    assert codes(audit(tiny().set("tokenizer.ggml.add_bos_token", False, V.BOOL), renders={"t": CHATML_RENDER})) == [
        "tokenizer.eos_not_in_template"
    ]


# --- declared against observed ----------------------------------------------------


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


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("general.name", "tiny\x1b[31mred", "U+001B"),
        ("general.author", "evil\u202eresu", "U+202E RIGHT-TO-LEFT OVERRIDE"),
        ("general.name", "two\nlines", "U+000A"),
        ("general.basename", "zero\u200bwidth", "U+200B ZERO WIDTH SPACE"),
        ("general.description", "tag\U000e0041smuggled", "U+E0041"),
    ],
)
def test_control_characters(key: str, value: str, says: str, audit: Callable[..., list[Finding]]) -> None:
    found = audit(tiny().set(key, value, V.STRING))
    assert codes(found) == ["meta.control_characters"]
    assert found[0].message.startswith(key) and says in found[0].message


def test_description_may_hold_newlines_and_tags_are_checked(audit: Callable[..., list[Finding]]) -> None:
    m = tiny().set("general.description", "line one\n\tline two\r\n", V.STRING)
    assert audit(m) == []
    m.set("general.tags", ["ok", "bad\x07bell"], V.ARRAY, V.STRING)
    found = audit(m)
    assert codes(found) == ["meta.control_characters"] and found[0].message.startswith("general.tags[1]")


# --- vocab-only files and shards --------------------------------------------------


def test_vocab_only_file_needs_no_tensors_or_hyperparameters(audit: Callable[..., list[Finding]]) -> None:
    m = tiny().drop("{arch}.context_length", "{arch}.attention.head_count")
    m.tensors.clear()
    assert audit(m) == []
    m.drop("tokenizer.ggml.tokens")
    assert codes(audit(m)) == ["meta.missing_key"]


def test_split_model_shards(tmp_path: Path) -> None:
    m = tiny(n_layer=3, wtype=Q.Q8_0)
    paths = write(m, tmp_path / "tiny-Q8_0.gguf", split_max_tensors=8)
    assert len(paths) > 2
    for path in paths:
        header = parse(path)
        assert list(check_semantics(header, url=str(path))) == [], path.name
    # A later shard holds no metadata at all: no missing architecture, no missing tensors.
    last = parse(paths[-1])
    assert last.architecture is None
    # The first shard still gets its own checks.
    m.set("llama.block_count", 2, V.UINT32)
    paths = write(m, tmp_path / "bad.gguf", split_max_tensors=29)
    found = list(check_semantics(parse(paths[0]), url=str(paths[0])))
    assert codes(found) == ["meta.block_count_mismatch"] and "blocks 2 exist" in found[0].message


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


@pytest.mark.parametrize(
    ("key", "value"),
    [("general.type", "adapter"), ("general.type", "imatrix"), ("general.architecture", "clip")],
)
def test_files_that_are_not_models_get_no_model_checks(
    key: str, value: str, audit: Callable[..., list[Finding]]
) -> None:
    m = tiny().drop("{arch}.context_length", "tokenizer.ggml.model")
    m.tensors["blk.0.attn_q.weight.lora_a"] = ((32, 8), Q.F32)
    m.set(key, value, V.STRING)
    assert audit(m) == []


# --- the architecture table -----------------------------------------------------------


def test_tensor_names_come_from_the_gguf_package() -> None:
    assert is_known_tensor_name("llama", "blk.31.ffn_down_exps.weight")
    assert is_known_tensor_name("mamba", "blk.0.ssm_a")
    assert is_known_tensor_name("t5", "enc.blk.3.attn_rel_b.weight")
    assert not is_known_tensor_name("qwen2", "blk.0.attn_q_norm.weight")
    # Mixtral before merged experts: one tensor per expert, still created by llama.cpp's llama case.
    assert is_known_tensor_name("llama", "blk.0.ffn_down.7.weight")
    assert not is_known_tensor_name("qwen2", "blk.0.ffn_down.7.weight")
    assert is_known_tensor_name("no-such-arch", "token_embd.weight") is None
    assert arch_spec("no-such-arch") is None and arch_spec("clip") is None


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


# --- the real corpus ----------------------------------------------------------------


def corpus_files() -> list[Path]:
    files = sorted(corpus_dir().rglob("*.gguf"))
    if not files:
        raise FileNotFoundError(f"no GGUF corpus at {corpus_dir()}; set GGUF_AUDIT_CORPUS")
    return files


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.name)
def test_corpus_has_no_semantic_finding(path: Path) -> None:
    found = list(check_semantics(parse(path), url=str(path)))
    # The one finding is true: the gpt-neox vocab file has no tokenizer.ggml.pre.
    expected = ["tokenizer.missing_pre"] if path.name == "ggml-vocab-gpt-neox.gguf" else []
    assert codes(found) == expected, found


def test_corpus_templates_as_the_template_audit_renders_them() -> None:
    """The real templates, rendered by the template audit: remarks at most, never a warning."""
    from gguf_audit.templates.audit import audit_templates

    seen: dict[str, set[str]] = {}
    for path in corpus_files():
        header = parse(path)
        templates = {kv.key: kv.value for kv in header.kvs if kv.key.startswith("tokenizer.chat_template")}
        if not templates:
            continue
        tokens = header.get("tokenizer.ggml.tokens")
        assert isinstance(tokens, Sequence)
        bos, eos = header.get("tokenizer.ggml.bos_token_id"), header.get("tokenizer.ggml.eos_token_id")
        audits, _ = audit_templates(
            {k: v for k, v in templates.items() if isinstance(v, str)},
            bos_token=tokens[bos] if isinstance(bos, int) else "",
            eos_token=tokens[eos] if isinstance(eos, int) else "",
        )
        renders = {a.key: a.rendered for a in audits if a.rendered is not None}
        assert renders, path.name
        found = list(check_semantics(header, url=str(path), template_renders=renders))
        assert all(f.severity is Severity.INFO for f in found), found
        seen[path.name] = set(codes(found))
    # Llama-2's template writes <s> itself; Phi-3's ends turns with <|end|> while its EOS is <|endoftext|>.
    assert seen["tiny-llama-Q4_K_M.gguf"] == {"tokenizer.double_bos"}
    assert seen["ggml-vocab-phi-3.gguf"] == {"tokenizer.double_bos", "tokenizer.eos_not_in_template"}


def test_corpus_llama_shapes_are_checked(tmp_path: Path) -> None:
    """The corpus model passes because its shapes agree, not because they are skipped."""
    path = corpus_dir() / "models" / "tiny-llama-F32.gguf"
    data = bytearray(path.read_bytes())
    header = parse(path)
    kv = header.metadata["llama.attention.head_count_kv"]
    value_at = kv.offset + 8 + len(kv.key) + 4  # key length, key, value type, then the uint32
    assert int.from_bytes(data[value_at : value_at + 4], "little") == 2
    data[value_at : value_at + 4] = (4).to_bytes(4, "little")
    changed = parse_header(bytes(data), len(data))
    assert isinstance(changed, Header)
    found = list(check_semantics(changed, url=str(path)))
    assert {f.tensor for f in found} == {"blk.0.attn_k.weight", "blk.0.attn_v.weight"}
    assert all(f.code == "tensor.wrong_shape" and "same in 1 more blocks" in f.message for f in found)


# --- cost ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def big_vocab(tmp_path_factory: pytest.TempPathFactory) -> Header:
    n = 256_000
    m = tiny(n_vocab=n)
    tokens = ["<unk>", "<s>", "</s>"] + [f"tok{i}" for i in range(3, n - 1)] + ["<|im_end|>"]
    m.set("tokenizer.ggml.tokens", tokens, V.ARRAY, V.STRING)
    m.set("tokenizer.ggml.token_type", [2, 3, 3] + [1] * (n - 4) + [3], V.ARRAY, V.INT32)
    m.tensors.clear()
    path = tmp_path_factory.mktemp("big") / "big-vocab.gguf"
    write(m, path)
    return parse(path)


def _best_ms(fn: Callable[[], object], runs: int = 5) -> float:
    best = float("inf")
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best * 1000


def test_256k_vocabulary_is_checked_fast(big_vocab: Header) -> None:
    # The render ends turns with <|im_end|>, not the EOS: the slow path, a lookup by text.
    renders = {"tokenizer.chat_template": CHATML_RENDER}
    found = list(check_semantics(big_vocab, template_renders=renders))
    assert codes(found) == ["tokenizer.eos_not_in_template"]
    assert _best_ms(lambda: list(check_semantics(big_vocab, template_renders=renders))) < 50


def test_largest_corpus_vocabulary_is_checked_fast() -> None:
    path = max((corpus_dir() / "vocab").glob("*.gguf"), key=lambda p: p.stat().st_size)
    header = parse(path)
    assert _best_ms(lambda: list(check_semantics(header, url=str(path)))) < 50


def test_unknown_tokenizer_and_pre_tokenizer(tmp_path: Path) -> None:
    from gguf_audit.audit import audit_file
    from gguf_audit.format.model import ValueType
    from gguf_audit.testing.builder import build_gguf, kv_array, kv_str, tiny_llama_like

    kvs, tensors = tiny_llama_like()
    for key, value, code, loadable in (
        ("tokenizer.ggml.model", "sentencepiece2", "tokenizer.unknown_model", None),
        ("tokenizer.ggml.pre", "not-a-real-pre", None, True),
    ):
        changed = [kv_str(key, value) if kv.key == key else kv for kv in kvs]
        if key == "tokenizer.ggml.pre":
            # Only BPE reads the pre-tokenizer: make it a gpt2 tokenizer with merges.
            changed = [
                kv_str("tokenizer.ggml.model", "gpt2") if kv.key == "tokenizer.ggml.model" else kv for kv in changed
            ]
            changed.append(kv_array("tokenizer.ggml.merges", ValueType.STRING, ["▁ t", "h e"]))
            code = "tokenizer.unknown_pre"
            loadable = None
        path = tmp_path / f"{code}.gguf"
        path.write_bytes(build_gguf(changed, tensors))
        audit = audit_file(str(path))
        assert code in [f.code for f in audit.findings]
        assert audit.loadable is loadable
