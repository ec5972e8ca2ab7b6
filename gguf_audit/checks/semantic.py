"""Semantic checks: what a header says about the model, against what llama.cpp expects of it.

Header only: keys, tensor names, shapes and types, never tensor data. Three groups:

- **architecture** (``meta.*``, ``tensor.*``): the keys ``llama_model::load_hparams``
  requires and the types its ``get_key`` insists on, the tensors
  ``llama_model::load_tensors`` creates (names, required ones, shapes) and
  ``{arch}.block_count`` against the ``blk.N`` tensors. The knowledge per
  architecture lives in :mod:`gguf_audit.checks.arch`.
- **tokenizer** (``tokenizer.*``): ``llama_vocab::load`` in ``src/llama-vocab.cpp``:
  array lengths, special ids, token types, the BPE pre-tokenizer, and, given the
  rendered chat templates, whether turns end with a control EOS/EOT token and
  whether BOS is written twice.
- **declared against observed**: ``general.file_type`` against the tensor types and the
  file name's quantization label, ``general.quantization_version``, and control or
  invisible characters in the ``general.*`` strings.

Vocab-only files (no tensors, as llama.cpp's ``ggml-vocab-*.gguf``) are loaded by
llama.cpp with ``vocab_only``: ``load_hparams`` returns before the hyperparameters,
and no tensor is created, so neither is required of them. A shard of a split
model holds part of the tensors, so nothing is missing from it alone; shards
after the first hold no metadata (llama.cpp reads it from the first), so only
their strings are checked. Cross-shard checks are in :mod:`gguf_audit.checks.shards`.

Cost: a 256k-token vocabulary costs a few numpy passes over ``token_type`` and the
token lengths; token strings are decoded only for the handful of special ids.
"""

from __future__ import annotations

import re
import unicodedata
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Final

import numpy as np
import numpy.typing as npt
from gguf.constants import GGMLQuantizationType, Keys, LlamaFileType, TokenType

from gguf_audit.checks.arch import (
    KNOWN_ARCHITECTURES,
    NON_MODEL_ARCHITECTURES,
    ArchSpec,
    ShapeFamily,
    arch_key,
    arch_spec,
    block_index,
    is_known_tensor_name,
)
from gguf_audit.checks.shards import model_id_for, parse_shard_name
from gguf_audit.findings import Finding, Severity, finding
from gguf_audit.format.ggml_types import ggml_type_info
from gguf_audit.format.model import KV, Header, StringArray, TensorInfo, ValueType
from gguf_audit.templates.conversations import standard_conversations

__all__ = [
    "LLAMA_MAX_LAYERS",
    "check_semantics",
    "file_name_quantization",
]


META_MISSING_KEY: Final = "meta.missing_key"
META_WRONG_TYPE: Final = "meta.wrong_type"
META_UNKNOWN_ARCHITECTURE: Final = "meta.unknown_architecture"
TENSOR_MISSING: Final = "tensor.missing"
TENSOR_UNEXPECTED: Final = "tensor.unexpected"
TENSOR_WRONG_SHAPE: Final = "tensor.wrong_shape"
META_BLOCK_COUNT_MISMATCH: Final = "meta.block_count_mismatch"
TOKENIZER_VOCAB_MISMATCH: Final = "tokenizer.vocab_mismatch"
TOKENIZER_ARRAY_LENGTH_MISMATCH: Final = "tokenizer.array_length_mismatch"
TOKENIZER_WRONG_ARRAY_TYPE: Final = "tokenizer.wrong_array_type"
TOKENIZER_SPECIAL_ID_OUT_OF_RANGE: Final = "tokenizer.special_id_out_of_range"
TOKENIZER_BAD_TOKEN_TYPE: Final = "tokenizer.bad_token_type"
TOKENIZER_UNKNOWN_MODEL: Final = "tokenizer.unknown_model"
TOKENIZER_UNKNOWN_PRE: Final = "tokenizer.unknown_pre"
TOKENIZER_MISSING_PRE: Final = "tokenizer.missing_pre"
TOKENIZER_EOS_NOT_IN_TEMPLATE: Final = "tokenizer.eos_not_in_template"
TOKENIZER_DOUBLE_BOS: Final = "tokenizer.double_bos"
META_FILE_TYPE_MISMATCH: Final = "meta.file_type_mismatch"
META_MISSING_QUANTIZATION_VERSION: Final = "meta.missing_quantization_version"
META_CONTROL_CHARACTERS: Final = "meta.control_characters"


LLAMA_MAX_LAYERS: Final = 512
"""llama.cpp's per-layer hyperparameter arrays hold 512 entries (``LLAMA_MAX_LAYERS``)."""

MAX_NAMED_FINDINGS: Final = 10
"""Unexpected tensors reported one by one; the rest are counted in one more finding."""

_INT_TYPES: Final = frozenset(
    {
        ValueType.UINT8,
        ValueType.INT8,
        ValueType.UINT16,
        ValueType.INT16,
        ValueType.UINT32,
        ValueType.INT32,
        ValueType.UINT64,
        ValueType.INT64,
    }
)
_LAYER_ARRAY_TYPES: Final = frozenset({ValueType.INT32, ValueType.UINT32})
_NO_VOCAB: Final = frozenset({"none", "no_vocab"})

# --- facts shared by the checks -------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Facts:
    header: Header
    arch: str | None
    spec: ArchSpec | None
    model: bool
    """A language model file (not an adapter, imatrix, projector or control vector)."""
    vocab_only: bool
    shard: bool
    """One file of a split model (split.count > 1 or a -NNNNN-of-MMMMM name)."""
    continuation: bool
    """A shard after the first: llama.cpp reads no metadata from it."""
    tokens: StringArray | None
    token_types: npt.NDArray[np.generic] | None
    n_layer: int | None

    @property
    def n_tokens(self) -> int | None:
        return None if self.tokens is None else len(self.tokens)

    def key(self, template: str) -> str:
        return arch_key(template, self.arch or "")


