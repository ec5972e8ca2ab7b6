"""The header-size estimate: how long a header is, guessed from the part parsed so far.

When the buffer ends inside a header, :func:`estimate_header_bytes` sizes the
rest so the caller's next read can fetch all of it in one round trip:
tokenizer arrays from the vocabulary's length and its measured token lengths,
tensor infos from the ones already read, other keys at a typical size. Pure:
no I/O. Internal to :mod:`gguf_audit.format` (it reaches the caller as
:attr:`NeedMore.estimated_bytes <gguf_audit.format.model.NeedMore>`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from gguf_audit.errors import FormatError
from gguf_audit.format.model import KV, StringArray, ValueType
from gguf_audit.format.reader import Checkpoint, RawTensor, Reader, Short
from gguf_audit.format.walk import walk_short_items
from gguf_audit.format.wire import SCALAR_SIZE

__all__ = ["estimate_header_bytes"]

# A tensor-info record of a typical name (blk.12.ffn_down.weight), 2 dims.
_TYPICAL_TENSOR_INFO: Final = 8 + 28 + 4 + 2 * 8 + 4 + 8
# A key-value record of a typical key and a scalar or short string value.
_TYPICAL_KV: Final = 64
# The longest key the estimate looks for by name (the tokenizer arrays' keys are about 25 bytes).
_KNOWN_KEY_BYTES: Final = 64
# The guess before the counts are read: most headers without a vocabulary fit.
_GUESS_BEFORE_COUNTS: Final = 64 * 1024
# The margin on a guess: 3 % and 4 KiB over (a second round trip costs more).
_MARGIN: Final = 1.03
_MARGIN_BYTES: Final = 4096


def estimate_header_bytes(
    r: Reader,
    needed: int,
    kvs: list[KV],
    tensors: list[RawTensor],
    n_kv: int,
    n_tensors: int,
    cp: Checkpoint,
) -> int:
    """Guess the header's full length from what has been parsed.

    The guess errs a few percent high: a second round trip costs far more than
    a few kilobytes of tensor data read with the header.
    """
    if n_kv < 0:
        return max(needed, _GUESS_BEFORE_COUNTS)
    # From the last whole record on: what is known is re-estimated, so the
    # requirement of the record in progress is not counted twice.
    pos = cp.pos
    if len(kvs) < n_kv:
        current, rest = _estimate_rest_of_kvs(r, kvs, n_kv, cp.pos, needed)
        tensor_bytes = _TYPICAL_TENSOR_INFO
        rest += (n_tensors - len(tensors)) * tensor_bytes
    else:
        tensor_bytes = (cp.pos - tensors[0].info_offset) // len(tensors) if tensors else _TYPICAL_TENSOR_INFO
        left = n_tensors - len(tensors)
        current, rest = (tensor_bytes, (left - 1) * tensor_bytes) if left > 0 else (0, 0)
    # The record in progress ends where it was guessed to or where the parser
    # needs it to, whichever is further: a record longer than guessed (a long
    # key or string, its length known once read) is asked for whole with the
    # rest of the header after it, and an array in progress is counted once.
    estimate = max(pos + current, needed) + rest
    return max(needed, int(estimate * _MARGIN) + _MARGIN_BYTES)


def _estimate_rest_of_kvs(r: Reader, kvs: list[KV], n_kv: int, kv_pos: int, needed: int) -> tuple[int, int]:
    """Bytes of the key-value records not parsed yet, tokenizer-aware: the array in progress (0 when the
    buffer stopped elsewhere) and the records after it.

    Vocabulary arrays dominate big headers. Once the token list's length is
    known the arrays that usually follow it can be sized: scores and token
    types (4 bytes an item) and, for BPE tokenizers, merges (about one per
    token, each spelling the token it makes plus a space).
    """
    seen = {kv.key: kv for kv in kvs}
    partial = _partial_array(r, kv_pos, needed)
    current = partial.record_bytes if partial is not None else 0
    rest = 0
    partial_key = partial.key if partial is not None else None
    n_tokens = _vocab_size(seen, partial)
    remaining_keys = n_kv - len(kvs) - (1 if partial is not None else 0)
    expected: list[tuple[str, int]] = []
    if n_tokens:
        token_bytes = _mean_token_bytes(seen.get("tokenizer.ggml.tokens"), r, partial)
        model = seen.get("tokenizer.ggml.model")
        kind = model.value if model is not None else None
        expected.append(("tokenizer.ggml.token_type", 4 * n_tokens + 64))
        if kind == "gpt2":
            expected.append(("tokenizer.ggml.merges", int(n_tokens * (token_bytes + 1)) + 64))
        elif kind in ("llama", "t5", None):
            expected.append(("tokenizer.ggml.scores", 4 * n_tokens + 64))
    for key, nbytes in expected:
        if key not in seen and key != partial_key and remaining_keys > 0:
            rest += nbytes
            remaining_keys -= 1
    rest += max(remaining_keys, 0) * _TYPICAL_KV
    return current, rest


@dataclass(frozen=True, slots=True)
class _PartialArray:
    key: str
    n_items: int
    record_bytes: int
    """Estimated bytes of the whole record, key to last item."""
    item_bytes: int
    """Estimated mean bytes per item still to come (prefix included)."""


def _partial_array(r: Reader, kv_pos: int, needed: int) -> _PartialArray | None:
    """If the buffer stopped inside an array, estimate that array's record.

    String items are measured from those already held. Vocabularies are
    sorted by rank, so later tokens run longer: the mean of the second half
    of the held items stands for the ones still to come.
    """
    try:
        sub = Reader(r.buf, r.file_size, 1 if r.v1 else 3, r.order, r.limits)
        sub.pos = kv_pos
        # Only a few short keys matter here: a long one is skipped, not copied
        # or decoded (a corrupt length can make it megabytes).
        n = sub.read_count("key length")
        sub.need(sub.pos + n, "key")
        key = bytes(r.buf[sub.pos : sub.pos + n]).decode("utf-8", "replace") if n <= _KNOWN_KEY_BYTES else ""
        sub.pos += n
        # Only a guess is made here: an error's message (which would quote a key of any length) is dropped.
        if sub.read_value_type("key") is not ValueType.ARRAY:
            return None
        item_type = sub.read_value_type("key")
        n = sub.read_count("array length")
    except (Short, FormatError):
        return None
    start = sub.pos
    head = start - kv_pos
    if item_type in SCALAR_SIZE:
        size = SCALAR_SIZE[item_type]
        return _PartialArray(key, n, head + n * size, size)
    if item_type is not ValueType.STRING:
        return _PartialArray(key, n, head + n * 16, 16)
    ends = _item_ends(r.buf, start, n, sub.count.unpack_from, sub.count_bytes, not r.v1 and r.order == "little")
    done = len(ends)
    if done < 2:
        mean = sub.count_bytes + 8
        return _PartialArray(key, n, head + n * mean, mean)
    half = done // 2
    recent = -(-(ends[-1] - ends[half - 1]) // (done - half))
    return _PartialArray(key, n, head + (ends[-1] - start) + (n - done) * recent, recent)


def _item_ends(
    buf: bytes | memoryview, start: int, n: int, unpack: Callable[..., tuple[int]], prefix: int, walk: bool
) -> list[int]:
    """End offsets of the whole string items held in ``buf`` from ``start`` (``walk``: u64 little-endian
    lengths, most of them found in bulk first)."""
    ends: list[int] = []
    pos, limit = start, len(buf)
    if walk:
        prefixes, pos = walk_short_items(buf, start, n)
        if len(prefixes):
            ends = [*prefixes[1:].tolist(), pos]
    while len(ends) < n and pos + prefix <= limit:
        pos += prefix + unpack(buf, pos)[0]
        if pos > limit:
            break
        ends.append(pos)
    return ends


def _vocab_size(seen: dict[str, KV], partial: _PartialArray | None) -> int:
    tokens = seen.get("tokenizer.ggml.tokens")
    if tokens is not None and tokens.length:
        return tokens.length
    if partial is not None and partial.key == "tokenizer.ggml.tokens":
        return partial.n_items
    return 0


def _mean_token_bytes(tokens: KV | None, r: Reader, partial: _PartialArray | None) -> float:
    """Mean bytes of a token item, prefix included."""
    if tokens is not None and isinstance(tokens.value, StringArray) and len(tokens.value):
        return float(tokens.value.lengths().mean()) + r.count_bytes
    if partial is not None and partial.key == "tokenizer.ggml.tokens" and partial.n_items:
        # The whole list's mean as estimated (the held items and the rest at the recent mean), not the
        # recent mean alone: merges spell tokens of every rank.
        return partial.record_bytes / partial.n_items
    return 8 + r.count_bytes
