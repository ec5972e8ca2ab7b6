"""The worker side of a scan's second phase: :func:`compare_batch` compares quantized files against their
family's full-precision file and writes the ``compare`` rows; it never raises for a pair's sake.

A task is one reference and some of its quantized siblings: the reference's
tensor infos are read once, each sibling's tensor infos and sampled blocks
(within a :class:`~gguf_audit.compare.CompareBudget`, at the same elements
whatever its type), then the reference ranges all of them need, once, merged.
The audit phase of the same night read every header whole and said where its
tensor infos lie (:class:`~gguf_audit.format.tensor_table.TensorTableAt`), so
only those bytes are read again, not the key-value pairs (the vocabulary: most
of a header). A file the audit did not read this night (reused: a sibling
whose reference was read, or the reference of a sibling that was) comes with
its tensor table as the night that read it stored it (:func:`~gguf_audit.pipelines.scan.reuse.stored_tables`), so only
its sampled blocks are read; a file whose stored rows cannot stand for its
header, or whose infos are no longer where they were, has its header read whole. The
reference's own sampled blocks are not reused: they went to its audit's
worker, and the few windows cost less than shipping them. The task writes
one ``compare`` row per tensor compared and returns the data file, each
pair's findings (a few small values: the driver files them as ``problems`` of
the quantized file's model) and what it read of each file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Final

from gguf_audit.checks.lineage import Pair
from gguf_audit.codes import Code
from gguf_audit.compare import (
    CompareBudget,
    Comparison,
    OpenReference,
    QuantSample,
    measure,
    open_reference,
    read_reference_ranges,
    sample_quantized,
)
from gguf_audit.errors import FormatError, SourceError, describe_exception
from gguf_audit.findings import Finding, finding
from gguf_audit.format.tensor_table import KnownTable, TableRef, TensorTableAt
from gguf_audit.io.blocks import ByteStore
from gguf_audit.io.options import options_for
from gguf_audit.io.source import IOStats, ReadConfig
from gguf_audit.pipelines.store import PartFile, RunParts
from gguf_audit.pipelines.work.execute import WORKER_POOLS
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
    """Quantized files compared with one reference: its header and sampled blocks are read once for them all."""

    batch_id: str
    reference_url: str
    pairs: tuple[Pair, ...]
    tensor_tables: Mapping[str, TensorTableAt] = field(default_factory=dict)
    """Where this night's audits found the tensor infos of the batch's files, by URL as listed."""
    stored: Mapping[str, bytes] = field(default_factory=dict)
    """The tables of the batch's files not read this night, as the nights that read them stored them (packed
    :class:`KnownTable` values, by URL as listed)."""

    def table(self, url: str) -> TableRef | None:
        """What the task knows of ``url``'s tensor table before reading it (None: its header is read)."""
        at = self.tensor_tables.get(url)
        if at is not None:
            return at
        stored = self.stored.get(url)
        return None if stored is None else KnownTable.unpacked(stored)


@dataclass(frozen=True, slots=True)
class CompareResult:
    """The data files written, per pair its findings ``(quant url, model id, finding)``, and the I/O per file."""

    batch_id: str
    parts: tuple[PartFile, ...]
    findings: tuple[tuple[str, str, Finding], ...]
    bytes_read: int
    requests: int
    io: tuple[tuple[str, int, int], ...] = ()
    """``(url as listed, requests, bytes)`` of every file this task read: each quantized file and the reference."""


def _failed(pair: Pair, exc: BaseException) -> Finding:
    if isinstance(exc, SourceError):
        return finding(exc.code, redact_text(f"comparing against {pair.reference_url}: {exc.message}"))
    message = f"comparing against {pair.reference_url}: {describe_exception(exc)}"
    return finding(Code.INTERNAL_UNEXPECTED, redact_text(message))


