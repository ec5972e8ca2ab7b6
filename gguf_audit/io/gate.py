"""A process's CPU gate: reads overlap, CPU work does not thrash.

A worker audits dozens of files at once on a thread pool so that their reads
overlap. When the reads are quick (local files, a warm cache) those threads
all want the CPU at once and contend for the GIL, which costs more CPU per
file than running them one after another. :class:`CpuGate` lets at most
``slots`` threads do CPU work (parsing, checks, decoding, building rows) at
a time; a thread holding a slot gives it back for every read it waits on
(:meth:`CpuGate.released`, which the byte sources call around each request),
so reads in flight never hold a slot and never wait for one.

Rules that keep it deadlock-free: a slot is only ever waited for by a thread
that holds none (:meth:`held` is re-entrant per thread and does not acquire
twice); a thread holding a slot waits only on reads (which it releases the
slot for) or on work that needs no slot. Every slot taken is given back on
exceptions too. The state is the gate's own (a semaphore and a per-thread
depth), never a module's.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["CpuGate", "GateStats"]


class GateStats:
    """What a gate has seen (for tests and benchmarks): slots taken, and the most held at once."""

    __slots__ = ("acquired", "peak")

    def __init__(self) -> None:
        self.acquired = 0
        self.peak = 0


class CpuGate:
    """At most ``slots`` threads of a process doing CPU work at once; released around reads.

    Thread-safe; one gate is shared by every thread that audits files in a
    process (see :class:`~gguf_audit.pipelines.work.execute.AuditPools`).
    """

    def __init__(self, slots: int) -> None:
        if slots < 1:
            raise ValueError(f"a CPU gate needs at least one slot. Got {slots}.")
        self.slots = slots
        self._sem = threading.Semaphore(slots)
        self._local = threading.local()
        self._lock = threading.Lock()
        self._holding = 0
        self.stats = GateStats()

    def _depth(self) -> int:
        return int(getattr(self._local, "depth", 0))

    def _acquire(self) -> None:
        self._sem.acquire()
        with self._lock:
            self._holding += 1
            self.stats.acquired += 1
            self.stats.peak = max(self.stats.peak, self._holding)

    def _release(self) -> None:
        with self._lock:
            self._holding -= 1
        self._sem.release()

    @property
    def holding(self) -> int:
        """Slots held right now."""
        with self._lock:
            return self._holding

    @property
    def is_held(self) -> bool:
        """Whether the calling thread holds a slot."""
        return self._depth() > 0 and not getattr(self._local, "lent", False)

    @contextmanager
    def held(self) -> Iterator[None]:
        """Hold a slot for the block (re-entrant: nested blocks of one thread share its slot)."""
        depth = self._depth()
        if depth == 0:
            self._acquire()
        self._local.depth = depth + 1
        try:
            yield
        finally:
            self._local.depth = depth
            if depth == 0:
                self._release()

    @contextmanager
    def released(self) -> Iterator[None]:
        """Give the calling thread's slot back for the block (a read), and take one again after.

        A no-op for a thread that holds none (a read made outside any CPU
        phase, or from a helper thread), and inside another ``released``.
        """
        if not self.is_held:
            yield
            return
        self._local.lent = True
        self._release()
        try:
            yield
        finally:
            self._acquire()
            self._local.lent = False
