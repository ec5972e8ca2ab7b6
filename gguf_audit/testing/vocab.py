"""Vocabulary-only GGUF files for tests: a tokenizer model, its pre-tokenizer and arrays, no tensors.

llama.cpp loads such a file with ``vocab_only`` (``llama-verdict --vocab-only``):
the architecture is looked up, ``load_hparams`` stops after ``general.name`` and
``llama_vocab::load`` reads the tokenizer. The file is small (about 5 KB), so
one oracle call can judge a hundred of them. Write one with
``build_gguf(vocab_kvs(...), [])``.
"""

from __future__ import annotations

from collections.abc import Sequence

from gguf_audit.format.model import ValueType
from gguf_audit.testing.builder import KV, kv_array, kv_str, kv_u32

__all__ = ["byte_tokens", "vocab_kvs"]

_NORMAL, _UNKNOWN, _CONTROL, _BYTE = 1, 2, 3, 6


def byte_tokens() -> list[str]:
    """The 256 SPM byte-fallback tokens, ``<0x00>`` to ``<0xFF>``."""
    return [f"<0x{b:02X}>" for b in range(256)]


def vocab_kvs(
    model: str,
    *,
    pre: str | None = "default",
    arch: str = "llama",
    merges: bool = True,
    with_bytes: bool | None = None,
    extra: Sequence[KV] = (),
) -> list[KV]:
    """The KVs of a small vocabulary of tokenizer ``model`` (``pre`` None: no ``tokenizer.ggml.pre``).

    ``with_bytes`` adds the 256 BYTE tokens (by default for every model but ``bert``,
    whose WordPiece loader aborts on a BYTE token); ``merges`` adds one BPE merge.
    """
    if with_bytes is None:
        with_bytes = model != "bert"
    tokens = ["<unk>", "<s>", "</s>"]
    types = [_UNKNOWN, _CONTROL, _CONTROL]
    if with_bytes:
        tokens += byte_tokens()
        types += [_BYTE] * 256
    pieces = ["a", "b", "ab", "▁", "Ġ", "Ċ", "[CLS]", "[SEP]"]
    tokens += pieces
    types += [_NORMAL] * len(pieces)
    kvs = [kv_str("general.architecture", arch), kv_str("general.type", "vocab"), kv_str("tokenizer.ggml.model", model)]
    if pre is not None:
        kvs.append(kv_str("tokenizer.ggml.pre", pre))
    kvs += [
        kv_array("tokenizer.ggml.tokens", ValueType.STRING, tokens),
        kv_array("tokenizer.ggml.scores", ValueType.FLOAT32, [0.0] * len(tokens)),
        kv_array("tokenizer.ggml.token_type", ValueType.INT32, types),
        kv_u32("tokenizer.ggml.bos_token_id", 1),
        kv_u32("tokenizer.ggml.eos_token_id", 2),
        kv_u32("tokenizer.ggml.unknown_token_id", 0),
    ]
    if merges:
        kvs.append(kv_array("tokenizer.ggml.merges", ValueType.STRING, ["a b"]))
    return [*kvs, *extra]
