"""Tensors: unexpected and missing ones, block_count against the blocks, vocabulary rows, shapes."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from corpus import corpus_dir
from tiny_model import Q, V, codes, only, parse, tiny

from gguf_audit.checks.arch import arch_spec, is_known_tensor_name
from gguf_audit.checks.header import check_semantics
from gguf_audit.findings import Finding
from gguf_audit.format.model import Header
from gguf_audit.format.parser import parse_header
from gguf_audit.llama import tensor_programs


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


def test_unmodelled_architecture_requires_token_embd_only(audit: Callable[..., list[Finding]]) -> None:
    # nanbeige's loader is not translated (b11312-tensors.json "unmodelled"): only token_embd is required.
    assert "nanbeige" in tensor_programs().unmodelled
    m = tiny("nanbeige")
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
    # Optional tensors llama.cpp creates for llama: biases, rope_freqs. attn_rot_embd is named in its table
    # but no loader creates it, and never bare: b11312 refuses the file ("wrong number of tensors", asked).
    m.tensors["blk.0.attn_q.bias"] = ((32,), Q.F32)
    m.tensors["rope_freqs.weight"] = ((4,), Q.F32)
    m.tensors["blk.1.attn_rot_embd"] = ((4,), Q.F32)
    found = audit(m)
    assert codes(found) == ["tensor.unexpected"] * 3
    assert {f.tensor for f in found} == {
        "blk.0.attn_qq.weight",
        "model.layers.0.self_attn.rotary_emb.inv_freq",
        "blk.1.attn_rot_embd",
    }


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
    assert "expects [32, 16] (n_embd 32, n_embd_k_gqa 16)" in by_tensor["blk.0.attn_k.weight"]
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
    assert codes(found) == ["tensor.wrong_shape"] and "n_embd_head_k 16" in found[0].message


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
    assert codes(found) == ["tensor.wrong_shape"] and "2 * n_ff = 128" in found[0].message


def test_llama_sizes_every_block_by_layer_0s_feed_forward_length(audit: Callable[..., list[Finding]]) -> None:
    # llama's loader reads n_ff (layer 0's value) for every block: b11312 refuses a block sized by its own
    # entry of a per-layer array ("tensor 'blk.1.ffn_gate.weight' has wrong shape; expected 32, 64", asked).
    m = tiny().set("llama.feed_forward_length", [64, 96], V.ARRAY, V.INT32)
    assert audit(m) == []
    m.tensors["blk.1.ffn_gate.weight"] = ((32, 96), Q.F32)
    m.tensors["blk.1.ffn_up.weight"] = ((32, 96), Q.F32)
    m.tensors["blk.1.ffn_down.weight"] = ((96, 32), Q.F32)
    found = audit(m)
    assert codes(found) == ["tensor.wrong_shape"] * 3 and "(n_embd 32, n_ff 64)" in found[0].message


def test_block_count_mismatch(audit: Callable[..., list[Finding]]) -> None:
    found = audit(tiny().set("llama.block_count", 3, V.UINT32))
    assert codes(found) == ["meta.block_count_mismatch"]
    assert "llama.block_count is 3, but blocks 2 have no tensor" in found[0].message
    found = audit(tiny(n_layer=3).set("llama.block_count", 2, V.UINT32))
    assert codes(found) == ["meta.block_count_mismatch"]
    assert "tensors of blocks 2 exist" in found[0].message
    # Past LLAMA_MAX_LAYERS llama.cpp aborts before it looks at tensors: that is the only finding.
    found = audit(tiny().set("llama.block_count", 100000, V.UINT32))
    assert codes(found) == ["hparams.block_count_out_of_range"] and "512" in found[0].message


def test_vocab_mismatch(audit: Callable[..., list[Finding]]) -> None:
    m = tiny()
    m.tensors["token_embd.weight"] = ((32, 65), Q.F32)
    m.tensors["output.weight"] = ((32, 60), Q.F32)
    found = audit(m)
    assert codes(found) == ["tokenizer.vocab_mismatch"] * 2
    assert "'token_embd.weight' has 65 rows" in found[0].message and "64 tokens" in found[0].message


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


def test_a_zero_head_count_kv_or_feed_forward_length_is_a_wrong_shape(tmp_path: Path) -> None:
    """llama.cpp creates attn_q (or attn_k/attn_v, or the FFN) zero wide and refuses the file on its shape
    (asked: the conformance fuzzer's retyped mutants found each)."""
    from tiny_model import write

    from gguf_audit.audit import AuditConfig, audit_file
    from gguf_audit.testing.oracle import find_oracle

    cases = {
        "kv0": tiny().set("llama.attention.head_count_kv", 0, V.UINT32),
        "ff0": tiny().set("llama.feed_forward_length", 0, V.UINT32),
        "head0": tiny().set("llama.attention.head_count", 0, V.UINT32),
    }
    paths = [write(m, tmp_path / f"{name}.gguf")[0] for name, m in cases.items()]
    for path in paths:
        audit = audit_file(str(path), config=AuditConfig())
        assert "tensor.wrong_shape" in [f.code for f in audit.findings] and audit.loadable is False, path.name
    oracle = find_oracle()
    if oracle is not None:
        assert [v.verdict for v in oracle.ask(paths)] == ["refused", "refused", "refused"]
