"""An audit's sampling plan: a few windows of bytes placed for coverage, within a request and a byte budget.

Each window is one range request: a run of bytes that may span tensor
boundaries (the end of one tensor and the start of the next), and every
whole block of every tensor inside it is decoded. Requests are what
sampling a collection spends (S3 bills each GET, Hugging Face limits them),
so :func:`plan_samples` places at most ``max_requests`` windows, in this
order, each while requests and bytes remain:

1. the end of the data section: the last tensor's last blocks, where a file
   cut short, or preallocated and never filled in, shows;
2. the start (the first tensor's first blocks), then the other end of the
   first and of the last tensor: the vocabulary matrices usually sit there,
   and a padded vocabulary's last rows may be zero by design, which one end
   alone would take for a zero-filled matrix;
3. one window in each of the :data:`~gguf_audit.plan.model.STRATA` strata not
   yet touched, centred on the tensor boundary nearest a position drawn in it;
4. one at the start of a tensor of each type not yet touched;
5. the rest at the tensor boundaries that add the most tensors not yet
   sampled and first blocks not yet read (ties drawn), and once none adds
   one, in the middle of the widest stretch not yet read.

A window holds ``window_blocks`` blocks, half on each side of its anchor
(so a Q4_K window reads 9 KiB, a Q8_0 one 2 KiB), within the byte budget's
share. When the whole data section fits in the byte budget (and holds at most
:data:`WHOLE_READ_MAX_BLOCKS` blocks), it is read whole, in one request (the
header read often holds its first part already). Positions are drawn from a hash of the seed and the
file identity (the tensor table's digest), so a rerun or a retry reads the
same bytes and mirrors of a file read the same blocks.
"""

from __future__ import annotations

import bisect
import hashlib
import heapq
from collections.abc import Collection
from dataclasses import dataclass
from functools import partial
from itertools import repeat
from typing import Final

from gguf_audit.format.model import Header, TensorInfo
from gguf_audit.plan.explicit import without_overlaps
from gguf_audit.plan.model import (
    DEFAULT_SAMPLE_CONFIG,
    STRATA,
    BlockGeometry,
    ByteRange,
    PlannedBlock,
    SampleConfig,
    SamplePlan,
    block_at,
    data_section,
    file_identity,
    strata_mask,
    stratum_bounds,
    tensor_geometry,
)
from gguf_audit.plan.ranges import merge_ranges

__all__ = ["WHOLE_READ_MAX_BLOCKS", "plan_samples"]

WHOLE_READ_MAX_BLOCKS: Final = 1 << 16
"""Blocks a data section read whole may hold at most. Each block decoded is checked and becomes a
``samples`` row (about 50 us of CPU each), so a byte budget raised far past the default must not make
a big file's whole read the plan: 65,536 blocks cover any 1 MiB data section (the default budget;
17 bytes per 32 elements, MXFP4's, are the densest blocks) and cost a few seconds at most."""

_identity = file_identity  # plan_samples takes a parameter of the same name

_as_block = partial(tuple.__new__, PlannedBlock)
"""A PlannedBlock from a tuple of its fields, without a Python-level call."""


