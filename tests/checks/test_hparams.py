"""The hyperparameter invariants of load_hparams (b11312): each class found, and its verdict the oracle's.

Every case is a tiny llama-like model with one defect. The oracle (llama-verdict,
the pinned build) is asked about all of them in one call; a case passes when
gguf-audit reports the expected code and the file's verdict (the worst of its
findings) is the one llama.cpp gives: ``aborted`` is ``aborts``. A seeded sweep
of 150 models with random values of those hyperparameters (and mistyped or missing
keys read before them, duplicate tokens behind them) checks the whole audit's verdict
the same way.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path

import pytest
from tiny_model import Model, V, parse, tiny, write

from gguf_audit.audit import AuditConfig, audit_file
from gguf_audit.checks.header import check_semantics
from gguf_audit.codes import CODES, LlamaCpp
from gguf_audit.findings import Finding, llama_cpp_verdict
from gguf_audit.testing.oracle import Oracle, Stage, find_oracle

_ORACLE_VERDICT = {"loaded": LlamaCpp.LOADS, "refused": LlamaCpp.REFUSES, "aborted": LlamaCpp.ABORTS}


def _llama(**keys: tuple[object, V]) -> Model:
    m = tiny()
    for key, (value, vtype) in keys.items():
        m.set(f"llama.{key}", value, vtype)
    return m


def _extra(
    names: list[object], prec: list[object] | None = None, prec_type: V = V.BOOL, names_type: V = V.STRING
) -> Model:
    m = tiny().set("general.tensor_extra.name", names, V.ARRAY, names_type)
    return m if prec is None else m.set("general.tensor_extra.prec_a4", prec, V.ARRAY, prec_type)


# name: (the model, the code expected, or None for a file that must load clean)
CASES: dict[str, tuple[Callable[[], Model], str | None]] = {
    "valid": (tiny, None),
    "block_count 0": (lambda: _llama(block_count=(0, V.UINT32)), "hparams.block_count_out_of_range"),
    "block_count 513": (lambda: _llama(block_count=(513, V.UINT32)), "hparams.block_count_out_of_range"),
    "nextn 3 of 2 blocks": (lambda: _llama(nextn_predict_layers=(3, V.UINT32)), "hparams.nextn_past_block_count"),
    "nextn 1 of 2 blocks, both with tensors": (
        lambda: _llama(nextn_predict_layers=(1, V.UINT32)),
        "hparams.nextn_blocks_not_loaded",
    ),
    "nextn 1 of 3 blocks, 2 with tensors": (
        lambda: _llama(nextn_predict_layers=(1, V.UINT32), block_count=(3, V.UINT32)),
        None,
    ),
    "block_count 0, context_length missing first": (
        lambda: _llama(block_count=(0, V.UINT32)).drop("{arch}.context_length"),
        "meta.missing_key",
    ),
    "rope 'dynamic', feed_forward_length a string first": (
        lambda: _llama(**{"rope.scaling.type": ("dynamic", V.STRING), "feed_forward_length": ("64", V.STRING)}),
        "meta.wrong_type",
    ),
    "expert_count 1025, expert_used_count a float first": (
        lambda: _llama(expert_count=(1025, V.UINT32), expert_used_count=(2.0, V.FLOAT32)),
        "meta.wrong_type",
    ),
    "duplicate token, but the norm epsilon missing first": (
        lambda: (
            tiny()
            .drop("{arch}.attention.layer_norm_rms_epsilon")
            .set("tokenizer.ggml.tokens", ["<unk>", "<s>", "</s>"] + ["t3"] * 61, V.ARRAY, V.STRING)
        ),
        "meta.missing_key",
    ),
    "duplicate token in a model": (
        lambda: tiny().set("tokenizer.ggml.tokens", ["<unk>", "<s>", "</s>"] + ["t3"] * 61, V.ARRAY, V.STRING),
        "tokenizer.duplicate_token",
    ),
    "expert_count 1025": (
        lambda: _llama(expert_count=(1025, V.UINT32), expert_used_count=(2, V.UINT32)),
        "hparams.too_many_experts",
    ),
    "expert_used 3 of 2": (
        lambda: _llama(expert_count=(2, V.UINT32), expert_used_count=(3, V.UINT32)),
        "hparams.expert_used_count",
    ),
    "expert_used absent with 2 experts": (lambda: _llama(expert_count=(2, V.UINT32)), "hparams.expert_used_count"),
    "expert_used 1 without experts": (lambda: _llama(expert_used_count=(1, V.UINT32)), "hparams.expert_used_count"),
    "expert_used per layer, 3 of 2": (
        lambda: tiny().set("llama.expert_count", 2, V.UINT32).set("llama.expert_used_count", [1, 3], V.ARRAY, V.INT32),
        "hparams.expert_used_count",
    ),
    "expert_used per layer, all 0": (
        lambda: tiny().set("llama.expert_count", 0, V.UINT32).set("llama.expert_used_count", [0, 0], V.ARRAY, V.INT32),
        None,
    ),
    "4 groups of 4 experts": (
        lambda: _llama(expert_count=(4, V.UINT32), expert_used_count=(2, V.UINT32), expert_group_count=(4, V.UINT32)),
        "hparams.expert_groups",
    ),
    "a group without experts": (lambda: _llama(expert_group_count=(1, V.UINT32)), "hparams.expert_groups"),
    "hunyuan-dense: one expert is none, groups still asserted": (
        lambda: (
            tiny("hunyuan-dense")
            .set("hunyuan-dense.expert_count", 1, V.UINT32)
            .set("hunyuan-dense.expert_used_count", 3, V.UINT32)
            .set("hunyuan-dense.expert_group_count", 4, V.UINT32)
        ),
        "hparams.expert_groups",
    ),
    "2 groups, none used": (
        lambda: _llama(expert_count=(4, V.UINT32), expert_used_count=(2, V.UINT32), expert_group_count=(2, V.UINT32)),
        "hparams.expert_groups",
    ),
    "rope scaling 'dynamic'": (
        lambda: _llama(**{"rope.scaling.type": ("dynamic", V.STRING)}),
        "hparams.unknown_rope_scaling",
    ),
    "rope scaling 'yarn'": (lambda: _llama(**{"rope.scaling.type": ("yarn", V.STRING)}), None),
    "rope scaling as uint32": (lambda: _llama(**{"rope.scaling.type": (1, V.UINT32)}), "meta.wrong_type"),
    "llama n_rot 4 of head size 8": (
        lambda: _llama(**{"rope.dimension_count": (4, V.UINT32)}),
        "hparams.bad_n_rot",
    ),
    "llama n_rot 8 of head size 8": (lambda: _llama(**{"rope.dimension_count": (8, V.UINT32)}), None),
    "llama n_rot 16 of key_length 16": (
        lambda: _llama(**{"rope.dimension_count": (16, V.UINT32), "attention.key_length": (16, V.UINT32)}),
        "tensor.wrong_shape",
    ),
    "qwen2 n_rot 4 (not checked there)": (
        lambda: tiny("qwen2").set("qwen2.rope.dimension_count", 4, V.UINT32),
        None,
    ),
    "tensor_extra without prec_a4": (lambda: _extra(["output.weight"]), "hparams.tensor_extra"),
    "tensor_extra with prec_a4": (lambda: _extra(["output.weight"], [True]), None),
    "tensor_extra, prec_a4 too long": (lambda: _extra(["output.weight"], [True, False]), "hparams.tensor_extra"),
    "tensor_extra, prec_a4 int32": (lambda: _extra(["output.weight"], [1], V.INT32), "hparams.tensor_extra"),
    "tensor_extra names of int32": (lambda: _extra([1], [True], names_type=V.INT32), "hparams.tensor_extra"),
    "tensor_extra name a string": (lambda: tiny().set("general.tensor_extra.name", "output.weight", V.STRING), None),
}


@pytest.fixture(scope="module")
def oracle() -> Oracle:
    found = find_oracle()
    if found is None:
        pytest.skip("the llama.cpp oracle (../shared/llama.cpp/bin/llama-verdict) is not here")
    return found


def _findings(tmp: Path) -> dict[str, tuple[Path, list[Finding]]]:
    out = {}
    for i, (name, (make, _)) in enumerate(CASES.items()):
        path = tmp / f"{i:03d}.gguf"
        write(make(), path)
        out[name] = (path, list(check_semantics(parse(path), url=str(path))))
    return out


def test_each_class_is_found(tmp_path: Path) -> None:
    for name, (_, found) in _findings(tmp_path).items():
        code = CASES[name][1]
        codes = [f.code for f in found]
        assert (code in codes) if code else codes == [], (name, codes)


def test_each_verdict_is_the_oracles(tmp_path: Path, oracle: Oracle) -> None:
    cases = _findings(tmp_path)
    verdicts = oracle.ask([path for path, _ in cases.values()], stage=Stage.MODEL)
    wrong = {}
    for (name, (_, found)), answer in zip(cases.items(), verdicts, strict=True):
        code = CASES[name][1]
        expected = _ORACLE_VERDICT[answer.verdict]
        if llama_cpp_verdict(found) is not expected or (code and CODES[code].llama_cpp is not expected):
            wrong[name] = (answer.verdict, answer.message[-100:], [f.code for f in found])
    assert wrong == {}


def _sweep_model(rng: random.Random) -> Model:
    """A tiny llama or qwen2 model with a random few of the hyperparameters load_hparams asserts on."""
    arch = rng.choice(["llama", "qwen2"])
    m = tiny(arch)
    choices: dict[str, list[object]] = {
        "block_count": [0, 1, 2, 3, 512, 513],
        "nextn_predict_layers": [0, 1, 2, 3],
        "expert_count": [0, 1, 2, 4, 1024, 1025],
        "expert_used_count": [0, 1, 2, 3, 5],
        "expert_group_count": [0, 1, 2, 4],
        "expert_group_used_count": [0, 1, 2],
        "rope.scaling.type": ["none", "linear", "yarn", "longrope", "dynamic", ""],
        "rope.dimension_count": [4, 8, 16],
    }
    for key, values in choices.items():
        if rng.random() < 0.35:
            value = rng.choice(values)
            m.set(f"{arch}.{key}", value, V.STRING if isinstance(value, str) else V.UINT32)
    # What llama.cpp throws on before its asserts, and a vocabulary abort behind them.
    if rng.random() < 0.2:
        key = rng.choice(["feed_forward_length", "expert_used_count", "context_length", "attention.head_count_kv"])
        m.set(f"{arch}.{key}", "x", V.STRING)
    if rng.random() < 0.15:
        m.drop(rng.choice(["{arch}.context_length", "{arch}.attention.layer_norm_rms_epsilon"]))
    if rng.random() < 0.15:
        m.set("tokenizer.ggml.tokens", ["<unk>", "<s>", "</s>"] + ["t3"] * 61, V.ARRAY, V.STRING)
    return m


def test_a_seeded_sweep_agrees_with_the_oracle(tmp_path: Path, oracle: Oracle) -> None:
    """150 models with random hparams (seeded): audit_file's verdict is llama.cpp's for every one."""
    rng = random.Random(18)
    paths = []
    for i in range(150):
        paths.append(tmp_path / f"{i:03d}.gguf")
        write(_sweep_model(rng), paths[-1])
    wrong = {}
    for path, answer in zip(paths, oracle.ask(paths), strict=True):
        audit = audit_file(str(path), config=AuditConfig())
        if llama_cpp_verdict(audit.findings) is not _ORACLE_VERDICT[answer.verdict]:
            wrong[path.name] = (answer.verdict, answer.message[-100:], sorted({f.code for f in audit.findings}))
    assert wrong == {}
