"""The name tables of the pinned llama.cpp build, shipped as data (``<build>.json`` beside this module).

:func:`llama_tables` loads them once. They are generated from llama.cpp's own
source by :mod:`gguf_audit.llama.generate` (run only to re-pin); the package never
needs that source. ``tests/llama/`` compares them with what the oracle loads.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from types import MappingProxyType
from typing import Any, Final

from gguf_audit.codes import LLAMA_CPP_BUILD

__all__ = ["BUILD", "LlamaTables", "TensorPrograms", "llama_tables", "tensor_programs"]

BUILD: Final = LLAMA_CPP_BUILD
"""The llama.cpp build the shipped tables (and the finding registry's verdicts) describe."""


@dataclass(frozen=True, slots=True)
class LlamaTables:
    """What one llama.cpp build knows by name, and its hyperparameter bounds."""

    build: str
    commit: str
    max_layers: int
    """``LLAMA_MAX_LAYERS``: ``{arch}.block_count`` must be 1 to this (``GGML_ASSERT`` in ``load_hparams``)."""
    max_experts: int
    """``LLAMA_MAX_EXPERTS``: the most ``{arch}.expert_count`` may be (``GGML_ASSERT``)."""
    architectures: frozenset[str]
    """``LLM_ARCH_NAMES``: every ``general.architecture`` the build can name."""
    arch_tensors: Mapping[str, tuple[str, ...]]
    """The architectures ``llama_model_mapping`` builds a model for, each with the tensor
    names (``blk.{bid}.attn_q``) its loader may create."""
    mtp_architectures: frozenset[str]
    """The architectures whose loader reads the last ``{arch}.nextn_predict_layers`` blocks (MTP);
    the others create no tensor there."""
    arch_required_keys: Mapping[str, Mapping[str, str]]
    """Per architecture, the keys its ``load_arch_hparams`` always requires, each with its GGUF type
    (``uint32``, ``float32``, ``bool``; ``uint32|array`` a value or per-layer array; ``array`` or ``?``
    when the generator could not tell)."""
    arch_optional_key_types: Mapping[str, Mapping[str, str]]
    """Per architecture, the scalar keys its ``load_arch_hparams`` always reads but does not require, each
    with the one GGUF type it reads (another type throws 'wrong type' all the same)."""
    keys: frozenset[str]
    """``LLM_KV_NAMES``, ``{arch}`` where the architecture goes."""
    hparams_key_types: Mapping[str, str]
    """Keys ``load_hparams`` reads for every architecture, each with the GGUF type it insists on
    (``uint32``; ``uint32|array`` for a value or a per-layer array)."""
    tensor_names: frozenset[str]
    """``LLM_TENSOR_NAMES``: ``{bid}`` the block, ``{xid}`` the expert."""
    rope_scaling_types: frozenset[str]
    """``LLAMA_ROPE_SCALING_TYPES``: the values ``{arch}.rope.scaling.type`` may take."""
    bare_tensor_names: frozenset[str]
    """The tensor names (templates) some loader creates with no suffix (``blk.{bid}.ssm_a``, ``d2t``)."""
    tensor_suffixes: frozenset[str]
    """The suffixes the loaders give a tensor base (``weight``, ``bias``, ``scale``, ...): any other name is
    one llama.cpp never creates, so the file ends on 'wrong number of tensors'."""
    tokenizer_models: frozenset[str]
    """The ``tokenizer.ggml.model`` values ``llama_vocab::load`` accepts."""
    tokenizer_models_needing_merges: frozenset[str]
    """The models it throws 'cannot find tokenizer merges' for when ``tokenizer.ggml.merges`` is missing."""
    bpe_pre_tokenizers: frozenset[str]
    """The ``tokenizer.ggml.pre`` names its BPE branch accepts."""

    @property
    def supported_architectures(self) -> frozenset[str]:
        """The architectures the build loads a model of (some it names, it does not build)."""
        return frozenset(self.arch_tensors)

    @classmethod
    def from_json(cls, doc: Mapping[str, Any]) -> LlamaTables:
        return cls(
            build=str(doc["build"]),
            commit=str(doc["commit"]),
            max_layers=int(doc["max_layers"]),
            max_experts=int(doc["max_experts"]),
            architectures=frozenset(doc["architectures"]),
            arch_tensors=MappingProxyType({str(k): tuple(v) for k, v in doc["arch_tensors"].items()}),
            mtp_architectures=frozenset(doc["mtp_architectures"]),
            arch_required_keys=MappingProxyType(
                {str(a): MappingProxyType(dict(keys)) for a, keys in doc["arch_required_keys"].items()}
            ),
            arch_optional_key_types=MappingProxyType(
                {str(a): MappingProxyType(dict(keys)) for a, keys in doc.get("arch_optional_key_types", {}).items()}
            ),
            keys=frozenset(doc["keys"]),
            hparams_key_types=MappingProxyType(dict(doc["hparams_key_types"])),
            tensor_names=frozenset(doc["tensor_names"]),
            rope_scaling_types=frozenset(doc["rope_scaling_types"]),
            tensor_suffixes=frozenset(doc["tensor_suffixes"]),
            bare_tensor_names=frozenset(doc["bare_tensor_names"]),
            tokenizer_models=frozenset(doc["tokenizer_models"]),
            tokenizer_models_needing_merges=frozenset(doc["tokenizer_models_needing_merges"]),
            bpe_pre_tokenizers=frozenset(doc["bpe_pre_tokenizers"]),
        )


@cache
def llama_tables() -> LlamaTables:
    """The tables of :data:`BUILD`, read from the package data once."""
    text = files("gguf_audit.llama").joinpath(f"{BUILD}.json").read_text(encoding="utf-8")
    return LlamaTables.from_json(json.loads(text))


@dataclass(frozen=True, slots=True)
class TensorPrograms:
    """What one build's ``load_arch_tensors`` create, per architecture, as programs
    (:mod:`gguf_audit.llama.loader_sim` runs them; :mod:`gguf_audit.llama.gen_tensors` writes them)."""

    build: str
    helpers: Mapping[str, Any]
    """``llama_model_base``'s helpers the programs call (``create_tensor_qkv``)."""
    defaults: Mapping[str, int]
    """The initial value of each ``llama_hparams`` field that has one."""
    architectures: Mapping[str, Mapping[str, Any]]
    """Per modelled architecture: ``program``, ``fields`` (hparams read from a key by its
    ``load_arch_hparams``), ``computed`` (hparams it sets otherwise)."""
    unmodelled: Mapping[str, str]
    """The architectures whose loader was not translated, each with the first reason."""
    hparams_stops: Mapping[str, Mapping[str, Any]]
    """Per architecture whose ``load_arch_hparams`` can stop on a key's value: ``stops`` (in order, each
    ``said``, ``after`` and a ``program`` or the ``why`` it has none), ``fields``, ``computed`` and ``types``
    (the GGUF type and initial value of each field the programs read); :mod:`gguf_audit.llama.arch_stops`."""


@cache
def tensor_programs() -> TensorPrograms:
    """The tensor programs of :data:`BUILD` (``<build>-tensors.json``), read once."""
    text = files("gguf_audit.llama").joinpath(f"{BUILD}-tensors.json").read_text(encoding="utf-8")
    doc = json.loads(text)
    return TensorPrograms(
        build=str(doc["build"]),
        helpers=MappingProxyType(doc["helpers"]),
        defaults=MappingProxyType({str(k): int(v) for k, v in doc["defaults"].items()}),
        architectures=MappingProxyType(doc["architectures"]),
        unmodelled=MappingProxyType(dict(doc["unmodelled"])),
        hparams_stops=MappingProxyType(doc.get("hparams_stops", {})),
    )
