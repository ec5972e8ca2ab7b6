"""The worker side of a scan's second phase: :func:`compare_batch` compares quantized files against their
family's full-precision file and writes the ``compare`` rows; it never raises for a pair's sake.

Each pair reads the quantized file's header and sampled blocks and the
reference's header and the same elements (:func:`gguf_audit.compare.compare_files`
within a :class:`~gguf_audit.compare.CompareBudget`), on the worker's shared
I/O pool. The task writes one ``compare`` row per tensor compared and returns
the data file, the rows' count and each pair's findings (a few small values:
the driver files them as ``problems`` of the quantized file's model).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Final

from gguf_audit.checks.lineage import Pair
from gguf_audit.compare import CompareBudget, Comparison, compare_files
from gguf_audit.errors import SourceError, describe_exception
from gguf_audit.findings import Finding, finding
from gguf_audit.io.source import ReadConfig
from gguf_audit.pipelines.discover import options_for
from gguf_audit.pipelines.execute import WORKER_POOLS
from gguf_audit.pipelines.parts import PartFile, RunParts
from gguf_audit.redact import redact_text
from gguf_audit.tables.lineage import compare_rows
from gguf_audit.tables.schema import rows_to_table

__all__ = ["COMPARE_TABLES", "CompareBatch", "CompareOptions", "CompareResult", "compare_batch"]

COMPARE_TABLES: Final = ("compare",)


@dataclass(frozen=True, slots=True)
class CompareOptions:
    """What every compare task needs besides its pairs."""

    run_id: str
    storage_options: Mapping[str, Any]
    read: ReadConfig
    budget: CompareBudget
    threads: int
    out: str
    out_storage_options: Mapping[str, Any] | None = None
    read_urls: Mapping[str, str] = field(default_factory=dict)
    """The URL to read a file from, by its redacted URL, where the two differ (presigned, ``user:password@``)."""


@dataclass(frozen=True, slots=True)
class CompareBatch:
    batch_id: str
    pairs: tuple[Pair, ...]


@dataclass(frozen=True, slots=True)
class CompareResult:
    """The data files written, and per pair its findings: ``(quant url, model id, finding)``."""

    batch_id: str
    parts: tuple[PartFile, ...]
    findings: tuple[tuple[str, str, Finding], ...]
    bytes_read: int
    requests: int


def _compare(pair: Pair, options: CompareOptions) -> Comparison | Finding:
    quant = options.read_urls.get(pair.quant_url, pair.quant_url)
    reference = options.read_urls.get(pair.reference_url, pair.reference_url)
    try:
        result = compare_files(
            quant,
            reference,
            budget=options.budget,
            storage_options=options_for(quant, options.storage_options),
            reference_storage_options=options_for(reference, options.storage_options),
            read_config=options.read,
        )
    except SourceError as exc:
        return finding(exc.code, redact_text(f"comparing against {pair.reference_url}: {exc.message}"))
    except Exception as exc:  # noqa: BLE001 - a pair that cannot be compared is a finding, never a lost task
        message = f"comparing against {pair.reference_url}: {describe_exception(exc)}"
        return finding("internal.unexpected", redact_text(message))
    # rows and messages show the URLs as listed (redacted), never the ones read
    shown = tuple(dataclasses.replace(f, message=redact_text(f.message)) for f in result.findings)
    return dataclasses.replace(result, quant_url=pair.quant_url, reference_url=pair.reference_url, findings=shown)


def compare_batch(batch: CompareBatch, options: CompareOptions) -> CompareResult:
    """Compare every pair of ``batch`` (reads overlapped on the worker's pool) and write its ``compare`` rows.

    Raises only when the data file cannot be written (the driver logs it; those pairs get no rows).
    """
    parts = RunParts(options.out, options.out_storage_options, options.run_id, f"c{batch.batch_id}", COMPARE_TABLES)
    pool = WORKER_POOLS.pool(options.threads)
    futures: list[tuple[Pair, Future[Comparison | Finding]]] = [
        (pair, pool.submit(_compare, pair, options)) for pair in batch.pairs
    ]
    found: list[tuple[str, str, Finding]] = []
    bytes_read = requests = 0
    try:
        for pair, future in futures:
            result = future.result()
            if isinstance(result, Finding):
                found.append((pair.quant_url, pair.model_id, result))
                continue
            bytes_read += result.quant_io.bytes_read + result.reference_io.bytes_read
            requests += result.quant_io.requests + result.reference_io.requests
            # the quantized file's own data findings are its audit's; only the comparison's are new
            found.extend((pair.quant_url, pair.model_id, f) for f in result.findings if f.code.startswith("compare."))
            rows = compare_rows(result, model_id=pair.model_id, family=pair.family, run_id=options.run_id)
            if rows:
                parts.write("compare", rows_to_table("compare", rows))
        written = parts.close()
    except BaseException:
        parts.abort()
        raise
    return CompareResult(batch.batch_id, written, tuple(found), bytes_read, requests)
