"""Hub reads: one resolve per file, then ranges from the CDN URL it redirects to (the helpers of
:class:`~gguf_audit.io.source.HubSource`).

The Hub answers a resolve of an LFS file (every GGUF) with a 302 to a CDN URL
presigned for an hour that signs only the host and path, so any ``Range`` may
be asked of it. Resolves are what the Hub rate-limits (3,000 per 5 minutes
anonymous, 5,000 free); following the redirect again for every sampled range
spent 14.7 of them a file. :class:`~gguf_audit.io.source.HubSource` resolves once (the first read's
answer is the redirect), keeps the CDN URL, and sends every later range
there, without the Hub token; it resolves again only when the URL's
``Expires`` has passed or the CDN answers 403. Small non-LFS files the
resolve serves itself are read from it as before. Each file's
``resolve_requests`` and ``cdn_requests`` are counted in its
:class:`~gguf_audit.io.source.IOStats`.
"""

from __future__ import annotations

import asyncio
import threading
import time
import urllib.parse
from typing import Final

__all__ = ["CDN_URLS", "DEFAULT_CDN_TTL_S", "EXPIRY_MARGIN_S", "REDIRECTS", "cdn_expiry"]

REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
EXPIRY_MARGIN_S: Final = 30.0
"""A CDN URL this close to its expiry is resolved again rather than risk a 403 on the way."""
DEFAULT_CDN_TTL_S: Final = 3600.0
"""How long a CDN URL that names no expiry is used (the Hub's presigned URLs last an hour)."""


class _CdnUrls:
    """The CDN URLs this process's resolves gave, by resolve URL: a file another task of the same process
    reads again (the compare phase re-reads references and siblings) reuses its night's resolve."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._urls: dict[str, tuple[str, float]] = {}
        self._direct: dict[str, None] = {}
        self._resolving: dict[tuple[int, str], asyncio.Lock] = {}

    def lock_for(self, resolve: str) -> asyncio.Lock:
        """The lock one resolve of ``resolve`` holds on the running loop (readers of the file wait, then reuse)."""
        key = (id(asyncio.get_running_loop()), resolve)
        with self._lock:
            lock = self._resolving.get(key)
            if lock is None:
                if len(self._resolving) >= _MAX_CACHED:
                    self._resolving.pop(next(iter(self._resolving)))
                lock = self._resolving[key] = asyncio.Lock()
            return lock

    def get(self, resolve: str) -> tuple[str, float] | None:
        with self._lock:
            return self._urls.get(resolve)

    def serves_itself(self, resolve: str) -> bool:
        """Whether ``resolve`` answered a range itself, without a redirect (a small non-LFS file, or a Hub
        without a CDN): its ranges need no shared resolve and go out together."""
        with self._lock:
            return resolve in self._direct

    def note_serves_itself(self, resolve: str) -> None:
        with self._lock:
            if len(self._direct) >= _MAX_CACHED:
                self._direct.pop(next(iter(self._direct)))
            self._direct[resolve] = None

    def put(self, resolve: str, cdn: str, expires: float) -> None:
        with self._lock:
            self._direct.pop(resolve, None)
            if len(self._urls) >= _MAX_CACHED:
                self._urls.pop(next(iter(self._urls)))  # the oldest: the cache only saves requests
            self._urls[resolve] = (cdn, expires)

    def clear(self) -> None:
        """Forget every CDN URL and direct answer (a benchmark's next run resolves each file again)."""
        with self._lock:
            self._urls.clear()
            self._direct.clear()

    def drop(self, resolve: str, cdn: str) -> None:
        with self._lock:
            if self._urls.get(resolve, ("", 0.0))[0] == cdn:
                del self._urls[resolve]


_MAX_CACHED: Final = 4096
CDN_URLS: Final = _CdnUrls()
"""The process's CDN URLs (the resolve URL pins a commit sha, so one names the same bytes all night)."""


def cdn_expiry(url: str, now: float) -> float:
    """When a presigned CDN URL stops working (unix seconds): CloudFront's ``Expires``, S3's
    ``X-Amz-Date`` + ``X-Amz-Expires``, else an hour from ``now``."""
    params = urllib.parse.parse_qs(urllib.parse.urlsplit(url).query)
    try:
        if "Expires" in params:
            return float(params["Expires"][0])
        if "X-Amz-Expires" in params and "X-Amz-Date" in params:
            signed = time.mktime(time.strptime(params["X-Amz-Date"][0], "%Y%m%dT%H%M%SZ")) - time.timezone
            return signed + float(params["X-Amz-Expires"][0])
    except (ValueError, IndexError, OverflowError):
        pass
    return now + DEFAULT_CDN_TTL_S
