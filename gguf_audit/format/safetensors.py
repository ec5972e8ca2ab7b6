"""The safetensors header: a little-endian u64 length, then a JSON table of tensors.

Pure: the file's first bytes in, a :class:`SafetensorsHeader` (or how many
bytes it needs) out; :class:`ReferenceFormatError` for a malformed one.
safetensors lists dimensions in PyTorch order, the reverse of ggml's; the
flattened element order is the same (ggml's ``ne[0]`` is PyTorch's last,
contiguous dimension), so a :class:`ReferenceTensor` holds its shape in
ggml order.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from gguf_audit.errors import GGUFAuditError

__all__ = [
    "MAX_SAFETENSORS_HEADER_BYTES",
    "ReferenceFormatError",
    "ReferenceTensor",
    "SafetensorsHeader",
    "parse_safetensors_header",
]

MAX_SAFETENSORS_HEADER_BYTES: Final = 100_000_000
"""The safetensors format's own limit on its JSON header (``MAX_HEADER_SIZE``):
a forged length must not make us read, or allocate, more."""

_SAFETENSORS_DTYPES: Final[dict[str, int]] = {
    "F64": 28,
    "F32": 0,
    "F16": 1,
    "BF16": 30,
    "I64": 27,
    "I32": 26,
    "I16": 25,
    "I8": 24,
}
_SAFETENSORS_ITEM_BYTES: Final[dict[str, int]] = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
    "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1,
}  # fmt: skip


class ReferenceFormatError(GGUFAuditError, ValueError):
    """The reference file is neither a GGUF nor a well-formed safetensors file."""


@dataclass(frozen=True, slots=True)
class ReferenceTensor:
    """One tensor of the reference, located and typed for decoding."""

    name: str
    shape: tuple[int, ...]
    """In ggml order (``ne[0]`` first), whatever the file's own order."""
    type_id: int | None
    """The ggml type its bytes decode as; None for a dtype gguf-audit cannot decode."""
    dtype: str
    data_offset: int
    """Absolute offset of the first byte."""
    n_bytes: int


@dataclass(frozen=True, slots=True)
class SafetensorsHeader:
    """A parsed safetensors header."""

    header_bytes: int
    """8 plus the JSON length: where the data section starts."""
    tensors: tuple[ReferenceTensor, ...]
    metadata: Mapping[str, str] = field(default_factory=dict)


def parse_safetensors_header(buf: bytes, file_size: int | None = None) -> SafetensorsHeader | int:
    """Parse a safetensors header from the file's first bytes.

    Returns the header, or the number of bytes ``buf`` must hold for it to
    be parsed. Raises ReferenceFormatError for a malformed header.
    """
    if len(buf) < 8:
        return 8
    n = int.from_bytes(bytes(buf[:8]), "little")
    if n > MAX_SAFETENSORS_HEADER_BYTES:
        raise ReferenceFormatError(
            f"not a safetensors file: its header length {n} passes the format's {MAX_SAFETENSORS_HEADER_BYTES}. "
            f"Got {bytes(buf[:8]).hex()!r}."
        )
    if file_size is not None and 8 + n > file_size:
        raise ReferenceFormatError(
            f"the safetensors header ({n} bytes) passes the end of the {file_size}-byte file. Got {n}."
        )
    if len(buf) < 8 + n:
        return 8 + n
    try:
        doc = json.loads(bytes(buf[8 : 8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReferenceFormatError(f"safetensors header is not UTF-8 JSON: {exc}. Got {bytes(buf[8:40])!r}.") from exc
    if not isinstance(doc, dict):
        raise ReferenceFormatError(f"safetensors header must be a JSON object. Got {type(doc).__name__}.")
    data_start = 8 + n
    metadata = doc.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise ReferenceFormatError(f"safetensors __metadata__ must be an object. Got {metadata!r:.80}.")
    tensors = [_safetensors_tensor(name, entry, data_start, file_size) for name, entry in doc.items()]
    tensors.sort(key=lambda t: t.data_offset)
    return SafetensorsHeader(data_start, tuple(tensors), {str(k): str(v) for k, v in metadata.items()})


def _safetensors_tensor(name: str, entry: Any, data_start: int, file_size: int | None) -> ReferenceTensor:
    if not isinstance(entry, dict):
        raise ReferenceFormatError(f"safetensors entry {name!r} must be an object. Got {entry!r:.80}.")
    dtype = entry.get("dtype")
    shape = entry.get("shape")
    offsets = entry.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in _SAFETENSORS_ITEM_BYTES:
        raise ReferenceFormatError(f"safetensors tensor {name!r} has an unknown dtype. Got {dtype!r}.")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise ReferenceFormatError(f"safetensors tensor {name!r} needs a shape of ints >= 0. Got {shape!r:.80}.")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        raise ReferenceFormatError(f"safetensors tensor {name!r} needs data_offsets [begin, end]. Got {offsets!r:.80}.")
    n_bytes = offsets[1] - offsets[0]
    expected = math.prod(shape) * _SAFETENSORS_ITEM_BYTES[dtype]
    if n_bytes != expected:
        raise ReferenceFormatError(
            f"safetensors tensor {name!r} ({dtype}, shape {shape}) needs {expected} bytes; "
            f"its data_offsets span {n_bytes}. Got {offsets!r}."
        )
    if file_size is not None and data_start + offsets[1] > file_size:
        raise ReferenceFormatError(
            f"safetensors tensor {name!r} ends at {data_start + offsets[1]}, past the "
            f"{file_size}-byte file. Got {offsets!r}."
        )
    return ReferenceTensor(
        name=name,
        shape=tuple(reversed(shape)),
        type_id=_SAFETENSORS_DTYPES.get(dtype),
        dtype=dtype,
        data_offset=data_start + offsets[0],
        n_bytes=n_bytes,
    )
