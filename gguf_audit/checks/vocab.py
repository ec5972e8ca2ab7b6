"""What ``llama_vocab::load`` (b11312) refuses or aborts on beyond the names: tokens, byte tokens, side arrays.

:mod:`gguf_audit.checks.tokenizer` judges the names, the token arrays and the special
ids; this module the rest of the load, each verdict asked of the oracle. The load
stops at its first failure, so a later one is reported only when nothing before it
refuses the file (a duplicate token aborts, unless an unknown pre-tokenizer was
refused first), in llama.cpp's order:

- ``tokenizer.ggml.precompiled_charsmap``, read by ``t5`` (UGM) only with the
  model: an array of int8 or uint8, at least its 4-byte XCDA size, which must
  leave bytes after the blob (refused otherwise).
- Two tokens with the same text abort (``GGML_ASSERT``) once the token list is read; a
  text is read as a C string, up to its first NUL byte (``'a\\0b'`` is ``'a'``).
- ``tokenizer.ggml.suppress_tokens``, read by every vocabulary but ``none``: an
  array of int32 or refused (its ids out of range are dropped, not refused).

- BYTE tokens: the load builds a token-to-piece cache, which reads every BYTE
  token with ``token_to_byte``. A WordPiece (``bert``) vocabulary has no case there
  (``GGML_ABORT``: aborts); SPM, UGM and BPE ones take the text from its fourth
  byte, and a text of one or two bytes throws (refused; an empty text is renamed
  ``[EMPTY_n]`` first). A PLaMo-2 vocabulary needs a ``<0xNN>`` BYTE token for
  each of the 256 bytes (refused otherwise).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Final

import numpy as np

from gguf_audit.checks.facts import NO_VOCAB, HeaderFacts
from gguf_audit.checks.hparams import refused_in_load_hparams
from gguf_audit.codes import Code
from gguf_audit.findings import Finding, finding
from gguf_audit.format.model import StringArray
from gguf_audit.gguf_constants import TokenType
from gguf_audit.llama import llama_tables

__all__ = ["check_vocab"]


# What llm_tokenizer_plamo2 takes as a byte token: six bytes, '<0x', two hex digits, '>'.
_PLAMO2_BYTE: Final = re.compile(rb"<0x([0-9A-Fa-f]{2})>")

_SUPPRESS_TOKENS: Final = "tokenizer.ggml.suppress_tokens"
_CHARSMAP: Final = "tokenizer.ggml.precompiled_charsmap"

# The tokenizer.ggml.model values llama_vocab::load takes as BPE and whose tokenizer.ggml.pre it reads.
_BPE_MODELS: Final = frozenset({"gpt2", "hybriddna", "whitespace"})

# Odd multipliers mixing a token's length, first and last 8 bytes into one 64-bit key.
_MIX: Final = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xC2B2AE3D27D4EB4F), np.uint64(0x165667B19E3779F9))

# The tokenizer models whose token_to_byte reads ``text.substr(3, 2)`` (SPM, UGM, BPE).
_SUBSTR_BYTE_MODELS: Final = frozenset({"llama", "t5", "gpt2", "hybriddna", "whitespace", "gemma4"})


def check_vocab(f: HeaderFacts) -> Iterator[Finding]:
    """The tokens, byte tokens and side arrays of the vocabulary, as ``llama_vocab::load`` reads them."""
    if f.tokenizer_model in NO_VOCAB:
        return
    charsmap = list(_check_charsmap(f)) if f.tokenizer_model == "t5" else []
    yield from charsmap
    if charsmap or _refused_before_tokens(f):
        return
    # A model whose load_hparams throws never reaches its vocabulary: its aborts are not reported.
    aborts_reached = not refused_in_load_hparams(f)
    # llama.cpp keys its token map by each text up to its first NUL byte (a C string).
    tokens = f.tokens.up_to_nul() if f.tokens is not None else None
    duplicate = _first_duplicate(tokens) if tokens is not None and aborts_reached else None
    if tokens is not None and duplicate is not None:
        first, second = duplicate
        cut = " (each read up to its first NUL byte)" if tokens is not f.tokens else ""
        yield finding(
            Code.TOKENIZER_DUPLICATE_TOKEN,
            f"tokens {first} and {second} are both {tokens[first][:40]!r}{cut}: llama.cpp "
            f"{llama_tables().build} aborts",
        )
        return
    suppress = f.header.metadata.get(_SUPPRESS_TOKENS)
    if suppress is not None and suppress.type_name != "array[int32]":
        yield finding(
            Code.TOKENIZER_WRONG_ARRAY_TYPE,
            f"{_SUPPRESS_TOKENS} is stored as {suppress.type_name}; llama.cpp {llama_tables().build} reads only "
            "array[int32] ('invalid gguf type')",
            offset=suppress.offset,
        )
        return
    yield from _check_byte_tokens(f, aborts_reached)


def _refused_before_tokens(f: HeaderFacts) -> bool:
    """Whether ``llama_vocab::load`` throws before it reads the token list: an unknown tokenizer or
    pre-tokenizer, missing or mistyped merges, a token list, scores or token types it cannot read
    (each reported by :mod:`gguf_audit.checks.tokenizer` or :mod:`gguf_audit.checks.metadata`)."""
    h = f.header
    tables = llama_tables()
    model = f.tokenizer_model
    if model is None or model not in tables.tokenizer_models or f.tokens is None:
        return True
    pre = f.c_str("tokenizer.ggml.pre")
    merges = h.metadata.get("tokenizer.ggml.merges")
    if model in tables.tokenizer_models_needing_merges:
        if merges is None and not (model != "gemma4" and pre == "kimi-k2"):
            return True
        if merges is not None and merges.type_name != "array[string]":
            return True
    if model in _BPE_MODELS and pre and pre not in tables.bpe_pre_tokenizers:
        return True
    n = len(f.tokens)
    for key, types in (
        ("tokenizer.ggml.scores", ("array[float32]", "array[int32]")),
        ("tokenizer.ggml.token_type", ("array[int32]",)),
    ):
        kv = h.metadata.get(key)
        if kv is not None and (kv.type_name not in types or (kv.length or 0) < n):
            return True
    return False


def _first_duplicate(tokens: StringArray) -> tuple[int, int] | None:
    """The first two ids whose (non-empty) texts are equal, or None.

    Each text is keyed by its length, first 8 and last 8 bytes (exact up to 16 bytes);
    keys are bucketed by their top bits, those sharing a bucket sorted, and only equal
    keys compared byte for byte: a few numpy passes over the token count, no full sort.
    """
    lengths = tokens.lengths()
    head, tail = tokens.edge_words()
    ids = np.flatnonzero(lengths > 0)
    if len(ids) < 2:
        return None
    keys = head[ids] * _MIX[0] + tail[ids] * _MIX[1] + lengths[ids].astype(np.uint64) * _MIX[2]
    # Buckets by the keys' top bits (a quarter full): only keys sharing a bucket are sorted.
    bits = min(len(keys).bit_length() + 2, 30)
    bucket = (keys >> np.uint64(64 - bits)).astype(np.intp)
    shared = np.flatnonzero(np.bincount(bucket, minlength=1 << bits)[bucket] > 1)
    if not len(shared):
        return None
    ids, keys = ids[shared], keys[shared]
    order = np.argsort(keys, kind="stable")
    ranked = keys[order]
    # Runs of equal keys: texts longer than 16 bytes may share one and differ inside.
    run_starts = np.flatnonzero(np.concatenate(([True], ranked[1:] != ranked[:-1])))
    run_ends = np.concatenate((run_starts[1:], [len(ranked)]))
    multi = run_ends - run_starts > 1
    pairs: list[tuple[int, int]] = []
    for lo, hi in zip(run_starts[multi].tolist(), run_ends[multi].tolist(), strict=True):
        seen: dict[bytes, int] = {}
        for i in sorted(int(ids[j]) for j in order[lo:hi].tolist()):
            text = tokens.raw(i)
            if text in seen:
                pairs.append((seen[text], i))
            else:
                seen[text] = i
    return min(pairs) if pairs else None


def _check_charsmap(f: HeaderFacts) -> Iterator[Finding]:
    kv = f.header.metadata.get(_CHARSMAP)
    if kv is None:
        return
    build = llama_tables().build
    if kv.type_name not in ("array[int8]", "array[uint8]") or not isinstance(kv.value, np.ndarray):
        yield finding(
            Code.TOKENIZER_WRONG_ARRAY_TYPE,
            f"{_CHARSMAP} is stored as {kv.type_name}; llama.cpp {build} reads only array[int8] or array[uint8] "
            "('invalid gguf type')",
            offset=kv.offset,
        )
        return
    size = len(kv.value)
    if size < 4:
        why = f"{size} bytes, too small for its 4-byte XCDA size ('too small for xcda_blob_size header')"
    else:
        blob = int.from_bytes(kv.value[:4].astype(np.uint8).tobytes(), "little")
        if blob + 4 < size:
            return
        why = f"{size} bytes, but its XCDA blob is {blob} bytes after the 4-byte size ('Index out of array bounds')"
    yield finding(Code.TOKENIZER_BAD_CHARSMAP, f"{_CHARSMAP} is {why}: llama.cpp {build} throws", offset=kv.offset)


def _check_byte_tokens(f: HeaderFacts, aborts_reached: bool) -> Iterator[Finding]:
    tt = f.token_types
    tokens = f.tokens.up_to_nul() if f.tokens is not None else None  # the texts llama.cpp keeps (C strings)
    if tt is None or tokens is None or len(tt) != len(tokens):
        return
    byte_ids = np.flatnonzero(np.asarray(tt) == int(TokenType.BYTE))
    build = llama_tables().build
    if f.tokenizer_model == "bert" and len(byte_ids) and aborts_reached:
        first = int(byte_ids[0])
        yield finding(
            Code.TOKENIZER_WPM_BYTE_TOKEN,
            f"the WordPiece vocabulary has {len(byte_ids)} BYTE tokens, the first {tokens[first][:40]!r} at token "
            f"{first}: llama.cpp {build} aborts",
        )
    if f.tokenizer_model in _SUBSTR_BYTE_MODELS and len(byte_ids):
        lengths = tokens.lengths()[byte_ids]
        short = byte_ids[(lengths > 0) & (lengths < 3)]
        if len(short):
            first = int(short[0])
            yield finding(
                Code.TOKENIZER_SHORT_BYTE_TOKEN,
                f"{len(short)} BYTE tokens are one or two bytes long, the first {tokens[first]!r} at token {first}: "
                f"llama.cpp {build} throws 'basic_string::substr'",
            )
    if f.tokenizer_model == "plamo2":
        covered = {int(m.group(1), 16) for i in byte_ids.tolist() if (m := _PLAMO2_BYTE.fullmatch(tokens.raw(i)))}
        if len(covered) < 256:
            missing = min(set(range(256)) - covered)
            yield finding(
                Code.TOKENIZER_MISSING_BYTE_TOKENS,
                f"the PLaMo-2 vocabulary has BYTE tokens for {len(covered)} of the 256 bytes, none for "
                f"<0x{missing:02X}>: llama.cpp {build} throws 'Byte token for <0x{missing}> is not set'",
            )
