"""What ``llama_vocab::load`` (b11312) refuses or aborts on beyond the names: byte tokens and side arrays.

:mod:`gguf_audit.checks.tokenizer` judges the names, the token arrays and the special
ids; this module the rest of the load, each verdict asked of the oracle:

- BYTE tokens: the load builds a token-to-piece cache, which reads every BYTE
  token with ``token_to_byte``. A WordPiece (``bert``) vocabulary has no case there
  (``GGML_ABORT``: aborts).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

import numpy as np
from gguf.constants import TokenType

from gguf_audit.checks.facts import HeaderFacts
from gguf_audit.findings import Finding, finding
from gguf_audit.llama import llama_tables

__all__ = ["check_vocab"]

TOKENIZER_WPM_BYTE_TOKEN: Final = "tokenizer.wpm_byte_token"


def check_vocab(f: HeaderFacts) -> Iterator[Finding]:
    """The byte tokens and side arrays of the vocabulary, as ``llama_vocab::load`` reads them."""
    yield from _check_byte_tokens(f)


def _check_byte_tokens(f: HeaderFacts) -> Iterator[Finding]:
    tt = f.token_types
    tokens = f.tokens
    if tt is None or tokens is None or len(tt) != len(tokens):
        return
    byte_ids = np.flatnonzero(np.asarray(tt) == int(TokenType.BYTE))
    build = llama_tables().build
    if f.tokenizer_model == "bert" and len(byte_ids):
        first = int(byte_ids[0])
        yield finding(
            TOKENIZER_WPM_BYTE_TOKEN,
            f"the WordPiece vocabulary has {len(byte_ids)} BYTE tokens, the first {tokens[first][:40]!r} at token "
            f"{first}: llama.cpp {build} aborts",
        )
