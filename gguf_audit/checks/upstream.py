"""A GGUF file against its upstream (Hugging Face) configuration: what breaks inference when it differs.

:class:`Upstream` holds the upstream files already read and parsed (by
:mod:`gguf_audit.io.upstream`, or by a test): ``config.json``,
``tokenizer_config.json``, ``generation_config.json``, ``chat_template.jinja``
and a reduced ``tokenizer.json`` (its ``added_tokens`` and ``vocab_count``, the
number of ids its vocabulary and added tokens span). :func:`check_upstream` compares a
header with it, in this order:

- ``upstream.unreadable`` (warning): an upstream file that exists but is not
  valid JSON, not an object, or larger than the read limit.
- the chat templates (:mod:`gguf_audit.checks.upstream_template`).
- the special tokens: the GGUF's EOS must be one of the upstream's stop tokens
  (``config.json`` and ``generation_config.json`` ``eos_token_id``, an int or
  a list, and ``tokenizer_config.json`` ``eos_token``): ``upstream.eos_not_stop``
  (error); every upstream stop token must end generation in the GGUF (its EOS,
  EOT or EOM id, or a text llama.cpp adds to its end-of-generation set):
  ``upstream.stop_not_eog`` (warning); BOS (``upstream.bos_mismatch``, warning),
  PAD (``upstream.pad_mismatch``, info), and a special id whose text differs
  from the upstream's text for that id (``upstream.special_text``, warning).
- the hyperparameters: head counts, block count and embedding length
  (``upstream.hparam_mismatch``, error: a different model, or garbage output);
  context length (``upstream.context_length``, warning); ``rope_theta``
  (``upstream.rope_freq_base``, error); rope scaling type, factor, original
  context length and YaRN betas (``upstream.rope_scaling``, warning); vocabulary
  size (``upstream.vocab_size``: warning when the GGUF has more tokens than the
  upstream's ``vocab_size`` or fewer than its tokenizer's; info when it lacks only
  padding rows, which checkpoints commonly add to ``vocab_size``).

Multimodal configurations keep the language model's settings in ``text_config``;
those are read where the top level lacks them. Every finding names the GGUF key
and value and the upstream file, key and value; its offset is the GGUF key's.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import numpy as np

from gguf_audit.checks.facts import HeaderFacts
from gguf_audit.checks.tokenizer import _LLAMA_EOG_TEXTS, _TokenLookup
from gguf_audit.checks.upstream_template import check_templates
from gguf_audit.codes import Code
from gguf_audit.findings import Finding, Severity, finding

__all__ = ["UPSTREAM_FILES", "Upstream", "check_upstream"]

UPSTREAM_FILES: Final = (
    "config.json",
    "tokenizer_config.json",
    "generation_config.json",
    "chat_template.jinja",
    "tokenizer.json",
)
"""The upstream files read, in the order they are looked for."""


@dataclass(frozen=True, slots=True)
class Upstream:
    """An upstream configuration: where it is and the files found there."""

    url: str
    """The directory or repository the files were read from."""
    documents: Mapping[str, Any] = field(default_factory=dict)
    """File name to content: a JSON object (dict) for the ``.json`` files, the text of
    ``chat_template.jinja``; ``tokenizer.json`` reduced to ``added_tokens`` and ``vocab_count``."""
    unreadable: tuple[tuple[str, str], ...] = ()
    """Files found but not readable as expected: (file name, why)."""

    def json(self, name: str) -> Mapping[str, Any]:
        doc = self.documents.get(name)
        return doc if isinstance(doc, Mapping) else {}

    @property
    def found(self) -> bool:
        return bool(self.documents) or bool(self.unreadable)

    @property
    def config(self) -> Mapping[str, Any]:
        """``config.json``, with ``text_config``'s keys where the top level lacks them."""
        top = self.json("config.json")
        text = top.get("text_config")
        if isinstance(text, Mapping):
            return {**text, **{k: v for k, v in top.items() if v is not None}}
        return top


def check_upstream(facts: HeaderFacts, upstream: Upstream) -> Iterator[Finding]:
    """Yield every ``upstream.*`` finding of the file ``facts`` describes against ``upstream``."""
    for name, why in upstream.unreadable:
        yield finding(Code.UPSTREAM_UNREADABLE, f"{_join(upstream.url, name)}: {why}")
    if facts.continuation or not facts.model:
        return
    yield from check_templates(facts.header, upstream)
    yield from _check_special_tokens(facts, upstream)
    yield from _check_hparams(facts, upstream)


def _join(url: str, name: str) -> str:
    return f"{url.rstrip('/')}/{name}"


# ---------------------------------------------------------------- special tokens


