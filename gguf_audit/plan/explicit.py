"""Plans without a budget: blocks chosen by index (``gguf-audit sample --blocks``), or spread through every tensor.

:func:`plan_blocks` reads the blocks named; :func:`plan_spread` reads the
same number of evenly spaced blocks from each tensor, first and last
included (``compare`` measures each tensor's error on them). Neither is
capped: they serve one-off commands on one file, not a collection.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from operator import attrgetter
from typing import Final

from gguf_audit.format.model import Header
from gguf_audit.plan.model import (
    PlannedBlock,
    SamplePlan,
    SelectionError,
    block_at,
    data_section,
    file_identity,
    tensor_geometry,
)
from gguf_audit.plan.ranges import merge_ranges

__all__ = ["plan_blocks", "plan_spread", "spread_indices", "without_overlaps"]

_DEFAULT_GAP_BYTES = 4 << 10
_ORDER: Final = attrgetter("offset", "tensor_index", "block_index")


def without_overlaps(blocks: list[PlannedBlock]) -> list[PlannedBlock]:
    """Blocks sorted by offset, dropping any that overlaps an earlier one (tensors whose regions overlap)."""
    blocks = sorted(blocks, key=_ORDER)
    out: list[PlannedBlock] = []
    end = -1
    for block in blocks:
        if block.offset >= end:
            out.append(block)
            end = block.offset + block.n_bytes
    return out


def _fits(block: PlannedBlock, file_size: int | None) -> bool:
    return file_size is None or block.end_offset <= file_size


def _explicit_plan(header: Header, chosen: list[PlannedBlock], max_gap_bytes: int) -> SamplePlan:
    blocks = without_overlaps(chosen)
    fetch = merge_ranges([b.range for b in blocks], max_gap_bytes)
    section = data_section(header)
    return SamplePlan(tuple(blocks), tuple(fetch), 0, file_identity(header), None, section.start, section.end)


def plan_blocks(
    header: Header,
    selection: Mapping[str, Sequence[int]] | None = None,
    *,
    blocks: Sequence[int] | None = None,
    file_size: int | None = None,
    max_gap_bytes: int = _DEFAULT_GAP_BYTES,
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
            block = block_at(resolved, index, tensor, geo)
            if _fits(block, file_size):
                chosen.append(block)
    return _explicit_plan(header, chosen, max_gap_bytes)


def spread_indices(n_blocks: int, count: int) -> list[int]:
    """``count`` block indices evenly spaced over ``n_blocks``, first and last included (all when fewer)."""
    if count >= n_blocks:
        return list(range(n_blocks))
    if count <= 1:
        return [0][:count]
    return sorted({round(i * (n_blocks - 1) / (count - 1)) for i in range(count)})


def plan_spread(
    header: Header,
    count: int,
    *,
    tensors: Collection[str] | None = None,
    file_size: int | None = None,
    max_gap_bytes: int = _DEFAULT_GAP_BYTES,
) -> SamplePlan:
    """``count`` evenly spaced blocks of every tensor (those named in ``tensors``), first and last included."""
    file_size = header.file_size if file_size is None else file_size
    chosen: list[PlannedBlock] = []
    for index, tensor in enumerate(header.tensors):
        if tensors is not None and tensor.name not in tensors:
            continue
        geo = tensor_geometry(tensor)
        if geo is None:
            continue
        for i in spread_indices(geo.n_blocks, count):
            block = block_at(i, index, tensor, geo)
            if _fits(block, file_size):
                chosen.append(block)
    return _explicit_plan(header, chosen, max_gap_bytes)