def _facts(header: Header, url: str | None) -> _Facts:
    arch = header.get_str(Keys.General.ARCHITECTURE)
    gtype = header.get_str(Keys.General.TYPE)
    model = gtype in (None, "model", "vocab") and arch not in NON_MODEL_ARCHITECTURES
    split_count = header.get_int(Keys.Split.LLM_KV_SPLIT_COUNT)
    split_no = header.get_int(Keys.Split.LLM_KV_SPLIT_NO)
    name = parse_shard_name(url) if url else None
    # (index, count) as the file name says; ShardName's fields shadow tuple methods for mypy.
    named = (name[1], name[2]) if name is not None else (1, 1)
    shard = (split_count is not None and split_count > 1) or named[1] > 1
    # split.no counts from 0; when it is absent, the name's index (from 1) tells.
    continuation = split_no > 0 if split_no is not None else named[0] > 1
    tokens_kv = header.metadata.get(Keys.Tokenizer.LIST)
    tokens = tokens_kv.value if tokens_kv is not None and isinstance(tokens_kv.value, StringArray) else None
    tt_kv = header.metadata.get(Keys.Tokenizer.TOKEN_TYPE)
    token_types = (
        tt_kv.value
        if tt_kv is not None and tt_kv.item_type in _LAYER_ARRAY_TYPES and isinstance(tt_kv.value, np.ndarray)
        else None
    )
    n_layer = header.get_int(arch_key(Keys.LLM.BLOCK_COUNT, arch)) if arch else None
    return _Facts(
        header=header,
        arch=arch,
        spec=arch_spec(arch) if arch else None,
        model=model,
        vocab_only=gtype == "vocab" or (header.n_tensors == 0 and not shard),
        shard=shard,
        continuation=continuation,
        tokens=tokens,
        token_types=token_types,
        n_layer=n_layer,
    )


def check_semantics(
    header: Header,
    *,
    url: str | None = None,
    template_renders: Mapping[str, str] | None = None,
) -> Iterator[Finding]:
    """Yield the semantic findings of ``header``.

    ``url`` gives the file name (its quantization label, and whether it is a shard);
    ``template_renders`` maps each chat template's key to its render of the standard
    conversation (from :func:`gguf_audit.checks.template.audit_templates`); the
    template-based tokenizer checks are skipped without it.
    """
    facts = _facts(header, url)
    yield from _check_control_characters(header)
    if facts.continuation or not facts.model:
        return
    yield from _check_keys(facts)
    if facts.spec is not None and not facts.vocab_only:
        yield from _check_tensors(facts)
    yield from _check_tokenizer(facts)
    if template_renders:
        yield from _check_templates(facts, template_renders)
    yield from _check_file_type(facts, url)


# --- keys -------------------------------------------------------------------------


def _missing(key: str, why: str) -> Finding:
    return finding(META_MISSING_KEY, f"key {key!r} is missing; {why}")


def _check_keys(f: _Facts) -> Iterator[Finding]:
    h = f.header
    arch_kv = h.metadata.get(Keys.General.ARCHITECTURE)
    if arch_kv is None:
        yield _missing(Keys.General.ARCHITECTURE, "llama.cpp cannot tell the architecture")
    elif f.arch is None:
        yield _wrong_type(arch_kv, "string")
    elif f.arch not in KNOWN_ARCHITECTURES and f.arch not in NON_MODEL_ARCHITECTURES:
        yield finding(
            META_UNKNOWN_ARCHITECTURE,
            f"general.architecture {f.arch!r} is not an architecture the gguf package knows",
            offset=arch_kv.offset,
        )
    yield from _check_tokenizer_keys(f)
    yield from _check_key_types(f)
    if f.arch is None or f.spec is None or f.vocab_only:
        return
    required = [Keys.LLM.CONTEXT_LENGTH, Keys.LLM.EMBEDDING_LENGTH, Keys.LLM.BLOCK_COUNT]
    if f.spec.norm_eps_key is not None:
        required.append(f.spec.norm_eps_key)
    if f.spec.requires_heads:
        required.append(Keys.Attention.HEAD_COUNT)
    if f.spec.requires_ff and not _is_moe(f):
        required.append(Keys.LLM.FEED_FORWARD_LENGTH)
    for template in required:
        key = f.key(template)
        if key not in h.metadata:
            yield _missing(key, f"llama.cpp needs it to load a {f.arch!r} model")


def _check_tokenizer_keys(f: _Facts) -> Iterator[Finding]:
    h = f.header
    model = h.get_str(Keys.Tokenizer.MODEL)
    if Keys.Tokenizer.MODEL not in h.metadata:
        yield _missing(Keys.Tokenizer.MODEL, "llama.cpp cannot tell the tokenizer type")
    if model in _NO_VOCAB:
        return
    if Keys.Tokenizer.LIST not in h.metadata:
        yield _missing(Keys.Tokenizer.LIST, "llama.cpp throws 'cannot find tokenizer vocab in model file'")
    if model == "gpt2" and Keys.Tokenizer.MERGES not in h.metadata:
        yield _missing(Keys.Tokenizer.MERGES, "a BPE tokenizer needs them ('cannot find tokenizer merges')")
    if model is not None and model not in _KNOWN_TOKENIZERS:
        yield finding(
            TOKENIZER_UNKNOWN_MODEL,
            f"tokenizer.ggml.model is {model!r}, not one of llama.cpp's tokenizers "
            f"({', '.join(sorted(_KNOWN_TOKENIZERS))})",
        )
    pre = h.get_str(Keys.Tokenizer.PRE)
    # Only BPE reads the pre-tokenizer name; SPM, WPM and UGM ignore it.
    if model == "gpt2" and pre is not None and pre not in _KNOWN_BPE_PRE:
        yield finding(
            TOKENIZER_UNKNOWN_PRE,
            f"tokenizer.ggml.pre is {pre!r}, which llama.cpp may not know: it throws 'unknown pre-tokenizer type' "
            "for names missing from its list",
        )


# llama.cpp's vocabulary types (llama-vocab.cpp): the names tokenizer.ggml.model may take.
_KNOWN_TOKENIZERS: Final = frozenset({"no_vocab", "none", "llama", "bert", "gpt2", "t5", "rwkv", "plamo2"})