def _open(batch: CompareBatch, options: CompareOptions) -> OpenReference:
    url = options.read_urls.get(batch.reference_url, batch.reference_url)
    storage_options = options_for(url, options.storage_options)
    table = batch.table(batch.reference_url)
    if table is not None:
        try:
            return open_reference(url, storage_options=storage_options, read_config=options.read, table=table)
        except FormatError:  # the file changed since its audit: read its header whole
            pass
    return open_reference(url, storage_options=storage_options, read_config=options.read)


def _sample(
    pair: Pair, reference: OpenReference, options: CompareOptions, table: TableRef | None
) -> QuantSample | Finding:
    quant = options.read_urls.get(pair.quant_url, pair.quant_url)
    storage_options = options_for(quant, options.storage_options)
    try:
        if table is not None:
            try:
                return sample_quantized(
                    quant,
                    reference,
                    budget=options.budget,
                    storage_options=storage_options,
                    read_config=options.read,
                    table=table,
                )
            except FormatError:  # the file changed since its audit: read its header whole
                pass
        return sample_quantized(
            quant, reference, budget=options.budget, storage_options=storage_options, read_config=options.read
        )
    except Exception as exc:  # noqa: BLE001 - a pair that cannot be compared is a finding, never a lost task
        return _failed(pair, exc)


def _shown(result: Comparison, pair: Pair) -> Comparison:
    """Rows and messages show the URLs as listed (redacted), never the ones read."""
    shown = tuple(dataclasses.replace(f, message=redact_text(f.message)) for f in result.findings)
    return dataclasses.replace(result, quant_url=pair.quant_url, reference_url=pair.reference_url, findings=shown)


def compare_batch(batch: CompareBatch, options: CompareOptions) -> CompareResult:
    """Compare every pair of ``batch`` with its one reference and write the ``compare`` rows.

    The reference's header is read once; the quantized files are sampled
    (overlapped on the worker's pool) at the same elements, so the reference
    ranges they need are read once for all of them, merged. Raises only when
    the data file cannot be written (the driver logs it; those pairs get no rows).
    """
    parts = RunParts(options.out, options.out_storage_options, options.run_id, f"c{batch.batch_id}", COMPARE_TABLES)
    found: list[tuple[str, str, Finding]] = []
    io: list[tuple[str, int, int]] = []
    try:
        try:
            reference = _open(batch, options)
        except Exception as exc:  # noqa: BLE001 - a reference that cannot be read is each pair's finding
            found.extend((p.quant_url, p.model_id, _failed(p, exc)) for p in batch.pairs)
            reference = None
        if reference is not None:
            pool = WORKER_POOLS.pool(options.threads)
            futures: list[tuple[Pair, Future[QuantSample | Finding]]] = [
                (pair, pool.submit(_sample, pair, reference, options, batch.table(pair.quant_url)))
                for pair in batch.pairs
            ]
            samples = [(pair, future.result()) for pair, future in futures]
            taken = [s for _, s in samples if isinstance(s, QuantSample)]
            store = read_reference_ranges(reference, taken) if any(s.decoded for s in taken) else ByteStore()
            for pair, sample in samples:
                if isinstance(sample, Finding):
                    found.append((pair.quant_url, pair.model_id, sample))
                    continue
                io.append((pair.quant_url, sample.io.requests, sample.io.bytes_read))
                result = _shown(measure(sample, reference, store, IOStats()), pair)
                # the quantized file's own data findings are its audit's; only the comparison's are new
                found.extend(
                    (pair.quant_url, pair.model_id, f) for f in result.findings if f.code.startswith("compare.")
                )
                rows = compare_rows(result, model_id=pair.model_id, family=pair.family, run_id=options.run_id)
                if rows:
                    parts.write("compare", rows_to_table("compare", rows))
            stats = reference.source.stats
            io.append((batch.reference_url, stats.requests, stats.bytes_read))
        written = parts.close()
    except BaseException:
        parts.abort()
        raise
    requests = sum(r for _, r, _ in io)
    bytes_read = sum(b for _, _, b in io)
    return CompareResult(batch.batch_id, written, tuple(found), bytes_read, requests, tuple(io))
