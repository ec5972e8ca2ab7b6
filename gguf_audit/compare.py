"""Comparing a quantized GGUF against its reference, at sampled positions.

The reference is an F32, F16 or BF16 GGUF (any type gguf-audit decodes
works) or a safetensors file. Both are read by range: the quantized file's
blocks spread through every tensor (:func:`~gguf_audit.plan.plan_spread`:
every tensor is measured, so an audit's request budget does not apply) and
the same element ranges of the reference, each file in one concurrent round.

For every tensor in both files with the same name and shape the error of the
quantized values is measured (:mod:`gguf_audit.decode.error`): RMSE, maximum
absolute error, RMSE relative to the reference's RMS, and sign flips; a
tensor whose errors reach whole quantization steps is reported as
``compare.layout_suspect``. The safetensors header is
:mod:`gguf_audit.format.safetensors`'s; the text and JSON reports are
:mod:`gguf_audit.report`'s.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

import fsspec
import numpy as np
import numpy.typing as npt

from gguf_audit.codes import Code
from gguf_audit.decode.error import TensorError, compare_values, quantization_steps
from gguf_audit.decode.kernels import NoDecoder, decode_blocks, has_decoder
from gguf_audit.decode.requant import Derivation, block_derived, derivation_of, reproducible
from gguf_audit.decode.sampled import DecodedBlock, SampleStatus
from gguf_audit.findings import Finding, finding
from gguf_audit.format.ggml_types import ggml_type_info
from gguf_audit.format.model import Header, NeedMore
from gguf_audit.format.parser import parse_header
from gguf_audit.format.safetensors import ReferenceFormatError, ReferenceTensor, parse_safetensors_header
from gguf_audit.format.tensor_table import IMATRIX_PREFIX, TableRef
from gguf_audit.io.blocks import ByteStore, read_ranges_into
from gguf_audit.io.header import read_header, read_tensor_table
from gguf_audit.io.source import DEFAULT_READ_CONFIG, FsspecSource, IOStats, ReadConfig, open_source
from gguf_audit.plan import DEFAULT_SAMPLE_CONFIG, ByteRange, SamplePlan, merge_ranges, plan_blocks, plan_spread
from gguf_audit.plan.explicit import spread_indices
from gguf_audit.plan.model import tensor_geometry
from gguf_audit.samples import read_samples
from gguf_audit.validate import check_int

__all__ = [
    "COMPARE_BLOCKS_PER_TENSOR",
    "DEFAULT_COMPARE_BUDGET",
    "CompareBudget",
    "CompareUsageError",
    "Comparison",
    "OpenReference",
    "QuantSample",
    "Reference",
    "Skipped",
    "compare_files",
    "measure",
    "open_reference",
    "read_reference",
    "read_reference_ranges",
    "sample_quantized",
]


class CompareUsageError(ReferenceFormatError):
    """The two files cannot be compared as asked: a file against itself, or a quantized reference."""


COMPARE_BLOCKS_PER_TENSOR: Final = 16
"""Enough values for stable error figures, still a few KiB a tensor."""

_SNIFF_BYTES: Final = 64 << 10

# --- the reference ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Reference:
    """The reference file's tensors, by name."""

    kind: Literal["gguf", "safetensors"]
    tensors: Mapping[str, ReferenceTensor]
    big_endian: bool
    buffer: bytes
    """The file's first bytes, as read for its header."""


def _gguf_reference(header: Header, buf: bytes) -> Reference:
    tensors: dict[str, ReferenceTensor] = {}
    for t in header.tensors:
        if t.name not in tensors:
            tensors[t.name] = ReferenceTensor(t.name, t.shape, t.type_id, t.type_name, t.data_offset, t.n_bytes)
    return Reference("gguf", tensors, header.byte_order == "big", buf)


