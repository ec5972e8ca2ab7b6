"""What a dask worker runs: a batch's audit, a compare task, and the values they take and give back.

The worker side of a night, kept apart from the driver (:mod:`~gguf_audit.pipelines.scan`) so that a
worker's imports are the library, the store's data files and this room: never the listing, the driver's
memory or dask itself (``tests/test_layers.py`` checks it in a fresh interpreter).
"""

from __future__ import annotations

from gguf_audit.pipelines.work.batches import MAX_SPLITS, Batch, auto_batch_size, ids_of, iter_batches, split_batch
from gguf_audit.pipelines.work.compare_task import CompareBatch, CompareOptions, CompareResult, compare_batch
from gguf_audit.pipelines.work.execute import BatchResult, TaskOptions, audit_batch, lost_result
from gguf_audit.pipelines.work.tally import FACT_COLUMNS, Tally, facts_of

__all__ = [
    "FACT_COLUMNS",
    "MAX_SPLITS",
    "Batch",
    "BatchResult",
    "CompareBatch",
    "CompareOptions",
    "CompareResult",
    "Tally",
    "TaskOptions",
    "audit_batch",
    "auto_batch_size",
    "compare_batch",
    "facts_of",
    "ids_of",
    "iter_batches",
    "lost_result",
    "split_batch",
]
