"""Statistics of decoded values: per block, per tensor, and the ``samples`` table's rows.

Pure: float arrays in, frozen summaries out. NaN and Inf are counted, never
averaged; the statistics of a union of blocks combine exactly (but for
rounding) from the blocks' own.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable
from functools import partial
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

__all__ = ["BlockStats", "SampleRow", "block_stats", "combine_stats", "row_stats", "tensor_stats"]


class BlockStats(NamedTuple):
    """Statistics of some decoded values.

    ``min`` to ``max_abs`` are over the finite values (population ``std``) and
    None when there is none; ``count`` counts every value.

    A NamedTuple rather than a frozen dataclass (as :class:`SampleRow` and the
    per-block values of :mod:`gguf_audit.plan` and :mod:`gguf_audit.decode.sampled`):
    a file's audit builds one per sampled block, about 2,000, and a tuple is
    built in a fraction of a frozen dataclass's time.
    """

    count: int  # type: ignore[assignment]  # the field shadows tuple.count, which nothing here calls
    min: float | None
    max: float | None
    mean: float | None
    std: float | None
    max_abs: float | None
    n_nan: int
    n_inf: int
    n_zero: int

    @property
    def n_finite(self) -> int:
        return self.count - self.n_nan - self.n_inf

    @property
    def zero_fraction(self) -> float:
        return self.n_zero / self.count if self.count else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "count": self.count,
            "min": self.min,
            "max": self.max,
            "mean": self.mean,
            "std": self.std,
            "max_abs": self.max_abs,
            "n_nan": self.n_nan,
            "n_inf": self.n_inf,
            "zero_fraction": self.zero_fraction,
        }


_as_stats = partial(tuple.__new__, BlockStats)
"""A BlockStats from a tuple of its fields, without a Python-level call (one per sampled block)."""


def block_stats(values: npt.NDArray[np.floating[Any]]) -> BlockStats:
    """Statistics of ``values`` (any float array; NaN and Inf are counted, not averaged)."""
    v = np.asarray(values).reshape(1, -1)
    return row_stats(v)[0]


def row_stats(values: npt.NDArray[np.floating[Any]]) -> list[BlockStats]:
    """:func:`block_stats` of every row of a 2-D array, in a few vectorised passes."""
    v = np.asarray(values)
    if v.ndim != 2:
        raise ValueError(f"row_stats takes a 2-D array. Got shape {v.shape}.")
    n_rows, width = v.shape
    with np.errstate(all="ignore"):
        finite = np.isfinite(v)
        if finite.all():
            # Nearly always: no masking needed, and the same sums in the same order as the masked path.
            n_finite = np.full(n_rows, width, dtype=np.int64)
            x = v.astype(np.float64)
            mean = x.sum(axis=1) / max(width, 1)
            d = x - mean[:, None]
            d *= d  # the square, in place: the same products as ** 2
            var = d.sum(axis=1) / max(width, 1)
            lo = x.min(axis=1)
            hi = x.max(axis=1)
            n_nan = n_inf = [0] * n_rows
        else:
            nan = np.isnan(v)
            inf = ~finite & ~nan
            n_finite = finite.sum(axis=1)
            x = np.where(finite, v, 0.0).astype(np.float64)
            mean = x.sum(axis=1) / np.maximum(n_finite, 1)
            var = np.where(finite, (x - mean[:, None]) ** 2, 0.0).sum(axis=1) / np.maximum(n_finite, 1)
            lo = np.where(finite, x, np.inf).min(axis=1)
            hi = np.where(finite, x, -np.inf).max(axis=1)
            # Python numbers once per column (tolist), not one numpy scalar per cell.
            n_nan = nan.sum(axis=1).tolist()
            n_inf = inf.sum(axis=1).tolist()
        max_abs = np.maximum(np.abs(lo), np.abs(hi))
    n_zero = (v == 0).sum(axis=1).tolist()
    count = [int(width)] * n_rows
    columns = (lo.tolist(), hi.tolist(), mean.tolist(), np.sqrt(var).tolist(), max_abs.tolist())
    out = list(map(_as_stats, zip(count, *columns, n_nan, n_inf, n_zero, strict=True)))
    # Rows with no finite value (rare): None, not the placeholders the masked sums left.
    for i in np.flatnonzero(n_finite == 0).tolist():
        out[i] = BlockStats(count[i], None, None, None, None, None, n_nan[i], n_inf[i], n_zero[i])
    return out


def combine_stats(parts: Iterable[BlockStats]) -> BlockStats | None:
    """The statistics of the union of the values ``parts`` describe (exact but for rounding)."""
    items = list(parts)
    if not items:
        return None
    count = sum(p.count for p in items)
    n_nan = sum(p.n_nan for p in items)
    n_inf = sum(p.n_inf for p in items)
    n_zero = sum(p.n_zero for p in items)
    # (n_finite, mean, std, min, max) of the parts that hold finite values.
    parts_with_values = [
        (p.n_finite, p.mean, p.std, p.min, p.max)
        for p in items
        if p.n_finite and p.mean is not None and p.std is not None and p.min is not None and p.max is not None
    ]
    if not parts_with_values:
        return BlockStats(count, None, None, None, None, None, n_nan, n_inf, n_zero)
    n = sum(k for k, *_ in parts_with_values)
    mean = sum(k * m for k, m, *_ in parts_with_values) / n
    var = sum(k * (s**2 + (m - mean) ** 2) for k, m, s, *_ in parts_with_values) / n
    lo = min(v[3] for v in parts_with_values)
    hi = max(v[4] for v in parts_with_values)
    return BlockStats(count, lo, hi, mean, math.sqrt(max(var, 0.0)), max(abs(lo), abs(hi)), n_nan, n_inf, n_zero)


class SampleRow(NamedTuple):
    """One row of the ``samples`` table: one decoded block and its statistics."""

    tensor: str
    block_index: int
    offset: int
    """Absolute offset of the block's first byte."""
    n_bytes: int
    type: str
    count: int  # type: ignore[assignment]  # the field shadows tuple.count, which nothing here calls
    min: float | None
    max: float | None
    mean: float | None
    std: float | None
    max_abs: float | None
    n_nan: int
    n_inf: int
    zero_fraction: float

    def as_dict(self) -> dict[str, Any]:
        # The fields are the samples table's columns, in order.
        return self._asdict()

    @property
    def stats(self) -> BlockStats:
        n_zero = round(self.zero_fraction * self.count)
        return BlockStats(
            self.count, self.min, self.max, self.mean, self.std, self.max_abs, self.n_nan, self.n_inf, n_zero
        )


def tensor_stats(rows: Iterable[SampleRow]) -> dict[str, BlockStats]:
    """Per-tensor statistics over every sampled block, from the block rows."""
    by_tensor: dict[str, list[BlockStats]] = defaultdict(list)
    for row in rows:
        by_tensor[row.tensor].append(row.stats)
    out: dict[str, BlockStats] = {}
    for name, parts in by_tensor.items():
        combined = combine_stats(parts)
        if combined is not None:
            out[name] = combined
    return out
