"""Comparing a quantized GGUF against its reference, at sampled positions.

The reference is an F32, F16 or BF16 GGUF (any type gguf-audit decodes
works) or a safetensors file. Both are read by range: the quantized file's
sampled blocks (:func:`~gguf_audit.plan.plan_samples`) and the same element
ranges of the reference, each file in one concurrent round.

For every tensor in both files with the same name and shape the error of the
quantized values is measured: RMSE, maximum absolute error, RMSE relative to
the reference's RMS, and sign flips. A correct quantizer rounds each value
to a nearby level, so its error stays within about half a *quantization
step* (the block's largest magnitude over ``2**(bits - 1)``) and a value
well away from zero keeps its sign. A wrong layout (nibbles swapped, scales
misread, a permuted block) puts values in the wrong places: errors reach
whole steps and signs flip for about half of the values, which
``compare.layout_suspect`` reports.

safetensors lists dimensions in PyTorch order, the reverse of ggml's; the
flattened element order is the same (ggml's ``ne[0]`` is PyTorch's last,
contiguous dimension).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Literal

import fsspec
import numpy as np
import numpy.typing as npt

from gguf_audit.checks.data import DecodedBlock, SampleStatus
from gguf_audit.decode import NoDecoder, decode_blocks, has_decoder
from gguf_audit.errors import GGUFAuditError
from gguf_audit.findings import Finding, finding
from gguf_audit.format.ggml_types import ggml_type_info, ggml_type_name
from gguf_audit.format.model import Header
from gguf_audit.plan import ByteRange, SampleConfig, merge_ranges, plan_samples
from gguf_audit.sampling import read_ranges_into, read_samples
from gguf_audit.source import (
    DEFAULT_READ_CONFIG,
    FsspecSource,
    IOStats,
    ReadConfig,
    open_source,
    read_header,
)

__all__ = [
    "COMPARE_SAMPLE_CONFIG",
    "Comparison",
    "Reference",
    "ReferenceFormatError",
    "ReferenceTensor",
    "SafetensorsHeader",
    "Skipped",
    "TensorError",
    "compare_files",
    "compare_values",
    "parse_safetensors_header",
    "quantization_steps",
    "read_reference",
    "render_comparison",
]

LAYOUT_SUSPECT: Final = "compare.layout_suspect"
NO_COMMON_TENSORS: Final = "compare.no_common_tensors"

COMPARE_SAMPLE_CONFIG: Final = SampleConfig(spread_blocks=14)
"""16 blocks per tensor: enough values for stable error figures, still a few KiB each."""

MAX_SAFETENSORS_HEADER_BYTES: Final = 100_000_000
"""The safetensors format's own limit on its JSON header (``MAX_HEADER_SIZE``):
a forged length must not make us read, or allocate, more."""

_SNIFF_BYTES: Final = 64 << 10

# Fractions of compared values past which a tensor's layout is suspect. A
# correct quantization has (almost) no error beyond one step and no sign flip
# among values of at least one step; a wrong layout has tens of percent of both.
# The real llama.cpp quantizations in the corpus (Q8_0 to IQ2_XXS, with an
# importance matrix for the last) stay below 1% on both.
OVER_STEP_LIMIT: Final = 0.05
SIGN_FLIP_LIMIT: Final = 0.05
_MIN_SIGNIFICANT: Final = 32

# Levels per value, as the bits of a uniform grid: the step is a block's
# largest magnitude over 2**(bits - 1). Non-uniform and vector grids (IQ*,
# MXFP4, NVFP4) get their nominal bits; their widest gaps still fall within
# a step of this size.
_GRID_BITS: Final[dict[str, int]] = {
    "Q1_0": 1,
    "Q2_0": 2,
    "Q4_0": 4,
    "Q4_1": 4,
    "Q5_0": 5,
    "Q5_1": 5,
    "Q8_0": 8,
    "Q8_1": 8,
    "Q2_K": 2,
    "Q3_K": 3,
    "Q4_K": 4,
    "Q5_K": 5,
    "Q6_K": 6,
    "Q8_K": 8,
    "IQ1_S": 1,
    "IQ1_M": 1,
    "IQ2_XXS": 2,
    "IQ2_XS": 2,
    "IQ2_S": 2,
    "IQ3_XXS": 3,
    "IQ3_S": 3,
    "IQ4_NL": 4,
    "IQ4_XS": 4,
    "TQ1_0": 1,
    "TQ2_0": 1,
    "MXFP4": 4,
    "NVFP4": 4,
}

# Mantissa bits and the smallest step (subnormal spacing) of the float types.
_FLOAT_STEPS: Final[dict[str, tuple[int, float]]] = {
    "F64": (52, 2.0**-1074),
    "F32": (23, 2.0**-149),
    "F16": (10, 2.0**-24),
    "BF16": (7, 2.0**-133),
}

_SAFETENSORS_DTYPES: Final[dict[str, int]] = {
    "F64": 28,
    "F32": 0,
    "F16": 1,
    "BF16": 30,
    "I64": 27,
    "I32": 26,
    "I16": 25,
    "I8": 24,
}
_SAFETENSORS_ITEM_BYTES: Final[dict[str, int]] = {
    "F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
    "U64": 8, "U32": 4, "U16": 2, "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1,
}  # fmt: skip


class ReferenceFormatError(GGUFAuditError, ValueError):
    """The reference file is neither a GGUF nor a well-formed safetensors file."""


# --- the reference ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ReferenceTensor:
    """One tensor of the reference, located and typed for decoding."""

    name: str
    shape: tuple[int, ...]
    """In ggml order (``ne[0]`` first), whatever the file's own order."""
    type_id: int | None
    """The ggml type its bytes decode as; None for a dtype gguf-audit cannot decode."""
    dtype: str
    data_offset: int
    """Absolute offset of the first byte."""
    n_bytes: int