# The pre-tokenizer names llama.cpp's BPE loader accepts, as far as gguf-audit
# knows them (convert_hf_to_gguf.py's get_vocab_base_pre writes them). A name
# missing here is a warning with an unknown verdict, never a refusal.
_KNOWN_BPE_PRE: Final = frozenset(
    {
        "default", "llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0", "lfm2",
        "deepseek-llm", "deepseek-coder", "deepseek-v3", "deepseek-r1-qwen", "falcon", "mpt", "starcoder",
        "gpt-2", "phi-2", "jina-es", "jina-de", "gigachat", "jina-v1-en", "jina-v2-es", "jina-v2-de",
        "a.x-4.0", "mellum", "jina-v2-code", "roberta-bpe", "refact", "command-r", "qwen2", "stablelm2",
        "olmo", "dbrx", "smaug-bpe", "poro-chat", "chatglm-bpe", "viking", "jais", "tekken", "smollm",
        "codeshell", "bloom", "gpt3-finnish", "exaone", "exaone4", "chameleon", "minerva-7b", "megrez",
        "gpt-4o", "llama4", "superbpe", "trillion", "granite-docling", "bailingmoe", "bailingmoe2",
        "seed-coder", "hunyuan", "hunyuan-dense", "kimi-k2", "grok-2",
    }
)  # fmt: skip


_SPECIAL_ID_KEYS: Final = (
    ("bos", Keys.Tokenizer.BOS_ID),
    ("eos", Keys.Tokenizer.EOS_ID),
    ("eot", Keys.Tokenizer.EOT_ID),
    ("eom", Keys.Tokenizer.EOM_ID),
    ("unk", Keys.Tokenizer.UNK_ID),
    ("sep", Keys.Tokenizer.SEP_ID),
    ("pad", Keys.Tokenizer.PAD_ID),
    ("mask", Keys.Tokenizer.MASK_ID),
    ("fim_pre", Keys.Tokenizer.FIM_PRE_ID),
    ("fim_suf", Keys.Tokenizer.FIM_SUF_ID),
    ("fim_mid", Keys.Tokenizer.FIM_MID_ID),
    ("fim_pad", Keys.Tokenizer.FIM_PAD_ID),
    ("fim_rep", Keys.Tokenizer.FIM_REP_ID),
    ("fim_sep", Keys.Tokenizer.FIM_SEP_ID),
)
_END_OF_GENERATION_ROLES: Final = frozenset({"bos", "eos", "eot", "eom"})

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
    **{key: ValueType.UINT32 for _, key in _SPECIAL_ID_KEYS},
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
_ARCH_LAYER_KEYS: Final = (Keys.LLM.FEED_FORWARD_LENGTH, Keys.Attention.HEAD_COUNT, Keys.Attention.HEAD_COUNT_KV)


def _wrong_type(kv: KV, expected: str) -> Finding:
    return finding(
        META_WRONG_TYPE,
        f"key {kv.key!r} is stored as {kv.type_name}; llama.cpp reads it as {expected}",
        offset=kv.offset,
    )


def _check_key_types(f: _Facts) -> Iterator[Finding]:
    h = f.header
    expected: dict[str, ValueType] = dict(_TOKENIZER_KEY_TYPES)
    # The hyperparameters are read only for a model of a known architecture, not vocab-only.
    arch_keys = f.spec is not None and not f.vocab_only
    if arch_keys:
        expected.update({f.key(t): ValueType.UINT32 for t in _ARCH_U32_KEYS})
        expected.update({f.key(t): ValueType.FLOAT32 for t in _ARCH_F32_KEYS})
    for key, vtype in expected.items():
        kv = h.metadata.get(key)
        if kv is not None and kv.type is not vtype:
            yield _wrong_type(kv, vtype.spelling)
    for key, item in ((Keys.Tokenizer.LIST, "array[string]"), (Keys.Tokenizer.MERGES, "array[string]")):
        kv = h.metadata.get(key)
        if kv is not None and kv.type_name != item:
            yield _wrong_type(kv, item)
    if not arch_keys:
        return
    for template in _ARCH_LAYER_KEYS:
        kv = h.metadata.get(f.key(template))
        if kv is None or kv.type is ValueType.UINT32:
            continue
        if kv.type is not ValueType.ARRAY or kv.item_type not in _LAYER_ARRAY_TYPES:
            yield _wrong_type(kv, "uint32 or an array of int32/uint32 per layer")
        elif f.n_layer is not None and kv.length != f.n_layer:
            yield finding(
                META_WRONG_TYPE,
                f"key {kv.key!r} is an array of {kv.length} values, but {f.key(Keys.LLM.BLOCK_COUNT)} is "
                f"{f.n_layer}; llama.cpp throws 'wrong array length'",
                offset=kv.offset,
            )


# --- tensors ----------------------------------------------------------------------


def _is_moe(f: _Facts) -> bool:
    if f.spec is not None and f.spec.always_moe:
        return True
    n_expert = f.header.get_int(f.key(Keys.LLM.EXPERT_COUNT))
    return n_expert is not None and n_expert > 0


def _per_layer(f: _Facts, template: str, n_layer: int) -> tuple[int, ...] | None:
    """A per-layer hyperparameter: a uint32 for every layer, or an array of one per layer."""
    kv = f.header.metadata.get(f.key(template))
    if kv is None:
        return None
    if kv.type in _INT_TYPES and isinstance(kv.value, int):
        return (kv.value,) * n_layer
    if kv.type is ValueType.ARRAY and kv.item_type in _INT_TYPES and isinstance(kv.value, np.ndarray):
        values = tuple(int(x) for x in kv.value.tolist())
        return values if len(values) == n_layer else None
    return None


def _fmt_blocks(blocks: Sequence[int]) -> str:
    shown = ", ".join(str(b) for b in blocks[:8])
    return shown + (f" and {len(blocks) - 8} more" if len(blocks) > 8 else "")


