"""Metadata keys: the ones ``llama_model::load_hparams`` requires, and the types its ``get_key`` insists on.

``general.architecture`` must be there and be one the gguf package knows; a model
of a known architecture (not vocab-only) needs its context and embedding length,
block count, and, per the table in :mod:`gguf_audit.checks.arch`, its norm epsilon,
head count and feed-forward length. ``GGUFMeta::GKV`` reads each key as exactly one
type: a length stored as uint64 or a string, an id as int32, is refused, and a
per-layer array must be ``block_count`` long. The tokenizer's own required keys
are in :mod:`gguf_audit.checks.tokenizer`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

import numpy as np
from gguf.constants import Keys

from gguf_audit.bounded import quote
from gguf_audit.checks.arch import KNOWN_ARCHITECTURES, NON_MODEL_ARCHITECTURES
from gguf_audit.checks.facts import LAYER_ARRAY_TYPES, SPECIAL_ID_KEYS, HeaderFacts
from gguf_audit.findings import Finding, finding
from gguf_audit.format.model import KV, ValueType

__all__ = ["check_architecture", "check_key_types", "check_required_keys", "missing_key", "wrong_type"]

META_MISSING_KEY: Final = "meta.missing_key"
META_WRONG_TYPE: Final = "meta.wrong_type"
META_UNKNOWN_ARCHITECTURE: Final = "meta.unknown_architecture"
META_HPARAM_OUT_OF_RANGE: Final = "meta.hparam_out_of_range"
# llama-hparams.h of b11312: the bounds load_hparams asserts (GGML_ASSERT: the process aborts).
LLAMA_MAX_LAYERS: Final = 512
LLAMA_MAX_EXPERTS: Final = 1024

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
_ARCH_U32_KEYS: Final = (
    Keys.LLM.CONTEXT_LENGTH,
    Keys.LLM.EMBEDDING_LENGTH,
    Keys.LLM.BLOCK_COUNT,
    Keys.LLM.VOCAB_SIZE,
    Keys.LLM.EXPERT_COUNT,
    Keys.LLM.EXPERT_USED_COUNT,
    Keys.Rope.DIMENSION_COUNT,
    Keys.Rope.SCALING_ORIG_CTX_LEN,
    Keys.Attention.KEY_LENGTH,
    Keys.Attention.VALUE_LENGTH,
)
_ARCH_F32_KEYS: Final = (
    Keys.Attention.LAYERNORM_EPS,
    Keys.Attention.LAYERNORM_RMS_EPS,
    Keys.Rope.FREQ_BASE,
    Keys.Rope.SCALING_FACTOR,
)
_NORM_EPS: Final = (Keys.Attention.LAYERNORM_EPS, Keys.Attention.LAYERNORM_RMS_EPS)
# The tokenizer.ggml.model values whose vocabulary llama.cpp loads as BPE, reading tokenizer.ggml.merges.
_BPE_MODELS: Final = frozenset({"gpt2", "hybriddna", "whitespace", "gemma4"})
_ARCH_LAYER_KEYS: Final = (Keys.LLM.FEED_FORWARD_LENGTH, Keys.Attention.HEAD_COUNT, Keys.Attention.HEAD_COUNT_KV)


def missing_key(key: str, why: str) -> Finding:
    """``meta.missing_key`` for ``key``, saying what llama.cpp does without it."""
    return finding(META_MISSING_KEY, f"key {quote(key)} is missing; {why}")


def wrong_type(kv: KV, expected: str) -> Finding:
    """``meta.wrong_type`` for ``kv``, which llama.cpp reads as ``expected``."""
    return finding(
        META_WRONG_TYPE,
        f"key {quote(kv.key)} is stored as {kv.type_name}; llama.cpp reads it as {expected}",
        offset=kv.offset,
    )


def check_architecture(f: HeaderFacts) -> Iterator[Finding]:
    """``general.architecture``: present, a string, and an architecture the gguf package knows."""
    arch_kv = f.header.metadata.get(Keys.General.ARCHITECTURE)
    if arch_kv is None:
        yield missing_key(Keys.General.ARCHITECTURE, "llama.cpp cannot tell the architecture")
    elif f.arch is None:
        yield wrong_type(arch_kv, "string")
    elif f.arch not in KNOWN_ARCHITECTURES and f.arch not in NON_MODEL_ARCHITECTURES:
        yield finding(
            META_UNKNOWN_ARCHITECTURE,
            f"general.architecture {quote(f.arch)} is not an architecture the gguf package knows",
            offset=arch_kv.offset,
        )


def check_key_types(f: HeaderFacts) -> Iterator[Finding]:
    """The keys llama.cpp reads, each stored as the one type it reads it as."""
    h = f.header
    expected: dict[str, ValueType] = dict(_TOKENIZER_KEY_TYPES)
    # The hyperparameters are read only for a model of a known architecture, not vocab-only.
    arch_keys = f.spec is not None and not f.vocab_only
    if arch_keys and f.spec is not None:
        expected.update({f.key(t): ValueType.UINT32 for t in _ARCH_U32_KEYS})
        # Of the two norm epsilons, a curated architecture's case of load_hparams reads its own only:
        # llama.cpp b11312 loads a llama file whose layer_norm_epsilon is a string.
        eps = [t for t in _ARCH_F32_KEYS if t not in _NORM_EPS or f.spec.norm_eps_key in (None, t)]
        expected.update({f.key(t): ValueType.FLOAT32 for t in eps})
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
                META_WRONG_TYPE,
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
    for template in required:
        key = f.key(template)
        if key not in f.header.metadata:
            yield missing_key(key, f"llama.cpp needs it to load a {quote(f.arch)} model")


def check_hparam_bounds(f: HeaderFacts) -> Iterator[Finding]:
    """The hyperparameters llama.cpp asserts on before it reads anything else of the model.

    ``load_hparams`` checks ``0 < n_layer <= LLAMA_MAX_LAYERS``, ``n_expert <= LLAMA_MAX_EXPERTS`` and
    ``max(n_expert_used) <= n_expert`` (above 0 when there are experts) with ``GGML_ASSERT``: a file past
    them kills the loading process (the oracle answers ``aborted``). Read as llama.cpp reads them: uint32
    scalars, ``expert_used_count`` a scalar or a per-layer array; a key of another type is ``meta.wrong_type``.
    """
    h = f.header
    if f.spec is None or f.vocab_only:
        return
    n_layer = _u32(f, Keys.LLM.BLOCK_COUNT)
    if n_layer is not None and not 0 < n_layer <= LLAMA_MAX_LAYERS:
        yield finding(
            META_HPARAM_OUT_OF_RANGE,
            f"{f.key(Keys.LLM.BLOCK_COUNT)} is {n_layer}; llama.cpp asserts 0 < n_layer <= {LLAMA_MAX_LAYERS}",
        )
    n_expert = _u32(f, Keys.LLM.EXPERT_COUNT) or 0
    if n_expert > LLAMA_MAX_EXPERTS:
        yield finding(
            META_HPARAM_OUT_OF_RANGE,
            f"{f.key(Keys.LLM.EXPERT_COUNT)} is {n_expert}; llama.cpp asserts n_expert <= {LLAMA_MAX_EXPERTS}",
        )
        return
    used_kv = h.metadata.get(f.key(Keys.LLM.EXPERT_USED_COUNT))
    used: int | None = None
    if used_kv is not None and used_kv.type is ValueType.UINT32:
        used = h.get_int(used_kv.key)
    elif used_kv is not None and used_kv.item_type is ValueType.UINT32 and isinstance(used_kv.value, np.ndarray):
        # per layer; b11312 refuses an int32 array here ('has wrong type') before any assert
        used = int(used_kv.value.max()) if used_kv.value.size else None
    if used is not None and used > n_expert:
        yield finding(
            META_HPARAM_OUT_OF_RANGE,
            f"{used_kv.key if used_kv else ''} is {used}, above the {n_expert} experts; llama.cpp asserts "
            "n_expert_used <= n_expert",
        )
    elif n_expert > 0 and used_kv is not None and used == 0:
        yield finding(
            META_HPARAM_OUT_OF_RANGE,
            f"{used_kv.key} is 0 with {n_expert} experts; llama.cpp asserts n_expert_used > 0",
        )


def _u32(f: HeaderFacts, template: str) -> int | None:
    """The key's value when stored as the uint32 llama.cpp reads (another type is refused before any assert)."""
    kv = f.header.metadata.get(f.key(template))
    return f.header.get_int(kv.key) if kv is not None and kv.type is ValueType.UINT32 else None
