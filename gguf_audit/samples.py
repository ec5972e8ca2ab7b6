"""Sampling a file: planned blocks read (io), decoded (decode) and checked (checks.data).

:func:`sample_file` is the one chain header -> plan -> read samples, which
``audit_file``, the ``sample`` command (:func:`read_file_samples`) and
``compare`` all run; :func:`read_samples` reads, decodes and checks the
blocks of a given plan. A failed read never raises here: the blocks it held
become a ``data.sample_unread`` finding (``io.range_ignored`` when the server
ignores Range past what may be read of a whole body).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import fsspec

from gguf_audit.checks.data import check_samples
from gguf_audit.codes import Code
from gguf_audit.decode.fingerprints import weights_fingerprint
from gguf_audit.decode.sampled import DecodedBlock, SampleStatus, decode_samples, sample_fingerprint, sample_rows
from gguf_audit.decode.stats import SampleRow
from gguf_audit.errors import SourceError
from gguf_audit.findings import Finding, finding
from gguf_audit.format.model import Header
from gguf_audit.io.base import RangeSource
from gguf_audit.io.blocks import read_ranges_into
from gguf_audit.io.header import HeaderRead, read_header
from gguf_audit.io.source import DEFAULT_READ_CONFIG, ByteSource, IOStats, ReadConfig, open_source
from gguf_audit.plan import (
    DEFAULT_SAMPLE_CONFIG,
    ByteRange,
    SampleConfig,
    SamplePlan,
    SelectionError,
    plan_blocks,
    plan_fetch,
    plan_samples,
    strata_mask,
)

__all__ = ["FileSamples", "SampleRead", "read_file_samples", "read_samples", "sample_file"]


@dataclass(frozen=True, slots=True)
class SampleRead:
    """What sampling one file gave."""

    plan: SamplePlan
    decoded: tuple[DecodedBlock, ...]
    """Every planned block, in offset order, with its values when decoded."""
    rows: tuple[SampleRow, ...]
    findings: tuple[Finding, ...]
    fingerprint: str | None
    """See :func:`~gguf_audit.decode.sampled.sample_fingerprint`; None when a block could not be read."""
    fetched: tuple[ByteRange, ...]
    """The ranges requested (the plan's, less what the header read already held)."""
    sampled_tensors: int = 0
    """Tensors with at least one block read (decoded or not)."""
    sampled_strata: int = 0
    """The strata of the plan's span the read blocks touch, bit ``k`` for stratum ``k``
    (see :func:`~gguf_audit.plan.strata_mask`)."""
    weights_fingerprint: str | None = None
    """See :func:`~gguf_audit.decode.fingerprints.weights_fingerprint`; None when a block could not be read."""


def read_samples(
    source: ByteSource,
    header: Header,
    plan: SamplePlan,
    *,
    held: bytes = b"",
    max_gap_bytes: int = DEFAULT_SAMPLE_CONFIG.max_gap_bytes,
) -> SampleRead:
    """Fetch, decode and check the blocks of ``plan``; failures become findings.

    ``held`` is the file's first bytes when already read (the header buffer):
    blocks inside it cost no request. Never raises for a failed read.
    """
    fetch = plan_fetch(plan, held_bytes=len(held), max_gap_bytes=max_gap_bytes)
    got = read_ranges_into(source, fetch, held=held)
    big_endian = header.byte_order == "big"
    get = got.store.get
    items = [(block, get(block.offset, block.offset + block.n_bytes)) for block in plan.blocks]
    decoded = decode_samples(items, big_endian=big_endian)
    raws = [(block, raw) for block, raw in items if raw is not None]
    findings = list(check_samples(header, decoded))
    unread = [d for d in decoded if d.status is SampleStatus.UNREAD]
    if unread:
        findings.append(_unread_finding(unread, len(decoded), got.errors, len(fetch)))
    fingerprint = sample_fingerprint(raws) if not unread else None
    read = [d.block for d in decoded if d.status is not SampleStatus.UNREAD]
    return SampleRead(
        plan=plan,
        decoded=tuple(decoded),
        rows=tuple(sample_rows(decoded)),
        findings=tuple(findings),
        fingerprint=fingerprint,
        fetched=tuple(fetch),
        weights_fingerprint=weights_fingerprint(header, raws) if not unread else None,
        sampled_tensors=len({b.tensor_index for b in read}),
        sampled_strata=strata_mask(((b.offset, b.offset + b.n_bytes) for b in read), plan.data_start, plan.data_end),
    )


def _unread_finding(
    unread: Sequence[DecodedBlock],
    n_blocks: int,
    errors: Sequence[tuple[ByteRange, SourceError]],
    n_ranges: int,
) -> Finding:
    first = unread[0].block
    ignored = [exc for _, exc in errors if exc.code == Code.IO_RANGE_IGNORED]
    if ignored:
        # Not a data problem: the server cannot serve ranges this far into the file.
        return finding(
            Code.IO_RANGE_IGNORED,
            f"{len(unread)} of {n_blocks} sampled blocks not read: {ignored[0].message}",
            tensor=first.tensor,
            offset=first.offset,
        )
    if errors:
        r, exc = errors[0]
        why = f"{len(errors)} of {n_ranges} ranges failed, first [{r.start}, {r.end}): {exc.code}: {exc.message}"
    else:
        why = f"the file ends early ({unread[0].note})"
    return finding(
        Code.DATA_SAMPLE_UNREAD,
        f"{len(unread)} of {n_blocks} sampled blocks could not be read: {why}",
        tensor=first.tensor,
        offset=first.offset,
    )


@dataclass(frozen=True, slots=True)
class FileSamples:
    """One file's header and sampled blocks, and what reading the file cost."""

    url: str
    header: Header
    read: SampleRead
    io: IOStats


def sample_file(
    source: RangeSource,
    head: HeaderRead | None = None,
    *,
    config: SampleConfig = DEFAULT_SAMPLE_CONFIG,
    tensors: Collection[str] | None = None,
    blocks: Sequence[int] | None = None,
) -> FileSamples:
    """Plan the samples of ``source``'s file and read them: header -> plan -> read samples.

    ``head`` is the header when already read (read here otherwise, with the
    source's read config). ``tensors`` limits the tensors read (every one by
    default). With ``blocks`` those block indices are read from each
    (negative ones count from the end, see :func:`~gguf_audit.plan.plan_blocks`);
    without, the sampling plan of ``config``. Raises FormatError for an
    unreadable header, SourceError when the header cannot be fetched,
    SelectionError for a tensor or block the file lacks; a failed block read
    is a finding, never raised.
    """
    if head is None:
        head = read_header(source)
    header = head.header
    if tensors is not None:
        names = {t.name for t in header.tensors}
        for name in tensors:
            if name not in names:
                raise SelectionError(f"the file has no tensor named {name!r}. Got {name!r}.")
    if blocks is not None:
        selection = {name: list(blocks) for name in tensors} if tensors is not None else None
        plan = plan_blocks(header, selection, blocks=blocks, file_size=source.size, max_gap_bytes=config.max_gap_bytes)
    else:
        plan = plan_samples(
            header, config=config, file_size=source.size, tensors=set(tensors) if tensors is not None else None
        )
    result = read_samples(source, header, plan, held=head.buffer, max_gap_bytes=config.max_gap_bytes)
    return FileSamples(source.url, header, result, source.stats)


def read_file_samples(
    url: str,
    *,
    tensors: Sequence[str] | None = None,
    blocks: Sequence[int] | None = None,
    config: SampleConfig = DEFAULT_SAMPLE_CONFIG,
    storage_options: Mapping[str, Any] | None = None,
    fs: fsspec.AbstractFileSystem | None = None,
    read_config: ReadConfig = DEFAULT_READ_CONFIG,
) -> FileSamples:
    """Open ``url`` and :func:`sample_file` it; the same arguments and errors."""
    source = open_source(url, storage_options=storage_options, fs=fs, config=read_config)
    return sample_file(source, config=config, tensors=tensors, blocks=blocks)