def _ids(value: object) -> list[int]:
    """``eos_token_id`` and the like: an int, a list of ints, or null."""
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
    return []


def _token_text(value: object) -> str | None:
    """``tokenizer_config.json``'s ``eos_token`` and the like: a string or an AddedToken dict."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


class _Vocab:
    """Token texts by id and ids by text, from the GGUF and the upstream's added tokens."""

    def __init__(self, facts: HeaderFacts, upstream: Upstream) -> None:
        self.facts = facts
        self.lookup = _TokenLookup(facts.tokens, facts.token_types) if facts.tokens is not None else None
        self.upstream_text: dict[int, str] = {}
        for item in _list(upstream.json("tokenizer.json").get("added_tokens")):
            if isinstance(item, Mapping) and isinstance(item.get("id"), int) and isinstance(item.get("content"), str):
                self.upstream_text[item["id"]] = item["content"]
        decoder = upstream.json("tokenizer_config.json").get("added_tokens_decoder")
        if isinstance(decoder, Mapping):
            for key, item in decoder.items():
                text = _token_text(item)
                if text is not None and str(key).isascii() and str(key).isdigit():
                    self.upstream_text[int(key)] = text
        self.upstream_id = {text: tid for tid, text in self.upstream_text.items()}

    def gguf_text(self, tid: int) -> str | None:
        tokens = self.facts.tokens
        return tokens[tid] if tokens is not None and 0 <= tid < len(tokens) else None

    def id_of(self, text: str) -> int | None:
        """The upstream id of ``text``: its added tokens first, else the GGUF vocabulary's."""
        if text in self.upstream_id:
            return self.upstream_id[text]
        return self.lookup.find(text) if self.lookup is not None else None

    def show(self, tid: int) -> str:
        text = self.gguf_text(tid)
        return f"{tid} ({text!r})" if text is not None else f"{tid} (out of the vocabulary)"


@dataclass(frozen=True, slots=True)
class _Source:
    """Where an upstream token id came from, and the ids."""

    where: str
    ids: tuple[int, ...]

    def describe(self, vocab: _Vocab) -> str:
        shown = ", ".join(vocab.show(i) for i in self.ids[:4]) + (", ..." if len(self.ids) > 4 else "")
        return f"{self.where} {shown if len(self.ids) == 1 else '[' + shown + ']'}"


def _sources(role: str, upstream: Upstream, vocab: _Vocab) -> list[_Source]:
    """The upstream's ids for ``role`` (bos, eos, pad), each source apart."""
    out: list[_Source] = []
    for name, cfg in (
        ("config.json", upstream.config),
        ("generation_config.json", upstream.json("generation_config.json")),
    ):
        ids = _ids(cfg.get(f"{role}_token_id"))
        if ids:
            out.append(_Source(f"{name} {role}_token_id", tuple(ids)))
    text = _token_text(upstream.json("tokenizer_config.json").get(f"{role}_token"))
    if text is not None:
        tid = vocab.id_of(text)
        where = f"tokenizer_config.json {role}_token {text!r}"
        out.append(_Source(where, (tid,) if tid is not None else ()))
    return out


def _check_special_tokens(facts: HeaderFacts, upstream: Upstream) -> Iterator[Finding]:
    h = facts.header
    vocab = _Vocab(facts, upstream)
    gguf = {role: h.get_int(f"tokenizer.ggml.{key}") for role, key in _ROLE_KEYS.items()}
    offsets = {role: _offset(facts, f"tokenizer.ggml.{key}") for role, key in _ROLE_KEYS.items()}
    eos_sources = _sources("eos", upstream, vocab)
    stops = {i for s in eos_sources for i in s.ids}
    eos = gguf["eos"]
    if eos is not None and eos_sources and eos not in stops:
        said = "; ".join(s.describe(vocab) if s.ids else f"{s.where} (not in the GGUF vocabulary)" for s in eos_sources)
        yield finding(
            Code.UPSTREAM_EOS_NOT_STOP,
            f"tokenizer.ggml.eos_token_id {vocab.show(eos)} is not a stop token upstream: {said}",
            offset=offsets["eos"],
        )
    eog = {i for i in (gguf["eos"], gguf["eot"], gguf["eom"]) if i is not None}
    for source in eos_sources:
        for tid in source.ids:
            if tid in eog or vocab.gguf_text(tid) in _LLAMA_EOG_TEXTS:
                continue
            yield finding(
                Code.UPSTREAM_STOP_NOT_EOG,
                f"{source.where} {vocab.show(tid)} is a stop token upstream but does not end generation in the "
                f"GGUF (its eos is {vocab.show(eos) if eos is not None else 'unset'}, eot "
                f"{gguf['eot'] if gguf['eot'] is not None else 'unset'})",
                offset=offsets["eos"],
            )
            eog.add(tid)  # once per id
    for role, code in (("bos", Code.UPSTREAM_BOS_MISMATCH), ("pad", Code.UPSTREAM_PAD_MISMATCH)):
        ours = gguf[role]
        if ours is None:
            continue
        for source in _sources(role, upstream, vocab):
            if source.ids and ours not in source.ids:
                yield finding(
                    code,
                    f"tokenizer.ggml.{_ROLE_KEYS[role]} {vocab.show(ours)} differs from {source.describe(vocab)}",
                    offset=offsets[role],
                )
                break
    for role, special in gguf.items():
        if special is None:
            continue
        ours_text, theirs = vocab.gguf_text(special), vocab.upstream_text.get(special)
        if ours_text is not None and theirs is not None and ours_text != theirs:
            yield finding(
                Code.UPSTREAM_SPECIAL_TEXT,
                f"tokenizer.ggml.{_ROLE_KEYS[role]} {special} is {ours_text!r} in the GGUF but {theirs!r} upstream "
                f"(added tokens of tokenizer_config.json / tokenizer.json)",
                offset=offsets[role],
            )


