"""What users of gguf-dump expect of ``inspect``'s text: names for ids, counts, floats as they were written.

- ``general.file_type`` by name: 15 is ``MOSTLY_Q4_K_M`` (llama.cpp's ``llama_ftype``, via gguf-py's
  ``LlamaFileType``);
- the parameter count (the tensors' elements), as ``8.03 B (8030261248)``;
- float32 values at their own precision: the shortest decimal that reads back as the same float32
  (``1e-05``, never ``9.999999747378752e-06``, the float64 the four bytes widen to);
- a hint to scan the whole set when the file is one shard of a split model.
"""

from __future__ import annotations

import math
from decimal import Decimal
from typing import Any

import numpy as np

from gguf_audit.format.model import KV, Header, ValueType
from gguf_audit.format.shard_names import file_name, parse_shard_name
from gguf_audit.gguf_constants import LlamaFileType

__all__ = ["file_type_label", "float32_repr", "parameter_count", "parameter_label", "scalar_repr", "shard_hint"]


def float32_repr(value: float) -> str:
    """The shortest decimal that reads back as the same float32 (``1e-05``); ``nan``, ``inf`` as such."""
    if not math.isfinite(value):
        return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
    single = np.float32(value)
    if value == 0 or 1e-4 <= abs(value) < 1e16:  # where Python's repr writes positional digits too
        return np.format_float_positional(single, unique=True, trim="0")
    return np.format_float_scientific(single, unique=True, trim="-", exp_digits=2)


def scalar_repr(kv: KV) -> str | None:
    """A scalar value as gguf-dump users read it, or None to leave it to the default."""
    value: Any = kv.value
    if kv.type is ValueType.FLOAT32 and isinstance(value, float | np.floating):
        return float32_repr(float(value))
    if kv.type is ValueType.FLOAT64 and isinstance(value, float | np.floating):
        return repr(float(value))
    if kv.key == "general.file_type" and isinstance(value, int | np.integer):
        label = file_type_label(int(value))
        return f"{int(value)} ({label})" if label else None
    return None


def file_type_label(file_type: int) -> str | None:
    """``MOSTLY_Q4_K_M`` for 15; None for an id llama.cpp does not define."""
    try:
        return LlamaFileType(file_type).name
    except ValueError:
        return None


def parameter_count(header: Header) -> int:
    """The tensors' elements added up (what llama.cpp prints as ``model params``)."""
    return sum(max(0, t.n_elements) for t in header.tensors)


def parameter_label(n: int) -> str:
    """``8.03 B (8030261248)``, ``124.4 M (124439808)``; a forged count past 1000 T in powers of ten.

    Integer and decimal arithmetic only: a forged header's count can pass 2**1024, where ``n / 1e12``
    raises OverflowError. Past 1000 T the exact count (hundreds of digits) is cut to its head and its
    number of digits.
    """
    if n >= 1000 * 10**12:
        digits = str(n)
        exact = digits if len(digits) <= 40 else f"{digits[:20]}… ({len(digits)} digits)"
        return f"{Decimal(n):.3e} ({exact})"
    for unit, scale in (("T", 10**12), ("B", 10**9), ("M", 10**6), ("K", 10**3)):
        if n >= scale:
            return f"{Decimal(n) / scale:.{2 if n < 100 * scale else 1}f} {unit} ({n})"
    return str(n)


def shard_hint(url: str, header: Header | None) -> str | None:
    """For one shard of a split model, how to audit the whole set; None for a single file."""
    shard = parse_shard_name(url)
    count = None
    if header is not None:
        kv = header.metadata.get("split.count")
        if kv is not None and isinstance(kv.value, int | np.integer):
            count = int(kv.value)
    if shard is None and (count is None or count <= 1):
        return None
    if shard is not None:
        count = shard.shard_count
        place = f"shard {shard.shard_index} of {shard.shard_count}"
    else:
        place = f"one shard of {count}"
    if count is not None and count <= 1:
        return None
    name = file_name(url)
    path = url.split("?", 1)[0].split("#", 1)[0]
    base = path[: len(path) - len(name)].rstrip("/") or "."
    pattern = name
    if shard is not None:
        stem = name[: -len(f"-{shard.shard_index:05d}-of-{shard.shard_count:05d}.gguf")]
        pattern = f"{stem}-*-of-{shard.shard_count:05d}.gguf"
    return (
        f"this file is {place} of a split model: shard-set checks (missing shards, counts, duplicate "
        f"tensors) need every shard; audit the set with: gguf-audit scan {base} --include '{pattern}' --out OUT"
    )