@dataclass(frozen=True, slots=True)
class SafetensorsHeader:
    """A parsed safetensors header."""

    header_bytes: int
    """8 plus the JSON length: where the data section starts."""
    tensors: tuple[ReferenceTensor, ...]
    metadata: Mapping[str, str] = field(default_factory=dict)


def parse_safetensors_header(buf: bytes, file_size: int | None = None) -> SafetensorsHeader | int:
    """Parse a safetensors header from the file's first bytes.

    Returns the header, or the number of bytes ``buf`` must hold for it to
    be parsed. Raises ReferenceFormatError for a malformed header.
    """
    if len(buf) < 8:
        return 8
    n = int.from_bytes(bytes(buf[:8]), "little")
    if n > MAX_SAFETENSORS_HEADER_BYTES:
        raise ReferenceFormatError(
            f"not a safetensors file: its header length {n} passes the format's {MAX_SAFETENSORS_HEADER_BYTES}. "
            f"Got {bytes(buf[:8]).hex()!r}."
        )
    if file_size is not None and 8 + n > file_size:
        raise ReferenceFormatError(
            f"the safetensors header ({n} bytes) passes the end of the {file_size}-byte file. Got {n}."
        )
    if len(buf) < 8 + n:
        return 8 + n
    try:
        doc = json.loads(bytes(buf[8 : 8 + n]).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ReferenceFormatError(f"safetensors header is not UTF-8 JSON: {exc}. Got {bytes(buf[8:40])!r}.") from exc
    if not isinstance(doc, dict):
        raise ReferenceFormatError(f"safetensors header must be a JSON object. Got {type(doc).__name__}.")
    data_start = 8 + n
    metadata = doc.pop("__metadata__", None) or {}
    if not isinstance(metadata, dict):
        raise ReferenceFormatError(f"safetensors __metadata__ must be an object. Got {metadata!r:.80}.")
    tensors = [_safetensors_tensor(name, entry, data_start, file_size) for name, entry in doc.items()]
    tensors.sort(key=lambda t: t.data_offset)
    return SafetensorsHeader(data_start, tuple(tensors), {str(k): str(v) for k, v in metadata.items()})


def _safetensors_tensor(name: str, entry: Any, data_start: int, file_size: int | None) -> ReferenceTensor:
    if not isinstance(entry, dict):
        raise ReferenceFormatError(f"safetensors entry {name!r} must be an object. Got {entry!r:.80}.")
    dtype = entry.get("dtype")
    shape = entry.get("shape")
    offsets = entry.get("data_offsets")
    if not isinstance(dtype, str) or dtype not in _SAFETENSORS_ITEM_BYTES:
        raise ReferenceFormatError(f"safetensors tensor {name!r} has an unknown dtype. Got {dtype!r}.")
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        raise ReferenceFormatError(f"safetensors tensor {name!r} needs a shape of ints >= 0. Got {shape!r:.80}.")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        raise ReferenceFormatError(f"safetensors tensor {name!r} needs data_offsets [begin, end]. Got {offsets!r:.80}.")
    n_bytes = offsets[1] - offsets[0]
    expected = math.prod(shape) * _SAFETENSORS_ITEM_BYTES[dtype]
    if n_bytes != expected:
        raise ReferenceFormatError(
            f"safetensors tensor {name!r} ({dtype}, shape {shape}) needs {expected} bytes; "
            f"its data_offsets span {n_bytes}. Got {offsets!r}."
        )
    if file_size is not None and data_start + offsets[1] > file_size:
        raise ReferenceFormatError(
            f"safetensors tensor {name!r} ends at {data_start + offsets[1]}, past the "
            f"{file_size}-byte file. Got {offsets!r}."
        )
    return ReferenceTensor(
        name=name,
        shape=tuple(reversed(shape)),
        type_id=_SAFETENSORS_DTYPES.get(dtype),
        dtype=dtype,
        data_offset=data_start + offsets[0],
        n_bytes=n_bytes,
    )


@dataclass(frozen=True, slots=True)
class Reference:
    """The reference file's tensors, by name."""

    kind: Literal["gguf", "safetensors"]
    tensors: Mapping[str, ReferenceTensor]
    big_endian: bool
    buffer: bytes
    """The file's first bytes, as read for its header."""


def read_reference(source: FsspecSource, *, config: ReadConfig = DEFAULT_READ_CONFIG) -> Reference:
    """Read the header of a GGUF or safetensors reference file.

    Raises ReferenceFormatError, FormatError for a broken GGUF header, SourceError
    when reads fail.
    """
    buf = source.read(0, _SNIFF_BYTES if source.size is None else min(_SNIFF_BYTES, source.size))
    # HTTP learns the size from this first answer; a short read is the end of the file.
    size = source.size if source.size is not None else (len(buf) if len(buf) < _SNIFF_BYTES else None)
    if buf[:4] == b"GGUF":
        head = read_header(source, config=config)
        tensors: dict[str, ReferenceTensor] = {}
        for t in head.header.tensors:
            if t.name not in tensors:
                tensors[t.name] = ReferenceTensor(t.name, t.shape, t.type_id, t.type_name, t.data_offset, t.n_bytes)
        return Reference("gguf", tensors, head.header.byte_order == "big", head.buffer)
    result = parse_safetensors_header(buf, size)
    if isinstance(result, int):
        buf = buf + source.read(len(buf), result)
        result = parse_safetensors_header(buf, size)
        if isinstance(result, int):
            raise ReferenceFormatError(
                f"the file ends inside its safetensors header ({len(buf)} bytes). Got {len(buf)}."
            )
    return Reference("safetensors", {t.name: t for t in result.tensors}, False, buf)


# --- errors -----------------------------------------------------------------------


def quantization_steps(
    type_id: int, reference: npt.NDArray[np.floating[Any]], block_elems: int
) -> npt.NDArray[np.float64]:
    """Per value, the quantization step of ``type_id`` at the reference values.

    For block types: the largest magnitude of the value's block over
    ``2**(bits - 1)``. For float types: the spacing of the format at the
    value. ``reference`` holds whole blocks of ``block_elems`` values.
    """
    r = np.abs(np.asarray(reference, dtype=np.float64))
    name = ggml_type_name(type_id)
    if name in _FLOAT_STEPS:
        mantissa, smallest = _FLOAT_STEPS[name]
        return np.asarray(np.maximum(r * 2.0**-mantissa, smallest), dtype=np.float64)
    bits = _GRID_BITS.get(name)
    if bits is None or block_elems < 2 or r.size % block_elems:
        return np.ones_like(r)  # integers: one unit
    block_max = r.reshape(-1, block_elems).max(axis=1, keepdims=True)
    step = np.broadcast_to(block_max / 2.0 ** (bits - 1), (block_max.shape[0], block_elems)).reshape(-1)
    return np.asarray(np.maximum(step, np.finfo(np.float32).tiny), dtype=np.float64)


@dataclass(frozen=True, slots=True)
class TensorError:
    """The error of one tensor's sampled values against the reference."""

    name: str
    shape: tuple[int, ...]
    quant_type: str
    reference_type: str
    n_blocks: int
    n_values: int
    """Values compared (both finite)."""
    n_nonfinite: int
    """Values left out because either side is NaN or Inf."""
    rmse: float
    max_abs_error: float
    reference_rms: float
    relative_rmse: float
    """RMSE over the reference's RMS (0 when both are 0)."""
    sign_flips: int
    """Values whose sign differs (one negative, the other positive)."""
    n_significant: int
    """Reference values of at least one quantization step."""
    significant_sign_flips: int
    over_step_fraction: float
    """Fraction of values whose error is a whole quantization step or more."""
    rmse_steps: float
    """RMSE in quantization steps (about 0.29 for uniform rounding)."""
    layout_suspect: bool

    @property
    def sign_flip_fraction(self) -> float:
        """Sign flips among the significant values."""
        return self.significant_sign_flips / self.n_significant if self.n_significant else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "shape": list(self.shape),
            "quant_type": self.quant_type,
            "reference_type": self.reference_type,
            "n_blocks": self.n_blocks,
            "n_values": self.n_values,
            "n_nonfinite": self.n_nonfinite,
            "rmse": self.rmse,
            "max_abs_error": self.max_abs_error,
            "reference_rms": self.reference_rms,
            "relative_rmse": self.relative_rmse,
            "sign_flips": self.sign_flips,
            "n_significant": self.n_significant,
            "significant_sign_flips": self.significant_sign_flips,
            "sign_flip_fraction": self.sign_flip_fraction,
            "over_step_fraction": self.over_step_fraction,
            "rmse_steps": self.rmse_steps,
            "layout_suspect": self.layout_suspect,
        }


