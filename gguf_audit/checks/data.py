"""Sampled tensor data: decoded values, their statistics, and the ``data.*`` findings.

Pure: raw block bytes in (read elsewhere, see :mod:`gguf_audit.sampling`),
statistics rows and findings out.

llama.cpp loads a file whatever its tensors hold: ``ggml_validate_row_data``
(``ggml/src/ggml-quants.c``), which rejects NaN and Inf values and scales, runs
at load time only with ``--check-tensors``. So none of these codes marks a
file as refused; they say the weights are broken.
"""

from __future__ import annotations

import hashlib
import math
import re
import struct
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from gguf_audit.decode import NoDecoder, ScaleProblems, block_scale_problems, decode_blocks, has_decoder
from gguf_audit.findings import Finding, finding
from gguf_audit.format.ggml_types import ggml_type_name
from gguf_audit.format.model import Header, TensorInfo
from gguf_audit.plan import PlannedBlock

__all__ = [
    "BlockStats",
    "DecodedBlock",
    "SampleRow",
    "SampleStatus",
    "block_stats",
    "check_samples",
    "combine_stats",
    "decode_sample",
    "decode_samples",
    "row_stats",
    "sample_fingerprint",
    "sample_rows",
    "tensor_stats",
    "zero_check_exempt",
]

F32Array = npt.NDArray[np.float32]


NONFINITE: Final = "data.nonfinite"
ZERO_FILLED: Final = "data.zero_filled"
BAD_SCALE: Final = "data.bad_scale"
NO_DECODER: Final = "data.no_decoder"
SAMPLE_UNREAD: Final = "data.sample_unread"

# Sampled blocks, all zero, before a tensor is called zero-filled: a single
# zero block may be a padding row of an otherwise written matrix.
_MIN_ZERO_BLOCKS: Final = 2

# Tensors that may legitimately be all zero (or that gguf-audit cannot tell
# about): norms, biases, LoRA adapters (lora_b starts at zero), rope factors,
# attention sinks, scales, and the state-space and RWKV mixing parameters.
_ZERO_OK: Final = re.compile(
    r"norm|\.bias$|_bias\b|exp_probs_b|lora|rope|sinks|scale|ssm_|time_mix|channel_mix|conv|_shift|token_types"
)

# Integer tensors (I8 to I64) hold indices and masks, not weights.
_INTEGER_TYPE_IDS: Final = frozenset({24, 25, 26, 27})


class SampleStatus(StrEnum):
    OK = "ok"
    NO_DECODER = "no_decoder"
    UNREAD = "unread"


@dataclass(frozen=True, slots=True)
class BlockStats:
    """Statistics of some decoded values.

    ``min`` to ``max_abs`` are over the finite values (population ``std``) and
    None when there is none; ``count`` counts every value.
    """

    count: int
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


def block_stats(values: npt.NDArray[np.floating[Any]]) -> BlockStats:
    """Statistics of ``values`` (any float array; NaN and Inf are counted, not averaged)."""
    v = np.asarray(values).reshape(1, -1)
    return row_stats(v)[0]


def row_stats(values: npt.NDArray[np.floating[Any]]) -> list[BlockStats]:
    """:func:`block_stats` of every row of a 2-D array, in a few vectorised passes."""
    v = np.asarray(values)
    if v.ndim != 2:
        raise ValueError(f"row_stats takes a 2-D array. Got shape {v.shape}.")
    with np.errstate(all="ignore"):
        nan = np.isnan(v)
        inf = np.isinf(v)
        finite = ~(nan | inf)
        n_finite = finite.sum(axis=1)
        x = np.where(finite, v, 0.0).astype(np.float64)
        mean = x.sum(axis=1) / np.maximum(n_finite, 1)
        var = np.where(finite, (x - mean[:, None]) ** 2, 0.0).sum(axis=1) / np.maximum(n_finite, 1)
        lo = np.where(finite, x, np.inf).min(axis=1)
        hi = np.where(finite, x, -np.inf).max(axis=1)
    n_nan = nan.sum(axis=1)
    n_inf = inf.sum(axis=1)
    n_zero = (v == 0).sum(axis=1)
    count = v.shape[1]
    out = []
    for i in range(v.shape[0]):
        if n_finite[i] == 0:
            out.append(BlockStats(count, None, None, None, None, None, int(n_nan[i]), int(n_inf[i]), int(n_zero[i])))
            continue
        low, high = float(lo[i]), float(hi[i])
        out.append(
            BlockStats(
                count=count,
                min=low,
                max=high,
                mean=float(mean[i]),
                std=float(np.sqrt(var[i])),
                max_abs=max(abs(low), abs(high)),
                n_nan=int(n_nan[i]),
                n_inf=int(n_inf[i]),
                n_zero=int(n_zero[i]),
            )
        )
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