def _check_tensors(f: _Facts) -> Iterator[Finding]:
    h = f.header
    spec = f.spec
    if spec is None or f.arch is None:
        return
    arch = f.arch
    names = {t.name for t in h.tensors}
    unexpected = [t for t in h.tensors if not is_known_tensor_name(arch, t.name)]
    for t in unexpected[:MAX_NAMED_FINDINGS]:
        yield finding(
            TENSOR_UNEXPECTED,
            f"tensor {t.name!r} is not one a {arch!r} model has",
            tensor=t.name,
            offset=t.info_offset,
        )
    if len(unexpected) > MAX_NAMED_FINDINGS:
        rest = unexpected[MAX_NAMED_FINDINGS:]
        yield finding(
            TENSOR_UNEXPECTED,
            f"{len(rest)} more tensors are not ones a {arch!r} model has, from {rest[0].name!r}",
            tensor=rest[0].name,
            offset=rest[0].info_offset,
        )
    present_blocks = sorted({b for b in (block_index(n) for n in names) if b is not None})
    yield from _check_block_count(f, present_blocks)
    if not f.shard:
        yield from _check_required(f, names, present_blocks)
    yield from _check_vocab_rows(f)
    if spec.curated:
        yield from _check_shapes(f)


def _check_block_count(f: _Facts, present: Sequence[int]) -> Iterator[Finding]:
    spec = f.spec
    key = f.key(Keys.LLM.BLOCK_COUNT)
    n_layer = f.n_layer
    if n_layer is None or spec is None:
        return
    if n_layer > LLAMA_MAX_LAYERS:
        yield finding(
            META_BLOCK_COUNT_MISMATCH,
            f"{key} is {n_layer}, past llama.cpp's limit of {LLAMA_MAX_LAYERS} layers",
        )
        return
    extra = [b for b in present if b >= n_layer]
    if extra:
        yield finding(
            META_BLOCK_COUNT_MISMATCH,
            f"{key} is {n_layer}, but tensors of blocks {_fmt_blocks(extra)} exist (blk.0 to blk.{present[-1]})",
        )
    if f.shard or spec.may_skip_blocks or not _uses_blk_names(f.arch or ""):
        return
    have = set(present)
    absent = [b for b in range(n_layer) if b not in have]
    if absent:
        yield finding(
            META_BLOCK_COUNT_MISMATCH,
            f"{key} is {n_layer}, but blocks {_fmt_blocks(absent)} have no tensor "
            f"({len(have & set(range(n_layer)))} of {n_layer} blocks present)",
        )


@cache
def _uses_blk_names(arch: str) -> bool:
    return is_known_tensor_name(arch, "blk.0.attn_norm.weight") is True or any(
        is_known_tensor_name(arch, f"blk.0.{base}.weight") is True
        for base in ("attn_q", "attn_qkv", "ffn_up", "ffn_down", "ssm_in", "time_mix_key")
    )


def _check_required(f: _Facts, names: set[str], present: Sequence[int]) -> Iterator[Finding]:
    spec = f.spec
    if spec is None:
        return
    for name in spec.required_global:
        if name not in names:
            yield finding(TENSOR_MISSING, f"tensor {name!r} is missing; a {f.arch!r} model requires it", tensor=name)
    if f.n_layer is None or f.n_layer > LLAMA_MAX_LAYERS:
        return
    blocks = [b for b in present if b < f.n_layer]
    bases = spec.required_block + (spec.required_moe if _is_moe(f) else spec.required_dense)
    for base in bases:
        lacking = [b for b in blocks if f"blk.{b}.{base}.weight" not in names]
        if lacking:
            first = f"blk.{lacking[0]}.{base}.weight"
            more = f" (and in blocks {_fmt_blocks(lacking[1:])})" if len(lacking) > 1 else ""
            yield finding(
                TENSOR_MISSING,
                f"tensor {first!r} is missing{more}; every block of a {f.arch!r} model requires it",
                tensor=first,
            )


def _check_vocab_rows(f: _Facts) -> Iterator[Finding]:
    n_tokens = f.n_tokens
    if n_tokens is None or f.header.get_str(Keys.Tokenizer.MODEL) in _NO_VOCAB:
        return
    spec = f.spec
    names = ("token_embd.weight", "output.weight") if spec is not None and spec.curated else ("token_embd.weight",)
    for t in f.header.tensors:
        if t.name in names and len(t.shape) >= 2 and t.shape[1] != n_tokens:
            yield finding(
                TOKENIZER_VOCAB_MISMATCH,
                f"tensor {t.name!r} has {t.shape[1]} rows (shape {list(t.shape)}) but the vocabulary has "
                f"{n_tokens} tokens",
                tensor=t.name,
                offset=t.info_offset,
            )


@dataclass(frozen=True, slots=True)
class _Dims:
    n_embd: int
    n_layer: int
    n_head: tuple[int, ...] | None
    n_head_kv: tuple[int, ...] | None
    n_ff: tuple[int, ...] | None
    head_k: int | None
    head_v: int | None
    n_expert: int


def _dims(f: _Facts) -> _Dims | None:
    n_embd = f.header.get_int(f.key(Keys.LLM.EMBEDDING_LENGTH))
    n_layer = f.n_layer
    if n_embd is None or n_embd <= 0 or n_layer is None or not 0 < n_layer <= LLAMA_MAX_LAYERS:
        return None
    n_head = _per_layer(f, Keys.Attention.HEAD_COUNT, n_layer)
    # llama.cpp: "n_head_kv is optional, default to n_head".
    n_head_kv = _per_layer(f, Keys.Attention.HEAD_COUNT_KV, n_layer) or n_head
    # Head dimensions come from layer 0's head count (hparams.n_head() without a layer).
    default_head = n_embd // n_head[0] if n_head and n_head[0] > 0 else None
    head_k = f.header.get_int(f.key(Keys.Attention.KEY_LENGTH)) or default_head
    head_v = f.header.get_int(f.key(Keys.Attention.VALUE_LENGTH)) or default_head
    return _Dims(
        n_embd=n_embd,
        n_layer=n_layer,
        n_head=n_head,
        n_head_kv=n_head_kv,
        n_ff=_per_layer(f, Keys.LLM.FEED_FORWARD_LENGTH, n_layer),
        head_k=head_k,
        head_v=head_v,
        n_expert=f.header.get_int(f.key(Keys.LLM.EXPERT_COUNT)) or 0,
    )


_NORMS: Final = frozenset({"attn_norm", "ffn_norm", "post_attention_norm", "post_ffw_norm"})


