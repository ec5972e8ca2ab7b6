"""Two fingerprints per file: the weights, and the metadata that changes inference.

Both are computed from what an audit already holds (the header and the sampled
blocks), with no extra read.

``weights_fingerprint`` hashes the whole tensor table, sorted by name
(``name, ndim, dims, type`` per tensor: the names as llama.cpp matches them,
byte for byte), and the bytes of each tensor's *first* block (block index 0)
when the plan read it, as ``name, block index, length, bytes`` in name order.
Offsets, alignment, tensor order and every metadata key are left out, so a
re-templated, renamed or re-aligned copy of the same weights hashes the same,
*provided both plans read the same set of first blocks*. Sample windows are
placed by absolute offset (gguf_audit.plan.windows favours first blocks but
does not promise every one), so two copies whose data sections start at
different offsets can read different first blocks and then fail to match; a
mismatch is therefore "not proven the same", never "proven different". Blocks
other than first blocks are not hashed, so a difference only there is not seen.

``metadata_fingerprint`` hashes, per group (:data:`METADATA_GROUPS`), the keys
that change what a model does with a prompt: the chat templates, the special
token ids and their texts, the tokenizer model and pre-tokenizer, the
vocabulary (tokens, types, scores, merges), the context length and the rope
keys. ``general.*`` (name, description, license ...) is left out.
:func:`metadata_parts` gives the per-group digests, so two files can be told
apart by group (``template``, ``special_tokens`` ...).
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Iterable
from typing import Final

import numpy as np

from gguf_audit.format.model import Header, StringArray, Value
from gguf_audit.plan import PlannedBlock

__all__ = ["METADATA_GROUPS", "metadata_fingerprint", "metadata_parts", "weights_fingerprint"]

_WEIGHTS_TAG: Final = b"gguf-audit weights fingerprint v1\0"
_METADATA_TAG: Final = b"gguf-audit metadata fingerprint v1\0"

METADATA_GROUPS: Final = ("template", "special_tokens", "tokenizer", "vocabulary", "context", "rope")
"""The groups of inference metadata, in hashing order."""

_VOCAB_KEYS: Final = frozenset(
    {"tokenizer.ggml.tokens", "tokenizer.ggml.token_type", "tokenizer.ggml.scores", "tokenizer.ggml.merges"}
)


def weights_fingerprint(header: Header, blocks: Iterable[tuple[PlannedBlock, bytes]]) -> str:
    """SHA-256 of the tensor table and the first blocks read (see the module docstring)."""
    h = hashlib.sha256(_WEIGHTS_TAG)
    tensors = sorted(header.tensors, key=lambda t: t.name.encode("utf-8", "surrogatepass"))
    h.update(struct.pack("<Q", len(tensors)))
    for t in tensors:
        name = t.name.encode("utf-8", "surrogatepass")
        h.update(struct.pack("<Q", len(name)) + name)
        # Dims and the type id are hashed as the words the file holds: a negative dim or a type id
        # with its high bit set (both read signed) is still a tensor of the table, never an error here.
        words = [d & 0xFFFF_FFFF_FFFF_FFFF for d in t.shape]
        h.update(struct.pack(f"<Q{len(words)}QI", len(words), *words, t.type_id & 0xFFFF_FFFF))
    firsts = sorted(
        ((b.tensor.encode("utf-8", "surrogatepass"), raw) for b, raw in blocks if b.block_index == 0),
        key=lambda item: item[0],
    )
    h.update(struct.pack("<Q", len(firsts)))
    for name, raw in firsts:
        h.update(struct.pack("<Q", len(name)) + name)
        h.update(struct.pack("<QQ", 0, len(raw)))
        h.update(raw)
    return h.hexdigest()


def _group(key: str, arch: str | None) -> str | None:
    if key == "tokenizer.chat_template" or key.startswith("tokenizer.chat_template."):
        return "template"
    if key.startswith("tokenizer.ggml.") and (key.endswith("_token_id") or key.startswith("tokenizer.ggml.add_")):
        return "special_tokens"
    if key in ("tokenizer.ggml.model", "tokenizer.ggml.pre"):
        return "tokenizer"
    if key in _VOCAB_KEYS:
        return "vocabulary"
    if arch is not None and key == f"{arch}.context_length":
        return "context"
    if arch is not None and key.startswith(f"{arch}.rope."):
        return "rope"
    return None


def _hash_value(h: hashlib._Hash, value: Value) -> None:
    if isinstance(value, bool):
        h.update(b"b" + (b"\1" if value else b"\0"))
    elif isinstance(value, int):
        h.update(b"i" + str(value).encode())
    elif isinstance(value, float):
        h.update(b"f" + struct.pack("<d", value))
    elif isinstance(value, str):
        data = value.encode("utf-8", "surrogatepass")
        h.update(b"s" + struct.pack("<Q", len(data)) + data)
    elif isinstance(value, StringArray):
        h.update(b"S" + np.asarray(value.lengths(), dtype="<u8").tobytes())
        h.update(value.joined_bytes())
    elif isinstance(value, np.ndarray):
        h.update(b"a" + str(value.dtype.newbyteorder("<")).encode() + struct.pack("<Q", value.size))
        h.update(np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<")).tobytes())
    else:
        h.update(b"l" + struct.pack("<Q", len(value)))
        for item in value:
            _hash_value(h, item)


def _special_texts(header: Header) -> list[tuple[str, str]]:
    """``(key, token text)`` for each special token id naming a token of the vocabulary."""
    tokens = header.get("tokenizer.ggml.tokens")
    if not isinstance(tokens, StringArray):
        return []
    out: list[tuple[str, str]] = []
    for kv in header.kvs:
        if kv.key.startswith("tokenizer.ggml.") and kv.key.endswith("_token_id"):
            value = kv.value
            if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < len(tokens):
                out.append((kv.key, tokens[value]))
    return out


def metadata_parts(header: Header) -> dict[str, str]:
    """A SHA-256 per group of :data:`METADATA_GROUPS` over that group's keys (absent keys count too)."""
    arch = header.get_str("general.architecture")
    hashers = {group: hashlib.sha256(group.encode() + b"\0") for group in METADATA_GROUPS}
    for kv in sorted(header.kvs, key=lambda kv: kv.key):
        group = _group(kv.key, arch)
        if group is None:
            continue
        key = kv.key.removeprefix(f"{arch}.") if arch is not None else kv.key
        data = key.encode("utf-8", "surrogatepass")
        hashers[group].update(struct.pack("<Q", len(data)) + data)
        _hash_value(hashers[group], kv.value)
    for key, text in _special_texts(header):
        hashers["special_tokens"].update(b"text\0" + key.encode() + b"\0")
        _hash_value(hashers["special_tokens"], text)
    return {group: h.hexdigest() for group, h in hashers.items()}


def metadata_fingerprint(header: Header, parts: dict[str, str] | None = None) -> str:
    """SHA-256 over :func:`metadata_parts`, in :data:`METADATA_GROUPS` order (``parts``: those of
    ``header`` when the caller has them already)."""
    h = hashlib.sha256(_METADATA_TAG)
    for group, part in (metadata_parts(header) if parts is None else parts).items():
        h.update(group.encode() + b"=" + part.encode() + b"\n")
    return h.hexdigest()
