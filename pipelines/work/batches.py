"""Batches: the files one dask task audits, how many to a task, and halving a batch whose workers die.

Files are sent to workers in batches (:class:`Batch`, one task each). When
dask gives up on a batch (its workers keep dying), the driver splits it in two
(:func:`split_batch`) and resubmits the halves, up to :data:`MAX_SPLITS`
times, so a file that kills workers ends up alone.

Pure: values in, values out.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from gguf_audit.tables.listed import ListedFile

__all__ = ["MAX_SPLITS", "Batch", "auto_batch_size", "ids_of", "iter_batches", "make_batches", "split_batch"]

MAX_SPLITS: Final = 12
"""Halvings of a batch whose workers keep dying (2**12 files end up alone)."""


@dataclass(frozen=True, slots=True)
class Batch:
    """Files audited by one task."""

    batch_id: str
    files: tuple[ListedFile, ...]
    model_ids: tuple[str, ...]


def make_batches(
    files: Sequence[ListedFile], model_ids: Mapping[str, str], batch_size: int, *, prefix: str = "b"
) -> list[Batch]:
    """Consecutive files in batches of ``batch_size``."""
    return list(iter_batches(files, model_ids, batch_size, prefix=prefix))


def iter_batches(
    files: Sequence[ListedFile], model_ids: Mapping[str, str], batch_size: int, *, prefix: str = "b"
) -> Iterator[Batch]:
    """:func:`make_batches`, a batch at a time: the driver holds the batches in flight, not the night's."""
    size = max(1, batch_size)
    for start in range(0, len(files), size):
        chunk = tuple(files[start : start + size])
        yield Batch(f"{prefix}{start // size}", chunk, ids_of(model_ids, [f.url for f in chunk]))


def ids_of(model_ids: Mapping[str, str], urls: Sequence[str]) -> tuple[str, ...]:
    """The model of each of ``urls``: a night's ids (:class:`~gguf_audit.pipelines.scan.groups.ModelIds`, which
    has ``many``) are looked up a batch together."""
    many = getattr(model_ids, "many", None)
    if many is not None:
        return tuple(many(urls))
    return tuple(model_ids[u] for u in urls)


def auto_batch_size(n_files: int, slots: int, threads: int, threads_per_worker: int) -> int:
    """Files per task: about four tasks per dask thread, and enough to keep the I/O pool full."""
    per_slot = math.ceil(n_files / max(1, slots * 4))
    floor = math.ceil(threads / max(1, threads_per_worker))
    return max(1, min(1024, max(per_slot, floor)))


def split_batch(batch: Batch) -> list[Batch]:
    """``batch`` in two halves (``<id>.0`` and ``<id>.1``), or no batches when it holds one file."""
    if len(batch.files) <= 1:
        return []
    mid = len(batch.files) // 2
    return [
        Batch(f"{batch.batch_id}.0", batch.files[:mid], batch.model_ids[:mid]),
        Batch(f"{batch.batch_id}.1", batch.files[mid:], batch.model_ids[mid:]),
    ]
