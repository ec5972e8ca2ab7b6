"""The shipped llama.cpp tables: stamped with the pinned build, and agreeing with what its loader does.

The oracle (``../shared/llama.cpp``'s ``llama-verdict``, the same build) is asked
in one call per test about small vocabulary-only files: every tokenizer model and
every BPE pre-tokenizer name in the tables loads, a made-up one is refused, the
models that need merges are refused without them, and every architecture the
tables name with a model class is accepted while a made-up one (and ``gptj``, named
without a model class) is refused. When
the pinned llama.cpp source is at hand (``$GGUF_AUDIT_LLAMA_SRC``; ``.ci/run`` extracts it)
the generator is run over it and must reproduce the shipped file.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from corpus import llama_source

from gguf_audit.codes import LLAMA_CPP_BUILD
from gguf_audit.format.model import ValueType
from gguf_audit.llama import llama_tables
from gguf_audit.llama.generate import generate
from gguf_audit.testing.builder import Tensor, build_gguf, kv_array, kv_bool, kv_f32, kv_u32
from gguf_audit.testing.oracle import Oracle, OracleVerdict, Stage, find_oracle
from gguf_audit.testing.vocab import vocab_kvs


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    found = find_oracle()
    if found is None:
        pytest.skip("the llama.cpp oracle (../shared/llama.cpp/bin/llama-verdict) is not here")
    return found


def _ask(oracle: Oracle, tmp: Path, files: dict[str, bytes]) -> dict[str, OracleVerdict]:
    paths = []
    for data in files.values():
        path = tmp / f"{len(paths):04d}.gguf"
        path.write_bytes(data)
        paths.append(path)
    return dict(zip(files, oracle.ask(paths, stage=Stage.VOCAB), strict=True))


def test_the_tables_name_the_pinned_build() -> None:
    t = llama_tables()
    assert (t.build, t.commit) == (LLAMA_CPP_BUILD, "0c1e57098")
    assert (t.max_layers, t.max_experts) == (512, 1024)
    assert t.rope_scaling_types == {"none", "linear", "yarn", "longrope"}
    # What the 2026 converters write, and the gguf 0.19 wheel did not know.
    assert {"gemma4", "hybriddna", "whitespace"} <= t.tokenizer_models
    assert {"qwen35", "glm4", "glm5", "gemma4", "minimax-m2"} <= t.bpe_pre_tokenizers
    assert {"deepseek4", "kimi-k3", "minimax-m3", "glm5-next", "qwen4exp", "hy_v4", "laguna"} <= t.architectures
    assert "general.tensor_extra.name" in t.keys and "tokenizer.ggml.suppress_tokens" in t.keys
    assert "gptj" in t.architectures and "gptj" not in t.supported_architectures
    assert "blk.{bid}.attn_q" in t.arch_tensors["llama"]


def test_the_generator_reproduces_the_shipped_tables() -> None:
    source = llama_source()
    shipped = json.loads((Path(__file__).parents[2] / "gguf_audit" / "llama" / f"{LLAMA_CPP_BUILD}.json").read_text())
    assert generate(source, build=shipped["build"], commit=shipped["commit"]) == shipped


def test_every_tokenizer_model_and_pre_tokenizer_loads(oracle: Oracle, tmp_path: Path) -> None:
    t = llama_tables()
    files = {f"model {m}": build_gguf(vocab_kvs(m), []) for m in sorted(t.tokenizer_models)}
    files |= {f"pre {p}": build_gguf(vocab_kvs("gpt2", pre=p), []) for p in sorted(t.bpe_pre_tokenizers)}
    files["model made-up"] = build_gguf(vocab_kvs("made-up"), [])
    files["pre made-up"] = build_gguf(vocab_kvs("gpt2", pre="made-up"), [])
    files |= {
        f"no merges {m}": build_gguf(vocab_kvs(m, merges=False), []) for m in sorted(t.tokenizer_models_needing_merges)
    }
    verdicts = _ask(oracle, tmp_path, files)
    wrong = {
        name: (v.verdict, v.message[-120:])
        for name, v in verdicts.items()
        if v.loads != (not name.endswith("made-up") and not name.startswith("no merges"))
    }
    assert wrong == {}
    assert "unknown tokenizer: 'made-up'" in verdicts["model made-up"].message
    assert "unknown pre-tokenizer type: 'made-up'" in verdicts["pre made-up"].message


def test_every_supported_architecture_is_accepted(oracle: Oracle, tmp_path: Path) -> None:
    t = llama_tables()
    # clip is named and mapped, but only mtmd loads it ("CLIP cannot be used as main model").
    models = sorted(t.supported_architectures - {"clip"})
    files = {a: build_gguf(vocab_kvs("llama", arch=a), []) for a in [*models, "clip", "gptj", "made-up"]}
    verdicts = _ask(oracle, tmp_path, files)
    wrong = {a: (v.verdict, v.message[-120:]) for a, v in verdicts.items() if v.loads != (a in models)}
    assert wrong == {}


def _hparams_file(arch: str, keys: dict[str, str], drop: str) -> bytes:
    """A one-tensor model of ``arch`` with the base hyperparameters and ``keys`` (name: GGUF type), but ``drop``."""
    kvs = [kv for kv in vocab_kvs("llama", arch=arch) if kv.key != "general.type"]
    kvs += [
        kv_u32(f"{arch}.context_length", 64),
        kv_u32(f"{arch}.embedding_length", 32),
        kv_u32(f"{arch}.block_count", 1),
        kv_u32(f"{arch}.attention.head_count", 4),
        kv_u32(f"{arch}.feed_forward_length", 64),
    ]
    have = {kv.key for kv in kvs}
    for key, gtype in keys.items():
        if key == drop or key in have:
            continue
        if gtype.startswith("float32"):
            kvs.append(kv_f32(key, 1e-5))
        elif gtype == "bool":
            kvs.append(kv_bool(key, False))
        elif gtype.startswith("uint32"):
            kvs.append(kv_u32(key, 1))
        else:
            kvs.append(kv_array(key, ValueType.INT32, [0, 0, 0, 0]))
    return build_gguf([kv for kv in kvs if kv.key != drop], [Tensor("token_embd.weight", (32, 32), 0)])


# Messages of a load that got past load_hparams: the dropped key was not needed there.
_PAST_HPARAMS = ("check_tensor_dims", "wrong number of tensors", "missing tensor", "done_getting_tensors")


def test_every_required_key_is_one_the_loader_demands(oracle: Oracle, tmp_path: Path) -> None:
    """Dropping any key the tables call required stops llama.cpp in load_hparams, never later.

    (The message usually names the key; a throw or assert of load_hparams that comes first
    hides it, which is no evidence either way. A load that reaches the tensors would be.)
    """
    t = llama_tables()
    files = {}
    for arch in sorted(t.supported_architectures - {"clip"}):
        keys = {k.format(arch=arch): v for k, v in t.arch_required_keys[arch].items()}
        files |= {f"{arch} without {key}": _hparams_file(arch, keys, key) for key in keys}
    assert len(files) > 300
    paths = []
    for data in files.values():
        paths.append(tmp_path / f"{len(paths):04d}.gguf")
        paths[-1].write_bytes(data)
    answers = oracle.ask(paths)
    named = sum(1 for name, v in zip(files, answers, strict=True) if name.split(" without ")[1] in v.message)
    wrong = {
        name: (v.verdict, v.message[-100:])
        for name, v in zip(files, answers, strict=True)
        if v.loads or any(m in v.message for m in _PAST_HPARAMS)
    }
    assert wrong == {}
    assert named > 0.8 * len(files)