def _expected_shape(f: _Facts, d: _Dims, t: TensorInfo) -> tuple[tuple[int, ...], str] | None:
    """The shape llama.cpp creates ``t`` with, and how it follows from the keys; None when not checked."""
    name = t.name
    e = d.n_embd
    if name in ("token_embd.weight", "output.weight"):
        # The row count is the token count, judged by tokenizer.vocab_mismatch.
        if len(t.shape) >= 2:
            return (e, t.shape[1]), f"n_embd {e}"
        return (e, -1), f"n_embd {e}"
    if name == "output_norm.weight":
        return (e,), f"n_embd {e}"
    b = block_index(name)
    if b is None or b >= d.n_layer or not name.endswith(".weight"):
        return None
    base = name[len(f"blk.{b}.") : -len(".weight")]
    if base in _NORMS:
        return (e,), f"n_embd {e}"
    hk, hv = d.head_k, d.head_v
    if base in ("attn_q_norm", "attn_k_norm"):
        return ((hk,), f"head_dim {hk}") if hk else None
    if base == "ffn_gate_inp":
        return ((e, d.n_expert), f"n_embd {e}, n_expert {d.n_expert}") if d.n_expert > 0 else None
    nh = d.n_head[b] if d.n_head else None
    nkv = d.n_head_kv[b] if d.n_head_kv else None
    ff = d.n_ff[b] if d.n_ff and not _is_moe(f) else None
    family = f.spec.family if f.spec else None
    if family is ShapeFamily.LLAMA:
        if base == "attn_q" and nh and hk:
            return (e, nh * hk), f"n_embd {e}, n_head {nh} x head_dim {hk}"
        if base == "attn_k" and nkv and hk:
            return (e, nkv * hk), f"n_embd {e}, n_head_kv {nkv} x head_dim {hk}"
        if base == "attn_v" and nkv and hv:
            return (e, nkv * hv), f"n_embd {e}, n_head_kv {nkv} x head_dim {hv}"
        if base == "attn_output" and nh and hk and hk == hv:
            return (nh * hk, e), f"n_head {nh} x head_dim {hk}, n_embd {e}"
        if base in ("ffn_gate", "ffn_up") and ff:
            return (e, ff), f"n_embd {e}, n_ff {ff}"
        if base == "ffn_down" and ff:
            return (ff, e), f"n_ff {ff}, n_embd {e}"
    elif family is ShapeFamily.PHI3:
        if base == "attn_qkv" and nkv and hk:
            return (e, e + 2 * nkv * hk), f"n_embd {e} + 2 x n_head_kv {nkv} x head_dim {hk}"
        if base == "attn_output":
            return (e, e), f"n_embd {e}"
        if base == "ffn_up" and ff:
            return (e, 2 * ff), f"n_embd {e}, 2 x n_ff {ff} (gate and up)"
        if base == "ffn_down" and ff:
            return (ff, e), f"n_ff {ff}, n_embd {e}"
    return None


def _padded(shape: Sequence[int]) -> tuple[int, ...]:
    return tuple(shape) + (1,) * (4 - len(shape)) if len(shape) < 4 else tuple(shape)


def _check_shapes(f: _Facts) -> Iterator[Finding]:
    d = _dims(f)
    if d is None:
        return
    groups: dict[tuple[str, tuple[int, ...], tuple[int, ...]], list[TensorInfo]] = {}
    reasons: dict[tuple[str, tuple[int, ...], tuple[int, ...]], str] = {}
    for t in f.header.tensors:
        got = _expected_shape(f, d, t)
        if got is None:
            continue
        expected, why = got
        if expected[-1] == -1 or _padded(t.shape) == _padded(expected):
            continue
        b = block_index(t.name)
        kind = t.name if b is None else t.name[len(f"blk.{b}.") :]
        group = (kind, tuple(t.shape), expected)
        groups.setdefault(group, []).append(t)
        reasons[group] = why
    for group, members in groups.items():
        first = members[0]
        more = f" (the same in {len(members) - 1} more blocks)" if len(members) > 1 else ""
        yield finding(
            TENSOR_WRONG_SHAPE,
            f"tensor {first.name!r} has shape {list(first.shape)}; llama.cpp expects {list(group[2])} "
            f"({reasons[group]}){more}",
            tensor=first.name,
            offset=first.info_offset,
        )


# --- tokenizer --------------------------------------------------------------------


def _check_tokenizer(f: _Facts) -> Iterator[Finding]:
    h = f.header
    n_tokens = f.n_tokens
    model = h.get_str(Keys.Tokenizer.MODEL)
    if model == "gpt2" and not h.get_str(Keys.Tokenizer.PRE):
        yield finding(
            TOKENIZER_MISSING_PRE,
            "the BPE tokenizer has no tokenizer.ggml.pre; llama.cpp falls back to the 'default' pre-tokenizer",
        )
    scores = h.metadata.get(Keys.Tokenizer.SCORES)
    if scores is not None and scores.type_name != "array[float32]":
        yield finding(
            TOKENIZER_WRONG_ARRAY_TYPE,
            f"tokenizer.ggml.scores is stored as {scores.type_name}; llama.cpp reads it as array[float32]",
            offset=scores.offset,
        )
    types = h.metadata.get(Keys.Tokenizer.TOKEN_TYPE)
    if types is not None and types.type_name not in ("array[int32]", "array[uint32]"):
        yield finding(
            TOKENIZER_WRONG_ARRAY_TYPE,
            f"tokenizer.ggml.token_type is stored as {types.type_name}; llama.cpp reads it as array[int32]",
            offset=types.offset,
        )
    if n_tokens is None:
        return
    for kv in (scores, types):
        if kv is not None and kv.length is not None and kv.length != n_tokens:
            yield finding(
                TOKENIZER_ARRAY_LENGTH_MISMATCH,
                f"{kv.key} has {kv.length} entries but tokenizer.ggml.tokens has {n_tokens}",
                offset=kv.offset,
            )
    for role, key in _SPECIAL_ID_KEYS:
        kv = h.metadata.get(key)
        value = h.get_int(key)
        if kv is not None and value is not None and not 0 <= value < n_tokens:
            yield finding(
                TOKENIZER_SPECIAL_ID_OUT_OF_RANGE,
                f"{key} is {value}, but the vocabulary has {n_tokens} tokens (ids 0 to {n_tokens - 1})",
                offset=kv.offset,
                severity=Severity.ERROR if role in _END_OF_GENERATION_ROLES else Severity.WARNING,
            )
    tt = f.token_types
    if tt is not None and len(tt):
        values = np.asarray(tt)
        bad = (values < int(TokenType.NORMAL)) | (values > int(TokenType.BYTE))
        n_bad = int(np.count_nonzero(bad))
        if n_bad:
            first = int(np.argmax(bad))
            yield finding(
                TOKENIZER_BAD_TOKEN_TYPE,
                f"tokenizer.ggml.token_type has {n_bad} values outside 1 to 6, the first {int(values[first])} "
                f"at token {first}",
                offset=types.offset if types is not None else None,
            )