@dataclass(frozen=True, slots=True)
class _Segment:
    """A tensor's sampleable bytes: its whole blocks, as far as the file goes."""

    index: int
    tensor: TensorInfo
    geo: BlockGeometry
    start: int
    end: int

    def block_end(self, i: int) -> int:
        g = self.geo
        n_elements = min(g.block_elems, g.n_elements - i * g.block_elems)
        return self.start + i * g.block_bytes + (n_elements * g.element_bytes if g.element_bytes else g.block_bytes)

    def blocks_in(self, start: int, end: int) -> range:
        """The blocks wholly inside ``[start, end)``."""
        bb = self.geo.block_bytes
        lo = max(0, -(-(start - self.start) // bb))
        bound = min(end, self.end)
        hi = min((bound - self.start) // bb, self.geo.n_blocks)  # blocks before hi end by bound
        if hi < self.geo.n_blocks and self.block_end(hi) <= bound:
            hi += 1  # a short last block (one-element types)
        return range(lo, max(lo, hi))


def _segments(header: Header, file_size: int | None, tensors: Collection[str] | None) -> list[_Segment]:
    out = []
    # Layers repeat a few shapes: the geometry of each (type, shape) is worked out once.
    geometries: dict[tuple[int, int, int], BlockGeometry | None] = {}
    for index, tensor in enumerate(header.tensors):
        if tensors is not None and tensor.name not in tensors:
            continue
        shape_key = (tensor.type_id, tensor.n_elements, tensor.n_bytes)
        if shape_key not in geometries:
            geometries[shape_key] = tensor_geometry(tensor)
        geo = geometries[shape_key]
        if geo is None or tensor.data_offset < 0:
            continue
        start = tensor.data_offset
        # Blocks end at n_elements (one-element types) or at the last whole block.
        end = start + (geo.n_elements * geo.element_bytes if geo.element_bytes else geo.n_blocks * geo.block_bytes)
        if file_size is not None:
            end = min(end, file_size)
        first_end = start + (min(geo.block_elems, geo.n_elements) * geo.element_bytes or geo.block_bytes)
        if end >= first_end:
            out.append(_Segment(index, tensor, geo, start, end))
    out.sort(key=lambda s: (s.start, s.index))
    return out


def _mix(seed: int, n: int) -> int:
    """splitmix64 of ``seed + n``: a cheap, portable draw for tie-breaks."""
    z = (seed + (n + 1) * 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return z ^ (z >> 31)


def _draw(key: bytes, tag: bytes, n: int) -> int:
    """A number from a hash, the same on every platform and Python."""
    digest = hashlib.blake2b(key + tag + n.to_bytes(8, "little", signed=True), digest_size=8).digest()
    return int.from_bytes(digest, "little")


_Run = tuple[int, int, int]
"""A window's blocks in one tensor: (segment position, first block, end block)."""


class _Placer:
    """The windows placed so far, and what they cover."""

    def __init__(self, segs: list[_Segment], side_blocks: int, cap: int, n_windows: int, span: ByteRange) -> None:
        self.segs = segs
        self.starts = [s.start for s in segs]
        self.ends = [s.end for s in segs]
        self.side_blocks = side_blocks
        self.cap = cap
        """Bytes per window at most."""
        self.n_windows = n_windows
        self.span = span
        self.lo = segs[0].start
        self.hi = max(s.end for s in segs)
        self.windows: list[tuple[int, int, list[_Run]]] = []
        self.covered: set[int] = set()
        self.first_read: set[int] = set()
        """Tensors whose first block a window holds (where a bad scale or an unwritten tensor shows first)."""
        self.types: set[int] = set()
        self.mask = 0

    @property
    def full(self) -> bool:
        return len(self.windows) >= self.n_windows

    def runs(self, start: int, end: int) -> list[_Run]:
        """The blocks of every tensor wholly inside ``[start, end)``."""
        out: list[_Run] = []
        j = bisect.bisect_left(self.starts, end) - 1
        while j >= 0:
            seg = self.segs[j]
            if seg.end <= start:
                break  # tensors sorted and apart: none further left reaches the window
            blocks = seg.blocks_in(start, end)
            if blocks:
                out.append((j, blocks.start, blocks.stop))
            j -= 1
        return out

    def side(self, j: int) -> int:
        """Bytes of one side of a window in tensor ``j``: ``side_blocks`` of its blocks, half the cap at most."""
        return min(self.side_blocks * self.segs[j].geo.block_bytes, self.cap // 2)

    def centred(self, anchor: int) -> tuple[int, int]:
        """The window around ``anchor``: ``side_blocks`` blocks of the tensor on each side of it."""
        right = max(0, bisect.bisect_right(self.starts, anchor) - 1)
        left = max(0, bisect.bisect_right(self.starts, anchor - 1) - 1)
        start, end = anchor - self.side(left), anchor + self.side(right)
        if start < self.lo:
            start, end = self.lo, min(self.hi, end + self.lo - start)
        if end > self.hi:
            start, end = max(self.lo, start - (end - self.hi)), self.hi
        return start, end

    def at_end(self) -> tuple[int, int]:
        last = max(range(len(self.segs)), key=lambda j: (self.segs[j].end, j))
        return max(self.lo, self.hi - 2 * self.side(last)), self.hi

    def at_start(self) -> tuple[int, int]:
        return self.lo, min(self.hi, self.lo + 2 * self.side(0))

    def add(self, start: int, end: int) -> bool:
        """Place the window ``[start, end)``; False when it holds no whole block (nothing is placed)."""
        if self.full:
            return False
        runs = self.runs(start, end)
        if not runs:
            return False
        self.windows.append((start, end, runs))
        for j, lo, hi in runs:
            seg = self.segs[j]
            self.covered.add(j)
            if lo == 0:
                self.first_read.add(j)
            self.types.add(seg.tensor.type_id)
            self.mask |= strata_mask([(seg.start + lo * seg.geo.block_bytes, seg.block_end(hi - 1))], *self.span)
        return True

    def holds(self, offset: int) -> bool:
        return any(s <= offset < e for s, e, _ in self.windows)

    # --- the placement steps, in order

    def edges(self) -> None:
        last = max(range(len(self.segs)), key=lambda j: (self.segs[j].end, j))
        self.add(*self.at_end())
        self.add(*self.at_start())
        if not self.holds(self.segs[last].start):
            self.add(*self.centred(self.segs[last].start))
        if not self.holds(self.segs[0].end - 1):
            self.add(*self.centred(self.segs[0].end))

    def strata(self, key: bytes) -> None:
        for k in range(STRATA):
            if self.full:
                return
            if self.mask >> k & 1:
                continue
            bounds = stratum_bounds(k, *self.span)
            if bounds.n_bytes <= 0:
                continue
            point = bounds.start + _draw(key, b"stratum", k) % bounds.n_bytes
            anchors = [point]
            i = bisect.bisect_left(self.starts, bounds.start)
            j = bisect.bisect_left(self.starts, bounds.end)
            if j > i:
                near = min(range(i, j), key=lambda m: (abs(self.starts[m] - point), m))
                anchors.insert(0, self.starts[near])
            for anchor in anchors:
                if self.mask >> k & 1 or self.full:
                    break
                self.add(*self.centred(anchor))

    def tensor_types(self, key: bytes) -> None:
        by_type: dict[int, list[int]] = {}
        for j, seg in enumerate(self.segs):
            by_type.setdefault(seg.tensor.type_id, []).append(j)
        for type_id in sorted(by_type):
            if type_id in self.types:
                continue
            choices = by_type[type_id]
            j = choices[_draw(key, b"type", type_id) % len(choices)]
            seg = self.segs[j]
            if not self.add(*self.centred(seg.start)):
                self.add(seg.start, seg.start + 2 * self.side(j))

    def touching(self, start: int, end: int) -> range:
        """Positions of the tensors overlapping ``[start, end)`` (tensors sorted and apart)."""
        return range(bisect.bisect_right(self.ends, start), bisect.bisect_left(self.starts, end))

    def gain(self, touched: range, opened: range) -> int:
        """What a window adds: each tensor it touches not yet touched, and each first block not yet read."""
        # Counted by set intersections (in C): a window may touch thousands of one-block tensors.
        return (
            len(touched)
            - len(self.covered.intersection(touched))
            + len(opened)
            - len(self.first_read.intersection(opened))
        )

    def fill(self, key: bytes) -> None:
        # Lazy greedy coverage: a boundary's gain only falls as windows are placed.
        seed = _draw(key, b"boundaries", 0)
        heap: list[tuple[int, int, int, range, range]] = []
        for j in range(1, len(self.segs)):
            start, end = self.centred(self.starts[j])
            touched = self.touching(start, end)
            # The tensors whose first block lies in the window.
            opened = range(bisect.bisect_left(self.starts, start), bisect.bisect_left(self.starts, end))
            gain = self.gain(touched, opened)
            if gain:
                heap.append((-gain, _mix(seed, j), j, touched, opened))
        heapq.heapify(heap)
        while heap and not self.full:
            neg_gain, tie, j, touched, opened = heapq.heappop(heap)
            gain = self.gain(touched, opened)
            if gain == 0:
                continue
            if gain != -neg_gain:
                heapq.heappush(heap, (-gain, tie, j, touched, opened))
                continue
            self.add(*self.centred(self.starts[j]))
        tries = 2 * self.n_windows
        while not self.full and tries > 0:
            tries -= 1
            if not self._widest_gap():
                return

    def _widest_gap(self) -> bool:
        """A window in the middle of the widest stretch no window reads; False when none fits there."""
        spans = sorted((s, e) for s, e, _ in self.windows)
        edges = [self.lo, *(x for s, e in spans for x in (s, e)), self.hi]
        gaps = [(edges[i + 1] - edges[i], edges[i]) for i in range(0, len(edges) - 1, 2)]
        width, start = max(gaps, default=(0, 0))
        window = self.centred(start + width // 2)
        if window[0] < start or window[1] > start + width:
            return False
        return self.add(*window)

    def blocks(self) -> list[PlannedBlock]:
        wanted: dict[int, list[tuple[int, int]]] = {}
        for _, _, runs in self.windows:
            for j, lo, hi in runs:
                wanted.setdefault(j, []).append((lo, hi))
        out: list[PlannedBlock] = []
        for j, spans in wanted.items():
            seg = self.segs[j]
            t, g = seg.tensor, seg.geo
            last = g.n_blocks - 1
            n_bytes = g.block_elems * g.element_bytes if g.element_bytes else g.block_bytes
            name, type_id, index, elems, stride, start = (
                t.name,
                t.type_id,
                seg.index,
                g.block_elems,
                g.block_bytes,
                seg.start,
            )
            # Each block index once, in order: runs merged rather than put in a set block by block.
            upto = 0
            for lo, hi in sorted(spans):
                first, end = max(lo, upto), min(hi, last)
                if first < end:
                    # The run's blocks built from columns: thousands per file, a call each would cost more.
                    fields = zip(
                        repeat(index),
                        repeat(name),
                        repeat(type_id),
                        range(first, end),
                        range(first * elems, end * elems, elems),
                        repeat(elems),
                        range(start + first * stride, start + end * stride, stride),
                        repeat(n_bytes),
                    )
                    out.extend(map(_as_block, fields))
                if lo <= last < hi and upto <= last:
                    out.append(block_at(last, index, t, g))  # the one that may be short
                upto = max(upto, hi)
        return out

    def spans(self) -> list[tuple[int, int]]:
        """Each window's fetch: from its first block's start to its last block's end."""
        out = []
        for _, _, runs in self.windows:
            first = min(self.segs[j].start + lo * self.segs[j].geo.block_bytes for j, lo, _ in runs)
            last = max(self.segs[j].block_end(hi - 1) for j, _, hi in runs)
            out.append((first, last))
        return out


def _n_blocks(segs: list[_Segment]) -> int:
    return sum(len(s.blocks_in(s.start, s.end)) for s in segs)


def _window_cap(config: SampleConfig, segs: list[_Segment]) -> tuple[int, int]:
    """Bytes per window at most, and how many windows: the budget shared out, two of the widest blocks at least."""
    widest = max(s.geo.block_bytes for s in segs)
    cap = max(config.budget_bytes // config.max_requests, 2 * widest)
    n_windows = min(config.max_requests, config.budget_bytes // cap)
    if n_windows == 0:
        return config.budget_bytes, 1
    return cap, n_windows


def plan_samples(
    header: Header,
    *,
    seed: int | None = None,
    file_identity: str | None = None,
    config: SampleConfig = DEFAULT_SAMPLE_CONFIG,
    file_size: int | None = None,
    tensors: Collection[str] | None = None,
) -> SamplePlan:
    """The windows to sample from ``header``'s file, within ``config``'s request and byte budgets.

    Parameters
    ----------
    seed:
        Overrides ``config.seed``.
    file_identity:
        What the window positions are drawn from besides the seed; defaults to
        :func:`~gguf_audit.plan.model.file_identity` of the header, so copies of a file agree.
    file_size:
        Blocks ending past it are not planned (their data is not there);
        defaults to the header's ``file_size``.
    tensors:
        Plan only tensors with these names; the strata then divide their span.
    """
    seed = config.seed if seed is None else seed
    identity = _identity(header) if file_identity is None else file_identity
    file_size = header.file_size if file_size is None else file_size
    segs = _segments(header, file_size, tensors)
    if tensors is None:
        span = data_section(header)
    elif segs:
        span = ByteRange(min(s.start for s in segs), max(s.tensor.end_offset for s in segs))
    else:
        span = ByteRange(0, 0)
    if not segs:
        return SamplePlan((), (), seed, identity, config.budget_bytes, span.start, span.end, config.max_requests)
    cap, n_windows = _window_cap(config, segs)
    placer = _Placer(segs, max(1, config.window_blocks // 2), cap, n_windows, span)
    if placer.hi - placer.lo <= config.budget_bytes and _n_blocks(segs) <= WHOLE_READ_MAX_BLOCKS:
        # A data section within the byte budget is read whole, in one request: every
        # tensor's every block is checked (a NaN scale in a first block included),
        # where windows would leave some tensors' starts unread.
        placer.add(placer.lo, placer.hi)
    else:
        key = f"{seed}\0{identity}\0".encode()
        placer.edges()
        placer.strata(key)
        placer.tensor_types(key)
        placer.fill(key)
    blocks = without_overlaps(placer.blocks())
    fetch = merge_ranges(placer.spans(), config.max_gap_bytes, budget_bytes=config.budget_bytes)
    return SamplePlan(
        tuple(blocks), tuple(fetch), seed, identity, config.budget_bytes, span.start, span.end, config.max_requests
    )
