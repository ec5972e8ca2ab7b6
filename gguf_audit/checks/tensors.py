"""Tensors: the ones ``llama_model::load_tensors`` creates, against the ones the header lists.

Names (a tensor the architecture never has ends the load on "wrong number of
tensors"), ``{arch}.block_count`` against the ``blk.N`` tensors present, the rows of
``token_embd`` (and ``output``) against the token count; then, where the architecture's
loader was translated from the pinned build (:mod:`gguf_audit.checks.loader`), the
tensors it requires, creates and the shape of each; elsewhere the tensors created as
required (a subset) and, for the curated architectures of :mod:`gguf_audit.checks.arch`,
the shape ``check_tensor_dims`` wants of each. A
shard of a split model holds part of the tensors, so nothing is missing from it
alone: neither a required tensor nor a block without tensors is reported there.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Final

import numpy as np

from gguf_audit.bounded import quote
from gguf_audit.checks.arch import ShapeFamily, block_index, is_known_tensor_name
from gguf_audit.checks.facts import NO_VOCAB, HeaderFacts
from gguf_audit.checks.loader import LoaderView, check_loader, loader_outcome
from gguf_audit.checks.structure import ggml_ne
from gguf_audit.codes import Code
from gguf_audit.findings import Finding, finding
from gguf_audit.format.model import TensorInfo, ValueType
from gguf_audit.gguf_constants import Keys
from gguf_audit.llama import llama_tables

__all__ = ["LLAMA_MAX_LAYERS", "MAX_NAMED_FINDINGS", "check_tensors"]


LLAMA_MAX_LAYERS: Final = llama_tables().max_layers
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


def _per_layer(f: HeaderFacts, template: str, n_layer: int) -> tuple[int, ...] | None:
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


def check_tensors(f: HeaderFacts) -> Iterator[Finding]:
    """Names, blocks against block_count, required tensors, vocabulary rows and (curated) shapes."""
    h = f.header
    spec = f.spec
    if spec is None or f.arch is None:
        return
    arch = f.arch
    names = {t.name for t in h.tensors}
    unexpected = [t for t in h.tensors if not is_known_tensor_name(arch, t.name)]
    for t in unexpected[:MAX_NAMED_FINDINGS]:
        yield finding(
            Code.TENSOR_UNEXPECTED,
            f"tensor {quote(t.name)} is not one a {quote(arch)} model has",
            tensor=t.name,
            offset=t.info_offset,
        )
    if len(unexpected) > MAX_NAMED_FINDINGS:
        rest = unexpected[MAX_NAMED_FINDINGS:]
        yield finding(
            Code.TENSOR_UNEXPECTED,
            f"{len(rest)} more tensors are not ones a {quote(arch)} model has, from {quote(rest[0].name)}",
            tensor=rest[0].name,
            offset=rest[0].info_offset,
        )
    present_blocks = sorted({b for b in (block_index(n) for n in names) if b is not None})
    # The translated loader, where it runs, replaces the hand-kept required tensors and shapes.
    view = loader_outcome(f)
    yield from _check_block_count(f, present_blocks, view)
    if not f.shard and view is None:
        yield from _check_required(f, names, present_blocks)
    yield from _check_vocab_rows(f)
    if view is not None:
        reported = not spec.may_skip_blocks and _uses_blk_names(arch)
        yield from check_loader(f, view, empty_blocks_reported=reported)
    elif spec.curated:
        yield from _check_shapes(f)


def _check_block_count(f: HeaderFacts, present: Sequence[int], view: LoaderView | None) -> Iterator[Finding]:
    spec = f.spec
    key = f.key(Keys.LLM.BLOCK_COUNT)
    n_layer = f.n_layer
    if n_layer is None or spec is None:
        return
    if not 0 < n_layer <= LLAMA_MAX_LAYERS:
        return  # llama.cpp aborts first: hparams.block_count_out_of_range (checks/hparams.py)
    extra = [b for b in present if b >= n_layer]
    if extra:
        yield finding(
            Code.META_BLOCK_COUNT_MISMATCH,
            f"{key} is {n_layer}, but tensors of blocks {_fmt_blocks(extra)} exist (blk.0 to blk.{present[-1]})",
        )
    if f.shard or spec.may_skip_blocks or not _uses_blk_names(f.arch or ""):
        return
    have = set(present)
    absent = [b for b in range(_loaded_blocks(f, n_layer)) if b not in have]
    if view is not None:
        # Only the blocks the translated loader requires a tensor of (t5encoder's are enc.blk.N).
        wanting = {block_index(n) for n in view.outcome.missing}
        absent = [b for b in absent if b in wanting]
    if absent:
        yield finding(
            Code.META_BLOCK_COUNT_MISMATCH,
            f"{key} is {n_layer}, but blocks {_fmt_blocks(absent)} have no tensor "
            f"({len(have & set(range(n_layer)))} of {n_layer} blocks present)",
        )


def _loaded_blocks(f: HeaderFacts, n_layer: int) -> int:
    """The blocks llama.cpp creates tensors for: all but the last nextn_predict_layers unless the
    architecture loads MTP layers (hparams.nextn_blocks_not_loaded reports tensors there)."""
    kv = f.header.metadata.get(f.key(Keys.LLM.NEXTN_PREDICT_LAYERS))
    n_nextn = kv.value if kv is not None and kv.type is ValueType.UINT32 and isinstance(kv.value, int) else 0
    if f.arch in llama_tables().mtp_architectures or not 0 < n_nextn <= n_layer:
        return n_layer
    return n_layer - n_nextn


@cache
def _uses_blk_names(arch: str) -> bool:
    return is_known_tensor_name(arch, "blk.0.attn_norm.weight") is True or any(
        is_known_tensor_name(arch, f"blk.0.{base}.weight") is True
        for base in ("attn_q", "attn_qkv", "ffn_up", "ffn_down", "ssm_in", "time_mix_key")
    )


def _check_required(f: HeaderFacts, names: set[str], present: Sequence[int]) -> Iterator[Finding]:
    spec = f.spec
    if spec is None:
        return
    for name in spec.required_global:
        if name not in names:
            yield finding(
                Code.TENSOR_MISSING,
                f"tensor {quote(name)} is missing; a {quote(f.arch)} model requires it",
                tensor=name,
            )
    if f.n_layer is None or f.n_layer > LLAMA_MAX_LAYERS:
        return
    blocks = [b for b in present if b < f.n_layer]
    bases = spec.required_block + (spec.required_moe if f.is_moe else spec.required_dense)
    for base in bases:
        lacking = [b for b in blocks if f"blk.{b}.{base}.weight" not in names]
        if lacking:
            first = f"blk.{lacking[0]}.{base}.weight"
            more = f" (and in blocks {_fmt_blocks(lacking[1:])})" if len(lacking) > 1 else ""
            yield finding(
                Code.TENSOR_MISSING,
                f"tensor {quote(first)} is missing{more}; every block of a {quote(f.arch)} model requires it",
                tensor=first,
            )


def _check_vocab_rows(f: HeaderFacts) -> Iterator[Finding]:
    n_tokens = f.n_tokens
    if n_tokens is None or f.tokenizer_model in NO_VOCAB:
        return
    spec = f.spec
    names = ("token_embd.weight", "output.weight") if spec is not None and spec.curated else ("token_embd.weight",)
    for t in f.header.tensors:
        if t.name not in names:
            continue
        # ggml pads a shape with 1s: a tensor of one dimension (or none) has one row.
        rows = ggml_ne(t.shape)[1] if len(t.shape) <= 4 else t.shape[1]
        if rows != n_tokens:
            yield finding(
                Code.TOKENIZER_VOCAB_MISMATCH,
                f"tensor {quote(t.name)} has {rows} rows (shape {list(t.shape)}) "
                f"but the vocabulary has {n_tokens} tokens",
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


def _dims(f: HeaderFacts) -> _Dims | None:
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


def _expected_shape(f: HeaderFacts, d: _Dims, t: TensorInfo) -> tuple[tuple[int, ...], str] | None:
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
    # A zero from the keys is checked too: llama.cpp then expects a zero-wide tensor and refuses the file.
    nkv = d.n_head_kv[b] if d.n_head_kv else None
    ff = d.n_ff[b] if d.n_ff and not f.is_moe else None
    family = f.spec.family if f.spec else None
    q_width, kv_width = _heads_width("n_head", nh, hk), _heads_width("n_head_kv", nkv, hk)
    if family is ShapeFamily.LLAMA:
        if base == "attn_q" and q_width is not None:
            return (e, q_width[0]), f"n_embd {e}, {q_width[1]}"
        if base == "attn_k" and kv_width is not None:
            return (e, kv_width[0]), f"n_embd {e}, {kv_width[1]}"
        v_width = _heads_width("n_head_kv", nkv, hv)
        if base == "attn_v" and v_width is not None:
            return (e, v_width[0]), f"n_embd {e}, {v_width[1]}"
        if base == "attn_output" and q_width is not None and (nh == 0 or hk == hv):
            return (q_width[0], e), f"{q_width[1]}, n_embd {e}"
        if base in ("ffn_gate", "ffn_up") and ff is not None:
            return (e, ff), f"n_embd {e}, n_ff {ff}"
        if base == "ffn_down" and ff is not None:
            return (ff, e), f"n_ff {ff}, n_embd {e}"
    elif family is ShapeFamily.PHI3:
        if base == "attn_qkv" and kv_width is not None:
            return (e, e + 2 * kv_width[0]), f"n_embd {e} + 2 x {kv_width[1]}"
        if base == "attn_output":
            return (e, e), f"n_embd {e}"
        if base == "ffn_up" and ff:
            return (e, 2 * ff), f"n_embd {e}, 2 x n_ff {ff} (gate and up)"
        if base == "ffn_down" and ff:
            return (ff, e), f"n_ff {ff}, n_embd {e}"
    return None


def _heads_width(what: str, heads: int | None, head_dim: int | None) -> tuple[int, str] | None:
    """``heads x head_dim`` and how it was got; zero heads are zero wide whatever the head size (llama.cpp
    then leaves the head size unset and expects a zero-wide tensor: asked, a retyped ``head_count``); None
    when either is unknown."""
    if heads == 0:
        return 0, f"{what} 0"
    if heads is None or not head_dim:
        return None
    return heads * head_dim, f"{what} {heads} x head_dim {head_dim}"


def _check_shapes(f: HeaderFacts) -> Iterator[Finding]:
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
        if expected[-1] == -1 or ggml_ne(t.shape) == ggml_ne(expected):
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
            Code.TENSOR_WRONG_SHAPE,
            f"tensor {quote(first.name)} has shape {list(first.shape)}; llama.cpp expects {list(group[2])} "
            f"({reasons[group]}){more}",
            tensor=first.name,
            offset=first.info_offset,
        )
