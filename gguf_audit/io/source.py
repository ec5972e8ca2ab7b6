"""Byte sources: range reads over any fsspec URL, with retries and accounting.

:class:`ByteSource` is what the readers above need; :func:`open_source` gives
the fsspec-backed one for a URL. The file size comes from the caller (a
listing), or from the first response where the protocol tells it (HTTP's
``Content-Range``, S3's ``ContentRange``); only otherwise from one ``info``
call. Failures map through :mod:`gguf_audit.io.errors`.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

import fsspec
from fsspec.asyn import AsyncFileSystem, sync
from fsspec.core import url_to_fs

from gguf_audit.errors import SourceError
from gguf_audit.io.base import RangeSource
from gguf_audit.io.errors import RangeAnswerError
from gguf_audit.io.gate import CpuGate
from gguf_audit.io.hub import hub_endpoint, hub_headers, parse_hf_url, resolve_url
from gguf_audit.io.hub_source import CDN_URLS, EXPIRY_MARGIN_S, REDIRECTS, cdn_expiry
from gguf_audit.io.limits import (
    DEFAULT_HOST_LIMITS,
    DEFAULT_HOST_PAUSES,
    HostLimits,
    HostPauses,
    host_key,
)
from gguf_audit.io.ranged import check_body, check_partial, read_upto, whole_body_end
from gguf_audit.io.read_config import DEFAULT_READ_CONFIG, ByteSource, IOStats, ReadConfig

# ReadConfig, IOStats and ByteSource live in read_config.py and are re-exported here, where they are used.
__all__ = ["DEFAULT_READ_CONFIG", "ByteSource", "FsspecSource", "HTTPSource", "HubSource", "IOStats", "ReadConfig"]
__all__ += ["S3Source", "open_source"]


def _with_timeouts(protocol: str, options: Mapping[str, Any], config: ReadConfig) -> dict[str, Any]:
    """Storage options with per-request timeouts (and S3's pool size) added where the user set none."""
    timeout_s = config.timeout_s
    opts = dict(options)
    if protocol in ("http", "https"):
        client_kwargs = dict(opts.get("client_kwargs") or {})
        if "timeout" not in client_kwargs:
            # Imported for HTTP only: aiohttp costs a quarter second to import,
            # which a local or S3 audit (and the CLI's start) should not pay.
            import aiohttp

            client_kwargs["timeout"] = aiohttp.ClientTimeout(total=timeout_s, sock_connect=min(timeout_s, 20.0))
        opts["client_kwargs"] = client_kwargs
    elif protocol in ("s3", "s3a"):
        config_kwargs = dict(opts.get("config_kwargs") or {})
        config_kwargs.setdefault("connect_timeout", min(timeout_s, 20.0))
        config_kwargs.setdefault("read_timeout", timeout_s)
        # Our own retry loop counts requests; botocore's would hide them.
        config_kwargs.setdefault("retries", {"max_attempts": 1, "mode": "standard"})
        # botocore's pool holds 10 connections by default: sized to the
        # per-host cap, a file's sampled ranges neither queue for one nor
        # open more than the cap allows.
        config_kwargs.setdefault("max_pool_connections", config.max_per_s3_host)
        opts["config_kwargs"] = config_kwargs
    return opts


def _protocol_of(fs: fsspec.AbstractFileSystem) -> str:
    protocol = fs.protocol
    return protocol[0] if isinstance(protocol, tuple) else str(protocol)


@dataclass
class FsspecSource(RangeSource):
    """Range reads through an fsspec filesystem.

    Every request, a header's or a sampled range's, goes through one retry
    loop (:meth:`_retry_delay` decides, the same way for both) and one check
    of the answer (:mod:`gguf_audit.io.ranged`). Sampled ranges of an async
    filesystem go out together, each holding its host's slot
    (:class:`~gguf_audit.io.limits.HostLimits`) while in flight.
    """

    url: str
    fs: fsspec.AbstractFileSystem
    path: str
    known_size: int | None = None
    config: ReadConfig = DEFAULT_READ_CONFIG
    stats: IOStats = field(default_factory=IOStats)
    limits: HostLimits = DEFAULT_HOST_LIMITS
    pauses: HostPauses = DEFAULT_HOST_PAUSES
    range_ignored: bool = False
    """Set once the server answered a Range request with the whole body."""
    gate: CpuGate | None = None
    """The process's CPU gate: every request gives the caller's slot back while it waits."""
    size_from: str | None = None
    """Who told :attr:`known_size`: ``"the listing"`` or ``"the first answer"`` (None while unknown)."""
    size_conflict: tuple[int, int] | None = None
    """The sizes (learnt, then told) of a disagreement that outlasted the retries; None when none did."""

    sizes_from_response: ClassVar[bool] = False
    """Whether a read's response tells the file size (so no look-up is needed first)."""

    def __post_init__(self) -> None:
        self._note_listed_size()

    def ensure_size(self) -> int | None:
        """The file size, from one ``info`` call when nobody told it yet."""
        if self.known_size is None:
            with self._waiting():
                info = self._call(lambda: self.fs.info(self.path), count_bytes=False)
            size = info.get("size") if isinstance(info, dict) else None
            self.known_size = int(size) if size is not None else None
        return self.known_size

    @property
    def _async(self) -> bool:
        return isinstance(self.fs, AsyncFileSystem)

    # --- one request

    def read(self, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        with self._waiting():
            if self._async:
                return sync(self.fs.loop, self._attempts, start, end, None, True)  # type: ignore[no-any-return]
            return self._call(lambda: self._fetch(start, end))

    def _fetch(self, start: int, end: int) -> bytes:
        """One ranged read of a sync filesystem; fewer bytes only at the end of the file."""
        end = self._clip(start, end)
        if end <= start:
            return b""
        body = bytes(self.fs.cat_file(self.path, start=start, end=end))
        if len(body) > end - start:
            raise RangeAnswerError(f"asked bytes={start}-{end - 1}, got {len(body)} bytes")
        return body

    async def _get(self, start: int, end: int) -> bytes:
        """One ranged read of an async filesystem (HTTP and S3 check the answer's headers too)."""
        end = self._clip(start, end)
        if end <= start:
            return b""
        fs: Any = self.fs
        body = bytes(await fs._cat_file(self.path, start=start, end=end))
        if len(body) > end - start:
            raise RangeAnswerError(f"asked bytes={start}-{end - 1}, got {len(body)} bytes")
        return body

    async def _attempts(self, start: int, end: int, slot: asyncio.Semaphore | None, timed: bool) -> bytes:
        """:meth:`_get` with the same retries as :meth:`_call`, each attempt holding ``slot`` if given."""
        for attempt in itertools.count():
            begun = time.perf_counter()
            try:
                if slot is None:
                    result = await self._get(start, end)
                else:
                    async with slot:
                        result = await self._get(start, end)
            except Exception as exc:  # noqa: BLE001 - classified: retried, or raised as a SourceError
                self.stats.add(0, time.perf_counter() - begun if timed else 0.0)
                await asyncio.sleep(self._retry_delay(exc, attempt))
                continue
            self.stats.add(len(result), time.perf_counter() - begun if timed else 0.0)
            return result
        raise AssertionError("unreachable")  # pragma: no cover

    # --- sampled ranges

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes | SourceError]:
        if not ranges:
            return []
        begun = time.perf_counter()
        try:
            with self._waiting():
                if self._async:
                    out: list[bytes | SourceError] = sync(self.fs.loop, self._read_ranges, ranges)
                else:
                    out = [self._read_or_error(s, e) for s, e in ranges]
        finally:
            self.stats.seconds += time.perf_counter() - begun
        return out

    def _read_or_error(self, start: int, end: int) -> bytes | SourceError:
        try:
            return self._call(lambda: self._fetch(start, end))
        except SourceError as exc:
            return exc

    def _host_cap(self) -> int:
        """Requests in flight to this file's host at most, across the process."""
        return self.config.max_per_host

    async def _read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes | SourceError]:
        slot = self.limits.slot(host_key(self.url, self.fs), self._host_cap())
        if self.range_ignored:
            # Every answer is the body from byte 0: one read as far as the last range, sliced.
            try:
                whole = await self._attempts(0, max(e for _, e in ranges), slot, False)
            except SourceError as exc:
                return [exc for _ in ranges]
            return [whole[s:e] for s, e in ranges]

        async def one(start: int, end: int) -> bytes | SourceError:
            try:
                return await self._attempts(start, end, slot, False)
            except SourceError as exc:
                return exc

        return list(await asyncio.gather(*(one(s, e) for s, e in ranges)))


