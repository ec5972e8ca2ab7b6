"""The ``gguf`` card the local Hub serves for a repository, read from its GGUF files as the Hub does.

The Hub parses a repository's GGUF (``@huggingface/gguf``) and serves, with
``expand=gguf`` (and in a full model info), ``total`` (parameters, summed over
the tensors of every shard of the set), ``architecture``, ``context_length``,
``chat_template``, ``bos_token`` and ``eos_token``. Here: the first ``.gguf``
of the commit in path order (a split set's first shard, with the parameters
of all its shards), parsed with gguf-audit's own parser.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gguf_audit.format.model import Header
from gguf_audit.format.parser import parse_header
from gguf_audit.format.shard_names import parse_shard_name

__all__ = ["gguf_card"]


def _header(data: bytes) -> Header | None:
    try:
        parsed = parse_header(data, len(data))
    except Exception:  # noqa: BLE001 - a broken upload gets no card, as on the Hub
        return None
    return parsed if isinstance(parsed, Header) else None


def _token(header: Header, key: str) -> str | None:
    tokens = header.get("tokenizer.ggml.tokens")
    index = header.get_int(key)
    if isinstance(tokens, list) and index is not None and 0 <= index < len(tokens):
        token = tokens[index]
        return token if isinstance(token, str) else None
    return None


def gguf_card(files: Mapping[str, bytes]) -> dict[str, Any] | None:
    """The card of a commit whose files are ``{path: bytes}``; None when it holds no readable GGUF."""
    ggufs = sorted(p for p in files if p.endswith(".gguf"))
    if not ggufs:
        return None
    first = ggufs[0]
    header = _header(files[first])
    if header is None:
        return None
    shard = parse_shard_name(first)
    members = [first]
    if shard is not None:
        members = [p for p in ggufs if (s := parse_shard_name(p)) is not None and s.model_id == shard.model_id]
    total = 0
    for path in members:
        member = header if path == first else _header(files[path])
        total += sum(t.n_elements for t in member.tensors) if member is not None else 0
    architecture = header.get("general.architecture")
    card: dict[str, Any] = {"total": total}
    if isinstance(architecture, str):
        card["architecture"] = architecture
        context = header.get_int(f"{architecture}.context_length")
        if context is not None:
            card["context_length"] = context
    template = header.get("tokenizer.chat_template")
    if isinstance(template, str):
        card["chat_template"] = template
    for name, key in (("bos_token", "tokenizer.ggml.bos_token_id"), ("eos_token", "tokenizer.ggml.eos_token_id")):
        token = _token(header, key)
        if token is not None:
            card[name] = token
    return card
