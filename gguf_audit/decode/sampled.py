"""Sampled blocks decoded: each planned block's bytes, values, statistics and scale checks.

Pure: the bytes of :class:`~gguf_audit.plan.PlannedBlock` s in (read by
:mod:`gguf_audit.samples`), :class:`DecodedBlock` s, ``samples`` table rows
and a fingerprint of the sampled bytes out. The ``data.*`` findings over
them are :mod:`gguf_audit.checks.data`'s.
"""

from __future__ import annotations

import hashlib
import struct
from collections import defaultdict
from collections.abc import Iterable, Sequence
from enum import StrEnum
from functools import partial
from itertools import repeat
from operator import attrgetter
from typing import Final, NamedTuple

import numpy as np

from gguf_audit.bounded import clip
from gguf_audit.decode.kernels import F32Array, NoDecoder, decode_blocks, has_decoder
from gguf_audit.decode.scales import ScaleProblems, block_scale_problems, part_scale_problems
from gguf_audit.decode.stats import BlockStats, SampleRow, row_stats
from gguf_audit.format.ggml_types import ggml_type_name
from gguf_audit.plan import PlannedBlock

__all__ = ["DecodedBlock", "SampleStatus", "decode_sample", "decode_samples", "sample_fingerprint", "sample_rows"]


_STATS_ROWS: Final = 256
"""Blocks per :func:`row_stats` call."""


class SampleStatus(StrEnum):
    OK = "ok"
    NO_DECODER = "no_decoder"
    UNREAD = "unread"


class DecodedBlock(NamedTuple):
    """One sampled block: its bytes' fate, values and scale checks.

    A NamedTuple, as :class:`~gguf_audit.plan.PlannedBlock`: one per sampled block.
    """

    block: PlannedBlock
    status: SampleStatus
    values: F32Array | None = None
    stats: BlockStats | None = None
    scales: ScaleProblems | None = None
    note: str | None = None
    """Why there are no values (the decoder's or the read's message)."""
    raw: bytes | None = None
    """The block's bytes as read (decoded blocks only): what a re-quantization is compared with."""


_as_decoded = partial(tuple.__new__, DecodedBlock)
"""A DecodedBlock from a tuple of its fields, without a Python-level call (one per sampled block)."""


def decode_sample(block: PlannedBlock, raw: bytes | None, *, big_endian: bool = False) -> DecodedBlock:
    """Decode one sampled block read as ``raw`` (None: it could not be read)."""
    return decode_samples([(block, raw)], big_endian=big_endian)[0]


def decode_samples(
    items: Sequence[tuple[PlannedBlock, bytes | None]], *, big_endian: bool = False
) -> list[DecodedBlock]:
    """Decode sampled blocks, in the order given.

    Blocks of one type and size are decoded in one call, whichever tensors they
    belong to (a call costs far more than a block: a header may list thousands
    of one-block tensors), and their scales checked block by block only when
    the batch holds a bad one.
    """
    out: list[DecodedBlock | None] = [None] * len(items)
    batches: dict[tuple[int, int], list[int]] = defaultdict(list)
    decodable: dict[int, bool] = {}
    for i, (block, raw) in enumerate(items):
        type_id = block.type_id
        can = decodable.get(type_id)
        if can is None:
            can = decodable[type_id] = has_decoder(type_id, big_endian=big_endian)
        if raw is None or len(raw) != block.n_bytes:
            got = "nothing" if raw is None else f"{len(raw)} bytes"
            out[i] = DecodedBlock(block, SampleStatus.UNREAD, note=f"read {got} of {block.n_bytes}")
        elif not can:
            order = "big-endian " if big_endian else ""
            note = f"no decoder for {order}{ggml_type_name(type_id)} blocks"
            out[i] = DecodedBlock(block, SampleStatus.NO_DECODER, note=note)
        else:
            batches[(type_id, block.n_bytes)].append(i)
    # Values of every batch, grouped by values per block: one row_stats call per width, not per tensor.
    by_width: dict[int, list[tuple[list[int], F32Array, list[ScaleProblems]]]] = defaultdict(list)
    for indices in batches.values():
        type_id = items[indices[0]][0].type_id
        raw = b"".join(items[i][1] or b"" for i in indices)
        try:
            values = decode_blocks(raw, type_id, big_endian=big_endian).reshape(len(indices), -1)
            scales = block_scale_problems(raw, type_id, big_endian=big_endian)
            if scales.ok or (scales.type_rejected and scales.first_bad_block is None):
                clean = ScaleProblems(1, 0, 0, None, scales.type_rejected)
                per_block = [clean] * len(indices)
            else:
                per_block = part_scale_problems(raw, type_id, len(indices), big_endian=big_endian)
        except NoDecoder as exc:
            for i in indices:
                out[i] = DecodedBlock(items[i][0], SampleStatus.NO_DECODER, note=exc.message)
            continue
        by_width[values.shape[1]].append((indices, values, per_block))
    for group in by_width.values():
        every = np.concatenate([values for _, values, _ in group])
        # In slices that stay in cache: one call over thousands of rows is slower than a few.
        stats = iter([s for k in range(0, len(every), _STATS_ROWS) for s in row_stats(every[k : k + _STATS_ROWS])])
        for indices, values, per_block in group:
            blocks = [items[i] for i in indices]
            fields = zip(
                (block for block, _ in blocks),
                repeat(SampleStatus.OK),
                values,
                stats,
                per_block,
                repeat(None),
                (raw for _, raw in blocks),
            )
            for i, decoded in zip(indices, map(_as_decoded, fields), strict=True):
                out[i] = decoded
    return [d for d in out if d is not None]