@dataclass
class HTTPSource(FsspecSource):
    """HTTP(S) range reads that learn the file size from the first response and check every answer.

    fsspec's own ``cat_file`` neither reports ``Content-Range`` nor notices a
    server that ignores ``Range`` (it reads the whole body and hands it back
    as if it were the range). Here a 206 must name the asked bytes; a 200 is
    read only as far as asked (within ``max_ignored_range_bytes``), then the
    connection dropped.
    """

    sizes_from_response: ClassVar[bool] = True

    async def _get(self, start: int, end: int) -> bytes:
        """One ranged GET; a 429 (or an answer with no requests left) pauses the host and asks again.

        Waits for the reset the server names, for every file of the process
        at once (:class:`~gguf_audit.io.limits.HostPauses`), within
        ``max_rate_limit_wait_s`` per file; they are counted, not retries.
        """
        host = host_key(self.url, self.fs)
        while True:
            budget = self._wait_budget(host)
            self.stats.rate_limit_wait_s += await self.pauses.wait(host, budget)
            body = await self._get_once(start, end, host)
            if body is not None:
                return body

    async def _get_once(self, start: int, end: int, host: str) -> bytes | None:
        """One ranged GET; None when it was answered 429 (the host is paused, ask again)."""
        end = self._clip(start, end)
        if end <= start:
            return b""
        fs: Any = self.fs
        session = await fs.set_session()
        kw = dict(fs.kwargs)
        headers = dict(kw.pop("headers", None) or {})
        headers["Range"] = f"bytes={start}-{end - 1}"
        headers.setdefault("Accept-Encoding", "identity")
        async with session.get(fs.encode_url(self.url), headers=headers, **kw) as resp:
            return await self._ranged_answer(resp, start, end, host)

    async def _ranged_answer(self, resp: Any, start: int, end: int, host: str) -> bytes | None:
        """The asked bytes ``[start, end)`` from an aiohttp response to a ranged GET; None when it was a 429."""
        asked = f"bytes={start}-{end - 1}"
        self._note_rate_limit(resp.headers, resp.status, host)
        if resp.status == 429:
            return None
        if resp.status == 416:
            # Asked past the end: the size is in Content-Range ("bytes */N").
            self._learn_size(resp.headers.get("Content-Range"))
            return b""
        if resp.status == 404:
            raise FileNotFoundError(self.url)
        resp.raise_for_status()
        if resp.status == 206:
            content_range = resp.headers.get("Content-Range")
            self._learn_size(content_range)
            expected = check_partial(start, end, content_range)
            return check_body(await read_upto(resp.content.read, expected), expected, asked)
        if resp.status != 200:
            raise RangeAnswerError(f"asked {asked}, the server answered {resp.status}")
        # 200: the server ignored Range and sends the whole file from byte 0.
        self.range_ignored = True
        length = resp.headers.get("Content-Length")
        total = int(length) if length is not None and length.isdigit() else None
        if total is not None:
            self._agree(total, None)
        stop = whole_body_end(start, end, total, self.config.max_ignored_range_bytes)
        body = await read_upto(resp.content.read, stop)
        resp.close()  # the rest of the body is not wanted: drop the connection
        if total is not None:
            check_body(body, stop, asked)
        return body[start:stop]

    def ensure_size(self) -> int | None:
        if self.known_size is None:
            # A one-byte ranged GET tells the size as well as a HEAD would, and
            # works on servers (and signed URLs) that refuse HEAD.
            self.read(0, 1)
        return self.known_size


