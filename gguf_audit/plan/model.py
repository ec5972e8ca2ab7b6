"""The values of a sampling plan: byte ranges, blocks, the plan itself, and how tensors divide into blocks.

A tensor is divided into *sampling blocks*: its ggml blocks for quantized
types (32 elements in 18 bytes for Q4_0, 256 in 144 for Q4_K), and runs of
:data:`RUN_ELEMS` elements for the one-element types (F32, F16, BF16, F64,
the integers), as the corpus ground truth numbers them. Block ``i`` of a
tensor is block ``i`` of the tensor flattened in ggml's storage order.

The data section is divided into :data:`STRATA` equal byte strata; a plan
and a read record which of them their blocks touch as a bit mask
(:func:`strata_mask`), so a table can say how much of a file was looked at.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, NamedTuple

from gguf_audit.errors import GGUFAuditError
from gguf_audit.format.ggml_types import TypeStatus
from gguf_audit.format.model import Header, TensorInfo
from gguf_audit.validate import check_int

__all__ = [
    "DEFAULT_SAMPLE_CONFIG",
    "RUN_ELEMS",
    "STRATA",
    "BlockGeometry",
    "ByteRange",
    "PlannedBlock",
    "SampleConfig",
    "SamplePlan",
    "SelectionError",
    "block_at",
    "data_section",
    "file_identity",
    "strata_mask",
    "stratum_bounds",
    "tensor_geometry",
]

RUN_ELEMS: Final = 32
"""Elements per sampling block of the one-element types (F32, F16, BF16, ...)."""

STRATA: Final = 16
"""Equal byte strata of the data section a plan spreads its windows over (one bit each in a mask)."""


class SelectionError(GGUFAuditError, ValueError):
    """An explicit block selection names a tensor or block the header lacks."""


class ByteRange(NamedTuple):
    """Bytes ``[start, end)`` of a file."""

    start: int
    end: int

    @property
    def n_bytes(self) -> int:
        return self.end - self.start


@dataclass(frozen=True, slots=True)
class SampleConfig:
    """What sampling one file may cost: range requests and bytes, and how wide each read is."""

    max_requests: int = 32
    """Range requests per file for samples at most (the header read is apart). Each
    request is one *window*: a run of bytes that may span tensor boundaries, every
    whole block inside it decoded. On S3 a GET costs what about 4 KiB of egress
    does, and Hugging Face's resolver allows a free account 5,000 requests in
    5 minutes: requests, not bytes, are what sampling a collection spends."""
    budget_bytes: int = 1 << 20
    """Bytes fetched per file at most, gaps inside windows included."""
    window_blocks: int = 64
    """Blocks per window, half on each side of a tensor boundary (fewer when a
    window would pass ``budget_bytes / max_requests``): 9 KiB of Q4_K, 2 KiB
    of Q8_0, 2,048 F32 values. Counted in blocks because each block read is
    decoded and becomes a ``samples`` row; wider windows find a bad block
    inside a sampled tensor more often, but touch no more tensors."""
    max_gap_bytes: int = 4 << 10
    """Windows this close are fetched as one (while the budget allows)."""
    seed: int = 0
    """Varies the window positions; the same seed reads the same bytes."""

    def __post_init__(self) -> None:
        check_int("SampleConfig.max_requests", self.max_requests, 1)
        check_int("SampleConfig.budget_bytes", self.budget_bytes, 1)
        check_int("SampleConfig.window_blocks", self.window_blocks, 2)
        check_int("SampleConfig.max_gap_bytes", self.max_gap_bytes, 0)
        if not isinstance(self.seed, int) or isinstance(self.seed, bool):
            raise ValueError(f"SampleConfig.seed must be an int. Got {self.seed!r}.")


DEFAULT_SAMPLE_CONFIG: Final = SampleConfig()


@dataclass(frozen=True, slots=True)
class BlockGeometry:
    """How one tensor divides into sampling blocks."""

    n_blocks: int
    block_elems: int
    """Elements per sampling block (the last one may hold fewer for one-element types)."""
    block_bytes: int
    element_bytes: int
    """Bytes per element for the one-element types; 0 for block-quantized types."""
    n_elements: int


class PlannedBlock(NamedTuple):
    """One sampling block to read.

    A NamedTuple rather than a frozen dataclass: a plan holds one per sampled
    block (about 2,000 a file), and a tuple is built in a fraction of the time.
    """

    tensor_index: int
    """Position of the tensor in the header's tensor list."""
    tensor: str
    type_id: int
    block_index: int
    first_element: int
    """Index of the block's first element in the flattened tensor."""
    n_elements: int
    offset: int
    """Absolute offset of the block's first byte."""
    n_bytes: int

    @property
    def end_offset(self) -> int:
        return self.offset + self.n_bytes

    @property
    def range(self) -> ByteRange:
        return ByteRange(self.offset, self.offset + self.n_bytes)