def read_reference(
    source: FsspecSource, *, config: ReadConfig = DEFAULT_READ_CONFIG, table: TableRef | None = None
) -> Reference:
    """Read the header of a GGUF or safetensors reference file (only its tensor infos when ``table`` says
    where a GGUF's lie, nothing when it holds them).

    Raises ReferenceFormatError, FormatError for a broken GGUF header, SourceError
    when reads fail.
    """
    if table is not None:
        return _gguf_reference(read_tensor_table(source, table), b"")
    sniff = max(_SNIFF_BYTES, config.initial_bytes)  # a GGUF header as big as a header read's first request
    buf = source.read(0, sniff if source.size is None else min(sniff, source.size))
    # HTTP learns the size from this first answer; a short read is the end of the file.
    size = source.size if source.size is not None else (len(buf) if len(buf) < sniff else None)
    if buf[:4] == b"GGUF":
        parsed = parse_header(buf, size)  # most headers are whole in the sniff: no second request
        if isinstance(parsed, NeedMore):
            head = read_header(source, config=config)
            parsed, buf = head.header, head.buffer
        return _gguf_reference(parsed, buf)
    result = parse_safetensors_header(buf, size)
    if isinstance(result, int):
        buf = buf + source.read(len(buf), result)
        result = parse_safetensors_header(buf, size)
        if isinstance(result, int):
            raise ReferenceFormatError(
                f"the file ends inside its safetensors header ({len(buf)} bytes). Got {len(buf)}."
            )
    return Reference("safetensors", {t.name: t for t in result.tensors}, False, buf)


# --- the comparison ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Skipped:
    """A quantized tensor that was not compared, and why."""

    name: str
    reason: str


@dataclass(frozen=True, slots=True)
class Comparison:
    """The result of comparing a quantized file against its reference."""

    quant_url: str
    reference_url: str
    reference_kind: str
    tensors: tuple[TensorError, ...]
    skipped: tuple[Skipped, ...]
    findings: tuple[Finding, ...]
    quant_io: IOStats
    reference_io: IOStats

    @property
    def n_suspect(self) -> int:
        return sum(1 for t in self.tensors if t.layout_suspect)

    @property
    def relative_rmse(self) -> float:
        """RMSE over reference RMS, pooled over the values of every tensor stored in another
        type than the reference's (a tensor copied as is would only dilute it)."""
        changed = [t for t in self.tensors if t.quant_type != t.reference_type] or list(self.tensors)
        sq_err = sum(t.rmse**2 * t.n_values for t in changed)
        sq_ref = sum(t.reference_rms**2 * t.n_values for t in changed)
        return math.sqrt(sq_err / sq_ref) if sq_ref else 0.0

    @property
    def worst(self) -> TensorError | None:
        """The tensor with the largest relative RMSE."""
        return max(self.tensors, key=lambda t: t.relative_rmse, default=None)

    @property
    def derivation(self) -> Derivation:
        """Over the tensors the quant converted (its type is not the reference's: a copy proves little):
        ``contradicted`` when one is, ``derived`` when every decided one is, ``unprovable`` when none is decided."""
        converted = [t for t in self.tensors if t.quant_type != t.reference_type]
        decided = {t.derivation for t in converted} - {None, Derivation.UNPROVABLE}
        return derivation_of(d == Derivation.DERIVED for d in decided)

    def summary(self) -> dict[str, Any]:
        worst = self.worst
        converted = [t for t in self.tensors if t.quant_type != t.reference_type]
        return {
            "derivation": str(self.derivation),
            "n_derived_tensors": sum(1 for t in self.tensors if t.derivation == Derivation.DERIVED),
            # what a derivation rests on: of the converted tensors, the blocks read and those re-made bit for bit
            "n_converted_tensors": len(converted),
            "n_converted_blocks": sum(t.n_blocks for t in converted),
            "n_derived_blocks": sum(t.n_derived_blocks for t in converted if t.derivation == Derivation.DERIVED),
            "n_compared": len(self.tensors),
            "n_skipped": len(self.skipped),
            "n_layout_suspect": self.n_suspect,
            "relative_rmse": self.relative_rmse,
            "worst_tensor": worst.name if worst else None,
            "worst_relative_rmse": worst.relative_rmse if worst else None,
            "max_abs_error": max((t.max_abs_error for t in self.tensors), default=None),
            # blocks measured of those planned for the compared tensors (fewer when reads failed)
            "n_blocks": sum(t.n_blocks for t in self.tensors),
            "n_planned_blocks": sum(t.n_planned_blocks or t.n_blocks for t in self.tensors),
        }


