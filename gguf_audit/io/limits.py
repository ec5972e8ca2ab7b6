"""Per-host caps on requests in flight: a process's sampled reads never crowd one server.

A scan runs dozens of files at once in each worker; without a cap, each
file's ranges would go out together and one host would see hundreds of
connections from one worker. :class:`HostLimits` hands out one semaphore per
host, shared by every file the process reads; :data:`DEFAULT_HOST_LIMITS` is
the process's (so the cap is per worker process, per host).
"""

from __future__ import annotations

import asyncio
import threading
import urllib.parse
import weakref
from typing import Any, Final

__all__ = ["DEFAULT_HOST_LIMITS", "HostLimits", "host_key"]


class HostLimits:
    """Semaphores capping requests in flight per host, made once and shared by every thread.

    A semaphore belongs to an event loop, so there is one per (loop, host,
    limit); fsspec runs every async filesystem's requests on one IO loop per
    process, which makes it one per host in practice. Thread-safe: files on
    many threads ask for the same host's semaphore at once, and the lock makes
    it exactly once.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, int], asyncio.Semaphore]]
        self._slots = weakref.WeakKeyDictionary()

    def slot(self, host: str, limit: int) -> asyncio.Semaphore:
        """The semaphore allowing ``limit`` requests in flight to ``host`` on the running loop.

        Call it from a coroutine (the loop is the running one); hold it with
        ``async with`` around each request.
        """
        loop = asyncio.get_running_loop()
        with self._lock:
            per_loop = self._slots.get(loop)
            if per_loop is None:
                per_loop = {}
                self._slots[loop] = per_loop
            sem = per_loop.get((host, limit))
            if sem is None:
                sem = asyncio.Semaphore(limit)
                per_loop[(host, limit)] = sem
            return sem


DEFAULT_HOST_LIMITS: Final = HostLimits()
"""The process's caps: every source shares them unless given its own."""


def host_key(url: str, fs: Any) -> str:
    """What one cap covers: ``scheme://host[:port]`` for HTTP, the endpoint for S3 (all its buckets share
    one connection pool), ``protocol://bucket`` for other stores."""
    split = urllib.parse.urlsplit(url)
    scheme = split.scheme or "file"
    if scheme in ("s3", "s3a"):
        endpoint = getattr(fs, "endpoint_url", None) or (getattr(fs, "client_kwargs", None) or {}).get("endpoint_url")
        return f"s3:{endpoint or 'aws'}"
    return f"{scheme}://{split.netloc}"
