"""Metadata keys: the ones ``llama_model::load_hparams`` requires, and the types its ``get_key`` insists on.

``general.architecture`` must be there and be one the pinned llama.cpp loads; a model
of a known architecture (not vocab-only) needs its context and embedding length,
block count, and, per the table in :mod:`gguf_audit.checks.arch`, its norm epsilon,
head count and feed-forward length. ``GGUFMeta::GKV`` reads each key as exactly one
type: a length stored as uint64 or a string, an id as int32, is refused, and a
per-layer array must be ``block_count`` long. The tokenizer's own required keys
are in :mod:`gguf_audit.checks.tokenizer`.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import cache
from typing import Final

from gguf_audit.bounded import quote
from gguf_audit.checks.arch import KNOWN_ARCHITECTURES, NON_MODEL_ARCHITECTURES
from gguf_audit.checks.facts import LAYER_ARRAY_TYPES, SPECIAL_ID_KEYS, HeaderFacts
from gguf_audit.codes import Code
from gguf_audit.findings import Finding, finding
from gguf_audit.format.model import KV, ValueType
from gguf_audit.gguf_constants import Keys
from gguf_audit.llama import llama_tables

__all__ = ["check_architecture", "check_key_types", "check_required_keys", "missing_key", "wrong_type"]


# The types llama.cpp's get_key reads these keys as (GGUFMeta::GKV: the stored type must be exactly this).
_TOKENIZER_KEY_TYPES: Final[dict[str, ValueType]] = {
    Keys.General.NAME: ValueType.STRING,
    Keys.General.FILE_TYPE: ValueType.UINT32,
    Keys.Tokenizer.MODEL: ValueType.STRING,
    Keys.Tokenizer.PRE: ValueType.STRING,
    Keys.Tokenizer.ADD_BOS: ValueType.BOOL,
    Keys.Tokenizer.ADD_EOS: ValueType.BOOL,
    Keys.Tokenizer.ADD_SEP: ValueType.BOOL,
    Keys.Tokenizer.ADD_PREFIX: ValueType.BOOL,
    Keys.Tokenizer.REMOVE_EXTRA_WS: ValueType.BOOL,
    **{key: ValueType.UINT32 for _, key in SPECIAL_ID_KEYS},
}
# Keys some architectures' own cases read (not every one's, so not in the generated table).
_ARCH_U32_KEYS: Final = (Keys.LLM.VOCAB_SIZE,)
_ARCH_F32_KEYS: Final = (Keys.Attention.LAYERNORM_EPS, Keys.Attention.LAYERNORM_RMS_EPS)


def _arch_key_types() -> tuple[dict[str, ValueType], tuple[str, ...]]:
    """The keys ``load_hparams`` reads for every architecture, from the pinned build's tables:
    the scalar ones with their one type, and those it takes as a value or a per-layer array."""
    scalar: dict[str, ValueType] = {t: ValueType.UINT32 for t in _ARCH_U32_KEYS}
    scalar |= {t: ValueType.FLOAT32 for t in _ARCH_F32_KEYS}
    per_layer: list[str] = []
    for template, type_name in llama_tables().hparams_key_types.items():
        if type_name.endswith("|array"):
            per_layer.append(template)
        else:
            scalar[template] = ValueType[type_name.upper()]
    return scalar, tuple(per_layer)


_ARCH_KEY_TYPES, _ARCH_LAYER_KEYS = _arch_key_types()

_SCALAR_TYPES: Final = {"uint32": ValueType.UINT32, "float32": ValueType.FLOAT32, "bool": ValueType.BOOL}


@cache
def _arch_own_key_types(arch: str) -> dict[str, ValueType]:
    """The scalar keys ``arch``'s ``load_arch_hparams`` always reads, with the one type it reads each as."""
    keys = llama_tables().arch_required_keys.get(arch, {})
    return {t: _SCALAR_TYPES[name] for t, name in keys.items() if name in _SCALAR_TYPES}


_NORM_EPS: Final = (Keys.Attention.LAYERNORM_EPS, Keys.Attention.LAYERNORM_RMS_EPS)
# The tokenizer.ggml.model values whose vocabulary llama.cpp loads as BPE, reading tokenizer.ggml.merges.
_BPE_MODELS: Final = frozenset({"gpt2", "hybriddna", "whitespace", "gemma4"})


def missing_key(key: str, why: str) -> Finding:
    """``meta.missing_key`` for ``key``, saying what llama.cpp does without it."""
    return finding(Code.META_MISSING_KEY, f"key {quote(key)} is missing; {why}")


def wrong_type(kv: KV, expected: str) -> Finding:
    """``meta.wrong_type`` for ``kv``, which llama.cpp reads as ``expected``."""
    return finding(
        Code.META_WRONG_TYPE,
        f"key {quote(kv.key)} is stored as {kv.type_name}; llama.cpp reads it as {expected}",
        offset=kv.offset,
    )