def _token(f: _Facts, role: str) -> tuple[int, str] | None:
    """The id and text of a special token named by its key, when the id is in range."""
    key = dict(_SPECIAL_ID_KEYS)[role]
    tid = f.header.get_int(key)
    tokens = f.tokens
    if tid is None or tokens is None or not 0 <= tid < len(tokens):
        return None
    text = tokens[tid]
    return (tid, text) if text else None


def _token_type(f: _Facts, tid: int) -> int | None:
    tt = f.token_types
    return int(tt[tid]) if tt is not None and 0 <= tid < len(tt) else None


def _type_name(value: int | None) -> str:
    if value is None:
        return "untyped"
    try:
        return TokenType(value).name.lower().replace("_", "-")
    except ValueError:
        return f"type-{value}"


# Texts llama.cpp's llama_vocab::load treats as end of generation (special_eog_ids) and as
# EOT when no eot id is given, whatever the keys say; it forces them to control type.
_LLAMA_EOG_TEXTS: Final = (
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<|return|>",
    "<|call|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|eom_id|>",
    "<EOT>",
    "_<EOT>",
    "<|end_of_text|>",
    "<end_of_utterance>",
    "<｜end▁of▁sentence｜>",
)


MAX_TOKEN_COMPARES: Final = 8192
"""Byte compares one file's token lookups by text may make (about 12 ms). Past it a
text counts as not looked up, and nothing is reported from it."""


class _TokenLookup:
    """Finds tokens by their text without decoding the vocabulary.

    A numpy length filter, then byte compares: special tokens are typed (control,
    user-defined) and appended after the base vocabulary, so those are compared
    first, from the end; the usual hit costs a few compares however many tokens
    share its length. The compares are bounded by :data:`MAX_TOKEN_COMPARES`;
    once it is spent, ``exhausted`` is set and lookups answer None.
    """

    __slots__ = ("_budget", "_lengths", "_tokens", "_types", "exhausted")

    def __init__(self, tokens: StringArray, token_types: npt.NDArray[np.generic] | None) -> None:
        self._tokens = tokens
        self._types = token_types if token_types is not None and len(token_types) == len(tokens) else None
        self._lengths: npt.NDArray[np.int64] | None = None
        self._budget = MAX_TOKEN_COMPARES
        self.exhausted = False

    def find(self, text: str) -> int | None:
        """The id of the token spelled ``text``; None when there is none (or the budget ran out)."""
        raw = text.encode("utf-8")
        if self._lengths is None:
            self._lengths = self._tokens.lengths()
        candidates = np.flatnonzero(self._lengths == len(raw))[::-1]
        if self._types is not None and len(candidates):
            normal = np.asarray(self._types)[candidates] == int(TokenType.NORMAL)
            candidates = np.concatenate((candidates[~normal], candidates[normal]))
        for i in candidates.tolist():
            if self._budget <= 0:
                self.exhausted = True
                return None
            self._budget -= 1
            if self._tokens.raw(i) == raw:
                return int(i)
        return None


@cache
def _assistant_contents() -> tuple[str, ...]:
    """The assistant messages of the template audit's standard conversations."""
    contents: set[str] = set()
    for _, context in standard_conversations():
        messages = context.get("messages")
        if isinstance(messages, list):
            for m in messages:
                content = m.get("content") if isinstance(m, dict) and m.get("role") == "assistant" else None
                if isinstance(content, str) and content.strip():
                    contents.add(content.strip())
    return tuple(sorted(contents))


def _after_last_assistant(text: str, bos: str | None) -> str:
    """What the template writes after the last assistant message (the whole render if none is found)."""
    ends = [i + len(c) for c in _assistant_contents() if (i := text.rfind(c)) >= 0]
    if ends:
        return text[max(ends) :]
    return text[len(bos) :] if bos and text.startswith(bos) else text


def _check_templates(f: _Facts, renders: Mapping[str, str]) -> Iterator[Finding]:
    tokens = f.tokens
    if tokens is None:
        return
    declared = [(role, *tok) for role in ("eot", "eom", "eos") if (tok := _token(f, role)) is not None]
    bos = _token(f, "bos")
    lookup = _TokenLookup(tokens, f.token_types)
    for key, text in renders.items():
        if bos is not None and _adds_bos(f) and text.startswith(bos[1]):
            yield finding(
                TOKENIZER_DOUBLE_BOS,
                f"{key}: the rendered template starts with the BOS text {bos[1]!r} and add_bos_token is true, "
                "so tokenizing it with special tokens added gives two BOS tokens",
            )
        if not declared:
            continue
        region = _after_last_assistant(text, bos[1] if bos else None)
        hits = [(region.find(t), role, tid, t) for role, tid, t in declared if t in region]
        known = False
        if not hits:
            for t in _LLAMA_EOG_TEXTS:
                pos = region.find(t)
                if pos >= 0 and (tid := lookup.find(t)) is not None:
                    hits.append((pos, "llama.cpp end-of-generation", tid, t))
                    known = True
            if not hits and lookup.exhausted:
                # Could not tell whether the vocabulary has the text the turn ends with: say nothing.
                continue
        names = " or ".join(f"{role.upper()} {t!r}" for role, _, t in declared)
        if not hits:
            tail = region.strip()[-40:]
            yield finding(
                TOKENIZER_EOS_NOT_IN_TEMPLATE,
                f"{key}: the assistant turn is not closed by {names}; the render ends {tail!r}",
            )
            continue
        _, _, tid, t = min(hits)
        if known:
            yield finding(
                TOKENIZER_EOS_NOT_IN_TEMPLATE,
                f"{key}: the assistant turn ends with {t!r} (id {tid}), not {names}; llama.cpp stops on it by its "
                "text, other runtimes may not",
                severity=Severity.INFO,
            )
        ttype = _token_type(f, tid)
        if ttype is not None and ttype != TokenType.CONTROL:
            override = " (llama.cpp warns and overrides its type)" if t in _LLAMA_EOG_TEXTS else ""
            yield finding(
                TOKENIZER_EOS_NOT_IN_TEMPLATE,
                f"{key}: the assistant turn ends with {t!r} (id {tid}), a {_type_name(ttype)} token, not a control "
                f"token{override}",
            )


