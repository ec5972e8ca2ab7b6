"""Complete small models of any modelled architecture, built from its translated loader.

:func:`complete_model` writes the keys of a small model (64 wide, 2 blocks, 4 heads
with 2 for keys and values, a 100-odd token vocabulary; with ``moe``, 4 experts of
which 2 are used) and runs the architecture's program of
``<build>-tensors.json`` in its ``make`` mode: the tensors are exactly the required
ones, at the shapes the loader creates them with. The conformance tests ask the
oracle whether such a file loads, then drop, add and reshape its tensors.
"""

from __future__ import annotations

from collections.abc import Mapping

from gguf_audit.format import Header, ValueType, parse_header
from gguf_audit.llama import llama_tables, tensor_programs
from gguf_audit.llama.hparams_env import HeaderEnv
from gguf_audit.llama.loader_sim import Unmodelled, simulate
from gguf_audit.testing.builder import KV, Tensor, build_gguf, kv_array, kv_bool, kv_f32, kv_u32
from gguf_audit.testing.vocab import vocab_kvs

__all__ = ["complete_model", "model_kvs"]

_F32 = 0

_BASE: Mapping[str, int] = {
    "context_length": 256,
    "embedding_length": 64,
    "block_count": 2,
    "attention.head_count": 4,
    "attention.head_count_kv": 2,
    "feed_forward_length": 128,
}
_MOE: Mapping[str, int] = {
    "expert_count": 4,
    "expert_used_count": 2,
    "expert_feed_forward_length": 32,
    "expert_shared_feed_forward_length": 32,
}

_SSM: Mapping[str, int] = {"ssm.inner_size": 128, "ssm.state_size": 16, "ssm.conv_kernel": 4, "ssm.time_step_rank": 4}
"""A state-space block twice as wide as the model (Mamba's expansion factor), for the architectures that have one."""


def model_kvs(arch: str, *, moe: bool = False) -> list[KV]:
    """The keys of a small ``arch`` model: the base hyperparameters and every key its loader requires."""
    kvs = [kv for kv in vocab_kvs("llama", arch=arch) if kv.key != "general.type"]
    values = {**_BASE, **(_MOE if moe else {})}
    kvs += [kv_u32(f"{arch}.{k}", v) for k, v in values.items()]
    kvs += [
        kv_f32(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5),
        kv_f32(f"{arch}.attention.layer_norm_epsilon", 1e-5),
    ]
    kvs += [kv_u32("tokenizer.ggml.token_type_count", 2)]
    kvs += [kv_u32(f"{arch}.{k}", v) for k, v in _SSM.items()]
    have = {kv.key for kv in kvs}
    for template, gtype in llama_tables().arch_required_keys.get(arch, {}).items():
        key = template.format(arch=arch)
        if key in have:
            continue
        if key.endswith("rope.dimension_sections"):
            kvs.append(kv_array(key, ValueType.INT32, [4, 2, 2, 0]))
        elif gtype.startswith("float32"):
            kvs.append(kv_f32(key, 1.0))
        elif gtype == "bool":
            kvs.append(kv_bool(key, False))
        elif gtype.startswith("uint32") or gtype.startswith("int32"):
            kvs.append(kv_u32(key, 1))
        else:
            kvs.append(kv_array(key, ValueType.INT32, [0] * _BASE["block_count"]))
    return kvs


def env_of(header: Header, arch: str) -> HeaderEnv:
    spec = tensor_programs().architectures[arch]
    return HeaderEnv(header, arch, spec["fields"], spec["computed"], tensor_programs().defaults)


def complete_model(arch: str, *, moe: bool = False) -> tuple[list[KV], list[Tensor]] | None:
    """The keys and tensors of a small complete ``arch`` model; None when its loader is unmodelled
    or cannot run on these keys (or stops, as for a dense model of an always-MoE architecture)."""
    programs = tensor_programs()
    spec = programs.architectures.get(arch)
    if spec is None:
        return None
    kvs = model_kvs(arch, moe=moe)
    header = parse_header(build_gguf(kvs, []), file_size=None)
    assert isinstance(header, Header)
    made: dict[str, tuple[int, ...]] = {}
    try:
        out = simulate(spec["program"], programs.helpers, env_of(header, arch), {}, make=made)
    except Unmodelled:
        return None
    if out.stopped is not None or any(d <= 0 for shape in made.values() for d in shape):
        return None
    return kvs, [Tensor(name, shape, _F32) for name, shape in made.items()]