@dataclass
class S3Source(FsspecSource):
    """S3 range reads that learn the object's size from the first GET and check every answer.

    fsspec's ``cat_file`` drops the response's ``ContentRange``; asking for
    the size first would cost a HEAD per file that a listing did not size.
    A store that answers a range with 200 (some S3-compatible ones) is read
    as HTTP's is.
    """

    sizes_from_response: ClassVar[bool] = True

    def _host_cap(self) -> int:
        return self.config.max_per_s3_host

    async def _get(self, start: int, end: int) -> bytes:
        end = self._clip(start, end)
        if end <= start:
            return b""
        fs: Any = self.fs
        bucket, key, version = fs.split_path(self.path)
        extra = {"VersionId": version} if version else {}
        asked = f"bytes={start}-{end - 1}"
        try:
            resp = await fs._call_s3("get_object", Bucket=bucket, Key=key, Range=asked, **extra)
        except (FileNotFoundError, PermissionError):
            raise
        except OSError:
            # An empty object answers a range with InvalidRange: size it the usual way.
            if await fs._size(self.path) == 0:
                self.known_size = 0
                return b""
            raise
        body = resp["Body"]
        try:
            status = (resp.get("ResponseMetadata") or {}).get("HTTPStatusCode")
            content_range = resp.get("ContentRange")
            if status == 200 and content_range is None:
                self.range_ignored = True
                total = resp.get("ContentLength")
                if isinstance(total, int):
                    self._agree(total, None)
                stop = whole_body_end(
                    start, end, total if isinstance(total, int) else None, self.config.max_ignored_range_bytes
                )
                data = check_body(await read_upto(body.read, stop), stop, asked)
                return data[start:stop]
            self._learn_size(content_range)
            expected = check_partial(start, end, content_range)
            return check_body(await read_upto(body.read, expected), expected, asked)
        finally:
            body.close()