def _match(header: Header, reference: Reference) -> tuple[list[str], list[Skipped]]:
    common: list[str] = []
    skipped: list[Skipped] = []
    seen: set[str] = set()
    for t in header.tensors:
        if t.name in seen:
            continue
        seen.add(t.name)
        ref = reference.tensors.get(t.name)
        shape = "x".join(map(str, t.shape))
        if ref is None:
            skipped.append(Skipped(t.name, "not in the reference"))
        elif ref.shape != t.shape:
            skipped.append(Skipped(t.name, f"shape {shape} here, {'x'.join(map(str, ref.shape))} in the reference"))
        elif ref.type_id is None or not has_decoder(ref.type_id, big_endian=reference.big_endian):
            skipped.append(Skipped(t.name, f"the reference's {ref.dtype} cannot be decoded"))
        elif not has_decoder(t.type_id, big_endian=header.byte_order == "big"):
            skipped.append(Skipped(t.name, f"{t.type_name} cannot be decoded"))
        else:
            common.append(t.name)
    return common, skipped


def _reference_range(ref: ReferenceTensor, first: int, count: int) -> tuple[ByteRange, int]:
    """The whole reference blocks holding elements ``[first, first + count)``, and the skip into them."""
    info = ggml_type_info(ref.type_id if ref.type_id is not None else -1)
    lo = first // info.block_elems
    hi = -(-(first + count) // info.block_elems)
    start = ref.data_offset + lo * info.block_bytes
    return ByteRange(start, ref.data_offset + hi * info.block_bytes), first - lo * info.block_elems


@dataclass(frozen=True, slots=True)
class CompareBudget:
    """A bound on one comparison (scans): at most ``max_tensors`` tensors, and per file at most
    ``max_requests`` sampled ranges and ``budget_bytes`` bytes of sampled blocks, as sampling has."""

    max_tensors: int = 8
    max_requests: int = DEFAULT_SAMPLE_CONFIG.max_requests
    budget_bytes: int = DEFAULT_SAMPLE_CONFIG.budget_bytes

    def __post_init__(self) -> None:
        for name in ("max_tensors", "max_requests", "budget_bytes"):
            check_int(f"CompareBudget.{name}", getattr(self, name), 1)


DEFAULT_COMPARE_BUDGET: Final = CompareBudget()


def _chosen_tensors(header: Header, reference: Reference, common: Sequence[str], limit: int) -> list[str]:
    """At most ``limit`` of ``common``, spread over the file: the ones stored in another type than the
    reference's first (a tensor copied as it is tells nothing of the quantization)."""
    types = {t.name: t.type_name for t in header.tensors}
    changed = [n for n in common if types.get(n) != reference.tensors[n].dtype]
    pool = changed or list(common)
    return [pool[i] for i in spread_indices(len(pool), limit)]


ALIGN_ELEMS: Final = 256
"""Compare windows start and end on multiples of this many elements where a tensor allows: every ggml block
size divides it (1, 32, 256), so siblings of any type ask the same elements of their reference."""

COMPARE_WINDOWS: Final = 8
"""Windows (ranges) read per file for a budgeted comparison: one per tensor at the default eight tensors.
An audit makes about 24 requests per file; a compare phase of about 10 (header and windows) per quantized
file, and once for their reference, keeps a full night under 1.5 times the requests of ``--no-compare``."""


def _budget_plan(
    header: Header,
    reference: Reference,
    names: Sequence[str],
    units_per_tensor: int,
    budget: CompareBudget,
    file_size: int | None,
) -> SamplePlan:
    """Runs of consecutive blocks in each of ``names``, within ``budget`` on either file.

    Each tensor gets at most ``units_per_tensor`` units of :data:`ALIGN_ELEMS`
    elements (of its own blocks when its size does not allow that), in at most
    ``COMPARE_WINDOWS / len(names)`` runs placed by the element count alone: the
    same elements whatever the file's type.
    """
    by_name = {t.name: t for t in reversed(header.tensors)}
    windows = max(1, min(budget.max_requests, COMPARE_WINDOWS) // max(1, len(names)))
    selection: dict[str, list[int]] = {}
    for name in names:
        tensor = by_name[name]
        geo = tensor_geometry(tensor)
        if geo is None:
            continue
        aligned = geo.n_elements % ALIGN_ELEMS == 0 and ALIGN_ELEMS % geo.block_elems == 0
        unit = ALIGN_ELEMS if aligned else geo.block_elems
        per_unit = unit // geo.block_elems if aligned else 1
        n_units = geo.n_elements // ALIGN_ELEMS if aligned else geo.n_blocks
        ref = reference.tensors[name]
        ref_info = ggml_type_info(ref.type_id if ref.type_id is not None else -1)
        ref_bytes = -(-unit * ref_info.block_bytes // max(1, ref_info.block_elems))
        cost = max(geo.block_bytes * per_unit, ref_bytes)
        affordable = max(1, budget.budget_bytes // max(1, cost * len(names)))
        count = min(units_per_tensor, affordable, n_units)
        run = -(-count // windows)
        starts = spread_indices(max(1, n_units - run + 1), max(1, -(-count // run)))
        units = sorted({u for start in starts for u in range(start, min(start + run, n_units))})[:count]
        selection[name] = [u * per_unit + k for u in units for k in range(per_unit)]
    max_gap = DEFAULT_SAMPLE_CONFIG.max_gap_bytes
    return plan_blocks(header, selection, file_size=file_size, max_gap_bytes=max_gap)


def _same_file(a: str, b: str) -> bool:
    """Whether two URLs name one file (local paths compared resolved)."""
    if "://" not in a and "://" not in b:
        return os.path.realpath(a) == os.path.realpath(b)
    return a.rstrip("/") == b.rstrip("/")


def _quantized(type_id: int | None) -> bool:
    return type_id is not None and ggml_type_info(type_id).quantized


@dataclass(frozen=True, slots=True)
class OpenReference:
    """A reference file opened for comparisons: its source (whose stats count every read of it) and header."""

    url: str
    source: FsspecSource
    reference: Reference


def open_reference(
    reference_url: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    fs: fsspec.AbstractFileSystem | None = None,
    read_config: ReadConfig = DEFAULT_READ_CONFIG,
    table: TableRef | None = None,
) -> OpenReference:
    """Read a reference's header once, for any number of comparisons (only its tensor infos with ``table``,
    nothing when ``table`` holds them).

    Raises CompareUsageError for a quantized reference, ReferenceFormatError,
    FormatError or SourceError when its header cannot be read.
    """
    size = None if table is None else table.file_size
    source = open_source(reference_url, storage_options=storage_options, size=size, fs=fs, config=read_config)
    reference = read_reference(source, config=read_config, table=table)
    quantized = [t for t in reference.tensors.values() if len(t.shape) >= 2 and _quantized(t.type_id)]
    if quantized:
        kinds = sorted({ggml_type_info(t.type_id).name for t in quantized if t.type_id is not None})
        raise CompareUsageError(
            f"the reference {reference_url} is quantized ({len(quantized)} matrices are {', '.join(kinds)}): "
            "compare needs an F32, F16 or BF16 GGUF or a safetensors file as the reference"
        )
    return OpenReference(reference_url, source, reference)


@dataclass(frozen=True, slots=True)
class QuantSample:
    """A quantized file's side of a comparison: its sampled blocks and the reference ranges they need."""

    quant_url: str
    header: Header
    common: tuple[str, ...]
    skipped: tuple[Skipped, ...]
    findings: tuple[Finding, ...]
    decoded: tuple[DecodedBlock, ...]
    wanted: tuple[tuple[ByteRange, int], ...]
    """Per decoded block, the reference's whole blocks holding its elements and the skip into them."""
    io: IOStats
    planned: Mapping[str, int] = dataclasses.field(default_factory=dict)
    """Blocks planned per tensor (a tensor's measured blocks are fewer when reads failed)."""
    imatrix: bool = False
    """Whether the quant says an importance matrix made it (llama-quantize writes ``quantize.imatrix.*``)."""


def sample_quantized(
    quant_url: str,
    reference: OpenReference,
    *,
    blocks_per_tensor: int = COMPARE_BLOCKS_PER_TENSOR,
    budget: CompareBudget | None = None,
    storage_options: Mapping[str, Any] | None = None,
    fs: fsspec.AbstractFileSystem | None = None,
    read_config: ReadConfig = DEFAULT_READ_CONFIG,
    table: TableRef | None = None,
) -> QuantSample:
    """Read ``quant_url``'s header (only its tensor infos when ``table`` says where they lie, nothing when it
    holds them) and the blocks a comparison with ``reference`` measures.

    Raises CompareUsageError for a file compared with itself, FormatError or
    SourceError when its header cannot be read.
    """
    if _same_file(quant_url, reference.url):
        raise CompareUsageError(f"a file compared with itself measures nothing. Got {quant_url!r} twice.")
    size = None if table is None else table.file_size
    q_source = open_source(quant_url, storage_options=storage_options, size=size, fs=fs, config=read_config)
    if table is None:
        q_head = read_header(q_source, config=read_config)
        header, held, imatrix = q_head.header, q_head.buffer, _used_imatrix(q_head.header)
    else:
        header, held, imatrix = read_tensor_table(q_source, table), b"", table.imatrix
    ref = reference.reference
    common, skipped = _match(header, ref)
    findings: list[Finding] = []
    if not common:
        findings.append(
            finding(
                Code.COMPARE_NO_COMMON_TENSORS,
                f"{quant_url} and {reference.url} share no tensor of the same name and shape "
                f"({len(header.tensors)} and {len(ref.tensors)} tensors)",
            )
        )
        return QuantSample(
            quant_url, header, (), tuple(skipped), tuple(findings), (), (), q_source.stats, imatrix=imatrix
        )
    max_gap = DEFAULT_SAMPLE_CONFIG.max_gap_bytes
    if budget is None:
        plan = plan_spread(
            header, blocks_per_tensor, tensors=set(common), file_size=q_source.size, max_gap_bytes=max_gap
        )
    else:
        common = _chosen_tensors(header, ref, common, budget.max_tensors)
        plan = _budget_plan(header, ref, common, blocks_per_tensor, budget, q_source.size)
    q_read = read_samples(q_source, header, plan, held=held, max_gap_bytes=max_gap)
    findings.extend(q_read.findings)
    decoded = tuple(d for d in q_read.decoded if d.status is SampleStatus.OK and d.values is not None)
    wanted = tuple(
        _reference_range(ref.tensors[d.block.tensor], d.block.first_element, d.block.n_elements) for d in decoded
    )
    planned: dict[str, int] = {}
    for b in plan.blocks:
        planned[b.tensor] = planned.get(b.tensor, 0) + 1
    kept = (tuple(common), tuple(skipped), tuple(findings))
    return QuantSample(quant_url, header, *kept, decoded, wanted, q_source.stats, planned, imatrix)


def read_reference_ranges(reference: OpenReference, samples: Sequence[QuantSample]) -> ByteStore:
    """The reference bytes every one of ``samples`` needs, in one round of merged ranges (each range once)."""
    held = len(reference.reference.buffer)
    needed = sorted({(max(r.start, held), r.end) for s in samples for r, _ in s.wanted if r.end > held})
    max_gap = DEFAULT_SAMPLE_CONFIG.max_gap_bytes
    return read_ranges_into(reference.source, merge_ranges(needed, max_gap), held=reference.reference.buffer).store


def measure(
    sample: QuantSample, reference: OpenReference, store: ByteStore, reference_io: IOStats | None = None
) -> Comparison:
    """The comparison of ``sample`` with the reference bytes in ``store``.

    ``reference_io`` is what the comparison reports as the reference's cost
    (the reference's source by default; a share of it when siblings share it).
    """
    ref = reference.reference
    skipped = list(sample.skipped)
    findings = list(sample.findings)
    per_tensor: dict[str, list[tuple[DecodedBlock, npt.NDArray[np.float32]]]] = {}
    missing: dict[str, int] = {}
    for d, (r_range, skip) in zip(sample.decoded, sample.wanted, strict=True):
        raw = store.get(r_range.start, r_range.end)
        ref_tensor = ref.tensors[d.block.tensor]
        if raw is None or ref_tensor.type_id is None:
            missing[d.block.tensor] = missing.get(d.block.tensor, 0) + 1
            continue
        try:
            values = decode_blocks(raw, ref_tensor.type_id, big_endian=ref.big_endian)
        except NoDecoder:
            missing[d.block.tensor] = missing.get(d.block.tensor, 0) + 1
            continue
        per_tensor.setdefault(d.block.tensor, []).append((d, values[skip : skip + d.block.n_elements]))

    results: list[TensorError] = []
    for name in sample.common:
        pairs = per_tensor.get(name)
        if not pairs:
            reason = f"{missing[name]} reference ranges could not be read" if name in missing else "no block sampled"
            skipped.append(Skipped(name, reason))
            continue
        result = _tensor_error(name, pairs, sample.header, ref, sample.planned.get(name), imatrix=sample.imatrix)
        results.append(result)
        if result.layout_suspect:
            findings.append(
                finding(
                    Code.COMPARE_LAYOUT_SUSPECT,
                    f"tensor {name!r} ({result.quant_type}): {result.over_step_fraction:.1%} of {result.n_values} "
                    f"sampled values are off by a quantization step or more and "
                    f"{result.sign_flip_fraction:.1%} of significant values flip sign "
                    f"(relative RMSE {result.relative_rmse:.3g})",
                    tensor=name,
                    offset=pairs[0][0].block.offset,
                )
            )
    return Comparison(
        sample.quant_url,
        reference.url,
        ref.kind,
        tuple(results),
        tuple(skipped),
        tuple(findings),
        sample.io,
        reference.source.stats if reference_io is None else reference_io,
    )


def compare_files(
    quant_url: str,
    reference_url: str,
    *,
    blocks_per_tensor: int = COMPARE_BLOCKS_PER_TENSOR,
    budget: CompareBudget | None = None,
    storage_options: Mapping[str, Any] | None = None,
    reference_storage_options: Mapping[str, Any] | None = None,
    fs: fsspec.AbstractFileSystem | None = None,
    read_config: ReadConfig = DEFAULT_READ_CONFIG,
) -> Comparison:
    """Compare ``quant_url``'s sampled blocks with the same elements of ``reference_url``.

    Without ``budget`` every common tensor is measured at ``blocks_per_tensor``
    spread blocks; with one, only the tensors and windows it affords (scans:
    ``blocks_per_tensor`` then counts units of :data:`ALIGN_ELEMS` elements).

    Raises FormatError or SourceError when the quantized file's header cannot
    be read, ReferenceFormatError (or those) for the reference's.
    """
    if _same_file(quant_url, reference_url):
        raise CompareUsageError(f"a file compared with itself measures nothing. Got {quant_url!r} twice.")
    r_options = storage_options if reference_storage_options is None else reference_storage_options
    reference = open_reference(reference_url, storage_options=r_options, fs=fs, read_config=read_config)
    sample = sample_quantized(
        quant_url,
        reference,
        blocks_per_tensor=blocks_per_tensor,
        budget=budget,
        storage_options=storage_options,
        fs=fs,
        read_config=read_config,
    )
    store = read_reference_ranges(reference, [sample]) if sample.decoded else ByteStore()
    return measure(sample, reference, store)


def _tensor_error(
    name: str,
    pairs: Sequence[tuple[DecodedBlock, npt.NDArray[np.float32]]],
    header: Header,
    reference: Reference,
    n_planned_blocks: int | None,
    *,
    imatrix: bool,
) -> TensorError:
    block = pairs[0][0].block
    tensor = header.tensors[block.tensor_index]
    info = tensor.type_info
    q_parts: list[npt.NDArray[np.float32]] = []
    r_parts: list[npt.NDArray[np.float32]] = []
    steps: list[npt.NDArray[np.float64]] = []
    for d, ref_values in pairs:
        if d.values is None:
            continue
        q_parts.append(d.values)
        r_parts.append(ref_values)
        steps.append(quantization_steps(tensor.type_id, ref_values, info.block_elems if info.quantized else 1))
    ref = reference.tensors[name]
    measured = compare_values(
        name,
        np.concatenate(q_parts),
        np.concatenate(r_parts),
        np.concatenate(steps),
        shape=tensor.shape,
        quant_type=tensor.type_name,
        reference_type=ref.dtype,
        n_blocks=len(q_parts),
        n_planned_blocks=n_planned_blocks,
    )
    judged = _derived_blocks(pairs, tensor.type_id, imatrix=imatrix)
    return dataclasses.replace(
        measured, derivation=str(derivation_of(judged)), n_derived_blocks=sum(1 for j in judged if j)
    )


def _used_imatrix(header: Header) -> bool:
    """Whether the quant says an importance matrix made it (llama-quantize writes ``quantize.imatrix.*``)."""
    return any(kv.key.startswith(IMATRIX_PREFIX) for kv in header.kvs)


def _derived_blocks(
    pairs: Sequence[tuple[DecodedBlock, npt.NDArray[np.float32]]], type_id: int, *, imatrix: bool
) -> list[bool | None]:
    """Each compared block: the reference's values re-quantized as the quant's type give its bytes (True), do
    not (False), or cannot be re-made here (None)."""
    if not reproducible(type_id, imatrix=imatrix):
        return [None] * len(pairs)
    return [None if d.raw is None else block_derived(d.raw, values, type_id) for d, values in pairs]