@dataclass(frozen=True, slots=True)
class SamplePlan:
    """The blocks to read from one file and the ranges that fetch them."""

    blocks: tuple[PlannedBlock, ...]
    """In offset order; no two overlap."""
    fetch: tuple[ByteRange, ...]
    """The sorted ranges covering every block: one request each."""
    seed: int
    file_identity: str
    budget_bytes: int | None
    """None for an explicit selection (no cap)."""
    data_start: int = 0
    data_end: int = 0
    """The span :data:`STRATA` divides (the data section, see :func:`data_section`)."""
    max_requests: int | None = None
    """The request cap the plan was made under; None for an explicit selection."""

    @property
    def ranges(self) -> tuple[ByteRange, ...]:
        """The blocks' own byte ranges, half-open, in offset order."""
        return tuple(b.range for b in self.blocks)

    @property
    def block_bytes(self) -> int:
        """Bytes of the sampled blocks themselves."""
        return sum(b.n_bytes for b in self.blocks)

    @property
    def fetch_bytes(self) -> int:
        """Bytes the ranges fetch (block bytes plus the gaps inside and between them)."""
        return sum(r.n_bytes for r in self.fetch)

    @property
    def n_tensors(self) -> int:
        """Tensors with at least one planned block."""
        return len({b.tensor_index for b in self.blocks})

    @property
    def strata(self) -> int:
        """The strata the planned blocks touch, bit ``k`` for stratum ``k`` (see :func:`strata_mask`)."""
        return strata_mask((b.range for b in self.blocks), self.data_start, self.data_end)


# --- geometry -----------------------------------------------------------------


def tensor_geometry(tensor: TensorInfo) -> BlockGeometry | None:
    """The sampling blocks of ``tensor``, or None when its type or size gives none."""
    info = tensor.type_info
    if info.status is not TypeStatus.SUPPORTED or info.block_elems < 1 or info.block_bytes < 1:
        return None
    if tensor.n_elements < 1 or tensor.n_bytes < 1 or tensor.data_offset < 0:
        return None
    if info.block_elems == 1:
        n_blocks = math.ceil(tensor.n_elements / RUN_ELEMS)
        return BlockGeometry(n_blocks, RUN_ELEMS, RUN_ELEMS * info.block_bytes, info.block_bytes, tensor.n_elements)
    n_blocks = tensor.n_bytes // info.block_bytes
    if n_blocks < 1:
        return None
    return BlockGeometry(n_blocks, info.block_elems, info.block_bytes, 0, n_blocks * info.block_elems)


def block_at(index: int, tensor_index: int, tensor: TensorInfo, geo: BlockGeometry) -> PlannedBlock:
    """Block ``index`` of ``tensor`` (``0 <= index < geo.n_blocks``)."""
    first = index * geo.block_elems
    n_elements = min(geo.block_elems, geo.n_elements - first)
    n_bytes = n_elements * geo.element_bytes if geo.element_bytes else geo.block_bytes
    return PlannedBlock(
        tensor_index=tensor_index,
        tensor=tensor.name,
        type_id=tensor.type_id,
        block_index=index,
        first_element=first,
        n_elements=n_elements,
        offset=tensor.data_offset + index * geo.block_bytes,
        n_bytes=n_bytes,
    )


def file_identity(header: Header) -> str:
    """A digest of the tensor table: the same for a file and its mirrors.

    Built from what places the bytes (data offset, and every tensor's name,
    shape, type and offset), so two copies of a file plan the same blocks
    wherever they are stored, and their sample fingerprints can be compared.
    """
    h = hashlib.blake2b(digest_size=16)
    h.update(f"{header.data_offset}:{len(header.tensors)}".encode())
    for t in header.tensors:
        h.update(b"\0")
        h.update(t.raw_name or t.name.encode("utf-8", "surrogatepass"))
        h.update(f"\0{','.join(map(str, t.shape))}:{t.type_id}:{t.offset}".encode())
    return h.hexdigest()


# --- strata -------------------------------------------------------------------


def data_section(header: Header) -> ByteRange:
    """The data section as the header declares it: from ``data_offset`` to the last tensor's end."""
    end = max((t.end_offset for t in header.tensors if t.n_bytes > 0), default=header.data_offset)
    return ByteRange(header.data_offset, max(end, header.data_offset))


def stratum_bounds(k: int, data_start: int, data_end: int) -> ByteRange:
    """Stratum ``k`` of ``[data_start, data_end)``: the bytes ``x`` with ``(x - data_start) * STRATA // size == k``."""
    size = data_end - data_start
    return ByteRange(data_start + -(-k * size // STRATA), data_start + -(-(k + 1) * size // STRATA))


def strata_mask(ranges: Iterable[tuple[int, int]], data_start: int, data_end: int) -> int:
    """Bit ``k`` set for each stratum ``k`` of ``[data_start, data_end)`` a range overlaps.

    Stratum ``k`` holds the bytes ``x`` with ``(x - data_start) * STRATA // size == k``:
    sixteen equal slices, the mask at most ``0xFFFF``. Bytes outside the span count for none.
    """
    size = data_end - data_start
    if size <= 0:
        return 0
    mask = 0
    # Touching ranges (a window's blocks, back to back) are joined first: one division per run, not per block.
    run_lo = run_hi = -1
    for start, end in ranges:
        lo, hi = max(start, data_start), min(end, data_end)
        if hi <= lo:
            continue
        if lo == run_hi:
            run_hi = hi
            continue
        if run_hi > run_lo:
            mask |= _strata_bits(run_lo, run_hi, data_start, size)
        run_lo, run_hi = lo, hi
    if run_hi > run_lo:
        mask |= _strata_bits(run_lo, run_hi, data_start, size)
    return mask


def _strata_bits(lo: int, hi: int, data_start: int, size: int) -> int:
    first = (lo - data_start) * STRATA // size
    last = (hi - 1 - data_start) * STRATA // size
    return ((1 << (last - first + 1)) - 1) << first
