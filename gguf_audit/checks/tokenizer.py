"""The tokenizer, as ``llama_vocab::load`` (``src/llama-vocab.cpp``) reads it, and as chat templates use it.

The keys it needs (``tokenizer.ggml.model``, the token list, BPE merges), a tokenizer
model and BPE pre-tokenizer it knows, the arrays beside the token list (length and
type), the special ids (in range) and token types (1 to 6). Given the chat templates'
renders of the standard conversation, whether each assistant turn ends with a
control EOS/EOT token (or a text llama.cpp stops on) and whether BOS is written twice.

Cost: a 256k-token vocabulary costs a few numpy passes over ``token_type`` and the
token lengths; token strings are decoded only for the handful of special ids.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from functools import cache
from typing import Final

import numpy as np
import numpy.typing as npt

from gguf_audit.bounded import quote
from gguf_audit.checks.facts import NO_VOCAB, SPECIAL_ID_KEYS, HeaderFacts
from gguf_audit.checks.metadata import missing_key
from gguf_audit.codes import Code, endangers
from gguf_audit.findings import Finding, Severity, finding
from gguf_audit.format.model import StringArray
from gguf_audit.gguf_constants import Keys, TokenType
from gguf_audit.llama import llama_tables
from gguf_audit.templates.conversations import standard_conversations

__all__ = ["MAX_TOKEN_COMPARES", "check_template_tokens", "check_tokenizer", "check_tokenizer_keys"]


def check_tokenizer_keys(f: HeaderFacts) -> Iterator[Finding]:
    """The keys ``llama_vocab::load`` needs, and a tokenizer model and BPE pre-tokenizer it knows.

    The names are the pinned build's (:func:`gguf_audit.llama.llama_tables`): a name
    missing there is one that build refuses ('unknown tokenizer', 'unknown pre-tokenizer type').
    """
    h = f.header
    model = f.tokenizer_model
    tables = llama_tables()
    if Keys.Tokenizer.MODEL not in h.metadata:
        yield missing_key(Keys.Tokenizer.MODEL, "llama.cpp cannot tell the tokenizer type")
    if model in NO_VOCAB:
        return
    if Keys.Tokenizer.LIST not in h.metadata:
        yield missing_key(Keys.Tokenizer.LIST, "llama.cpp throws 'cannot find tokenizer vocab in model file'")
    pre = f.c_str(Keys.Tokenizer.PRE)
    # Kimi-K2's BPE vocabulary has no merges; llama.cpp skips them for that pre-tokenizer (not for gemma4).
    merges_optional = model in _BPE_MODELS and pre == "kimi-k2"
    if (
        model in tables.tokenizer_models_needing_merges
        and Keys.Tokenizer.MERGES not in h.metadata
        and not merges_optional
    ):
        yield missing_key(Keys.Tokenizer.MERGES, f"a {model!r} tokenizer needs them ('cannot find tokenizer merges')")
    if model is not None and model not in tables.tokenizer_models:
        yield finding(
            Code.TOKENIZER_UNKNOWN_MODEL,
            f"tokenizer.ggml.model is {quote(model)}, not one of llama.cpp {tables.build}'s tokenizers "
            f"({', '.join(sorted(tables.tokenizer_models))})",
        )
    # Only the BPE models read the pre-tokenizer name (gemma4 sets its own); SPM, WPM and UGM ignore it.
    if model in _BPE_MODELS and pre and pre not in tables.bpe_pre_tokenizers:
        yield finding(
            Code.TOKENIZER_UNKNOWN_PRE,
            f"tokenizer.ggml.pre is {quote(pre)}, not a pre-tokenizer llama.cpp {tables.build} knows: it throws "
            "'unknown pre-tokenizer type'",
        )


# The tokenizer.ggml.model values llama_vocab::load takes as BPE and whose tokenizer.ggml.pre it reads.
_BPE_MODELS: Final = frozenset({"gpt2", "hybriddna", "whitespace"})


def check_tokenizer(f: HeaderFacts) -> Iterator[Finding]:
    """The pre-tokenizer, the arrays beside the token list, the special ids and the token types."""
    h = f.header
    n_tokens = f.n_tokens
    model = f.tokenizer_model
    if model in _BPE_MODELS and not f.c_str(Keys.Tokenizer.PRE):
        yield finding(
            Code.TOKENIZER_MISSING_PRE,
            "the BPE tokenizer has no tokenizer.ggml.pre; llama.cpp falls back to the 'default' pre-tokenizer",
        )
    # Current llama-vocab.cpp throws 'invalid gguf type' for scores that are not an
    # array of float32 or int32 and for token types that are not an array of int32,
    # and 'Index out of array bounds' for either shorter than the token list; builds
    # before llama.cpp PR #27075 read them as float/int32 whatever they were, past
    # the end of a shorter array.
    scores = h.metadata.get(Keys.Tokenizer.SCORES)
    if scores is not None and scores.type_name not in ("array[float32]", "array[int32]"):
        yield finding(
            Code.TOKENIZER_WRONG_ARRAY_TYPE,
            f"tokenizer.ggml.scores is stored as {scores.type_name}; llama.cpp reads only array[float32] or "
            f"array[int32] {endangers('vocab_arrays')}",
            offset=scores.offset,
        )
    types = h.metadata.get(Keys.Tokenizer.TOKEN_TYPE)
    if types is not None and types.type_name != "array[int32]":
        yield finding(
            Code.TOKENIZER_WRONG_ARRAY_TYPE,
            f"tokenizer.ggml.token_type is stored as {types.type_name}; llama.cpp reads only array[int32] "
            f"{endangers('vocab_arrays')}",
            offset=types.offset,
        )
    if n_tokens is None:
        return
    for kv in (scores, types):
        if kv is not None and kv.length is not None and kv.length < n_tokens:
            yield finding(
                Code.TOKENIZER_ARRAY_LENGTH_MISMATCH,
                f"{kv.key} has {kv.length} entries but tokenizer.ggml.tokens has {n_tokens} "
                f"{endangers('vocab_arrays')}",
                offset=kv.offset,
            )
    yield from _check_byte_tokens(f)
    # llama_vocab::load warns 'bad special token' and keeps the role's default id (asked of b11312: a
    # bos, eos or eot id past the vocabulary loads), so a warning whatever the role.
    for _, key in SPECIAL_ID_KEYS:
        kv = h.metadata.get(key)
        value = h.get_int(key)
        if kv is not None and value is not None and not 0 <= value < n_tokens:
            yield finding(
                Code.TOKENIZER_SPECIAL_ID_OUT_OF_RANGE,
                f"{key} is {value}, but the vocabulary has {n_tokens} tokens (ids 0 to {n_tokens - 1}); "
                "llama.cpp keeps its default id for it",
                offset=kv.offset,
            )
    tt = f.token_types
    if tt is not None and len(tt):
        values = np.asarray(tt)
        bad = (values < int(TokenType.NORMAL)) | (values > int(TokenType.BYTE))
        n_bad = int(np.count_nonzero(bad))
        if n_bad:
            first = int(np.argmax(bad))
            yield finding(
                Code.TOKENIZER_BAD_TOKEN_TYPE,
                f"tokenizer.ggml.token_type has {n_bad} values outside 1 to 6, the first {int(values[first])} "
                f"at token {first}",
                offset=types.offset if types is not None else None,
            )


# Matched on the undecoded bytes: a text decodes to '<0xNN>' exactly when its bytes are those six.
_BYTE_TOKEN: Final = re.compile(rb"<0x[0-9A-Fa-f]{2}>\Z")


def _check_byte_tokens(f: HeaderFacts) -> Iterator[Finding]:
    """BYTE-type tokens whose text is not ``<0xNN>`` (the PLaMo-2 out-of-bounds write)."""
    tt = f.token_types
    tokens = f.header.get(Keys.Tokenizer.LIST)
    if tt is None or not len(tt) or not isinstance(tokens, StringArray):
        return
    byte_ids = np.flatnonzero(np.asarray(tt) == int(TokenType.BYTE))
    bad = [int(i) for i in byte_ids.tolist() if i < len(tokens) and not _BYTE_TOKEN.match(tokens.raw(i))]
    if not bad:
        return
    plamo2 = f.tokenizer_model == "plamo2"
    first = bad[0]
    where = (
        "a PLaMo-2 vocabulary: older builds take it as a byte index and write out of bounds"
        if plamo2
        else "SPM reads two hex digits from it; a PLaMo-2 vocabulary would be written out of bounds"
    )
    yield finding(
        Code.TOKENIZER_BAD_BYTE_TOKEN,
        f"{len(bad)} BYTE tokens are not '<0xNN>', the first {tokens[first][:40]!r} at token {first}, in {where} "
        f"{endangers('plamo2_byte')}",
        severity=Severity.ERROR if plamo2 else Severity.WARNING,
    )


def _token(f: HeaderFacts, role: str) -> tuple[int, str] | None:
    """The id and text of a special token named by its key, when the id is in range."""
    key = dict(SPECIAL_ID_KEYS)[role]
    tid = f.header.get_int(key)
    tokens = f.tokens
    if tid is None or tokens is None or not 0 <= tid < len(tokens):
        return None
    text = tokens[tid]
    return (tid, text) if text else None


def _token_type(f: HeaderFacts, tid: int) -> int | None:
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


def check_template_tokens(f: HeaderFacts, renders: Mapping[str, str]) -> Iterator[Finding]:
    """Each rendered chat template: its assistant turns closed by a control EOS/EOT, and BOS written once."""
    tokens = f.tokens
    if tokens is None:
        return
    declared = [(role, *tok) for role in ("eot", "eom", "eos") if (tok := _token(f, role)) is not None]
    bos = _token(f, "bos")
    lookup = _TokenLookup(tokens, f.token_types)
    for key, text in renders.items():
        if bos is not None and _adds_bos(f) and text.startswith(bos[1]):
            yield finding(
                Code.TOKENIZER_DOUBLE_BOS,
                f"{key}: the rendered template starts with the BOS text {quote(bos[1])} and add_bos_token is true, "
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
        names = " or ".join(f"{role.upper()} {quote(t)}" for role, _, t in declared)
        if not hits:
            tail = region.strip()[-40:]
            yield finding(
                Code.TOKENIZER_EOS_NOT_IN_TEMPLATE,
                f"{key}: the assistant turn is not closed by {names}; the render ends {quote(tail)}",
            )
            continue
        _, _, tid, t = min(hits)
        if known:
            yield finding(
                Code.TOKENIZER_EOS_NOT_IN_TEMPLATE,
                f"{key}: the assistant turn ends with {quote(t)} (id {tid}), not {names}; llama.cpp stops on it by its "
                "text, other runtimes may not",
                severity=Severity.INFO,
            )
        ttype = _token_type(f, tid)
        if ttype is not None and ttype != TokenType.CONTROL:
            override = " (llama.cpp warns and overrides its type)" if t in _LLAMA_EOG_TEXTS else ""
            yield finding(
                Code.TOKENIZER_EOS_NOT_IN_TEMPLATE,
                f"{key}: the assistant turn ends with {quote(t)} (id {tid}), a {_type_name(ttype)} token, "
                f"not a control token{override}",
            )


def _adds_bos(f: HeaderFacts) -> bool:
    explicit = f.header.get_bool(Keys.Tokenizer.ADD_BOS)
    if explicit is not None:
        return explicit
    # llama_vocab::load defaults add_bos to true for SPM ("llama") vocabularies.
    return f.tokenizer_model == "llama"
