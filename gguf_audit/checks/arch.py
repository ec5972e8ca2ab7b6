"""What gguf-audit knows about each model architecture, from the pinned llama.cpp (and the gguf package).

Two levels of knowledge:

- For **every** architecture the pinned llama.cpp builds a model of
  (:func:`gguf_audit.llama.llama_tables`, generated from its ``src/llama-model.cpp``
  and ``src/models/``), the tensor names it may hold: those its model class names,
  with the ones the gguf package lists for it (the package keeps a few legacy
  names), and the hyperparameters llama.cpp reads for all of them (context and
  embedding length, block count). A name outside both lists is one llama.cpp never
  creates, so its loader ends on "wrong number of tensors".
- For a **curated** set whose cases in ``llama_model::load_tensors`` this module mirrors
  (llama, qwen2, qwen3, qwen2moe, qwen3moe, gemma 1 to 3, phi3): the tensors created
  with flag 0 (so a missing one is "missing tensor"; a subset, never an optional one)
  and the shape each must have (``check_tensor_dims``: "tensor 'x' has wrong shape").
- For the architectures listed in ``_NORM_EPS_KEY``, the norm epsilon key their case
  of ``load_hparams`` reads as required.

For an architecture outside the curated set only ``token_embd`` is required: its
per-block layout (fused QKV, hybrid attention/SSM layers, dense-then-MoE layers)
varies too much to claim more without reading its loader.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import StrEnum
from functools import cache, lru_cache
from typing import Final

from gguf_audit.gguf_constants import MODEL_ARCH_NAMES, MODEL_TENSORS, TENSOR_NAMES, Keys
from gguf_audit.llama import llama_tables

__all__ = [
    "KNOWN_ARCHITECTURES",
    "NON_MODEL_ARCHITECTURES",
    "ArchSpec",
    "ShapeFamily",
    "arch_key",
    "arch_spec",
    "block_index",
    "is_known_tensor_name",
]

KNOWN_ARCHITECTURES: Final[frozenset[str]] = llama_tables().supported_architectures
"""Every ``general.architecture`` the pinned llama.cpp builds a model of (``clip`` included: mtmd loads it)."""

NON_MODEL_ARCHITECTURES: Final[frozenset[str]] = frozenset({"clip", "controlvector"})
"""Architectures of files that are not language models: ``clip`` (multimodal
projectors, loaded by mtmd, not ``llama_model``) and ``controlvector`` (loaded
by ``llama_control_vector_load``). Their keys and tensors follow other rules."""


class ShapeFamily(StrEnum):
    """How the per-block tensor shapes of a curated architecture are computed."""

    LLAMA = "llama"
    """Separate Q, K, V: attn_q [n_embd, n_head*head_k], attn_k [n_embd, n_head_kv*head_k],
    attn_v [n_embd, n_head_kv*head_v], attn_output [n_head*head_k, n_embd],
    ffn_gate/ffn_up [n_embd, n_ff], ffn_down [n_ff, n_embd]."""
    PHI3 = "phi3"
    """Fused: attn_qkv [n_embd, n_embd + 2*n_head_kv*head_k], attn_output [n_embd, n_embd],
    ffn_up [n_embd, 2*n_ff] (gate and up stacked), ffn_down [n_ff, n_embd]."""


_RMS_EPS: Final = Keys.Attention.LAYERNORM_RMS_EPS
_LN_EPS: Final = Keys.Attention.LAYERNORM_EPS

# The norm epsilon each architecture's case of llama_model::load_hparams reads with
# required=true (a missing one throws "key not found in model"). Only cases known
# here; the others are not checked.
_NORM_EPS_KEY: Final[dict[str, str]] = {
    **dict.fromkeys(
        (
            "llama", "baichuan", "qwen", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "phi3",
            "gemma", "gemma2", "gemma3", "internlm2", "refact", "xverse", "deepseek", "deepseek2",
            "minicpm", "olmo2", "granite", "mamba", "chatglm", "glm4",
        ),
        _RMS_EPS,
    ),
    **dict.fromkeys(
        (
            "falcon", "gpt2", "gptneox", "starcoder", "starcoder2", "bloom", "mpt", "stablelm",
            "phi2", "bert", "nomic-bert", "jina-bert-v2", "command-r",
        ),
        _LN_EPS,
    ),
}  # fmt: skip

_LLAMA_BLOCK: Final = ("attn_norm", "attn_q", "attn_k", "attn_v", "attn_output", "ffn_norm")
_DENSE_FFN: Final = ("ffn_gate", "ffn_up", "ffn_down")


@dataclass(frozen=True, slots=True)
class ArchSpec:
    """What gguf-audit checks for one architecture."""

    name: str
    norm_eps_key: str | None = None
    """``{arch}.attention.layer_norm[_rms]_epsilon`` when llama.cpp requires it."""
    family: ShapeFamily | None = None
    """Set for the curated architectures whose shapes are checked."""
    required_global: tuple[str, ...] = ("token_embd.weight",)
    required_block: tuple[str, ...] = ()
    """Tensor bases (``attn_q``) every ``blk.N`` needs, as ``blk.N.<base>.weight``."""
    required_dense: tuple[str, ...] = ()
    """Per block when the model has no experts (``{arch}.expert_count`` absent or 0)."""
    required_moe: tuple[str, ...] = ()
    """Per block when it has experts. The ``*_exps`` tensors are not listed: llama's own
    case creates them as optional, and their per-layer sizes are not checked."""
    always_moe: bool = False
    """The architecture is mixture-of-experts in every block (qwen2moe, qwen3moe)."""
    requires_heads: bool = False
    """``{arch}.attention.head_count`` is needed: without it every attention shape
    is computed with zero heads and the first one fails llama.cpp's shape check."""
    requires_ff: bool = False
    """``{arch}.feed_forward_length`` is needed (dense FFN shapes use it)."""
    may_skip_blocks: bool = False
    """Some blocks may legitimately hold no tensor at all (deci's no-op layers)."""

    @property
    def curated(self) -> bool:
        return self.family is not None