def sample_rows(decoded: Iterable[DecodedBlock]) -> list[SampleRow]:
    """A row per decoded block (blocks without values get none)."""
    done = [d for d in decoded if d.stats is not None]
    blocks = [d.block for d in done]
    stats = [d.stats for d in done]
    names = {t: ggml_type_name(t) for t in {b.type_id for b in blocks}}
    # Columns read with C getters and zipped into rows: no Python call, and no object but the row, per block
    # (~2,000 a file; every object allocated brings the garbage collector's next pass nearer).
    fields = zip(
        map(clip, map(_TENSOR, blocks)),
        map(_BLOCK_INDEX, blocks),
        map(_OFFSET, blocks),
        map(_N_BYTES, blocks),
        map(names.__getitem__, map(_TYPE_ID, blocks)),
        *(map(attrgetter(name), stats) for name in _STATS_COLUMNS),
        strict=True,
    )
    return list(map(_as_row, fields))


_TENSOR, _BLOCK_INDEX, _OFFSET, _N_BYTES, _TYPE_ID = map(
    attrgetter, ("tensor", "block_index", "offset", "n_bytes", "type_id")
)
_STATS_COLUMNS: Final = ("count", "min", "max", "mean", "std", "max_abs", "n_nan", "n_inf", "zero_fraction")
_as_row = partial(tuple.__new__, SampleRow)


_FINGERPRINT_TAG: Final = b"gguf-audit sampled-data fingerprint v1\0"


def sample_fingerprint(blocks: Iterable[tuple[PlannedBlock, bytes]]) -> str | None:
    """A SHA-256 of the sampled bytes with their offsets; None when nothing was sampled.

    Two files with the same fingerprint hold the same bytes at the same
    absolute offsets in every sampled block: copies, or mirrors, of one
    file (the plan depends only on the tensor table and the seed, so copies
    sample the same blocks). Blocks are hashed in offset order as
    ``u64 offset, u64 length, bytes``.
    """
    items = sorted(blocks, key=_by_offset)
    if not items:
        return None
    h = hashlib.sha256(_FINGERPRINT_TAG)
    # One update over the joined stream hashes the same bytes as an update per piece.
    pieces = []
    for block, raw in items:
        pieces.append(_OFFSET_LENGTH.pack(block.offset, len(raw)))
        pieces.append(raw)
    h.update(b"".join(pieces))
    return h.hexdigest()


_OFFSET_LENGTH: Final = struct.Struct("<QQ")


def _by_offset(item: tuple[PlannedBlock, bytes]) -> int:
    return item[0].offset
