"""Complete small models of any modelled architecture, built from its translated loader.

:func:`complete_model` writes the keys of a small model (64 wide, 2 blocks, 4 heads
with 2 for keys and values, a 100-odd token vocabulary; with ``moe``, 4 experts of
which 2 are used) and runs the architecture's program of
``<build>-tensors.json`` in its ``make`` mode: the tensors are exactly the required
ones, at the shapes the loader creates them with. The conformance tests ask the
oracle whether such a file loads, then drop, add and reshape its tensors.
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Mapping, Sequence, Sized
from dataclasses import dataclass, replace
from typing import Any

from gguf_audit.format import Header, ValueType, parse_header
from gguf_audit.llama import llama_tables, tensor_programs
from gguf_audit.llama.arch_stops import PRESENT, first_arch_stop
from gguf_audit.llama.hparams_env import HeaderEnv
from gguf_audit.llama.loader_sim import Unmodelled, simulate
from gguf_audit.testing.builder import KV, Tensor, build_gguf, kv_array, kv_bool, kv_f32, kv_str, kv_u32
from gguf_audit.testing.vocab import vocab_kvs

__all__ = [
    "RETAG_SOURCES",
    "Case",
    "arch_stop_cases",
    "complete_model",
    "env_of",
    "model_kvs",
    "optional_key_cases",
    "retag_cases",
    "semantic_cases",
    "variant_cases",
]

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
    "interleave_moe_layer_step": 1,  # ernie4_5-moe requires it when it has experts
}

_SSM: Mapping[str, int] = {"ssm.inner_size": 128, "ssm.state_size": 16, "ssm.conv_kernel": 4, "ssm.time_step_rank": 4}
"""A state-space block twice as wide as the model (Mamba's expansion factor), for the architectures that have one."""

_MLA: Mapping[str, int] = {
    "attention.key_length_mla": 24,
    "attention.value_length_mla": 16,
    "rope.dimension_count": 8,
    "attention.kv_lora_rank": 16,
    "attention.q_lora_rank": 16,
}
"""Multi-head latent attention (deepseek2 and its kin): the loaders assert a rope part smaller than the head."""


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


def complete_model(arch: str, *, moe: bool = False, extra: Sequence[KV] = ()) -> tuple[list[KV], list[Tensor]] | None:
    """The keys (``extra`` in place of the same keys) and tensors of a small complete ``arch`` model; None
    when its loader is unmodelled or cannot run on these keys (or stops, as for a dense model of an
    always-MoE architecture). An architecture whose loader stops without them gets MLA attention keys."""
    made = _complete(arch, moe=moe, extra=extra)
    if made is not None:
        return made
    given = {kv.key for kv in extra}
    mla = [kv_u32(f"{arch}.{k}", v) for k, v in _MLA.items() if f"{arch}.{k}" not in given]
    return _complete(arch, moe=moe, extra=[*mla, *extra])


def _complete(arch: str, *, moe: bool, extra: Sequence[KV]) -> tuple[list[KV], list[Tensor]] | None:
    programs = tensor_programs()
    spec = programs.architectures.get(arch)
    if spec is None:
        return None
    replaced = {kv.key for kv in extra}
    kvs = [kv for kv in model_kvs(arch, moe=moe) if kv.key not in replaced] + list(extra)
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


@dataclass(frozen=True, slots=True)
class Case:
    """One generated file: what llama.cpp should say, and the tensor gguf-audit's finding should name."""

    label: str
    kvs: list[KV]
    tensors: list[Tensor]
    expect: str
    """``loaded`` or ``refused``."""
    tensor: str | None = None

    def data(self) -> bytes:
        return build_gguf(self.kvs, self.tensors)


def _uncreated_name(arch: str, kvs: list[KV], tensors: list[Tensor]) -> str | None:
    """A tensor name ``arch`` has (in block 0 or global) that its loader does not create for this file."""
    programs = tensor_programs()
    have = {str(t.name) for t in tensors}
    header = parse_header(build_gguf(kvs, []), file_size=None)
    assert isinstance(header, Header)
    present = {str(t.name): tuple(t.dims) for t in tensors}
    for template in llama_tables().arch_tensors.get(arch, ()):
        name = template.format(bid=0, xid=0) + ".weight"
        if name in have or "{xid}" in template or name in llama_tables().bare_tensor_names:
            continue
        out = simulate(
            programs.architectures[arch]["program"],
            programs.helpers,
            env_of(header, arch),
            {**present, name: (64,)},
        )
        if name not in out.created and not out.missing and out.stopped is None:
            return name
    return None


def semantic_cases(arch: str) -> list[Case]:
    """For each of ``arch``'s dense and MoE models that its loader builds: the complete model (loads),
    each required global and block-0 tensor dropped, one tensor the loader does not create added,
    and the first block-0 tensor and ``output_norm.weight`` widened (all refused)."""
    cases: list[Case] = []
    for moe in (False, True):
        made = complete_model(arch, moe=moe)
        if made is None:
            continue
        kvs, tensors = made
        tag = f"{arch}-{'moe' if moe else 'dense'}"
        cases.append(Case(f"{tag} complete", kvs, tensors, "loaded"))
        for t in tensors:
            name = str(t.name)
            if not name.startswith("blk.") or name.startswith("blk.0."):
                rest = [u for u in tensors if u is not t]
                cases.append(Case(f"{tag} without {name}", kvs, rest, "refused", name))
        extra = _uncreated_name(arch, kvs, tensors)
        if extra is not None:
            cases.append(Case(f"{tag} with {extra}", kvs, [*tensors, Tensor(extra, (64,), _F32)], "refused", extra))
        first = next((t for t in tensors if str(t.name).startswith("blk.0.")), None)
        norm = next((t for t in tensors if t.name == "output_norm.weight"), None)
        for target in (first, norm):
            if target is not None:
                wide = Tensor(target.name, (target.dims[0] + 32, *target.dims[1:]), _F32)
                rest = [wide if u is target else u for u in tensors]
                cases.append(Case(f"{tag} {target.name!s} widened", kvs, rest, "refused", str(target.name)))
    return cases


def _variants(arch: str) -> dict[str, list[KV]]:
    return {
        "head_dim 8": [
            kv_u32(f"{arch}.attention.key_length", 8),
            kv_u32(f"{arch}.attention.value_length", 8),
            kv_u32(f"{arch}.rope.dimension_count", 8),
        ],
        "head_count_kv [2, 1]": [kv_array(f"{arch}.attention.head_count_kv", ValueType.INT32, [2, 1])],
        # a hybrid's recurrent layer (lfm2moe, granitehybrid): no key/value heads
        "head_count_kv [2, 0]": [kv_array(f"{arch}.attention.head_count_kv", ValueType.INT32, [2, 0])],
        "feed_forward_length [128, 96]": [kv_array(f"{arch}.feed_forward_length", ValueType.INT32, [128, 96])],
        # nemotron_h's recurrent layer: no key/value heads and no feed-forward
        "head_count_kv [2, 0], feed_forward_length [128, 0]": [
            kv_array(f"{arch}.attention.head_count_kv", ValueType.INT32, [2, 0]),
            kv_array(f"{arch}.feed_forward_length", ValueType.INT32, [128, 0]),
        ],
        "head_count_kv 4": [kv_u32(f"{arch}.attention.head_count_kv", 4)],
        "longrope": [kv_str(f"{arch}.rope.scaling.type", "longrope")],
        "block_count 3": [kv_u32(f"{arch}.block_count", 3)],
    }


def variant_cases(arch: str) -> list[Case]:
    """The complete model's tensors under edited hyperparameters (head sizes, per-layer head and
    feed-forward arrays, rope scaling, block count): llama.cpp loads the file exactly when the
    edited keys make its loader create the same tensors, as the program computes them."""
    cases: list[Case] = []
    for moe in (False, True):
        base = complete_model(arch, moe=moe)
        if base is None:
            continue
        shapes = {(str(t.name), tuple(t.dims)) for t in base[1]}
        for what, extra in _variants(arch).items():
            edited = complete_model(arch, moe=moe, extra=extra)
            if edited is None:
                continue
            same = {(str(t.name), tuple(t.dims)) for t in edited[1]} == shapes
            label = f"{arch}-{'moe' if moe else 'dense'} {what}"
            cases.append(Case(label, edited[0], base[1], "loaded" if same else "refused"))
    return cases


RETAG_SOURCES: tuple[str, ...] = ("llama", "qwen3moe", "gemma3")
"""Complete models retagged to every other architecture (:func:`retag_cases`): a dense model with tied
embeddings, a MoE model, and one with per-head norms and sliding-window keys."""


def retag_cases(sources: Sequence[str] = RETAG_SOURCES) -> list[Case]:
    """Each source's complete model under every other architecture's name, twice: ``general.architecture``
    alone changed (its keys keep the source's prefix), and the keys renamed with it, as a converter that
    mislabels a model writes it. What llama.cpp does with each is the oracle's to say (``expect`` is ``?``)."""
    cases: list[Case] = []
    for src in sources:
        made = complete_model(src) or complete_model(src, moe=True)
        if made is None:
            continue
        kvs, tensors = made
        for dst in sorted(llama_tables().architectures):
            if dst == src:
                continue
            for renamed in (False, True):
                edited = [_retagged(kv, src, dst, renamed) for kv in kvs]
                label = f"{src} as {dst}{' (keys renamed)' if renamed else ''}"
                cases.append(Case(label, edited, tensors, "?"))
    return cases


def _retagged(kv: KV, src: str, dst: str, renamed: bool) -> KV:
    if kv.key == "general.architecture":
        return replace(kv, value=dst)
    if renamed and isinstance(kv.key, str) and kv.key.startswith(src + "."):
        return replace(kv, key=dst + kv.key[len(src) :])
    return kv


_STOP_CANDIDATES: Mapping[str, tuple[object, ...]] = {
    "uint32": (0, 1, 2, 3, 4, 64),
    "int32": (0, 1, 2, 3, 4, 64),
    "float32": (-5.0, 0.0, 1.0),
    "bool": (False, True),
}


def _typed_kv(key: str, type_name: str, value: object) -> KV:
    if type_name == "float32":
        return kv_f32(key, float(str(value)))
    if type_name == "bool":
        return kv_bool(key, bool(value))
    return kv_u32(key, int(str(value)))


def arch_stop_cases() -> list[Case]:
    """For every translated stop of an architecture's ``load_arch_hparams`` (``hparams_stops``): the small
    model with the keys that stop reads set so that it is the first to fire (``aborted`` for an assert,
    ``refused`` for a throw); then, the keys of every stop set so that none fires though they differ from
    the model's (``loaded`` with the complete model of a modelled architecture, else ``?``: its tensors are
    the oracle's to judge). The values are found by trying small ones against the translation; the oracle
    decides."""
    cases: list[Case] = []
    for arch, spec in sorted(tensor_programs().hparams_stops.items()):
        made = complete_model(arch) or complete_model(arch, moe=True)
        kvs, tensors = made if made is not None else (model_kvs(arch), _embedding_only(arch))
        shown: list[str] = []
        for stop in spec["stops"]:
            if "program" not in stop:
                break  # the runner judges nothing past a stop it cannot run
            said = _program_said(stop["program"])
            fired, through = _stop_values(arch, spec, stop, kvs)
            if fired is not None:
                expect = "refused" if said.startswith("throw: ") else "aborted"
                cases.append(Case(f"{arch} fires: {said[:70]} with {fired[1]}", fired[0], tensors, expect))
            if through is None:
                break
            kvs = through[0]
            shown.append(through[1])
        if shown and _first_stop(arch, kvs) is None:
            expect = "loaded" if made is not None else "?"
            cases.append(Case(f"{arch} passes with {'; '.join(shown)}", kvs, tensors, expect))
    return cases


def _embedding_only(arch: str) -> list[Tensor]:
    """The token embedding of ``arch``'s small model alone: a model file (not vocabulary-only) whose loader
    is unmodelled; llama.cpp stops on its hyperparameters before it asks for a tensor."""
    header = parse_header(build_gguf(model_kvs(arch), []), file_size=None)
    assert isinstance(header, Header)
    tokens = header.metadata["tokenizer.ggml.tokens"].value
    assert isinstance(tokens, Sized)
    return [Tensor("token_embd.weight", (_BASE["embedding_length"], len(tokens)), _F32)]


def _first_stop(arch: str, kvs: list[KV]) -> str | None:
    header = parse_header(build_gguf(kvs, []), file_size=None)
    assert isinstance(header, Header)
    got = first_arch_stop(header, arch, lambda after, optional: True)
    return None if got is None else ("throw: " if got.throws else "") + got.said


def _knobs(
    arch: str, spec: Mapping[str, Any], program: Any, defaults: dict[str, object]
) -> list[tuple[str, list[KV | None]]]:
    """The keys a stop's ``program`` reads, each with the values to try (None: the key left out): small
    values for a field it reads (its initial value put in ``defaults``), absent or present for a key it
    asks about."""
    text = json.dumps(program)
    knobs: list[tuple[str, list[KV | None]]] = []
    for f in sorted(spec["types"]):
        if f"hparams.{f}" in text:
            type_name, default = spec["types"][f]
            key = spec["fields"][f].format(arch=arch)
            knobs.append((key, [_typed_kv(key, type_name, v) for v in _STOP_CANDIDATES[type_name]]))
            defaults[key] = default
    for template, type_name in sorted(set(re.findall(rf'"{PRESENT}([^"]+):(\w+)"', text))):
        key = template.format(arch=arch)
        knobs.append((key, [None, _typed_kv(key, type_name, 1e-5 if type_name == "float32" else 1)]))
    return knobs


def _stop_values(
    arch: str, spec: Mapping[str, Any], stop: Mapping[str, Any], kvs: list[KV]
) -> tuple[tuple[list[KV], str] | None, tuple[list[KV], str] | None]:
    """Keys (and their values, shown) making ``stop`` the first to fire, and keys of other values than
    ``kvs``' with which it does not fire (a later stop may)."""
    said = _program_said(stop["program"])
    fired = through = None
    base = {kv.key: kv for kv in kvs}
    defaults: dict[str, object] = {}
    knobs = _knobs(arch, spec, stop["program"], defaults)
    keys = {key for key, _ in knobs}
    for choice in itertools.product(*(values for _, values in knobs)):
        if all(
            (kv is None and key not in base) or (kv is not None and key in base and base[key].value == kv.value)
            for (key, _), kv in zip(knobs, choice, strict=True)
        ):
            continue
        edited = [kv for kv in kvs if kv.key not in keys] + [kv for kv in choice if kv is not None]
        got = _first_stop(arch, edited)
        text = ", ".join(
            f"{key}={'absent' if kv is None else kv.value}" for (key, _), kv in zip(knobs, choice, strict=True)
        )
        if got == said and fired is None:
            fired = (edited, text)
        elif (
            got != said
            and through is None
            and not any(kv is not None and defaults.get(str(kv.key)) == kv.value for kv in choice)
        ):
            through = (edited, text)
        if fired is not None and through is not None:
            break
    return fired, through


def _program_said(node: Any) -> str:
    """The message of the one ``stop`` statement in a stop's program."""
    if isinstance(node, list) and node:
        if node[0] == "stop":
            return str(node[1])
        for part in node:
            said = _program_said(part)
            if said:
                return said
    return ""


def optional_key_cases() -> list[Case]:
    """Each key an architecture's ``load_arch_hparams`` always reads without requiring it
    (``arch_optional_key_types``), stored as another type in its small model (a string; a number for a
    string key): ``get_key`` throws 'wrong type' for it all the same, so llama.cpp refuses the file
    (or stops earlier, on an assert before the read: the oracle says which)."""
    cases: list[Case] = []
    for arch, keys in sorted(llama_tables().arch_optional_key_types.items()):
        made = complete_model(arch) or complete_model(arch, moe=True)
        kvs, tensors = made if made is not None else (model_kvs(arch), _embedding_only(arch))
        for template, type_name in sorted(keys.items()):
            key = template.format(arch=arch)
            wrong = kv_u32(key, 1) if type_name == "string" else kv_str(key, "x")
            edited = [kv for kv in kvs if kv.key != key] + [wrong]
            shown = "uint32" if type_name == "string" else "string"
            cases.append(Case(f"{arch} {key} ({type_name}) as {shown}", edited, tensors, "refused"))
    return cases