def _adds_bos(f: _Facts) -> bool:
    explicit = f.header.get_bool(Keys.Tokenizer.ADD_BOS)
    if explicit is not None:
        return explicit
    # llama_vocab::load defaults add_bos to true for SPM ("llama") vocabularies.
    return f.header.get_str(Keys.Tokenizer.MODEL) == "llama"


# --- declared against observed ----------------------------------------------------

Q = GGMLQuantizationType

# For each llama ftype, the ggml types llama-quantize gives the weight matrices it does not
# bump (default_type in llama_model_quantize_impl, and its siblings in the same mix).
_FTYPE_MAIN_TYPES: Final[dict[str, frozenset[int]]] = {
    name: frozenset(int(t) for t in types)
    for name, types in {
        "ALL_F32": (Q.F32,),
        "MOSTLY_F16": (Q.F16,),
        "MOSTLY_BF16": (Q.BF16,),
        "MOSTLY_Q4_0": (Q.Q4_0,),
        "MOSTLY_Q4_1": (Q.Q4_1,),
        "MOSTLY_Q5_0": (Q.Q5_0,),
        "MOSTLY_Q5_1": (Q.Q5_1,),
        "MOSTLY_Q8_0": (Q.Q8_0,),
        "MOSTLY_Q2_K": (Q.Q2_K,),
        "MOSTLY_Q2_K_S": (Q.Q2_K,),
        "MOSTLY_Q3_K_S": (Q.Q3_K,),
        "MOSTLY_Q3_K_M": (Q.Q3_K,),
        "MOSTLY_Q3_K_L": (Q.Q3_K,),
        "MOSTLY_Q4_K_S": (Q.Q4_K,),
        "MOSTLY_Q4_K_M": (Q.Q4_K,),
        "MOSTLY_Q5_K_S": (Q.Q5_K,),
        "MOSTLY_Q5_K_M": (Q.Q5_K,),
        "MOSTLY_Q6_K": (Q.Q6_K,),
        "MOSTLY_IQ2_XXS": (Q.IQ2_XXS,),
        "MOSTLY_IQ2_XS": (Q.IQ2_XS,),
        "MOSTLY_IQ2_S": (Q.IQ2_XS, Q.IQ2_S),
        "MOSTLY_IQ2_M": (Q.IQ2_S, Q.IQ2_XS),
        "MOSTLY_IQ3_XXS": (Q.IQ3_XXS,),
        "MOSTLY_IQ3_XS": (Q.IQ3_S, Q.IQ3_XXS),
        "MOSTLY_IQ3_S": (Q.IQ3_S,),
        "MOSTLY_IQ3_M": (Q.IQ3_S,),
        "MOSTLY_IQ1_S": (Q.IQ1_S,),
        "MOSTLY_IQ1_M": (Q.IQ1_M,),
        "MOSTLY_IQ4_NL": (Q.IQ4_NL,),
        "MOSTLY_IQ4_XS": (Q.IQ4_XS,),
        "MOSTLY_TQ1_0": (Q.TQ1_0,),
        "MOSTLY_TQ2_0": (Q.TQ2_0,),
        # Experts get MXFP4, every other matrix Q8_0 (a dense model has no MXFP4 at all).
        "MOSTLY_MXFP4_MOE": (Q.MXFP4, Q.Q8_0),
    }.items()
}
_FLOAT_TYPES: Final = frozenset(int(t) for t in (Q.F32, Q.F16, Q.BF16, Q.F64))

# Matrices llama-quantize gives the default type unless its mix bumps them; norms,
# routers, convolutions and embeddings are left out (kept in float or chosen apart).
_WEIGHT_BASES: Final = frozenset(
    {
        "attn_q",
        "attn_k",
        "attn_v",
        "attn_qkv",
        "attn_output",
        "ffn_gate",
        "ffn_up",
        "ffn_down",
        "ffn_gate_exps",
        "ffn_up_exps",
        "ffn_down_exps",
        "ffn_gate_shexp",
        "ffn_up_shexp",
        "ffn_down_shexp",
    }
)

_LABEL_ALIASES: Final[dict[str, tuple[str, ...]]] = {
    "FP32": ("ALL_F32",),
    "FP16": ("MOSTLY_F16",),
    "Q2_K": ("MOSTLY_Q2_K", "MOSTLY_Q2_K_S"),
    "Q3_K": ("MOSTLY_Q3_K_S", "MOSTLY_Q3_K_M", "MOSTLY_Q3_K_L"),
    "Q4_K": ("MOSTLY_Q4_K_S", "MOSTLY_Q4_K_M"),
    "Q5_K": ("MOSTLY_Q5_K_S", "MOSTLY_Q5_K_M"),
    "MXFP4": ("MOSTLY_MXFP4_MOE",),
}


@cache
def _labels() -> dict[str, frozenset[str]]:
    """Quantization label as written in file names -> the llama ftype names it stands for."""
    labels: dict[str, frozenset[str]] = {}
    for ft in LlamaFileType:
        if ft is LlamaFileType.GUESSED:
            continue
        labels[ft.name.split("_", 1)[1]] = frozenset({ft.name})
    for label, names in _LABEL_ALIASES.items():
        labels[label] = frozenset(names)
    return labels


