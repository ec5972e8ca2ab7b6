"""Untrusted header values as table cells: int64 or null, text Arrow accepts, JSON heads and digests.

Metadata values are untrusted and can be huge (a 256k-token vocabulary, a
template of megabytes): the ``metadata`` table stores each value as JSON cut
to :data:`MAX_ARRAY_ITEMS` items and :data:`MAX_VALUE_CHARS` characters, with
its full ``length``, a ``truncated`` flag and a SHA-256 of the whole value, so
"which models share this tokenizer or chat template" is a query over digests.

Pure: values in, cell values out.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any, Final

import numpy as np

from gguf_audit.format.model import KV, StringArray, Value, ValueType, json_scalar

__all__ = [
    "MAX_ARRAY_ITEMS",
    "MAX_ITEM_CHARS",
    "MAX_VALUE_CHARS",
    "ValueCells",
    "arrow_text",
    "digest",
    "fits_int64",
    "i64",
    "value_cells",
]

MAX_ARRAY_ITEMS: Final = 32
"""Array items kept in ``metadata.value``; ``length`` has the real count."""
MAX_VALUE_CHARS: Final = 65536
"""Characters of a string value kept (most chat templates fit whole)."""
MAX_ITEM_CHARS: Final = 1024
"""Characters kept of each string inside a truncated array."""

_INT64_MIN, _INT64_MAX = -(1 << 63), (1 << 63) - 1


def i64(value: object) -> int | None:
    """An int for an int64 column, or None when it is not one or does not fit."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        return None
    n = int(value)
    return n if _INT64_MIN <= n <= _INT64_MAX else None


def fits_int64(*values: int) -> bool:
    """Whether every one of ``values`` fits an int64 column."""
    return all(_INT64_MIN <= v <= _INT64_MAX for v in values)


def arrow_text(value: str) -> str:
    """``value`` as text Arrow accepts (lone surrogates escaped)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")
    return value


def _scalar_json(value: Any) -> Any:
    value = json_scalar(value)
    return arrow_text(value) if isinstance(value, str) else value


def _head_json(value: Value, items: int, chars: int) -> tuple[Any, bool]:
    """The first ``items`` items of an array value as JSON data, and whether that is all of it."""
    if isinstance(value, StringArray):
        n = len(value)
        whole = value[: min(n, items)]
        return [arrow_text(s[:chars]) for s in whole], n > items or any(len(s) > chars for s in whole)
    if isinstance(value, np.ndarray):
        n = int(value.shape[0]) if value.ndim else 1
        return [_scalar_json(v) for v in value[:items].tolist()], n > items
    if isinstance(value, list):
        out = []
        cut = len(value) > items
        for item in value[:items]:
            sub, sub_cut = _head_json(item, items, chars)
            out.append(sub)
            cut = cut or sub_cut
        return out, cut
    return _scalar_json(value), False


def digest(value: Value) -> str | None:
    """SHA-256 of a string or array value's bytes, None for other scalars.

    Strings hash their UTF-8; numeric arrays their little-endian items; string
    arrays each item's u64 length and bytes (so item boundaries count).
    """
    h = hashlib.sha256()
    if isinstance(value, str):
        h.update(value.encode("utf-8", "surrogatepass"))
    elif isinstance(value, StringArray):
        lengths = value.lengths()
        h.update(np.asarray(lengths, dtype="<u8").tobytes())
        h.update(value.joined_bytes())
    elif isinstance(value, np.ndarray):
        h.update(np.ascontiguousarray(value, dtype=value.dtype.newbyteorder("<")).tobytes())
    elif isinstance(value, list):
        for item in value:
            inner = digest(item)
            h.update((inner or "").encode())
    else:
        return None
    return h.hexdigest()


@dataclass(frozen=True, slots=True)
class ValueCells:
    """The ``metadata`` cells of one key-value record."""

    value: str | None
    value_text: str | None
    length: int | None
    truncated: bool
    sha256: str | None


def value_cells(kv: KV) -> ValueCells:
    """``kv``'s value as JSON (cut), as text for scalars, its full length, whether it was cut, its digest."""
    value = kv.value
    if kv.type is ValueType.ARRAY:
        head, cut = _head_json(value, MAX_ARRAY_ITEMS, MAX_ITEM_CHARS)
        return ValueCells(json.dumps(head, ensure_ascii=False, allow_nan=False), None, kv.length, cut, digest(value))
    if isinstance(value, str):
        cut = len(value) > MAX_VALUE_CHARS
        text = arrow_text(value[:MAX_VALUE_CHARS])
        return ValueCells(json.dumps(text, ensure_ascii=False), text, len(value), cut, digest(value))
    scalar = _scalar_json(value)
    shown = json.dumps(scalar, ensure_ascii=False, allow_nan=False)
    text = ("true" if scalar else "false") if isinstance(scalar, bool) else str(scalar)
    return ValueCells(shown, text, None, False, None)