_ROLE_KEYS: Final = {
    "bos": "bos_token_id",
    "eos": "eos_token_id",
    "eot": "eot_token_id",
    "eom": "eom_token_id",
    "pad": "padding_token_id",
}


def _offset(facts: HeaderFacts, key: str) -> int | None:
    kv = facts.header.metadata.get(key)
    return kv.offset if kv is not None else None


def _list(value: object) -> Sequence[Any]:
    return value if isinstance(value, list) else []


# ---------------------------------------------------------------- hyperparameters

_SHAPES: Final = (
    ("{arch}.attention.head_count", ("num_attention_heads", "n_head", "num_heads")),
    ("{arch}.attention.head_count_kv", ("num_key_value_heads", "n_head_kv", "num_kv_heads")),
    ("{arch}.block_count", ("num_hidden_layers", "n_layer", "num_layers")),
    ("{arch}.embedding_length", ("hidden_size", "n_embd", "d_model")),
)
_CONTEXT: Final = ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length", "n_ctx")

LLAMA_DEFAULT_FREQ_BASE: Final = 10000.0
"""The rope base llama.cpp uses when ``{arch}.rope.freq_base`` is absent."""


def _int_of(cfg: Mapping[str, Any], names: Sequence[str]) -> tuple[str, int] | None:
    for name in names:
        value = cfg.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return name, value
    return None


def _float_of(value: object) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _gguf_float(facts: HeaderFacts, key: str) -> float | None:
    value = facts.header.get(key)
    return float(value) if isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_) else None


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-5, abs_tol=1e-9)


def _check_hparams(facts: HeaderFacts, upstream: Upstream) -> Iterator[Finding]:
    cfg = upstream.config
    if not cfg or facts.arch is None:
        return
    for template, names in _SHAPES:
        key = facts.key(template)
        ours = facts.header.get_int(key)
        theirs = _int_of(cfg, names)
        if ours is None or theirs is None:
            continue
        expected = theirs[1]
        if template == "{arch}.block_count":
            nextn = _int_of(cfg, ("num_nextn_predict_layers",))
            if nextn is not None and ours == expected + nextn[1]:
                continue
        if ours != expected:
            yield finding(
                Code.UPSTREAM_HPARAM_MISMATCH,
                f"{key} {ours} differs from config.json {theirs[0]} {expected}",
                offset=_offset(facts, key),
            )
    key = facts.key("{arch}.context_length")
    ours_ctx, theirs_ctx = facts.header.get_int(key), _int_of(cfg, _CONTEXT)
    if ours_ctx is not None and theirs_ctx is not None and ours_ctx != theirs_ctx[1]:
        yield finding(
            Code.UPSTREAM_CONTEXT_LENGTH,
            f"{key} {ours_ctx} differs from config.json {theirs_ctx[0]} {theirs_ctx[1]}",
            offset=_offset(facts, key),
        )
    yield from _check_rope(facts, cfg)
    yield from _check_vocab_size(facts, cfg, upstream)


def _rope_settings(cfg: Mapping[str, Any]) -> tuple[float | None, Mapping[str, Any]]:
    """``rope_theta`` and the ``rope_scaling`` dict (older configs) or ``rope_parameters`` (newer)."""
    params = cfg.get("rope_parameters")
    params = params if isinstance(params, Mapping) else {}
    theta = _float_of(cfg.get("rope_theta"))
    if theta is None:
        theta = _float_of(params.get("rope_theta"))
    scaling = cfg.get("rope_scaling")
    return theta, scaling if isinstance(scaling, Mapping) else params