def compare_values(
    name: str,
    quant: npt.NDArray[np.floating[Any]],
    reference: npt.NDArray[np.floating[Any]],
    steps: npt.NDArray[np.float64],
    *,
    shape: tuple[int, ...] = (),
    quant_type: str = "",
    reference_type: str = "",
    n_blocks: int = 0,
) -> TensorError:
    """The error of ``quant`` against ``reference`` (same length), judged in ``steps``."""
    q = np.asarray(quant, dtype=np.float64).reshape(-1)
    r = np.asarray(reference, dtype=np.float64).reshape(-1)
    s = np.asarray(steps, dtype=np.float64).reshape(-1)
    if not q.shape == r.shape == s.shape:
        raise ValueError(f"quant, reference and steps must have one length. Got {q.size}, {r.size}, {s.size}.")
    finite = np.isfinite(q) & np.isfinite(r)
    q, r, s = q[finite], r[finite], s[finite]
    n = int(q.size)
    err = q - r
    rmse = float(np.sqrt(np.mean(err**2))) if n else 0.0
    ref_rms = float(np.sqrt(np.mean(r**2))) if n else 0.0
    flips = (q * r) < 0
    significant = np.abs(r) >= s
    over = np.abs(err) >= s
    n_significant = int(significant.sum())
    significant_flips = int((flips & significant).sum())
    over_fraction = float(over.mean()) if n else 0.0
    flip_fraction = significant_flips / n_significant if n_significant else 0.0
    suspect = over_fraction > OVER_STEP_LIMIT or (n_significant >= _MIN_SIGNIFICANT and flip_fraction > SIGN_FLIP_LIMIT)
    return TensorError(
        name=name,
        shape=shape,
        quant_type=quant_type,
        reference_type=reference_type,
        n_blocks=n_blocks,
        n_values=n,
        n_nonfinite=int((~finite).sum()),
        rmse=rmse,
        max_abs_error=float(np.abs(err).max()) if n else 0.0,
        reference_rms=ref_rms,
        relative_rmse=rmse / ref_rms if ref_rms else (0.0 if rmse == 0 else math.inf),
        sign_flips=int(flips.sum()),
        n_significant=n_significant,
        significant_sign_flips=significant_flips,
        over_step_fraction=over_fraction,
        rmse_steps=float(np.sqrt(np.mean((err / s) ** 2))) if n else 0.0,
        layout_suspect=bool(suspect),
    )


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

    def summary(self) -> dict[str, Any]:
        worst = self.worst
        return {
            "n_compared": len(self.tensors),
            "n_skipped": len(self.skipped),
            "n_layout_suspect": self.n_suspect,
            "relative_rmse": self.relative_rmse,
            "worst_tensor": worst.name if worst else None,
            "worst_relative_rmse": worst.relative_rmse if worst else None,
            "max_abs_error": max((t.max_abs_error for t in self.tensors), default=None),
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "quant": self.quant_url,
            "reference": self.reference_url,
            "reference_kind": self.reference_kind,
            "summary": self.summary(),
            "tensors": [t.as_dict() for t in self.tensors],
            "skipped": [{"name": s.name, "reason": s.reason} for s in self.skipped],
            "problems": [f.as_dict() for f in self.findings],
            "io": {
                "quant": {"requests": self.quant_io.requests, "bytes_read": self.quant_io.bytes_read},
                "reference": {"requests": self.reference_io.requests, "bytes_read": self.reference_io.bytes_read},
            },
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


def compare_files(
    quant_url: str,
    reference_url: str,
    *,
    config: SampleConfig = COMPARE_SAMPLE_CONFIG,
    storage_options: Mapping[str, Any] | None = None,
    reference_storage_options: Mapping[str, Any] | None = None,
    fs: fsspec.AbstractFileSystem | None = None,
    read_config: ReadConfig = DEFAULT_READ_CONFIG,
) -> Comparison:
    """Compare ``quant_url``'s sampled blocks with the same elements of ``reference_url``.

    Raises FormatError or SourceError when the quantized file's header cannot
    be read, ReferenceFormatError (or those) for the reference's.
    """
    q_source = open_source(quant_url, storage_options=storage_options, fs=fs, config=read_config)
    q_head = read_header(q_source, config=read_config)
    header = q_head.header
    r_options = storage_options if reference_storage_options is None else reference_storage_options
    r_source = open_source(reference_url, storage_options=r_options, fs=fs, config=read_config)
    reference = read_reference(r_source, config=read_config)

    common, skipped = _match(header, reference)
    findings: list[Finding] = []
    if not common:
        findings.append(
            finding(
                NO_COMMON_TENSORS,
                f"{quant_url} and {reference_url} share no tensor of the same name and shape "
                f"({len(header.tensors)} and {len(reference.tensors)} tensors)",
            )
        )
        return Comparison(
            quant_url,
            reference_url,
            reference.kind,
            (),
            tuple(skipped),
            tuple(findings),
            q_source.stats,
            r_source.stats,
        )
    plan = plan_samples(header, config=config, file_size=q_source.size, tensors=set(common))
    q_read = read_samples(q_source, header, plan, held=q_head.buffer, max_gap_bytes=config.max_gap_bytes)
    findings.extend(q_read.findings)

    decoded = [d for d in q_read.decoded if d.status is SampleStatus.OK and d.values is not None]
    wanted = [
        _reference_range(reference.tensors[d.block.tensor], d.block.first_element, d.block.n_elements) for d in decoded
    ]
    held = len(reference.buffer)
    needed = [(max(r.start, held), r.end) for r, _ in wanted if r.end > held]
    r_got = read_ranges_into(r_source, merge_ranges(needed, config.max_gap_bytes), held=reference.buffer)

    per_tensor: dict[str, list[tuple[DecodedBlock, npt.NDArray[np.float32]]]] = {}
    missing: dict[str, int] = {}
    for d, (r_range, skip) in zip(decoded, wanted, strict=True):
        raw = r_got.store.get(r_range.start, r_range.end)
        ref = reference.tensors[d.block.tensor]
        if raw is None or ref.type_id is None:
            missing[d.block.tensor] = missing.get(d.block.tensor, 0) + 1
            continue
        try:
            values = decode_blocks(raw, ref.type_id, big_endian=reference.big_endian)
        except NoDecoder:
            missing[d.block.tensor] = missing.get(d.block.tensor, 0) + 1
            continue
        per_tensor.setdefault(d.block.tensor, []).append((d, values[skip : skip + d.block.n_elements]))

    results: list[TensorError] = []
    for name in common:
        pairs = per_tensor.get(name)
        if not pairs:
            reason = f"{missing[name]} reference ranges could not be read" if name in missing else "no block sampled"
            skipped.append(Skipped(name, reason))
            continue
        result = _tensor_error(name, pairs, header, reference)
        results.append(result)
        if result.layout_suspect:
            findings.append(
                finding(
                    LAYOUT_SUSPECT,
                    f"tensor {name!r} ({result.quant_type}): {result.over_step_fraction:.1%} of {result.n_values} "
                    f"sampled values are off by a quantization step or more and "
                    f"{result.sign_flip_fraction:.1%} of significant values flip sign "
                    f"(relative RMSE {result.relative_rmse:.3g})",
                    tensor=name,
                    offset=pairs[0][0].block.offset,
                )
            )
    return Comparison(
        quant_url,
        reference_url,
        reference.kind,
        tuple(results),
        tuple(skipped),
        tuple(findings),
        q_source.stats,
        r_source.stats,
    )


def _tensor_error(
    name: str,
    pairs: Sequence[tuple[DecodedBlock, npt.NDArray[np.float32]]],
    header: Header,
    reference: Reference,
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
    return compare_values(
        name,
        np.concatenate(q_parts),
        np.concatenate(r_parts),
        np.concatenate(steps),
        shape=tensor.shape,
        quant_type=tensor.type_name,
        reference_type=ref.dtype,
        n_blocks=len(q_parts),
    )


def render_comparison(c: Comparison) -> str:
    """``compare``'s text report: a line per tensor, then the file's summary."""
    from gguf_audit.report import escape

    lines = [f"{escape(c.quant_url)}", f"  against {escape(c.reference_url)} ({c.reference_kind})"]
    if c.tensors:
        width = min(max(len(t.name) for t in c.tensors), 40)
        lines.append(
            f"  {'tensor':{width}}  {'type':8} {'rel RMSE':>9} {'RMSE':>10} {'max err':>10} "
            f"{'≥1 step':>8} {'flips':>7} {'steps':>6}"
        )
        for t in c.tensors:
            flag = "  LAYOUT SUSPECT" if t.layout_suspect else ""
            lines.append(
                f"  {escape(t.name, 40):{width}}  {t.quant_type:8} {t.relative_rmse:>9.3g} {t.rmse:>10.3g} "
                f"{t.max_abs_error:>10.3g} {t.over_step_fraction:>8.1%} {t.sign_flip_fraction:>7.1%} "
                f"{t.rmse_steps:>6.2f}{flag}"
            )
    for s in c.skipped:
        lines.append(f"  skipped {escape(s.name, 64)}: {escape(s.reason, 200)}")
    summary = c.summary()
    lines.append(
        f"summary: {summary['n_compared']} tensors compared, {summary['n_skipped']} skipped, "
        f"{summary['n_layout_suspect']} layout suspect; relative RMSE {summary['relative_rmse']:.3g}"
        + (
            f", worst {escape(str(summary['worst_tensor']), 64)} ({summary['worst_relative_rmse']:.3g})"
            if summary["worst_tensor"]
            else ""
        )
    )
    for f in c.findings:
        lines.append(f"  {f.severity.upper():7} {f.code:24} {escape(f.message, 400)}")
    lines.append(
        f"io: quant {c.quant_io.requests} requests, {c.quant_io.bytes_read} B; "
        f"reference {c.reference_io.requests} requests, {c.reference_io.bytes_read} B"
    )
    return "\n".join(lines)
