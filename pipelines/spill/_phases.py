"""The driver's phases: memory handed back at each phase's end, and each end told to whoever watches.

A night's driver frees what a phase built (a listing's sort, a batch of the
base night's rows, lineage's columns) back to glibc and Arrow's pool, which
keep it resident: a later allocation a little larger than any hole left
extends the heap instead. So the night is written as a sequence of phases
(:func:`driver_phase`) and of streamed steps (:func:`released_after_each`),
and at the end of each the mapped pages, Arrow's free pages and the C heap's
go back to the system. This is the one place that does it.

A benchmark (``benchmarks/bench_driver.py --phases``) subscribes with
:func:`watch_phases` and measures what it likes at each phase's end. A name
with a dot (``audit.batch``, ``parts.layout``) is a step within a phase.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TypeVar

from gguf_audit.pipelines.spill._mapped import give_back_freed_memory

__all__ = ["PhaseEnd", "driver_phase", "released_after_each", "watch_phases"]

_Item = TypeVar("_Item")


@dataclass(frozen=True, slots=True)
class PhaseEnd:
    """One phase of the driver done, its memory handed back."""

    name: str
    seconds: float
    heap_trimmed: bool
    """Whether the C heap had free pages to hand back (glibc's ``malloc_trim``; False elsewhere)."""


_LOCK = threading.Lock()
_WATCHERS: list[Callable[[PhaseEnd], None]] = []


def watch_phases(watcher: Callable[[PhaseEnd], None]) -> Callable[[], None]:
    """Call ``watcher`` at the end of every phase from now on; returns what stops it."""
    with _LOCK:
        _WATCHERS.append(watcher)

    def stop() -> None:
        with _LOCK:
            if watcher in _WATCHERS:
                _WATCHERS.remove(watcher)

    return stop


@contextlib.contextmanager
def driver_phase(name: str) -> Iterator[None]:
    """Run one phase of the night; at its end (an error's too) hand freed memory back and tell the watchers."""
    begun = time.perf_counter()
    try:
        yield
    finally:
        trimmed = give_back_freed_memory()
        with _LOCK:
            watchers = list(_WATCHERS)
        if watchers:
            end = PhaseEnd(name, time.perf_counter() - begun, trimmed)
            for watcher in watchers:
                watcher(end)


def released_after_each(items: Iterable[_Item]) -> Iterator[_Item]:
    """``items``, freed memory handed back after each one's step (a streamed batch, a chunk of models) is done."""
    for item in items:
        yield item
        give_back_freed_memory()