def check_architecture(f: HeaderFacts) -> Iterator[Finding]:
    """``general.architecture``: present, a string, and an architecture the pinned llama.cpp builds."""
    arch_kv = f.header.metadata.get(Keys.General.ARCHITECTURE)
    if arch_kv is None:
        yield missing_key(Keys.General.ARCHITECTURE, "llama.cpp cannot tell the architecture")
    elif f.arch is None:
        yield wrong_type(arch_kv, "string")
    elif f.arch not in KNOWN_ARCHITECTURES and f.arch not in NON_MODEL_ARCHITECTURES:
        yield finding(
            Code.META_UNKNOWN_ARCHITECTURE,
            f"general.architecture {quote(f.arch)} is not an architecture llama.cpp {llama_tables().build} "
            f"{'builds a model of' if f.arch in llama_tables().architectures else 'knows'}",
            offset=arch_kv.offset,
        )


def check_key_types(f: HeaderFacts) -> Iterator[Finding]:
    """The keys llama.cpp reads, each stored as the one type it reads it as."""
    h = f.header
    expected: dict[str, ValueType] = dict(_TOKENIZER_KEY_TYPES)
    # The hyperparameters are read only for a model of a known architecture, not vocab-only.
    arch_keys = f.spec is not None and not f.vocab_only
    if arch_keys and f.spec is not None:
        # Of the two norm epsilons, a curated architecture's case of load_hparams reads its own only:
        # llama.cpp b11312 loads a llama file whose layer_norm_epsilon is a string.
        expected.update(
            {
                f.key(t): vtype
                for t, vtype in _ARCH_KEY_TYPES.items()
                if t not in _NORM_EPS or f.spec.norm_eps_key in (None, t)
            }
        )
        expected.update({f.key(t): vtype for t, vtype in _arch_own_key_types(f.arch or "").items()})
    # split.count is read as uint16 from every file (absent means one file); split.no too when it is above 1.
    split_count = h.metadata.get(Keys.Split.LLM_KV_SPLIT_COUNT)
    expected[Keys.Split.LLM_KV_SPLIT_COUNT] = ValueType.UINT16
    if split_count is not None and split_count.type is ValueType.UINT16 and h.get_int(split_count.key) not in (0, 1):
        expected[Keys.Split.LLM_KV_SPLIT_NO] = ValueType.UINT16
        if Keys.Split.LLM_KV_SPLIT_NO not in h.metadata:
            yield missing_key(Keys.Split.LLM_KV_SPLIT_NO, "llama.cpp reads it when split.count is above 1")
    for key, vtype in expected.items():
        kv = h.metadata.get(key)
        if kv is not None and kv.type is not vtype:
            yield wrong_type(kv, vtype.spelling)
    string_arrays = [Keys.Tokenizer.LIST]
    if f.tokenizer_model in _BPE_MODELS:  # merges are read for BPE vocabularies only
        string_arrays.append(Keys.Tokenizer.MERGES)
    for key in string_arrays:
        item = "array[string]"
        kv = h.metadata.get(key)
        if kv is not None and kv.type_name != item:
            yield wrong_type(kv, item)
    if not arch_keys:
        return
    for template in _ARCH_LAYER_KEYS:
        kv = h.metadata.get(f.key(template))
        if kv is None or kv.type is ValueType.UINT32:
            continue
        if kv.type is not ValueType.ARRAY or kv.item_type not in LAYER_ARRAY_TYPES:
            yield wrong_type(kv, "uint32 or an array of int32/uint32 per layer")
        elif f.n_layer is not None and kv.length != f.n_layer:
            yield finding(
                Code.META_WRONG_TYPE,
                f"key {quote(kv.key)} is an array of {kv.length} values, but {f.key(Keys.LLM.BLOCK_COUNT)} is "
                f"{f.n_layer}; llama.cpp throws 'wrong array length'",
                offset=kv.offset,
            )


def check_required_keys(f: HeaderFacts) -> Iterator[Finding]:
    """The hyperparameters a model of a known architecture (not vocab-only) cannot load without."""
    if f.arch is None or f.spec is None or f.vocab_only:
        return
    required = [Keys.LLM.CONTEXT_LENGTH, Keys.LLM.EMBEDDING_LENGTH, Keys.LLM.BLOCK_COUNT]
    if f.spec.norm_eps_key is not None:
        required.append(f.spec.norm_eps_key)
    if f.spec.requires_heads:
        required.append(Keys.Attention.HEAD_COUNT)
    if f.spec.requires_ff and not f.is_moe:
        required.append(Keys.LLM.FEED_FORWARD_LENGTH)
    # The keys the architecture's own load_arch_hparams always reads, from the pinned build's tables.
    required += [t for t in llama_tables().arch_required_keys.get(f.arch, {}) if t not in required]
    for template in required:
        key = f.key(template)
        if key not in f.header.metadata:
            yield missing_key(key, f"llama.cpp needs it to load a {quote(f.arch)} model")