@dataclass(frozen=True, slots=True)
class DecodedBlock:
    """One sampled block: its bytes' fate, values and scale checks."""

    block: PlannedBlock
    status: SampleStatus
    values: F32Array | None = None
    stats: BlockStats | None = None
    scales: ScaleProblems | None = None
    note: str | None = None
    """Why there are no values (the decoder's or the read's message)."""


def decode_sample(block: PlannedBlock, raw: bytes | None, *, big_endian: bool = False) -> DecodedBlock:
    """Decode one sampled block read as ``raw`` (None: it could not be read)."""
    return decode_samples([(block, raw)], big_endian=big_endian)[0]


def decode_samples(
    items: Sequence[tuple[PlannedBlock, bytes | None]], *, big_endian: bool = False
) -> list[DecodedBlock]:
    """Decode sampled blocks, in the order given.

    Blocks of one tensor are decoded in one call (a call costs far more than
    a block), and their scales checked block by block only when the batch
    holds a bad one.
    """
    out: list[DecodedBlock | None] = [None] * len(items)
    batches: dict[tuple[int, int], list[int]] = defaultdict(list)
    for i, (block, raw) in enumerate(items):
        if raw is None or len(raw) != block.n_bytes:
            got = "nothing" if raw is None else f"{len(raw)} bytes"
            out[i] = DecodedBlock(block, SampleStatus.UNREAD, note=f"read {got} of {block.n_bytes}")
        elif not has_decoder(block.type_id, big_endian=big_endian):
            order = "big-endian " if big_endian else ""
            note = f"no decoder for {order}{ggml_type_name(block.type_id)} blocks"
            out[i] = DecodedBlock(block, SampleStatus.NO_DECODER, note=note)
        else:
            batches[(block.tensor_index, block.n_bytes)].append(i)
    for indices in batches.values():
        blocks = [items[i][0] for i in indices]
        raw = b"".join(items[i][1] or b"" for i in indices)
        type_id = blocks[0].type_id
        try:
            values = decode_blocks(raw, type_id, big_endian=big_endian).reshape(len(blocks), -1)
            scales = block_scale_problems(raw, type_id, big_endian=big_endian)
            if scales.ok or (scales.type_rejected and scales.first_bad_block is None):
                clean = ScaleProblems(1, 0, 0, None, scales.type_rejected)
                per_block = [clean] * len(blocks)
            else:
                per_block = [block_scale_problems(items[i][1] or b"", type_id, big_endian=big_endian) for i in indices]
        except NoDecoder as exc:
            for i in indices:
                out[i] = DecodedBlock(items[i][0], SampleStatus.NO_DECODER, note=exc.message)
            continue
        for i, block, v, stats, sc in zip(indices, blocks, values, row_stats(values), per_block, strict=True):
            out[i] = DecodedBlock(block, SampleStatus.OK, values=v, stats=stats, scales=sc)
    return [d for d in out if d is not None]


# --- rows -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SampleRow:
    """One row of the ``samples`` table: one decoded block and its statistics."""

    tensor: str
    block_index: int
    offset: int
    """Absolute offset of the block's first byte."""
    n_bytes: int
    type: str
    count: int
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
        return {f.name: getattr(self, f.name) for f in fields(self)}

    @property
    def stats(self) -> BlockStats:
        n_zero = round(self.zero_fraction * self.count)
        return BlockStats(
            self.count, self.min, self.max, self.mean, self.std, self.max_abs, self.n_nan, self.n_inf, n_zero
        )


def sample_rows(decoded: Iterable[DecodedBlock]) -> list[SampleRow]:
    """A row per decoded block (blocks without values get none)."""
    rows = []
    for d in decoded:
        s = d.stats
        if s is None:
            continue
        b = d.block
        rows.append(
            SampleRow(
                tensor=b.tensor,
                block_index=b.block_index,
                offset=b.offset,
                n_bytes=b.n_bytes,
                type=ggml_type_name(b.type_id),
                count=s.count,
                min=s.min,
                max=s.max,
                mean=s.mean,
                std=s.std,
                max_abs=s.max_abs,
                n_nan=s.n_nan,
                n_inf=s.n_inf,
                zero_fraction=s.zero_fraction,
            )
        )
    return rows


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


# --- findings -------------------------------------------------------------------


def zero_check_exempt(tensor: TensorInfo) -> bool:
    """Whether an all-zero ``tensor`` may be legitimate (so it is never flagged).

    Only matrices are judged: vectors are norms, biases and scales, and a
    name that marks one of those, or an adapter, a rope factor or a
    state-space parameter, is exempt whatever its shape.
    """
    if tensor.type_id in _INTEGER_TYPE_IDS:
        return True
    if sum(1 for d in tensor.shape if d > 1) < 2:
        return True
    return _ZERO_OK.search(tensor.name) is not None


