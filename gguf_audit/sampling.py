"""Reading sampled blocks: the I/O between a :class:`~gguf_audit.plan.SamplePlan` and the data checks.

All merged ranges of a file go out in one concurrent round
(:meth:`~gguf_audit.source.ByteSource.read_ranges`, fsspec's ``cat_ranges``
with errors returned per range); bytes already held from the header read
are not fetched again. A failed range costs only the blocks inside it.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import fsspec

from gguf_audit.checks.data import (
    SAMPLE_UNREAD,
    DecodedBlock,
    SampleRow,
    SampleStatus,
    check_samples,
    combine_stats,
    decode_samples,
    sample_fingerprint,
    sample_rows,
)
from gguf_audit.errors import SourceError
from gguf_audit.findings import Finding, finding
from gguf_audit.format.model import Header
from gguf_audit.plan import (
    DEFAULT_SAMPLE_CONFIG,
    ByteRange,
    SampleConfig,
    SamplePlan,
    SelectionError,
    plan_blocks,
    plan_fetch,
    plan_samples,
)
from gguf_audit.source import DEFAULT_READ_CONFIG, ByteSource, IOStats, ReadConfig, open_source, read_header

__all__ = [
    "ByteStore",
    "FileSamples",
    "RangeFetch",
    "SampleRead",
    "file_samples_to_json",
    "read_file_samples",
    "read_ranges_into",
    "read_samples",
    "render_file_samples",
]


@dataclass(frozen=True, slots=True)
class SampleRead:
    """What sampling one file gave."""

    plan: SamplePlan
    decoded: tuple[DecodedBlock, ...]
    """Every planned block, in offset order, with its values when decoded."""
    rows: tuple[SampleRow, ...]
    findings: tuple[Finding, ...]
    fingerprint: str | None
    """See :func:`~gguf_audit.checks.data.sample_fingerprint`; None when a block could not be read."""
    fetched: tuple[ByteRange, ...]
    """The ranges requested (the plan's, less what the header read already held)."""


class ByteStore:
    """Byte segments of one file, looked up by absolute range."""

    def __init__(self) -> None:
        self._starts: list[int] = []
        self._data: list[bytes] = []

    def add(self, start: int, data: bytes) -> None:
        if not data:
            return
        i = bisect.bisect_left(self._starts, start)
        self._starts.insert(i, start)
        self._data.insert(i, data)

    def get(self, start: int, end: int) -> bytes | None:
        """Bytes ``[start, end)`` when the segments cover them all."""
        pieces = []
        pos = start
        while pos < end:
            i = bisect.bisect_right(self._starts, pos) - 1
            if i < 0:
                return None
            seg_start, data = self._starts[i], self._data[i]
            if pos >= seg_start + len(data):
                return None
            take = data[pos - seg_start : end - seg_start]
            pieces.append(take)
            pos += len(take)
        return b"".join(pieces)


@dataclass(frozen=True, slots=True)
class RangeFetch:
    """The bytes one round of range reads brought, and what failed."""

    store: ByteStore
    fetched: tuple[ByteRange, ...]
    errors: tuple[tuple[ByteRange, SourceError], ...]


def read_ranges_into(source: ByteSource, fetch: Sequence[ByteRange], *, held: bytes = b"") -> RangeFetch:
    """Fetch ``fetch`` (already merged) in one concurrent round; ``held`` is the file's first bytes."""
    results = source.read_ranges(fetch) if fetch else []
    store = ByteStore()
    store.add(0, held)
    errors: list[tuple[ByteRange, SourceError]] = []
    for r, result in zip(fetch, results, strict=True):
        if isinstance(result, SourceError):
            errors.append((r, result))
        else:
            store.add(r.start, result[: r.n_bytes])
    return RangeFetch(store, tuple(fetch), tuple(errors))


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
    items = [(block, got.store.get(block.offset, block.end_offset)) for block in plan.blocks]
    decoded = decode_samples(items, big_endian=big_endian)
    raws = [(block, raw) for block, raw in items if raw is not None]
    findings = list(check_samples(header, decoded))
    unread = [d for d in decoded if d.status is SampleStatus.UNREAD]
    if unread:
        findings.append(_unread_finding(unread, len(decoded), got.errors, len(fetch)))
    fingerprint = sample_fingerprint(raws) if not unread else None
    return SampleRead(
        plan=plan,
        decoded=tuple(decoded),
        rows=tuple(sample_rows(decoded)),
        findings=tuple(findings),
        fingerprint=fingerprint,
        fetched=tuple(fetch),
    )


def _unread_finding(
    unread: Sequence[DecodedBlock],
    n_blocks: int,
    errors: Sequence[tuple[ByteRange, SourceError]],
    n_ranges: int,
) -> Finding:
    first = unread[0].block
    if errors:
        r, exc = errors[0]
        why = f"{len(errors)} of {n_ranges} ranges failed, first [{r.start}, {r.end}): {exc.code}: {exc.message}"
    else:
        why = f"the file ends early ({unread[0].note})"
    return finding(
        SAMPLE_UNREAD,
        f"{len(unread)} of {n_blocks} sampled blocks could not be read: {why}",
        tensor=first.tensor,
        offset=first.offset,
    )


@dataclass(frozen=True, slots=True)
class FileSamples:
    """One file's header and sampled blocks, for the ``sample`` and ``compare`` commands."""

    url: str
    header: Header
    read: SampleRead
    io: IOStats


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
    """Read ``url``'s header and sample it.

    ``tensors`` limits the tensors read (every one by default). With
    ``blocks`` those block indices are read from each (negative ones count
    from the end, see :func:`~gguf_audit.plan.plan_blocks`); without, the
    sampling plan of ``config``. Raises FormatError for an unreadable header,
    SourceError when the header cannot be fetched, SelectionError for a
    tensor or block the file lacks.
    """
    source = open_source(url, storage_options=storage_options, fs=fs, config=read_config)
    head = read_header(source, config=read_config)
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
    return FileSamples(url, header, result, source.stats)


def file_samples_to_json(samples: FileSamples) -> dict[str, Any]:
    """The ``sample --json`` object: every block's values and statistics, by tensor."""
    from gguf_audit.report import value_to_json

    by_tensor: dict[int, list[DecodedBlock]] = {}
    for d in samples.read.decoded:
        by_tensor.setdefault(d.block.tensor_index, []).append(d)
    out_tensors = []
    for index, decoded in sorted(by_tensor.items()):
        tensor = samples.header.tensors[index]
        parts = [d.stats for d in decoded if d.stats is not None]
        combined = combine_stats(parts)
        out_tensors.append(
            {
                "name": tensor.name,
                "type": tensor.type_name,
                "shape": list(tensor.shape),
                "stats": combined.as_dict() if combined is not None else None,
                "blocks": [
                    {
                        "index": d.block.block_index,
                        "offset": d.block.offset,
                        "n_bytes": d.block.n_bytes,
                        "first_element": d.block.first_element,
                        "values": value_to_json(d.values) if d.values is not None else None,
                        "stats": d.stats.as_dict() if d.stats is not None else None,
                        "status": str(d.status),
                    }
                    for d in sorted(decoded, key=lambda d: d.block.block_index)
                ],
            }
        )
    return {
        "url": samples.url,
        "fingerprint": samples.read.fingerprint,
        "tensors": out_tensors,
        "problems": [f.as_dict() for f in samples.read.findings],
        "io": {
            "requests": samples.io.requests,
            "bytes_read": samples.io.bytes_read,
            "sampled_bytes": samples.read.plan.block_bytes,
            "fetched_ranges": len(samples.read.fetched),
        },
    }


def render_file_samples(samples: FileSamples, *, max_values: int = 8) -> str:
    """``sample``'s text report: per block its place, statistics and first values."""
    from gguf_audit.report import escape

    lines = [escape(samples.url)]
    current = -1
    for d in sorted(samples.read.decoded, key=lambda d: (d.block.tensor_index, d.block.block_index)):
        b = d.block
        if b.tensor_index != current:
            current = b.tensor_index
            tensor = samples.header.tensors[current]
            shape = "x".join(map(str, tensor.shape))
            lines.append(f"  {escape(tensor.name, 64)}  {tensor.type_name} {shape}")
        head = f"    block {b.block_index:<8} @{b.offset:<12} {b.n_bytes:>5} B"
        if d.values is None or d.stats is None:
            lines.append(f"{head}  {d.status}: {escape(d.note or '', 200)}")
            continue
        s = d.stats
        values = ", ".join(f"{v:.6g}" for v in d.values[:max_values].tolist())
        more = ", …" if d.values.size > max_values else ""
        lines.append(
            f"{head}  min {_g(s.min)} max {_g(s.max)} mean {_g(s.mean)} std {_g(s.std)} "
            f"nan {s.n_nan} inf {s.n_inf} zero {s.zero_fraction:.0%}  [{values}{more}]"
        )
    for f in samples.read.findings:
        lines.append(f"  {f.severity.upper():7} {f.code:24} {escape(f.message, 400)}")
    lines.append(
        f"io: {samples.io.requests} requests, {samples.io.bytes_read} B read for "
        f"{samples.read.plan.block_bytes} B of sampled blocks in {len(samples.read.fetched)} ranges"
        + (f"; fingerprint {samples.read.fingerprint}" if samples.read.fingerprint else "")
    )
    return "\n".join(lines)


def _g(x: float | None) -> str:
    return "-" if x is None else f"{x:.4g}"