def _llama_like(name: str, *, moe: bool = False, always_moe: bool = False) -> ArchSpec:
    return ArchSpec(
        name=name,
        norm_eps_key=_NORM_EPS_KEY[name],
        family=ShapeFamily.LLAMA,
        required_global=("token_embd.weight", "output_norm.weight"),
        required_block=_LLAMA_BLOCK,
        required_dense=() if always_moe else _DENSE_FFN,
        # llama.cpp creates ffn_gate_inp with flag 0 in every MoE case it has.
        required_moe=("ffn_gate_inp",) if moe or always_moe else (),
        always_moe=always_moe,
        requires_heads=True,
        requires_ff=not always_moe,
    )


_CURATED: Final[dict[str, ArchSpec]] = {
    # llama's case also covers Mixtral-style MoE files (expert_count > 0).
    "llama": _llama_like("llama", moe=True),
    "qwen2": _llama_like("qwen2"),
    "qwen3": _llama_like("qwen3"),
    "qwen2moe": _llama_like("qwen2moe", always_moe=True),
    "qwen3moe": _llama_like("qwen3moe", always_moe=True),
    "gemma": _llama_like("gemma"),
    "gemma2": _llama_like("gemma2"),
    "gemma3": _llama_like("gemma3"),
    "phi3": ArchSpec(
        name="phi3",
        norm_eps_key=_RMS_EPS,
        family=ShapeFamily.PHI3,
        required_global=("token_embd.weight", "output_norm.weight"),
        # attn_qkv is optional in llama.cpp's phi3 case (separate q/k/v are accepted).
        required_block=("attn_norm", "attn_output", "ffn_norm", "ffn_up", "ffn_down"),
        requires_heads=True,
        requires_ff=True,
    ),
}


@cache
def arch_spec(name: str) -> ArchSpec | None:
    """The spec of architecture ``name``; None when the pinned llama.cpp does not load it."""
    if name in _CURATED:
        return _CURATED[name]
    if name not in KNOWN_ARCHITECTURES or name in NON_MODEL_ARCHITECTURES:
        return None
    return ArchSpec(name=name, norm_eps_key=_NORM_EPS_KEY.get(name), may_skip_blocks=name == "deci")


def arch_key(template: str, arch: str) -> str:
    """``arch_key(Keys.LLM.CONTEXT_LENGTH, "llama")`` is ``"llama.context_length"``."""
    return template.format(arch=arch)


_BLOCK: Final = re.compile(r"blk\.(\d+)\.")


@lru_cache(maxsize=1 << 16)
def block_index(name: str) -> int | None:
    """N for a tensor named ``blk.N.<...>``, else None (kept per name: every file of an architecture
    repeats the same names, and several checks ask of each)."""
    m = _BLOCK.match(name)
    return int(m.group(1)) if m else None


# Names llama.cpp accepts that the gguf package no longer lists: Mixtral files written before
# the experts were merged (2024) hold one tensor per expert, blk.N.ffn_gate.X.weight; llama's
# case still creates them as views of the merged tensor (LLM_TENSOR_FFN_*_EXP).
_EXTRA_TENSOR_NAMES: Final[dict[str, tuple[str, ...]]] = {
    "llama": ("blk.{bid}.ffn_gate.{xid}", "blk.{bid}.ffn_down.{xid}", "blk.{bid}.ffn_up.{xid}"),
}


def _template_pattern(template: str) -> str:
    return re.escape(template).replace(r"\{bid\}", r"\d+").replace(r"\{xid\}", r"\d+")


@cache
def _name_pattern(arch: str) -> re.Pattern[str] | None:
    pinned = llama_tables().arch_tensors.get(arch)
    if pinned is None:
        return None
    members = {a for a, n in MODEL_ARCH_NAMES.items() if n == arch}
    wheel = {TENSOR_NAMES[t] for a in members for t in MODEL_TENSORS.get(a, ())}
    names = set(pinned) | wheel | set(_EXTRA_TENSOR_NAMES.get(arch, ()))
    bases = sorted(names, key=len, reverse=True)
    alternatives = "|".join(_template_pattern(b) for b in bases)
    # A base with one of the suffixes the loaders use (.weight, .bias, .scale, ...), or alone for the few
    # tensors a loader creates bare (``blk.0.ssm_a``), or a name only the gguf wheel lists; any other name
    # is one llama.cpp never creates.
    suffixes = "|".join(re.escape(s) for s in sorted(llama_tables().tensor_suffixes))
    bare = sorted((llama_tables().bare_tensor_names & names) | (names - llama_tables().tensor_names))
    bare_alternatives = "|".join(_template_pattern(b) for b in bare) or "(?!)"
    return re.compile(rf"(?:{alternatives})\.(?:{suffixes})|(?:{bare_alternatives})")


@lru_cache(maxsize=1 << 16)
def is_known_tensor_name(arch: str, name: str) -> bool | None:
    """Whether ``name`` is one of ``arch``'s tensors; None when ``arch`` is unknown."""
    pattern = _name_pattern(arch)
    if pattern is None:
        return None
    return pattern.fullmatch(name) is not None