def _check_rope(facts: HeaderFacts, cfg: Mapping[str, Any]) -> Iterator[Finding]:
    theta, scaling = _rope_settings(cfg)
    key = facts.key("{arch}.rope.freq_base")
    ours = _gguf_float(facts, key)
    if theta is not None and not _close(ours if ours is not None else LLAMA_DEFAULT_FREQ_BASE, theta):
        shown = f"{ours:g}" if ours is not None else f"absent (llama.cpp uses {LLAMA_DEFAULT_FREQ_BASE:g})"
        yield finding(
            Code.UPSTREAM_ROPE_FREQ_BASE,
            f"{key} {shown} differs from config.json rope_theta {theta:g}",
            offset=_offset(facts, key),
        )
    kind = scaling.get("rope_type", scaling.get("type"))
    kind = kind if isinstance(kind, str) else None
    type_key = facts.key("{arch}.rope.scaling.type")
    ours_kind = facts.header.get_str(type_key)
    factor_key = facts.key("{arch}.rope.scaling.factor")
    ours_factor = _gguf_float(facts, factor_key)
    theirs_factor = _float_of(scaling.get("factor"))
    if kind in (None, "default"):
        if ours_kind not in (None, "none") and ours_factor not in (None, 0.0, 1.0):
            yield _rope(
                facts,
                type_key,
                f"{type_key} {ours_kind!r} (factor {ours_factor:g}) but config.json has no rope_scaling",
            )
        return
    if kind in ("linear", "yarn"):
        if ours_kind != kind:
            yield _rope(
                facts,
                type_key,
                f"{type_key} {ours_kind or 'absent'} differs from config.json rope_scaling type {kind!r}",
            )
            return
        if theirs_factor is not None and (ours_factor is None or not _close(ours_factor, theirs_factor)):
            shown = f"{ours_factor:g}" if ours_factor is not None else "absent"
            yield _rope(
                facts,
                factor_key,
                f"{factor_key} {shown} differs from config.json rope_scaling factor {theirs_factor:g}",
            )
    if kind == "llama3":
        if not facts.shard and all(t.name != "rope_freqs.weight" for t in facts.header.tensors):
            yield _rope(
                facts, type_key, "config.json rope_scaling is 'llama3' but the GGUF has no rope_freqs.weight tensor"
            )
        return
    pairs = [
        ("{arch}.rope.scaling.original_context_length", "original_max_position_embeddings"),
        ("{arch}.rope.scaling.yarn_beta_fast", "beta_fast"),
        ("{arch}.rope.scaling.yarn_beta_slow", "beta_slow"),
    ]
    for template, name in pairs:
        key = facts.key(template)
        theirs = _float_of(scaling.get(name))
        ours_value = _gguf_float(facts, key)
        if theirs is None or (ours_value is None and name != "original_max_position_embeddings"):
            continue
        if ours_value is None or not _close(ours_value, theirs):
            shown = f"{ours_value:g}" if ours_value is not None else "absent"
            yield _rope(facts, key, f"{key} {shown} differs from config.json rope_scaling {name} {theirs:g}")


def _rope(facts: HeaderFacts, key: str, message: str) -> Finding:
    return finding(Code.UPSTREAM_ROPE_SCALING, message, offset=_offset(facts, key))


def _check_vocab_size(facts: HeaderFacts, cfg: Mapping[str, Any], upstream: Upstream) -> Iterator[Finding]:
    n = facts.n_tokens
    theirs = _int_of(cfg, ("vocab_size", "padded_vocab_size"))
    if n is None or theirs is None or n == theirs[1]:
        return
    size = theirs[1]
    spanned = upstream.json("tokenizer.json").get("vocab_count")
    spanned = spanned if isinstance(spanned, int) and not isinstance(spanned, bool) else None
    base = f"tokenizer.ggml.tokens has {n} tokens, config.json {theirs[0]} is {size}"
    if n > size:
        yield finding(Code.UPSTREAM_VOCAB_SIZE, f"{base}: the GGUF has ids the upstream embedding lacks")
    elif spanned is not None and n < spanned:
        yield finding(Code.UPSTREAM_VOCAB_SIZE, f"{base} and tokenizer.json spans {spanned} ids: the GGUF lacks tokens")
    else:
        why = f"tokenizer.json spans {spanned} ids" if spanned is not None else "no tokenizer.json to tell"
        yield finding(Code.UPSTREAM_VOCAB_SIZE, f"{base}: padding rows only ({why})", severity=Severity.INFO)
