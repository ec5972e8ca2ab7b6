"""Byte ranges: coalescing near ones within a budget, and what is left to fetch past a held prefix."""

from __future__ import annotations

from collections.abc import Iterable

from gguf_audit.plan.model import ByteRange, SamplePlan

__all__ = ["merge_ranges", "plan_fetch"]


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
    ``budget_bytes``. Empty ranges are dropped. Never more ranges out than in.
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


def plan_fetch(plan: SamplePlan, *, held_bytes: int = 0, max_gap_bytes: int = 0) -> list[ByteRange]:
    """The plan's ranges still to fetch when bytes ``[0, held_bytes)`` are already held.

    A range wholly inside the held prefix (the header read often covers the
    first tensors of a small file) needs no request; one straddling its end
    is fetched from ``held_bytes`` on. Ranges at most ``max_gap_bytes`` apart
    are joined within the plan's budget; there are never more ranges than the
    plan's, so its request cap holds.
    """
    needed = [(max(r.start, held_bytes), r.end) for r in plan.fetch if r.end > held_bytes]
    return merge_ranges(needed, max_gap_bytes, budget_bytes=plan.budget_bytes)
