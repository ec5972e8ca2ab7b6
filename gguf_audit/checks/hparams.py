"""The hyperparameters' own invariants, as ``llama_model_base::load_hparams`` (b11312) asserts and throws them.

Read for a language model of a known architecture, not vocab-only (llama.cpp
returns before them for those), and only from values stored as the type llama.cpp
reads (a wrong type is ``meta.wrong_type``, refused before any of these). Most are
``GGML_ASSERT``s: the loading process dies (``aborts``), a denial of service for any
server that loads the file. The bounds come from the pinned build's tables
(:func:`gguf_audit.llama.llama_tables`).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Final

import numpy as np

from gguf_audit.checks.arch import block_index
from gguf_audit.checks.facts import LAYER_ARRAY_TYPES, HeaderFacts
from gguf_audit.checks.metadata import wrong_type
from gguf_audit.codes import Code
from gguf_audit.findings import Finding, finding
from gguf_audit.format.model import ValueType
from gguf_audit.gguf_constants import Keys
from gguf_audit.llama import llama_tables, tensor_programs
from gguf_audit.llama.arch_stops import ArchStop, first_arch_stop

__all__ = ["check_hparams", "refused_in_load_hparams"]

_TENSOR_EXTRA_NAME: Final = "general.tensor_extra.name"
_TENSOR_EXTRA_PREC_A4: Final = "general.tensor_extra.prec_a4"

# The architectures whose rope dimension load_hparams requires to be the head size.
_N_ROT_IS_HEAD_SIZE: Final = frozenset({"llama", "deci", "falcon", "llama-embed"})

# hunyuan's dense cases read one expert as none (load_hparams resets n_expert <= 1 to 0).
_ONE_EXPERT_IS_NONE: Final = frozenset({"hunyuan-dense", "hunyuan_vl"})


def _u32(f: HeaderFacts, template: str) -> int | None:
    """``{arch}.<key>`` when it is stored as uint32 (what ``get_key`` reads it as), else None."""
    kv = f.header.metadata.get(f.key(template))
    if kv is None or kv.type is not ValueType.UINT32 or not isinstance(kv.value, int):
        return None
    return kv.value


def _u32_or_layers(f: HeaderFacts, template: str, n_layer: int) -> int | None:
    """The largest value of a key ``get_key_or_arr`` reads: a uint32, or an int32/uint32 array of
    ``n_layer`` values (anything else is refused as ``meta.wrong_type`` first); 0 when absent."""
    kv = f.header.metadata.get(f.key(template))
    if kv is None:
        return 0
    if kv.type is ValueType.UINT32 and isinstance(kv.value, int):
        return kv.value
    if kv.item_type in LAYER_ARRAY_TYPES and isinstance(kv.value, np.ndarray) and len(kv.value) == n_layer:
        return int(kv.value.max()) if n_layer else 0
    return None


# What llama_model_base::load_hparams reads before each of its asserts, in its order: a key it
# cannot read (missing when required, or of another type) throws first, and the assert is never
# reached. (key template, required)
_READS_BEFORE: Final[dict[str, tuple[tuple[str, bool], ...]]] = {
    "block_count": (
        (Keys.LLM.CONTEXT_LENGTH, True),
        (Keys.LLM.EMBEDDING_LENGTH, True),
        ("{arch}.embedding_length_out", False),
        ("{arch}.attention.causal", False),
        (Keys.LLM.BLOCK_COUNT, True),
    ),
    "nextn": ((Keys.LLM.NEXTN_PREDICT_LAYERS, False),),
    "experts": (
        (Keys.LLM.EXPERT_COUNT, False),
        (Keys.LLM.EXPERT_USED_COUNT, False),
        (Keys.LLM.EXPERT_GROUP_COUNT, False),
        (Keys.LLM.EXPERT_GROUP_USED_COUNT, False),
    ),
    "rope": (
        (Keys.LLM.FEED_FORWARD_LENGTH, False),
        (Keys.Attention.HEAD_COUNT, False),
        (Keys.Attention.HEAD_COUNT_KV, False),
        ("{arch}.rope.scaling.finetuned", False),
        (Keys.Rope.SCALING_ORIG_CTX_LEN, False),
        (Keys.Rope.FREQ_BASE, False),
        (Keys.Rope.SCALING_TYPE, False),
    ),
}
# The keys check_key_types holds to one type for every architecture beyond the generated ones.
_COMMON_KEY_TYPES: Final = frozenset(
    {Keys.LLM.VOCAB_SIZE, Keys.Attention.LAYERNORM_EPS, Keys.Attention.LAYERNORM_RMS_EPS}
)
_GGUF_TYPES: Final = {
    "uint32": ValueType.UINT32,
    "float32": ValueType.FLOAT32,
    "bool": ValueType.BOOL,
    "string": ValueType.STRING,
}


def _unreadable(f: HeaderFacts, template: str, required: bool, n_layer: int | None) -> bool:
    """Whether ``get_key`` (or ``get_key_or_arr``) throws on ``{arch}.<key>``: missing when required,
    another type than the one it reads, or a per-layer array of another length."""
    kv = f.header.metadata.get(f.key(template))
    if kv is None:
        return required
    type_name = llama_tables().hparams_key_types.get(template, "")
    if type_name.endswith("|array") and kv.type is ValueType.ARRAY:
        return kv.item_type not in LAYER_ARRAY_TYPES or (n_layer is not None and kv.length != n_layer)
    expected = _GGUF_TYPES.get(type_name.removesuffix("|array"))
    return expected is not None and kv.type is not expected


def _reached(f: HeaderFacts, *steps: str) -> bool:
    """Whether load_hparams reads every key of ``steps`` (and what comes before them) without throwing."""
    name = f.header.metadata.get("general.name")
    if name is not None and name.type is not ValueType.STRING:
        return False
    n_layer = _u32(f, Keys.LLM.BLOCK_COUNT)
    return not any(_unreadable(f, key, required, n_layer) for step in steps for key, required in _READS_BEFORE[step])


def refused_in_load_hparams(f: HeaderFacts) -> bool:
    """Whether loading the model throws before its vocabulary: a base hyperparameter llama.cpp cannot
    read, ``invalid n_rot``, or a key the architecture's own ``load_arch_hparams`` requires missing.
    (A file the vocabulary would abort on is then refused, not aborted on.)"""
    if f.arch is None or f.spec is None or f.vocab_only or not f.model:
        return False
    if not _reached(f, *_READS_BEFORE):
        return True
    n_layer = _u32(f, Keys.LLM.BLOCK_COUNT)
    if f.arch in _N_ROT_IS_HEAD_SIZE and n_layer and any(_check_n_rot(f, n_layer)):
        return True
    if any(t.format(arch=f.arch) not in f.header.metadata for t in llama_tables().arch_required_keys.get(f.arch, {})):
        return True
    if any(_optional_wrong_types(f)):
        return True
    stop = _arch_stop(f)
    return stop is not None and stop.throws


def check_hparams(f: HeaderFacts) -> Iterator[Finding]:
    """The ``load_hparams`` asserts and throws a header decides; an assert only when the keys read
    before it are readable (else llama.cpp throws first: ``meta.missing_key`` or ``meta.wrong_type``)."""
    if f.arch is None or f.vocab_only or not f.model:
        return
    tables = llama_tables()
    if f.spec is None:
        # An architecture the hand-kept specs do not know: only its own load_arch_hparams' stops.
        if f.arch in tables.arch_tensors:
            yield from _check_arch_stop(f)
        return
    if not _reached(f, "block_count"):
        yield from _check_tensor_extra(f)
        return
    n_layer = _u32(f, Keys.LLM.BLOCK_COUNT)
    if n_layer is not None and not 0 < n_layer <= tables.max_layers:
        yield finding(
            Code.HPARAMS_BLOCK_COUNT_OUT_OF_RANGE,
            f"{f.key(Keys.LLM.BLOCK_COUNT)} is {n_layer}, outside 1 to {tables.max_layers} (LLAMA_MAX_LAYERS): "
            f"llama.cpp {tables.build} aborts",
        )
    n_nextn = _u32(f, Keys.LLM.NEXTN_PREDICT_LAYERS) if n_layer is not None else None
    if not _reached(f, "block_count", "nextn"):
        return
    if n_layer is not None and n_nextn is not None and n_nextn > n_layer:
        yield finding(
            Code.HPARAMS_NEXTN_PAST_BLOCK_COUNT,
            f"{f.key(Keys.LLM.NEXTN_PREDICT_LAYERS)} is {n_nextn}, more than the {n_layer} blocks of "
            f"{f.key(Keys.LLM.BLOCK_COUNT)}: llama.cpp {tables.build} aborts",
        )
    elif n_layer is not None and n_nextn and f.arch not in tables.mtp_architectures:
        yield from _check_nextn_blocks(f, n_layer - n_nextn, n_nextn)
    if n_layer is not None and 0 < n_layer <= tables.max_layers and _reached(f, "block_count", "nextn", "experts"):
        yield from _check_experts(f, n_layer)
    if f.arch in _N_ROT_IS_HEAD_SIZE and n_layer is not None and 0 < n_layer <= tables.max_layers:
        yield from _check_n_rot(f, n_layer)
    yield from _check_tensor_extra(f)
    rope = f.header.metadata.get(f.key(Keys.Rope.SCALING_TYPE))
    # Compared as a C string: 'linear\0x' is 'linear' to llama.cpp (asked of b11312: it loads).
    scaling = f.c_str(rope.key) if rope is not None else None
    if (
        rope is not None
        and scaling is not None
        and scaling not in tables.rope_scaling_types
        and _reached(f, *_READS_BEFORE)
    ):
        read = f" (read up to its NUL as {scaling!r})" if scaling != rope.value else ""
        yield finding(
            Code.HPARAMS_UNKNOWN_ROPE_SCALING,
            f"{rope.key} is {rope.value!r}{read}, not one of {', '.join(sorted(tables.rope_scaling_types))}: "
            f"llama.cpp {tables.build} aborts",
            offset=rope.offset,
        )
    yield from _check_arch_stop(f)


_VALUE_TYPES: Final = {**_GGUF_TYPES, "int32": ValueType.INT32}


def _optional_wrong_types(f: HeaderFacts) -> Iterator[Finding]:
    """The keys the architecture's ``load_arch_hparams`` always reads without requiring them, stored as
    another type: ``get_key`` throws 'wrong type' all the same. (The keys every architecture reads and
    the required ones are :func:`~gguf_audit.checks.metadata.check_key_types`'.)"""
    tables = llama_tables()
    required = tables.arch_required_keys.get(f.arch or "", {})
    for template, type_name in tables.arch_optional_key_types.get(f.arch or "", {}).items():
        if template in tables.hparams_key_types or template in required or template in _COMMON_KEY_TYPES:
            continue
        kv = f.header.metadata.get(f.key(template))
        if kv is not None and kv.type is not _VALUE_TYPES[type_name]:
            yield wrong_type(kv, type_name)


def _arch_stop(f: HeaderFacts) -> ArchStop | None:
    """The first stop of the architecture's own ``load_arch_hparams`` the file reaches: after the base
    ``load_hparams`` (its keys readable, none of its asserts failing, ``n_rot`` right)."""
    if f.arch is None or f.arch not in tensor_programs().hparams_stops or not _reached(f, *_READS_BEFORE):
        return None  # (most architectures have no stop: nothing more to read)
    tables = llama_tables()
    n_layer = _u32(f, Keys.LLM.BLOCK_COUNT)
    if n_layer is None or not 0 < n_layer <= tables.max_layers:
        return None
    n_nextn = _u32(f, Keys.LLM.NEXTN_PREDICT_LAYERS) or 0
    rope = f.header.metadata.get(f.key(Keys.Rope.SCALING_TYPE))
    scaling = f.c_str(rope.key) if rope is not None else "linear"
    if n_nextn > n_layer or any(_check_experts(f, n_layer)) or scaling not in tables.rope_scaling_types:
        return None
    if f.arch in _N_ROT_IS_HEAD_SIZE and any(_check_n_rot(f, n_layer)):
        return None
    own = tables.arch_required_keys.get(f.arch, {})

    optional = tables.arch_optional_key_types.get(f.arch, {})

    def reached(after: Sequence[str], after_optional: Sequence[str]) -> bool:
        for template in after:
            kv = f.header.metadata.get(f.key(template))
            expected = _GGUF_TYPES.get(own.get(template, ""))
            if kv is None or (expected is not None and kv.type is not expected):
                return False
        for template in after_optional:  # absent is fine; another type throws
            kv = f.header.metadata.get(f.key(template))
            expected = _VALUE_TYPES.get(optional.get(template, ""))
            if kv is not None and expected is not None and kv.type is not expected:
                return False
        return True

    return first_arch_stop(f.header, f.arch, reached)


def _check_arch_stop(f: HeaderFacts) -> Iterator[Finding]:
    if f.arch in llama_tables().arch_optional_key_types and _reached(f, *_READS_BEFORE):
        yield from _optional_wrong_types(f)
    stop = _arch_stop(f)
    if stop is None:
        return
    build = llama_tables().build
    if stop.throws:
        yield finding(
            Code.HPARAMS_ARCH_THROWS,
            f"llama.cpp {build}'s {f.arch!r} load_arch_hparams throws on this file's keys: {stop.said!r}",
        )
    else:
        yield finding(
            Code.HPARAMS_ARCH_ASSERTS,
            f"llama.cpp {build}'s {f.arch!r} load_arch_hparams aborts on this file's keys: {stop.said}",
        )


def _check_experts(f: HeaderFacts, n_layer: int) -> Iterator[Finding]:
    """The MoE invariants: expert count, experts used per token (per layer), expert groups."""
    tables = llama_tables()
    n_expert = _u32(f, Keys.LLM.EXPERT_COUNT) or 0
    n_used = _u32_or_layers(f, Keys.LLM.EXPERT_USED_COUNT, n_layer)
    if f.arch in _ONE_EXPERT_IS_NONE and n_expert <= 1:
        n_expert = n_used = 0  # the expert groups are still asserted on
    if n_expert > tables.max_experts:
        yield finding(
            Code.HPARAMS_TOO_MANY_EXPERTS,
            f"{f.key(Keys.LLM.EXPERT_COUNT)} is {n_expert}, above LLAMA_MAX_EXPERTS ({tables.max_experts}): "
            f"llama.cpp {tables.build} aborts",
        )
    used_key = f.key(Keys.LLM.EXPERT_USED_COUNT)
    if n_used is not None and n_used > n_expert:
        yield finding(
            Code.HPARAMS_EXPERT_USED_COUNT,
            f"{used_key} is {n_used}, more than the {n_expert} experts of {f.key(Keys.LLM.EXPERT_COUNT)}: "
            f"llama.cpp {tables.build} aborts",
        )
    elif n_used == 0 and n_expert > 0:
        yield finding(
            Code.HPARAMS_EXPERT_USED_COUNT,
            f"{used_key} is 0 or absent in a model of {n_expert} experts: llama.cpp {tables.build} aborts",
        )
    why = _expert_groups_problem(
        n_expert, _u32(f, Keys.LLM.EXPERT_GROUP_COUNT) or 0, _u32(f, Keys.LLM.EXPERT_GROUP_USED_COUNT) or 0
    )
    if why:
        yield finding(
            Code.HPARAMS_EXPERT_GROUPS, f"{f.key(Keys.LLM.EXPERT_GROUP_COUNT)}: {why}; llama.cpp {tables.build} aborts"
        )


def _expert_groups_problem(n_expert: int, n_groups: int, n_group_used: int) -> str | None:
    """Which of load_hparams' expert-group asserts fails, in its order; None when all hold."""
    if n_expert == 0:
        return f"{n_groups} expert groups in a model without experts" if n_groups else None
    if n_groups >= n_expert:
        return f"{n_groups} expert groups for {n_expert} experts (must be fewer)"
    if n_groups > 1 and n_expert % n_groups:
        return f"{n_expert} experts do not divide into {n_groups} groups"
    if n_groups > 1 and not 0 < n_group_used < n_groups:
        return f"{n_group_used} groups used of {n_groups} (must be 1 to {n_groups - 1})"
    return None


def _check_n_rot(f: HeaderFacts, n_layer: int) -> Iterator[Finding]:
    """``invalid n_rot``: the rope dimension of the llama family must be the (key) head size."""
    n_embd = _u32(f, Keys.LLM.EMBEDDING_LENGTH)
    n_rot = _u32(f, Keys.Rope.DIMENSION_COUNT)
    n_head = _first_of_layers(f, Keys.Attention.HEAD_COUNT, n_layer)
    if n_embd is None or n_rot is None or not n_head:
        return
    head_k = _u32(f, Keys.Attention.KEY_LENGTH)
    if head_k is None:
        head_k = n_embd // n_head
    if n_rot != head_k:
        yield finding(
            Code.HPARAMS_BAD_N_ROT,
            f"{f.key(Keys.Rope.DIMENSION_COUNT)} is {n_rot}, but the head size is {head_k}: llama.cpp "
            f"{llama_tables().build} throws 'invalid n_rot'",
        )


def _first_of_layers(f: HeaderFacts, template: str, n_layer: int) -> int | None:
    """Layer 0's value of a key ``get_key_or_arr`` reads (what ``hparams.n_head()`` answers)."""
    kv = f.header.metadata.get(f.key(template))
    if kv is None:
        return None
    if kv.type is ValueType.UINT32 and isinstance(kv.value, int):
        return kv.value
    if kv.item_type in LAYER_ARRAY_TYPES and isinstance(kv.value, np.ndarray) and len(kv.value) == n_layer:
        return int(kv.value[0])
    return None


def _check_tensor_extra(f: HeaderFacts) -> Iterator[Finding]:
    """``llama_prec_policy::load``: a name array needs a bool ``prec_a4`` array of its length.

    A ``general.tensor_extra.name`` that is not an array is not read at all.
    """
    names = f.header.metadata.get(_TENSOR_EXTRA_NAME)
    if names is None or names.type is not ValueType.ARRAY:
        return
    build = llama_tables().build
    if names.item_type is not ValueType.STRING:
        yield finding(
            Code.HPARAMS_TENSOR_EXTRA,
            f"{_TENSOR_EXTRA_NAME} is {names.type_name}, not array[string]: llama.cpp {build} throws",
            offset=names.offset,
        )
        return
    prec = f.header.metadata.get(_TENSOR_EXTRA_PREC_A4)
    if prec is None or prec.item_type is not ValueType.BOOL:
        stored = "missing" if prec is None else f"stored as {prec.type_name}"
        yield finding(
            Code.HPARAMS_TENSOR_EXTRA,
            f"{_TENSOR_EXTRA_PREC_A4} is {stored} beside {_TENSOR_EXTRA_NAME}: llama.cpp {build} throws "
            "'must be a bool array'",
            offset=names.offset,
        )
    elif prec.length != names.length:
        yield finding(
            Code.HPARAMS_TENSOR_EXTRA,
            f"{_TENSOR_EXTRA_PREC_A4} has {prec.length} values for the {names.length} names of "
            f"{_TENSOR_EXTRA_NAME}: llama.cpp {build} throws 'tensor/value length mismatch'",
            offset=prec.offset,
        )


def _check_nextn_blocks(f: HeaderFacts, first: int, n_nextn: int) -> Iterator[Finding]:
    """Tensors in the MTP blocks of an architecture whose loader creates none there."""
    tail = sorted({b for t in f.header.tensors if (b := block_index(t.name)) is not None and b >= first})
    if tail:
        yield finding(
            Code.HPARAMS_NEXTN_BLOCKS_NOT_LOADED,
            f"{f.key(Keys.LLM.NEXTN_PREDICT_LAYERS)} is {n_nextn}, so llama.cpp {llama_tables().build} loads no "
            f"tensor of blocks {first} and up of a {f.arch!r} model, but the file has tensors in blocks "
            f"{', '.join(map(str, tail[:8]))}: it throws 'wrong number of tensors'",
        )
