"""Hub reads: one resolve per file, then ranges from the CDN URL it redirects to.

The Hub answers a resolve of an LFS file (every GGUF) with a 302 to a CDN URL
presigned for an hour that signs only the host and path, so any ``Range`` may
be asked of it. Resolves are what the Hub rate-limits (3,000 per 5 minutes
anonymous, 5,000 free); following the redirect again for every sampled range
spent 14.7 of them a file. :class:`HubSource` resolves once (the first read's
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
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Final

from fsspec.core import url_to_fs

from gguf_audit.io.gate import CpuGate
from gguf_audit.io.hub import hub_endpoint, hub_headers, parse_hf_url, resolve_url
from gguf_audit.io.source import HTTPSource, ReadConfig, _with_timeouts

__all__ = ["HubSource", "cdn_expiry", "hub_source"]

_REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
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

    def get(self, resolve: str) -> tuple[str, float] | None:
        with self._lock:
            return self._urls.get(resolve)

    def put(self, resolve: str, cdn: str, expires: float) -> None:
        with self._lock:
            if len(self._urls) >= _MAX_CACHED:
                self._urls.pop(next(iter(self._urls)))  # the oldest: the cache only saves requests
            self._urls[resolve] = (cdn, expires)

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


@dataclass
class HubSource(HTTPSource):
    """HTTP range reads of an ``hf://`` file: the resolve URL once, then its CDN redirect target."""

    cdn_url: str | None = field(default=None, repr=False)
    """The presigned URL the last resolve redirected to (never shown: it carries a signature)."""
    cdn_expires: float = 0.0
    _resolving: asyncio.Lock | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        self.stats.resolve_requests = self.stats.resolve_requests or 0
        self.stats.cdn_requests = self.stats.cdn_requests or 0
        known = CDN_URLS.get(self.url)
        if known is not None:
            self.cdn_url, self.cdn_expires = known

    def _cdn_usable(self) -> bool:
        return self.cdn_url is not None and time.time() < self.cdn_expires - EXPIRY_MARGIN_S

    async def _get_once(self, start: int, end: int, host: str) -> bytes | None:
        end = self._clip(start, end)
        if end <= start:
            return b""
        fresh = False
        if not self._cdn_usable():
            if self._resolving is None:
                self._resolving = asyncio.Lock()
            async with self._resolving:  # concurrent ranges: one resolves, the others then use its CDN URL
                if not self._cdn_usable():
                    answered, body = await self._resolve(start, end, host)
                    if answered:
                        return body
                    fresh = True
        return await self._from_cdn(start, end, host, fresh)

    async def _resolve(self, start: int, end: int, host: str) -> tuple[bool, bytes | None]:
        """Ask the Hub's resolve URL for the range, not following a redirect: (True, bytes) when it served
        them itself, (False, None) when it redirected (the CDN URL is kept)."""
        fs: Any = self.fs
        session = await fs.set_session()
        kw = dict(fs.kwargs)
        headers = dict(kw.pop("headers", None) or {})
        headers["Range"] = f"bytes={start}-{end - 1}"
        headers.setdefault("Accept-Encoding", "identity")
        self.stats.resolve_requests = (self.stats.resolve_requests or 0) + 1
        async with session.get(fs.encode_url(self.url), headers=headers, allow_redirects=False, **kw) as resp:
            location = resp.headers.get("Location") if resp.status in _REDIRECTS else None
            if location is None:
                return True, await self._ranged_answer(resp, start, end, host)
            self._note_rate_limit(resp.headers, resp.status, host)
        now = time.time()
        self.cdn_url = urllib.parse.urljoin(self.url, location)
        self.cdn_expires = cdn_expiry(self.cdn_url, now)
        CDN_URLS.put(self.url, self.cdn_url, self.cdn_expires)
        self.stats.requests += 1  # the resolve; the caller counts the CDN request that answers
        return False, None

    async def _from_cdn(self, start: int, end: int, host: str, fresh: bool) -> bytes | None:
        """The range from the CDN URL, sent without the Hub's token; a 403 drops the URL (resolve again),
        unless the URL is ``fresh`` (this very read resolved it): then the file may not be read."""
        fs: Any = self.fs
        session = await fs.set_session()
        kw = {k: v for k, v in fs.kwargs.items() if k != "headers"}
        url = self.cdn_url
        if url is None:  # another range's 403 dropped it meanwhile
            return await self._get_once(start, end, host)
        headers = {"Range": f"bytes={start}-{end - 1}", "Accept-Encoding": "identity"}
        self.stats.cdn_requests = (self.stats.cdn_requests or 0) + 1
        async with session.get(url, headers=headers, **kw) as resp:
            if resp.status == 403 and fresh:
                raise PermissionError(f"the CDN refused (403) the URL {self.url} had just redirected to")
            if resp.status == 403:
                # Expired early, or its key rotated: resolve again (this request is counted here, the next by
                # the caller).
                if self.cdn_url == url:
                    self.cdn_url = None
                CDN_URLS.drop(self.url, url)
                self.stats.requests += 1
            else:
                return await self._ranged_answer(resp, start, end, host)
        return await self._get_once(start, end, host)


def hub_source(
    url: str,
    options: Mapping[str, Any],
    size: int | None,
    config: ReadConfig,
    revision: str | None,
    gate: CpuGate | None = None,
) -> HubSource:
    """The source of ``url`` (``hf://ORG/REPO[@REV]/PATH``) with the bearer token huggingface_hub resolves."""
    try:
        hub = parse_hf_url(url)
    except ValueError as exc:
        raise FileNotFoundError(str(exc)) from exc  # io.not_found: no file has such a URL
    if hub.repo_id is None or not hub.path:
        raise IsADirectoryError(f"an hf:// file URL is hf://ORG/REPO[@REVISION]/PATH. Got {url!r}.")
    pinned = revision or hub.revision or str(options.get("revision") or "main")
    target = resolve_url(hub_endpoint(options), hub.repo_id, pinned, hub.path)
    http_options: dict[str, Any] = {"headers": hub_headers(options)}
    if options.get("client_kwargs"):
        http_options["client_kwargs"] = dict(options["client_kwargs"])
    fs, _ = url_to_fs(target, **_with_timeouts("http", http_options, config))
    return HubSource(url=target, fs=fs, path=target, known_size=size, config=config, gate=gate)