def check_samples(header: Header, decoded: Sequence[DecodedBlock]) -> Iterator[Finding]:
    """Yield the ``data.*`` findings of the sampled blocks of ``header``'s tensors."""
    by_tensor: Mapping[int, list[DecodedBlock]] = _group(decoded)
    for index, blocks in by_tensor.items():
        tensor = header.tensors[index]
        yield from _check_tensor(tensor, blocks)


def _group(decoded: Iterable[DecodedBlock]) -> dict[int, list[DecodedBlock]]:
    groups: dict[int, list[DecodedBlock]] = defaultdict(list)
    for d in decoded:
        groups[d.block.tensor_index].append(d)
    return dict(sorted(groups.items()))


def _check_tensor(tensor: TensorInfo, blocks: list[DecodedBlock]) -> Iterator[Finding]:
    name = tensor.name
    undecoded = [d for d in blocks if d.status is SampleStatus.NO_DECODER]
    if undecoded:
        yield finding(
            NO_DECODER,
            f"tensor {name!r}: {undecoded[0].note}; {len(undecoded)} sampled blocks not checked",
            tensor=name,
            offset=undecoded[0].block.offset,
        )
    ok = [d for d in blocks if d.status is SampleStatus.OK and d.stats is not None]
    if not ok:
        return

    # An MXFP4 exponent of 0xFF decodes as 2**127 and overflows to Inf: that
    # block is reported once, as a bad scale.
    nonfinite = [
        d
        for d in ok
        if d.stats is not None and (d.stats.n_nan or d.stats.n_inf or _bad_scales(d)) and not _bad_exponent(d)
    ]
    if nonfinite:
        n_nan = sum(d.stats.n_nan for d in nonfinite if d.stats is not None)
        n_inf = sum(d.stats.n_inf for d in nonfinite if d.stats is not None)
        n_scales = sum(1 for d in nonfinite if _bad_scales(d))
        first = nonfinite[0].block
        scales = f", {n_scales} with a NaN or Inf scale" if n_scales else ""
        yield finding(
            NONFINITE,
            f"tensor {name!r} ({tensor.type_name}): {len(nonfinite)} of {len(ok)} sampled blocks hold "
            f"NaN or Inf ({n_nan} NaN and {n_inf} Inf values{scales}); first at block {first.block_index}",
            tensor=name,
            offset=first.offset,
        )

    bad_exponent = [d for d in ok if _bad_exponent(d)]
    if bad_exponent:
        first = bad_exponent[0].block
        yield finding(
            BAD_SCALE,
            f"tensor {name!r} ({tensor.type_name}): {len(bad_exponent)} of {len(ok)} sampled blocks have "
            f"the exponent byte 0xFF (NaN in OCP MX); first at block {first.block_index}",
            tensor=name,
            offset=first.offset,
        )

    zero = [d for d in ok if d.stats is not None and d.stats.n_zero == d.stats.count]
    if len(zero) == len(ok) and len(ok) >= _MIN_ZERO_BLOCKS and not zero_check_exempt(tensor):
        yield finding(
            ZERO_FILLED,
            f"tensor {name!r} ({tensor.type_name}, {'x'.join(map(str, tensor.shape))}): all {len(ok)} "
            f"sampled blocks are zero, from block {ok[0].block.block_index} to {ok[-1].block.block_index}",
            tensor=name,
            offset=ok[0].block.offset,
        )


def _bad_scales(d: DecodedBlock) -> bool:
    return d.scales is not None and d.scales.nonfinite_scale_blocks > 0


def _bad_exponent(d: DecodedBlock) -> bool:
    return d.scales is not None and d.scales.bad_exponent_blocks > 0


# --- fingerprint ----------------------------------------------------------------

_FINGERPRINT_TAG: Final = b"gguf-audit sampled-data fingerprint v1\0"


def sample_fingerprint(blocks: Iterable[tuple[PlannedBlock, bytes]]) -> str | None:
    """A SHA-256 of the sampled bytes with their offsets; None when nothing was sampled.

    Two files with the same fingerprint hold the same bytes at the same
    absolute offsets in every sampled block: copies, or mirrors, of one
    file (the plan depends only on the tensor table and the seed, so copies
    sample the same blocks). Blocks are hashed in offset order as
    ``u64 offset, u64 length, bytes``.
    """
    items = sorted(blocks, key=lambda item: item[0].offset)
    if not items:
        return None
    h = hashlib.sha256(_FINGERPRINT_TAG)
    for block, raw in items:
        h.update(struct.pack("<QQ", block.offset, len(raw)))
        h.update(raw)
    return h.hexdigest()