def file_name_quantization(url: str) -> tuple[str, frozenset[str]] | None:
    """The quantization label at the end of a file name and the llama ftype names it means.

    ``model-Q4_K_M.gguf``, ``model.Q4_K_M.gguf``, ``model-q4_k_m-00001-of-00003.gguf`` give
    ``("Q4_K_M", {"MOSTLY_Q4_K_M"})``; one short trailing tag is looked past
    (``model-Q8_0-BE.gguf``). Labels that are not llama ftypes (``Q4_K_XL``, ``Q6_K_L``) give None.
    """
    stem = model_id_for(url).rsplit("/", 1)[-1]
    labels = _labels()
    ordered = sorted(labels, key=len, reverse=True)
    for _ in range(2):
        upper = stem.upper()
        for label in ordered:
            start = len(upper) - len(label)
            if upper.endswith(label) and (start == 0 or upper[start - 1] in "-._"):
                return label, labels[label]
        cut = max(stem.rfind("-"), stem.rfind("."))
        if cut <= 0 or len(stem) - cut > 6:
            return None
        stem = stem[:cut]
    return None


def _weights(tensors: Iterable[TensorInfo], allowed: frozenset[int]) -> list[TensorInfo]:
    """The matrices that llama-quantize would have given one of ``allowed`` (not too narrow for its blocks)."""
    blocks = [_block_elems(t) for t in allowed]
    out = []
    for t in tensors:
        b = block_index(t.name)
        if b is None or not t.name.endswith(".weight"):
            continue
        if t.name[len(f"blk.{b}.") : -len(".weight")] not in _WEIGHT_BASES:
            continue
        if len(t.shape) < 2 or t.shape[0] <= 0 or any(t.shape[0] % n for n in blocks):
            continue
        out.append(t)
    return out


def _block_elems(type_id: int) -> int:
    return max(ggml_type_info(type_id).block_elems, 1)


def _type_summary(tensors: Iterable[TensorInfo]) -> str:
    counts = Counter(t.type_name for t in tensors)
    return ", ".join(f"{n} {name}" for name, n in counts.most_common(4))


def _contradicts(f: _Facts, ftype_name: str) -> str | None:
    """Why the tensors contradict ``ftype_name``, or None when they agree (or cannot tell)."""
    allowed = _FTYPE_MAIN_TYPES.get(ftype_name)
    if allowed is None:
        return None
    weights = _weights(f.header.tensors, allowed)
    if not weights:
        return None
    if any(t.type_id in allowed for t in weights):
        return None
    if f.shard:
        # A shard holds some blocks only (perhaps just the ones the mix bumps): judge only a
        # wholesale contradiction, float matrices for a quantized type or the reverse.
        floats = [t.type_id in _FLOAT_TYPES for t in weights]
        if not (all(floats) if not allowed & _FLOAT_TYPES else not any(floats)):
            return None
    wanted = "/".join(sorted(Q(t).name for t in allowed))
    return f"no weight matrix is {wanted}; they are {_type_summary(weights)}"


def _check_file_type(f: _Facts, url: str | None) -> Iterator[Finding]:
    h = f.header
    tensors = h.tensors
    quantized = [t for t in tensors if t.type_info.quantized]
    if quantized and Keys.General.QUANTIZATION_VERSION not in h.metadata:
        yield finding(
            META_MISSING_QUANTIZATION_VERSION,
            f"{len(quantized)} tensors are quantized ({_type_summary(quantized)}) but "
            "general.quantization_version is absent",
        )
    kv = h.metadata.get(Keys.General.FILE_TYPE)
    declared: str | None = None
    raw = h.get_int(Keys.General.FILE_TYPE)
    if kv is not None and raw is not None and raw != LlamaFileType.GUESSED:
        base = raw & ~LlamaFileType.GUESSED
        try:
            declared = LlamaFileType(base).name
        except ValueError:
            yield finding(
                META_FILE_TYPE_MISMATCH,
                f"general.file_type is {raw}, not a llama ftype id (removed or from a fork)",
                offset=kv.offset,
            )
        if declared is not None and tensors:
            why = _contradicts(f, declared)
            if why is not None:
                yield finding(
                    META_FILE_TYPE_MISMATCH,
                    f"general.file_type is {raw} ({declared}) but {why}",
                    offset=kv.offset,
                )
    parsed = file_name_quantization(url) if url else None
    if parsed is None:
        return
    label, meant = parsed
    if declared is not None:
        if declared not in meant:
            yield finding(
                META_FILE_TYPE_MISMATCH,
                f"the file name says {label} but general.file_type is {raw} ({declared})",
                offset=kv.offset if kv is not None else None,
            )
    elif tensors:
        reasons = [_contradicts(f, name) for name in sorted(meant)]
        if all(r is not None for r in reasons) and reasons[0] is not None:
            yield finding(META_FILE_TYPE_MISMATCH, f"the file name says {label} but {reasons[0]}")


# --- control characters -------------------------------------------------------------

# C0 (but tab, newline, carriage return), DEL and C1; checked apart so descriptions may hold them.
_LINE_BREAKS: Final = "\t\n\r"
_HIDDEN: Final = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"
    "\u061c\u200b\u200e\u200f\u2028\u2029\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff"
    "\U000e0000-\U000e007f]"
)
_MAX_ARRAY_ITEMS: Final = 1000


def _char_name(ch: str) -> str:
    name = unicodedata.name(ch, "")
    return f"U+{ord(ch):04X}" + (f" {name}" if name else "")


def _hidden_in(text: str, allow_breaks: bool) -> tuple[int, int] | None:
    """(count, index of the first) of control or invisible characters in ``text``."""
    hits = [m.start() for m in _HIDDEN.finditer(text)]
    if not allow_breaks:
        hits += [i for i, ch in enumerate(text) if ch in _LINE_BREAKS]
    if not hits:
        return None
    return len(hits), min(hits)


def _check_control_characters(header: Header) -> Iterator[Finding]:
    for kv in header.kvs:
        if not kv.key.startswith("general."):
            continue
        allow_breaks = kv.key.endswith("description")
        items: list[tuple[str, str]] = []
        if kv.type is ValueType.STRING and isinstance(kv.value, str):
            items.append((kv.key, kv.value))
        elif isinstance(kv.value, StringArray):
            items.extend((f"{kv.key}[{i}]", kv.value[i]) for i in range(min(len(kv.value), _MAX_ARRAY_ITEMS)))
        for where, text in items:
            hit = _hidden_in(text, allow_breaks)
            if hit is None:
                continue
            count, first = hit
            yield finding(
                META_CONTROL_CHARACTERS,
                f"{where} holds {count} control or invisible characters, the first {_char_name(text[first])} "
                f"at index {first}",
                offset=kv.offset,
            )
