"""Every corpus file and every builder layout, judged by gguf-audit and by llama.cpp: the same verdict."""

from __future__ import annotations

from pathlib import Path

import pytest
from corpus import gguf_files

from gguf_audit.audit import AuditConfig, audit_file
from gguf_audit.format.model import ValueType
from gguf_audit.testing.builder import KV, build_gguf, kv_array, kv_str, kv_u32, tiny_llama_like
from gguf_audit.testing.conformance import compare, stage_for
from gguf_audit.testing.layouts import LLAMA_7B_LIKE, LLAMA_70B_LIKE, SyntheticGGUF, llama_table
from gguf_audit.testing.oracle import Oracle, Stage

pytestmark = pytest.mark.conformance


def test_every_corpus_file_gets_llama_cpps_verdict(oracle: Oracle) -> None:
    by_stage: dict[Stage, list[Path]] = {}
    for path in gguf_files():
        by_stage.setdefault(stage_for(path), []).append(path)
    assert set(by_stage) == {Stage.MODEL, Stage.VOCAB}
    outcomes = [o for stage, paths in by_stage.items() for o in compare(oracle, paths, stage=stage)]
    assert len(outcomes) == len(gguf_files())
    assert [(o.path, o.klass) for o in outcomes if not o.agrees] == []
    # The corpus holds both answers: files that load, and the big-endian one llama.cpp refuses here.
    assert {o.theirs for o in outcomes} == {"loaded", "refused"}


def _llama_kvs(n_layer: int, n_embd: int, n_ff: int, n_vocab: int, n_embd_kv: int) -> list[KV]:
    """The metadata of a llama model with these sizes: tiny_llama_like's keys, resized, and a vocabulary of n_vocab."""
    n_head = n_embd // 128
    sizes = {
        "llama.block_count": n_layer,
        "llama.embedding_length": n_embd,
        "llama.feed_forward_length": n_ff,
        "llama.attention.head_count": n_head,
        "llama.attention.head_count_kv": n_embd_kv // 128,
        "llama.rope.dimension_count": 128,
        "llama.vocab_size": n_vocab,
        "llama.context_length": 4096,
    }
    tokens = ["<unk>", "<s>", "</s>", *(f"t{i}" for i in range(n_vocab - 3))]
    vocab = {
        "tokenizer.ggml.tokens": kv_array("tokenizer.ggml.tokens", ValueType.STRING, tokens),
        "tokenizer.ggml.scores": kv_array("tokenizer.ggml.scores", ValueType.FLOAT32, [0.0] * n_vocab),
        "tokenizer.ggml.token_type": kv_array(
            "tokenizer.ggml.token_type", ValueType.INT32, [2, 3, 3] + [1] * (n_vocab - 3)
        ),
    }
    out = []
    for kv in tiny_llama_like()[0]:
        name = kv.key if isinstance(kv.key, str) else ""
        if name in sizes:
            kv = kv_u32(name, sizes[name])
        out.append(vocab.get(name, kv))
    return out


def test_builder_layouts_get_llama_cpps_verdict(oracle: Oracle, tmp_path: Path) -> None:
    kvs, tensors = tiny_llama_like()
    tiny = tmp_path / "tiny-llama-like.gguf"
    tiny.write_bytes(build_gguf(kvs, tensors))
    sparse = []
    for label, dims in (("7b", LLAMA_7B_LIKE), ("70b", LLAMA_70B_LIKE)):
        for named, table_kvs in (("bare", [kv_str("general.architecture", "llama")]), ("full", _llama_kvs(*dims))):
            path = tmp_path / f"llama-{label}-like-{named}.gguf"
            SyntheticGGUF(llama_table(*dims), kvs=table_kvs).write_sparse(path)
            sparse.append(path)
    # The model-sized tables go to ggml's header parser and gguf-audit's structural checks: b11312's
    # --no-alloc load aborts on any loadable file (GGML_ASSERT(!ml.no_alloc) in llama-model.cpp), and a
    # full load of 44 GB maps more than the harness's 8 GiB of address space.
    structural = AuditConfig(semantics=False, templates=False)
    outcomes = compare(oracle, [tiny], stage=Stage.MODEL) + compare(oracle, sparse, stage=Stage.GGUF, config=structural)
    assert [(o.path, o.klass) for o in outcomes if not o.agrees] == []
    assert [o.theirs for o in outcomes] == ["loaded"] * 5
    # The bare tables lack their hyperparameters: the whole audit refuses them, as a model load would.
    assert [loadable(p) for p in sparse] == [False, True, False, True]


def loadable(path: Path) -> bool | None:
    return audit_file(str(path), config=AuditConfig(templates=False)).loadable