@dataclass
class HubSource(HTTPSource):
    """HTTP range reads of an ``hf://`` file: the resolve URL once, then its CDN redirect target."""

    cdn_url: str | None = field(default=None, repr=False)
    """The presigned URL the last resolve redirected to (never shown: it carries a signature)."""
    cdn_expires: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        self.stats.resolve_requests, self.stats.cdn_requests = (
            self.stats.resolve_requests or 0,
            self.stats.cdn_requests or 0,
        )
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
        if not self._cdn_usable() and not CDN_URLS.serves_itself(self.url):
            # Every reader of this file in the process (its ranges, the compare phase's sources): one resolves,
            # the others then take its CDN URL.
            async with CDN_URLS.lock_for(self.url):
                known = CDN_URLS.get(self.url)
                if not self._cdn_usable() and known is not None:
                    self.cdn_url, self.cdn_expires = known
                if not self._cdn_usable() and not CDN_URLS.serves_itself(self.url):
                    answered, body = await self._resolve(start, end, host)
                    if answered:
                        return body
                    fresh = True
        if not self._cdn_usable():
            # The resolve URL serves the bytes itself (no CDN redirect): nothing to share, so the ranges go
            # out together, each its own resolve request.
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
            location = resp.headers.get("Location") if resp.status in REDIRECTS else None
            if location is None:
                body = await self._ranged_answer(resp, start, end, host)
                if resp.status in (200, 206):
                    CDN_URLS.note_serves_itself(self.url)
                return True, body
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


def open_source(
    url: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    size: int | None = None,
    fs: fsspec.AbstractFileSystem | None = None,
    config: ReadConfig = DEFAULT_READ_CONFIG,
    revision: str | None = None,
    gate: CpuGate | None = None,
) -> FsspecSource:
    """A byte source for ``url``: any fsspec URL or a local path.

    ``size`` is the listed size when the caller has it (a listing costs no
    extra request per file). ``fs`` reuses an existing filesystem instance.
    An ``hf://`` URL is read through the Hub's resolve URL
    (:mod:`gguf_audit.io.hub`) at ``revision`` (the commit sha its listing
    saw), else at the URL's own revision, else ``main``.
    ``gate`` is the CPU gate the caller's thread holds a slot of, given back
    around every request.
    """
    if url.startswith("hf://") and fs is None:
        return _hub_source(url, storage_options or {}, size, config, revision, gate)
    if fs is None:
        protocol = url.split("://", 1)[0] if "://" in url else "file"
        options = _with_timeouts(protocol, storage_options or {}, config)
        fs, path = url_to_fs(url, **options)
    else:
        path = fs._strip_protocol(url)
    protocol = _protocol_of(fs)
    if protocol in ("http", "https"):
        return HTTPSource(url=url, fs=fs, path=url, known_size=size, config=config, gate=gate)
    if protocol in ("s3", "s3a") and hasattr(fs, "_call_s3"):
        return S3Source(url=url, fs=fs, path=path, known_size=size, config=config, gate=gate)
    return FsspecSource(url=url, fs=fs, path=path, known_size=size, config=config, gate=gate)


def _hub_source(
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
