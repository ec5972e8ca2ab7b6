"""Per-host caps on requests in flight, and pauses a server's rate limit asks for.

A scan runs dozens of files at once in each worker; without a cap, each
file's ranges would go out together and one host would see hundreds of
connections from one worker. :class:`HostLimits` hands out one semaphore per
host, shared by every file the process reads; :data:`DEFAULT_HOST_LIMITS` is
the process's (so the cap is per worker process, per host).
:class:`HostPauses` holds a host back until the reset its rate-limit headers
named (``RateLimit``, ``Retry-After``; :func:`parse_rate_limit`), for every
file of the process at once.
"""

from __future__ import annotations

import re
import threading
import time
import urllib.parse
import weakref
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, NamedTuple

if TYPE_CHECKING:
    import asyncio

__all__ = [
    "DEFAULT_HOST_LIMITS",
    "DEFAULT_HOST_PAUSES",
    "HostLimits",
    "HostPauses",
    "RateLimit",
    "host_key",
    "parse_rate_limit",
]


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
        import asyncio  # here: a one-file read through the standard library never needs an event loop

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


# --- rate limits ---------------------------------------------------------------

_RATE_LIMIT_T: Final = re.compile(r"(?:^|;)\s*t\s*=\s*(\d+(?:\.\d+)?)")
_RATE_LIMIT_R: Final = re.compile(r"(?:^|;)\s*r\s*=\s*(\d+)")
_RATE_LIMIT_W: Final = re.compile(r"(?:^|;)\s*w\s*=\s*(\d+(?:\.\d+)?)")


class RateLimit(NamedTuple):
    """What a response's rate-limit headers say: requests left in the window and seconds to its reset."""

    remaining: int | None
    reset_s: float | None


def parse_rate_limit(headers: Mapping[str, str]) -> RateLimit:
    """``RateLimit: "<bucket>";r=<left>;t=<seconds>`` (the IETF draft the Hub sends), else ``Retry-After`` seconds,
    else (with no requests left) the window of ``RateLimit-Policy: "<policy>";"<bucket>";q=<n>;w=<seconds>``.

    Unknown or malformed values give None; a reset is never negative.
    """
    text = headers.get("RateLimit") or headers.get("ratelimit")
    remaining: int | None = None
    reset: float | None = None
    if text:
        found_r = _RATE_LIMIT_R.search(text)
        found_t = _RATE_LIMIT_T.search(text)
        remaining = int(found_r.group(1)) if found_r else None
        reset = float(found_t.group(1)) if found_t else None
    if reset is None:
        retry_after = (headers.get("Retry-After") or headers.get("retry-after") or "").strip()
        if retry_after.replace(".", "", 1).isdigit():
            reset = float(retry_after)
    if reset is None and remaining == 0:
        # No reset named: the policy's window (``RateLimit-Policy: ...;q=<n>;w=<seconds>``) is the longest wait.
        window = _RATE_LIMIT_W.search(headers.get("RateLimit-Policy") or headers.get("ratelimit-policy") or "")
        reset = float(window.group(1)) if window else None
    return RateLimit(remaining, reset)


class HostPauses:
    """When each host may be asked again: set by a 429 or an answer with no requests left, shared by every file.

    A 429 to one file's request pauses every file of the process reading from
    that host until the reset the server named, rather than letting each file
    run into its own 429. Thread-safe; each request awaits :meth:`wait` (or, read
    without an event loop, calls :meth:`wait_blocking`) before it goes out.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._until: dict[str, float] = {}

    def pause(self, host: str, seconds: float) -> None:
        """No request to ``host`` for ``seconds`` from now (an earlier end already set is kept if later)."""
        until = time.monotonic() + max(0.0, seconds)
        with self._lock:
            if until > self._until.get(host, 0.0):
                self._until[host] = until

    def remaining(self, host: str) -> float:
        """Seconds until ``host`` may be asked again (0 when it may now)."""
        with self._lock:
            until = self._until.get(host, 0.0)
        return max(0.0, until - time.monotonic())

    async def wait(self, host: str, limit_s: float) -> float:
        """Sleep until ``host`` may be asked again, ``limit_s`` at most; the seconds slept."""
        import asyncio

        delay = min(self.remaining(host), max(0.0, limit_s))
        if delay > 0:
            await asyncio.sleep(delay)
        return delay

    def wait_blocking(self, host: str, limit_s: float) -> float:
        """:meth:`wait` for a thread that reads without an event loop (:mod:`gguf_audit.io.plain`)."""
        delay = min(self.remaining(host), max(0.0, limit_s))
        if delay > 0:
            time.sleep(delay)
        return delay


DEFAULT_HOST_PAUSES: Final = HostPauses()
"""The process's pauses: every source shares them unless given its own."""
