"""Work run on threads that are kept and reused, not on a thread started and ended for each call.

An audit waits on two things of its own beside its reads: the chat templates'
render child, and on HTTP a read run ahead of the reader. Each had a thread
started for it and ended after it, one or more a file. On Python 3.11 a thread
starting or ending can deadlock a process: reading every thread's frames
(``sys._current_frames``, which a dask worker's profiler calls every 10 ms)
holds the interpreter's list of threads, a garbage collection during that read
runs dask's GC callback, which waits for the GIL, while the thread being
started or ended holds the GIL and waits for the list. A night of 100,000
files hung there for good (a worker's template thread that never ran). Threads
that are kept start once, when a worker first needs that many at a time, and
never end.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from queue import SimpleQueue
from typing import Final

__all__ = ["KeptThreads", "kept_threads"]


class KeptThreads:
    """Daemon threads that run what is handed to them, one call each at a time; a new one starts only when
    every kept thread is busy, and none ever ends (as many as were ever busy at once)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._lock = threading.Lock()
        self._work: SimpleQueue[tuple[Callable[[], None], threading.Event]] = SimpleQueue()
        self._idle = 0
        self._started = 0

    @property
    def started(self) -> int:
        """Threads started so far."""
        return self._started

    def start(self, call: Callable[[], None]) -> threading.Event:
        """Run ``call`` on a kept thread; the event is set once it returned (or raised: ``call`` keeps its own
        outcome, an exception it lets out is dropped and the thread goes on)."""
        done = threading.Event()
        with self._lock:
            if self._idle:
                self._idle -= 1
            else:
                self._started += 1
                threading.Thread(target=self._serve, name=f"{self._name}-{self._started}", daemon=True).start()
        self._work.put((call, done))
        return done

    def _serve(self) -> None:
        while True:
            call, done = self._work.get()
            try:
                call()
            except BaseException:  # noqa: BLE001 - the caller's call keeps its outcome; the thread stays
                pass
            finally:
                with self._lock:
                    self._idle += 1
                done.set()


kept_threads: Final = KeptThreads("gguf-audit-kept")
"""The process's kept threads (template audits, HTTP read-ahead)."""
