"""Which tensor blocks to read, and the byte ranges that fetch them.

Pure: a parsed :class:`~gguf_audit.format.model.Header` in, a
:class:`SamplePlan` out. No I/O.

A tensor is divided into *sampling blocks*: its ggml blocks for quantized
types (32 elements in 18 bytes for Q4_0, 256 in 144 for Q4_K), and runs of
:data:`RUN_ELEMS` elements for the one-element types (F32, F16, BF16, F64,
the integers), as the corpus ground truth numbers them. Block ``i`` of a
tensor is block ``i`` of the tensor flattened in ggml's storage order.

:func:`plan_samples` takes, per tensor, the first and last blocks and a few
spread through the rest (one per stratum, at a position drawn from a hash of
the seed, the file's identity and the tensor), so a rerun or a retry reads
the same bytes, and mirrors of a file (same identity) read the same blocks.
A per-file byte budget caps the total: blocks are granted round by round
(every tensor's first block, then every last block, then each spread block
in turn), so a small budget still touches every tensor. :func:`merge_ranges`
then coalesces near ranges, smallest gaps first, without passing the budget.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, NamedTuple

from gguf_audit.errors import GGUFAuditError
from gguf_audit.format.ggml_types import TypeStatus
from gguf_audit.format.model import Header, TensorInfo

__all__ = [
    "DEFAULT_SAMPLE_CONFIG",
    "RUN_ELEMS",
    "BlockGeometry",
    "ByteRange",
    "PlannedBlock",
    "SampleConfig",
    "SamplePlan",
    "SelectionError",
    "file_identity",
    "merge_ranges",
    "plan_blocks",
    "plan_fetch",
    "plan_samples",
    "tensor_geometry",
]

RUN_ELEMS: Final = 32
"""Elements per sampling block of the one-element types (F32, F16, BF16, ...)."""


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
    """How many blocks of each tensor to read, and the per-file cap on bytes."""

    head_blocks: int = 1
    """Blocks taken from the start of every tensor."""
    tail_blocks: int = 1
    """Blocks taken from the end of every tensor."""
    spread_blocks: int = 4
    """Blocks spread through the rest, one per equal stratum."""
    budget_bytes: int = 1 << 20
    """Bytes fetched per file at most, merge gaps included."""
    max_gap_bytes: int = 4 << 10
    """Ranges this close are fetched as one (while the budget allows). All
    ranges go out concurrently, so a merge saves a request, not a round
    trip; on S3 a GET costs about what 4 KiB of egress does."""
    seed: int = 0
    """Varies the spread blocks; the same seed reads the same bytes."""

    def __post_init__(self) -> None:
        for name in ("head_blocks", "tail_blocks", "spread_blocks", "max_gap_bytes"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"SampleConfig.{name} must be an int >= 0. Got {value!r}.")
        if not isinstance(self.budget_bytes, int) or isinstance(self.budget_bytes, bool) or self.budget_bytes < 1:
            raise ValueError(f"SampleConfig.budget_bytes must be an int >= 1. Got {self.budget_bytes!r}.")
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


@dataclass(frozen=True, slots=True)
class PlannedBlock:
    """One sampling block to read."""

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
    """The blocks to read from one file and the merged ranges that fetch them."""

    blocks: tuple[PlannedBlock, ...]
    """In offset order; no two overlap."""
    fetch: tuple[ByteRange, ...]
    """The merged, sorted ranges covering every block."""
    seed: int
    file_identity: str
    budget_bytes: int | None
    """None for an explicit selection (no cap)."""
    dropped_blocks: int = 0
    """Blocks the per-tensor counts asked for that the budget left out."""

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
        """Bytes the merged ranges fetch (block bytes plus merged gaps)."""
        return sum(r.n_bytes for r in self.fetch)


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


def _block(index: int, tensor_index: int, tensor: TensorInfo, geo: BlockGeometry) -> PlannedBlock:
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


_identity = file_identity  # plan_samples takes a parameter of the same name


def _draw(key: bytes, stratum: int, size: int) -> int:
    """A position in ``[0, size)`` from a hash, the same on every platform and Python."""
    digest = hashlib.blake2b(key + stratum.to_bytes(4, "little"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % size


def _spread(n_blocks: int, head: int, tail: int, count: int, key: bytes) -> list[int]:
    """Up to ``count`` block indices between the head and tail blocks, one per stratum."""
    lo, hi = head, n_blocks - tail
    if count == 0 or hi <= lo:
        return []
    width = hi - lo
    if width <= count:
        return list(range(lo, hi))
    picks = []
    for j in range(count):
        start = lo + j * width // count
        end = lo + (j + 1) * width // count
        picks.append(start + _draw(key, j, end - start))
    return picks


def _fits(block: PlannedBlock, file_size: int | None) -> bool:
    return file_size is None or block.end_offset <= file_size


def plan_samples(
    header: Header,
    *,
    seed: int | None = None,
    file_identity: str | None = None,
    config: SampleConfig = DEFAULT_SAMPLE_CONFIG,
    file_size: int | None = None,
    tensors: Collection[str] | None = None,
) -> SamplePlan:
    """The blocks to sample from every tensor of ``header``, within the budget.

    Parameters
    ----------
    seed:
        Overrides ``config.seed``.
    file_identity:
        What the spread positions are drawn from besides the seed; defaults to
        :func:`file_identity` of the header, so copies of a file agree.
    file_size:
        Blocks ending past it are not planned (their data is not there);
        defaults to the header's ``file_size``.
    tensors:
        Plan only tensors with these names.
    """
    seed = config.seed if seed is None else seed
    identity = _identity(header) if file_identity is None else file_identity
    file_size = header.file_size if file_size is None else file_size
    rounds: list[list[PlannedBlock]] = []
    for index, tensor in enumerate(header.tensors):
        if tensors is not None and tensor.name not in tensors:
            continue
        geo = tensor_geometry(tensor)
        if geo is None:
            continue
        n = geo.n_blocks
        key = f"{seed}\0{identity}\0{index}\0".encode() + (tensor.raw_name or tensor.name.encode())
        head = list(range(min(config.head_blocks, n)))
        tail = list(range(max(n - config.tail_blocks, len(head)), n))
        order = head + tail[::-1] + _spread(n, len(head), len(tail), config.spread_blocks, key)
        for k, block_index in enumerate(order):
            if k == len(rounds):
                rounds.append([])
            block = _block(block_index, index, tensor, geo)
            if _fits(block, file_size):
                rounds[k].append(block)
    chosen: list[PlannedBlock] = []
    used = 0
    dropped = 0
    for blocks in rounds:
        for block in blocks:
            if used + block.n_bytes <= config.budget_bytes:
                chosen.append(block)
                used += block.n_bytes
            else:
                dropped += 1
    chosen.sort(key=lambda b: (b.offset, b.tensor_index, b.block_index))
    chosen = _without_overlaps(chosen)
    fetch = merge_ranges([b.range for b in chosen], config.max_gap_bytes, budget_bytes=config.budget_bytes)
    return SamplePlan(tuple(chosen), tuple(fetch), seed, identity, config.budget_bytes, dropped)


def _without_overlaps(blocks: list[PlannedBlock]) -> list[PlannedBlock]:
    """Drop blocks that overlap an earlier one (tensors whose regions overlap)."""
    out: list[PlannedBlock] = []
    end = -1
    for block in blocks:
        if block.offset >= end:
            out.append(block)
            end = block.end_offset
    return out


def plan_blocks(
    header: Header,
    selection: Mapping[str, Sequence[int]] | None = None,
    *,
    blocks: Sequence[int] | None = None,
    file_size: int | None = None,
    max_gap_bytes: int = DEFAULT_SAMPLE_CONFIG.max_gap_bytes,
) -> SamplePlan:
    """A plan for chosen blocks: ``selection`` maps tensor names to block indices.

    Negative indices count from the end, as in Python. Without ``selection``
    every tensor is chosen, each with ``blocks`` (default: first, middle,
    last). No budget applies. Raises SelectionError for a name the header
    lacks or an index outside a tensor.
    """
    default = list(blocks) if blocks is not None else None
    if selection is None:
        wanted: dict[str, list[int] | None] = {t.name: default for t in header.tensors}
    else:
        names = {t.name for t in header.tensors}
        for name in selection:
            if name not in names:
                raise SelectionError(f"the file has no tensor named {name!r}. Got {name!r}.")
        wanted = {name: list(indices) for name, indices in selection.items()}
    chosen: list[PlannedBlock] = []
    file_size = header.file_size if file_size is None else file_size
    for index, tensor in enumerate(header.tensors):
        if tensor.name not in wanted:
            continue
        geo = tensor_geometry(tensor)
        if geo is None:
            if selection is not None:
                raise SelectionError(
                    f"tensor {tensor.name!r} has no blocks to sample (type {tensor.type_name}, "
                    f"{tensor.n_elements} elements). Got {tensor.name!r}."
                )
            continue
        n = geo.n_blocks
        indices = wanted[tensor.name]
        if indices is None:
            indices = sorted({0, n // 2, n - 1})
        seen: set[int] = set()
        for i in indices:
            resolved = i + n if i < 0 else i
            if not 0 <= resolved < n:
                raise SelectionError(
                    f"block {i} is outside tensor {tensor.name!r}, which has {n} blocks ({-n} to {n - 1}). Got {i}."
                )
            if resolved in seen:
                continue
            seen.add(resolved)
            block = _block(resolved, index, tensor, geo)
            if _fits(block, file_size):
                chosen.append(block)
    chosen.sort(key=lambda b: (b.offset, b.tensor_index, b.block_index))
    chosen = _without_overlaps(chosen)
    fetch = merge_ranges([b.range for b in chosen], max_gap_bytes)
    return SamplePlan(tuple(chosen), tuple(fetch), 0, _identity(header), None, 0)


# --- ranges -------------------------------------------------------------------


def merge_ranges(
    ranges: Iterable[tuple[int, int]],
    max_gap: int,
    *,
    budget_bytes: int | None = None,
) -> list[ByteRange]:
    """Sorted ranges covering ``ranges``, near ones fetched as one.

    Overlapping and touching ranges always merge. Two ranges at most
    ``max_gap`` bytes apart merge too, smallest gap first, as long as the
    total fetched (the ranges plus the gaps merged) stays within
    ``budget_bytes``. Empty ranges are dropped.
    """
    spans = sorted((int(s), int(e)) for s, e in ranges if e > s)
    if not spans:
        return []
    # Coalesce overlaps and touching ranges: that costs no byte.
    solid: list[list[int]] = [list(spans[0])]
    for s, e in spans[1:]:
        last = solid[-1]
        if s <= last[1]:
            last[1] = max(last[1], e)
        else:
            solid.append([s, e])
    total = sum(e - s for s, e in solid)
    gaps = sorted((solid[i + 1][0] - solid[i][1], i) for i in range(len(solid) - 1))
    join = [False] * len(solid)
    for gap, i in gaps:
        if gap > max_gap:
            break
        if budget_bytes is not None and total + gap > budget_bytes:
            continue
        join[i] = True
        total += gap
    out: list[ByteRange] = []
    start = solid[0][0]
    for i, (_, e) in enumerate(solid):
        if not join[i]:
            out.append(ByteRange(start, e))
            if i + 1 < len(solid):
                start = solid[i + 1][0]
    return out


def plan_fetch(
    plan: SamplePlan,
    *,
    held_bytes: int = 0,
    max_gap_bytes: int = DEFAULT_SAMPLE_CONFIG.max_gap_bytes,
) -> list[ByteRange]:
    """The merged ranges still to fetch when bytes ``[0, held_bytes)`` are already held.

    Blocks wholly inside the held prefix (the header read often covers the
    first tensors of a small file) need no request; a block straddling its
    end is fetched from ``held_bytes`` on. The plan's budget still applies.
    """
    needed = [(max(b.offset, held_bytes), b.end_offset) for b in plan.blocks if b.end_offset > held_bytes]
    return merge_ranges(needed, max_gap_bytes, budget_bytes=plan.budget_bytes)
