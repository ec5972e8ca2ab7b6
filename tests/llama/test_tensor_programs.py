"""The shipped tensor programs (``b11312-tensors.json``): what the generator writes, and what the simulator runs.

The oracle half is ``tests/conformance/test_oracle_loader.py``; here the generator is rerun
over the pinned source (``$GGUF_AUDIT_LLAMA_SRC``; skipped without it unless
``GGUF_AUDIT_REQUIRE_LLAMA_SRC=1``) and must write the shipped file byte for byte, and the
translation of a few loaders is read back as llama.cpp wrote them.
"""

from __future__ import annotations

import json
from pathlib import Path

from corpus import llama_source

from gguf_audit.codes import LLAMA_CPP_BUILD
from gguf_audit.llama import tensor_programs
from gguf_audit.llama.cxx import Untranslatable, parse_body
from gguf_audit.llama.gen_tensors import generate_tensors
from gguf_audit.llama.loader_sim import render

SHIPPED = Path(__file__).parents[2] / "gguf_audit" / "llama" / f"{LLAMA_CPP_BUILD}-tensors.json"


def test_the_generator_reproduces_the_shipped_programs() -> None:
    source = llama_source()
    assert generate_tensors(source, build=LLAMA_CPP_BUILD) == json.loads(SHIPPED.read_text())


def test_the_programs_name_their_build_and_what_is_left_unmodelled() -> None:
    p = tensor_programs()
    assert p.build == LLAMA_CPP_BUILD
    assert {"llama", "qwen3", "qwen3moe", "gemma3", "phi3", "bert", "falcon", "gpt2", "starcoder2"} <= set(
        p.architectures
    )
    assert {"t5", "qwen35", "rwkv6"} <= set(p.unmodelled) and all(p.unmodelled.values())
    assert set(p.helpers) == {"create_tensor_qkv", "create_tensor_gate_up_exps"}


def test_qwen3moes_experts_are_sized_as_its_loader_sizes_them() -> None:
    program = tensor_programs().architectures["qwen3moe"]["program"]
    loop = next(s for s in program if s[0] == "for")
    lets = {s[1]: render(s[2]) for s in loop[4] if s[0] == "let"}
    assert lets["n_ff_exp"] == "hparams.n_ff_exp() ? hparams.n_ff_exp() : n_ff / n_expert_used"
    [gate] = [s for s in loop[4] if s[0] == "t" and s[1] == "blk.{bid}.ffn_gate_exps"]
    assert [render(d) for d in gate[5]] == ["n_embd", "n_ff_exp", "n_expert"] and gate[6] == 0


def test_a_construct_outside_the_small_language_is_refused_not_guessed() -> None:
    ids = {"LLM_TENSOR_OUTPUT": "output"}
    ok = parse_body('{ output = create_tensor(tn(LLM_TENSOR_OUTPUT, "weight"), {n_embd}, TENSOR_NOT_REQUIRED); }', ids)
    assert ok == [["t", "output", "weight", None, None, ["n_embd"], "TENSOR_NOT_REQUIRED", "output"]]
    for body in (
        "{ try { } catch (...) { } }",
        "{ while (x) { } }",
        "{ y = layers[i].wq; }",
        "{ for (i = 0; i != n; ++i) { } }",
    ):
        try:
            parse_body(body, ids)
        except Untranslatable:
            continue
        raise AssertionError(body)
