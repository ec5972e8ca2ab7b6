"""Range reads over any fsspec URL, with retries, accounting and one error table.

The header is fetched with an adaptive read-ahead (:func:`read_header`): a
first request sized so typical headers fit, then exactly the bytes the
parser's estimate says are missing. The file size comes from the caller (a
listing), or from the first response where the protocol tells it (HTTP's
``Content-Range``); only otherwise from one ``info`` call. No tensor data is
read on purpose.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import fsspec
from fsspec.asyn import AsyncFileSystem, sync
from fsspec.core import url_to_fs

from gguf_audit.errors import FormatError, SourceError
from gguf_audit.format.model import Header
from gguf_audit.format.parser import parse_header
from gguf_audit.format.wire import Limits

__all__ = [
    "ByteSource",
    "FsspecSource",
    "HeaderRead",
    "IOStats",
    "ReadConfig",
    "classify_error",
    "open_source",
    "read_header",
]


@dataclass(frozen=True, slots=True)
class ReadConfig:
    """How reads are made. Every limit here bounds time or memory per file."""

    initial_bytes: int = 512 * 1024
    """First request of a header: one round trip covers most small headers,
    and the parser's estimate sizes the second for the big tokenizer arrays."""
    max_header_bytes: int = 512 * 1024 * 1024
    """A header claiming more is not read further (``header.too_large``)."""
    retries: int = 3
    """Attempts after the first, for transient failures only."""
    backoff_s: float = 0.2
    """First retry delay; doubles each attempt."""
    timeout_s: float = 60.0
    """Per request, where the filesystem takes a timeout."""


DEFAULT_READ_CONFIG = ReadConfig()


@dataclass(slots=True)
class IOStats:
    """What a file cost: requests made (retries included) and body bytes received."""

    requests: int = 0
    bytes_read: int = 0
    seconds: float = 0.0

    def add(self, nbytes: int, seconds: float) -> None:
        self.requests += 1
        self.bytes_read += nbytes
        self.seconds += seconds


class ByteSource(Protocol):
    """Something that serves byte ranges of one file."""

    url: str
    stats: IOStats

    @property
    def size(self) -> int | None: ...

    def read(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)``; fewer at the end of the file. Raises SourceError."""
        ...

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes | SourceError]:
        """Several ranges in one concurrent round; failures come back as values."""
        ...


# --- errors ------------------------------------------------------------------

_TRANSIENT_STATUS = {408, 425, 429, 500, 502, 503, 504}


def classify_error(exc: BaseException) -> tuple[str, bool]:
    """The ``io.*`` code for an exception and whether retrying may help.

    The one table from exceptions to codes: every source maps through it.
    """
    if isinstance(exc, SourceError):
        return exc.code, False
    if isinstance(exc, FileNotFoundError | IsADirectoryError | NotADirectoryError):
        return "io.not_found", False
    if isinstance(exc, PermissionError):
        return "io.permission_denied", False
    if isinstance(exc, TimeoutError | asyncio.TimeoutError):
        return "io.timeout", True
    status = getattr(exc, "status", None) or getattr(exc, "code", None)
    if isinstance(status, int):
        if status == 404:
            return "io.not_found", False
        if status in (401, 403):
            return "io.permission_denied", False
        return "io.error", status in _TRANSIENT_STATUS
    name = type(exc).__name__
    if "Timeout" in name:
        return "io.timeout", True
    if isinstance(exc, ConnectionError) or name in {
        "ClientConnectorError",
        "ServerDisconnectedError",
        "ClientOSError",
        "ClientPayloadError",
        "EndpointConnectionError",
        "ConnectionClosedError",
        "ReadTimeoutError",
        "IncompleteReadError",
    }:
        return "io.error", True
    return "io.error", False


def _describe(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    return f"{type(exc).__name__}: {first[:300]}" if first else type(exc).__name__


# --- sources -----------------------------------------------------------------

_CONTENT_RANGE = re.compile(r"bytes\s+(\d+)-(\d+)/(\d+|\*)")
_UNSATISFIED_RANGE = re.compile(r"bytes\s+\*/(\d+)")


def _with_timeouts(protocol: str, options: Mapping[str, Any], timeout_s: float) -> dict[str, Any]:
    """Storage options with per-request timeouts added where the user set none."""
    opts = dict(options)
    if protocol in ("http", "https"):
        client_kwargs = dict(opts.get("client_kwargs") or {})
        if "timeout" not in client_kwargs:
            import aiohttp

            client_kwargs["timeout"] = aiohttp.ClientTimeout(total=timeout_s, sock_connect=min(timeout_s, 20.0))
        opts["client_kwargs"] = client_kwargs
    elif protocol in ("s3", "s3a"):
        config_kwargs = dict(opts.get("config_kwargs") or {})
        config_kwargs.setdefault("connect_timeout", min(timeout_s, 20.0))
        config_kwargs.setdefault("read_timeout", timeout_s)
        # Our own retry loop counts requests; botocore's would hide them.
        config_kwargs.setdefault("retries", {"max_attempts": 1, "mode": "standard"})
        opts["config_kwargs"] = config_kwargs
    return opts


def _protocol_of(fs: fsspec.AbstractFileSystem) -> str:
    protocol = fs.protocol
    return protocol[0] if isinstance(protocol, tuple) else str(protocol)


@dataclass
class FsspecSource:
    """Range reads through an fsspec filesystem."""

    url: str
    fs: fsspec.AbstractFileSystem
    path: str
    known_size: int | None = None
    config: ReadConfig = DEFAULT_READ_CONFIG
    stats: IOStats = field(default_factory=IOStats)

    sizes_from_response: ClassVar[bool] = False
    """Whether a read's response tells the file size (so no look-up is needed first)."""

    @property
    def size(self) -> int | None:
        return self.known_size

    def _learn_size(self, content_range: str | None) -> None:
        """Take the total size from a ``Content-Range`` (``bytes a-b/N`` or ``bytes */N``)."""
        if content_range and self.known_size is None:
            match = _CONTENT_RANGE.match(content_range) or _UNSATISFIED_RANGE.match(content_range)
            if match and match.groups()[-1] != "*":
                self.known_size = int(match.groups()[-1])

    def ensure_size(self) -> int | None:
        """The file size, from one ``info`` call when nobody told it yet."""
        if self.known_size is None:
            info = self._call(lambda: self.fs.info(self.path), count_bytes=False)
            size = info.get("size") if isinstance(info, dict) else None
            self.known_size = int(size) if size is not None else None
        return self.known_size

    def read(self, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        data = self._call(lambda: self._fetch(start, end))
        return data  # type: ignore[no-any-return]

    def _fetch(self, start: int, end: int) -> bytes:
        if self.known_size is not None:
            end = min(end, self.known_size)
            if end <= start:
                return b""
        return bytes(self.fs.cat_file(self.path, start=start, end=end))

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes | SourceError]:
        if not ranges:
            return []
        begun = time.perf_counter()
        starts = [s for s, _ in ranges]
        ends = [e for _, e in ranges]
        try:
            results = self.fs.cat_ranges([self.path] * len(ranges), starts, ends, on_error="return")
        except Exception as exc:  # noqa: BLE001 - every failure becomes a value
            code, _ = classify_error(exc)
            results = [SourceError(code, _describe(exc))] * len(ranges)
        elapsed = time.perf_counter() - begun
        out: list[bytes | SourceError] = []
        for result in results:
            if isinstance(result, BaseException):
                code, _ = classify_error(result)
                out.append(result if isinstance(result, SourceError) else SourceError(code, _describe(result)))
                self.stats.requests += 1
            else:
                self.stats.add(len(result), 0.0)
                out.append(bytes(result))
        self.stats.seconds += elapsed
        return out

    def _call(self, fn: Any, *, count_bytes: bool = True) -> Any:
        """Run one request with retries on transient failures; raise SourceError."""
        delay = self.config.backoff_s
        for attempt in range(self.config.retries + 1):
            begun = time.perf_counter()
            try:
                result = fn()
            except SourceError:
                self.stats.add(0, time.perf_counter() - begun)
                raise
            except Exception as exc:
                self.stats.add(0, time.perf_counter() - begun)
                code, transient = classify_error(exc)
                if not transient or attempt == self.config.retries:
                    suffix = f" (after {attempt + 1} attempts)" if attempt else ""
                    raise SourceError(code, f"{_describe(exc)}{suffix}") from exc
                time.sleep(delay)
                delay *= 2
                continue
            nbytes = len(result) if count_bytes and isinstance(result, bytes | bytearray) else 0
            self.stats.add(nbytes, time.perf_counter() - begun)
            return result
        raise AssertionError("unreachable")  # pragma: no cover


@dataclass
class HTTPSource(FsspecSource):
    """HTTP(S) range reads that learn the file size from the first response.

    fsspec's own ``cat_file`` neither reports ``Content-Range`` nor guards
    against a server that ignores ``Range`` (it would read a whole model).
    Here the body is read only as far as asked, then the connection dropped.
    """

    range_ignored: bool = False
    sizes_from_response: ClassVar[bool] = True

    def _fetch(self, start: int, end: int) -> bytes:
        if self.known_size is not None:
            end = min(end, self.known_size)
            if end <= start:
                return b""
        fs = self.fs
        if not isinstance(fs, AsyncFileSystem):  # pragma: no cover - fsspec's http is async
            return super()._fetch(start, end)
        return sync(fs.loop, self._get, start, end)  # type: ignore[no-any-return]

    async def _get(self, start: int, end: int) -> bytes:
        fs: Any = self.fs
        session = await fs.set_session()
        kw = dict(fs.kwargs)
        headers = dict(kw.pop("headers", None) or {})
        headers["Range"] = f"bytes={start}-{end - 1}"
        headers.setdefault("Accept-Encoding", "identity")
        async with session.get(fs.encode_url(self.url), headers=headers, **kw) as resp:
            if resp.status == 416:
                # Asked past the end: the size is in Content-Range ("bytes */N").
                self._learn_size(resp.headers.get("Content-Range"))
                return b""
            if resp.status == 404:
                raise FileNotFoundError(self.url)
            resp.raise_for_status()
            if resp.status == 206:
                self._learn_size(resp.headers.get("Content-Range"))
                return await _read_exactly(resp, end - start)
            # 200: the server ignored Range and sends the whole file from byte 0.
            self.range_ignored = True
            length = resp.headers.get("Content-Length")
            if length is not None and self.known_size is None:
                self.known_size = int(length)
            body = await _read_exactly(resp, end)
            resp.close()
            return body[start:end]

    def ensure_size(self) -> int | None:
        if self.known_size is None:
            # A one-byte ranged GET tells the size as well as a HEAD would, and
            # works on servers (and signed URLs) that refuse HEAD.
            self.read(0, 1)
        return self.known_size

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes | SourceError]:
        if self.range_ignored:
            error = SourceError("io.error", f"the server ignores Range requests; {self.url} cannot be sampled")
            return [error for _ in ranges]
        return super().read_ranges(ranges)


@dataclass
class S3Source(FsspecSource):
    """S3 range reads that learn the object's size from the first GET.

    fsspec's ``cat_file`` drops the response's ``ContentRange``; asking for
    the size first would cost a HEAD per file that a listing did not size.
    """

    sizes_from_response: ClassVar[bool] = True

    def _fetch(self, start: int, end: int) -> bytes:
        if self.known_size is not None or not isinstance(self.fs, AsyncFileSystem):
            return super()._fetch(start, end)
        return sync(self.fs.loop, self._get, start, end)  # type: ignore[no-any-return]

    async def _get(self, start: int, end: int) -> bytes:
        fs: Any = self.fs
        bucket, key, version = fs.split_path(self.path)
        extra = {"VersionId": version} if version else {}
        try:
            resp = await fs._call_s3("get_object", Bucket=bucket, Key=key, Range=f"bytes={start}-{end - 1}", **extra)
        except (FileNotFoundError, PermissionError):
            raise
        except OSError:
            # An empty object answers a range with InvalidRange: size it the usual way.
            if await fs._size(self.path) == 0:
                self.known_size = 0
                return b""
            raise
        try:
            self._learn_size(resp.get("ContentRange"))
            return bytes(await resp["Body"].read())
        finally:
            resp["Body"].close()


async def _read_exactly(resp: Any, n: int) -> bytes:
    chunks: list[bytes] = []
    got = 0
    while got < n:
        chunk = await resp.content.read(min(n - got, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


def open_source(
    url: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    size: int | None = None,
    fs: fsspec.AbstractFileSystem | None = None,
    config: ReadConfig = DEFAULT_READ_CONFIG,
) -> FsspecSource:
    """A byte source for ``url``: any fsspec URL or a local path.

    ``size`` is the listed size when the caller has it (a listing costs no
    extra request per file). ``fs`` reuses an existing filesystem instance.
    """
    if fs is None:
        protocol = url.split("://", 1)[0] if "://" in url else "file"
        options = _with_timeouts(protocol, storage_options or {}, config.timeout_s)
        fs, path = url_to_fs(url, **options)
    else:
        path = fs._strip_protocol(url)
    protocol = _protocol_of(fs)
    if protocol in ("http", "https"):
        return HTTPSource(url=url, fs=fs, path=url, known_size=size, config=config)
    if protocol in ("s3", "s3a") and hasattr(fs, "_call_s3"):
        return S3Source(url=url, fs=fs, path=path, known_size=size, config=config)
    return FsspecSource(url=url, fs=fs, path=path, known_size=size, config=config)


@dataclass(frozen=True, slots=True)
class HeaderRead:
    """A header and what reading it cost."""

    header: Header
    buffer: bytes
    """Every byte read from the start of the file."""


def read_header(
    source: FsspecSource,
    *,
    config: ReadConfig | None = None,
    limits: Limits | None = None,
) -> HeaderRead:
    """Fetch and parse the header of ``source``'s file.

    Raises FormatError for a header that cannot be decoded and SourceError
    when reads fail for good.
    """
    config = config or source.config
    limits = limits or Limits()
    size = source.size
    if size is None and not source.sizes_from_response:
        size = source.ensure_size()
    first = max(8, config.initial_bytes if size is None else min(config.initial_bytes, size))
    buf = source.read(0, first)
    if source.size is not None:
        size = source.size
    if len(buf) < first:
        # A short read is the end of the file, whatever the listing said
        # (the object changed, or was cut mid-upload).
        size = len(buf)
    resume: object | None = None
    while True:
        result = parse_header(buf, size, resume=resume, limits=limits)
        if isinstance(result, Header):
            return HeaderRead(result, buf)
        target = max(result.needed_bytes, result.estimated_bytes)
        if size is not None:
            target = min(target, size)
        if target > config.max_header_bytes:
            if result.needed_bytes > config.max_header_bytes:
                raise FormatError(
                    "header.too_large",
                    f"the header needs more than {config.max_header_bytes} bytes "
                    f"(at least {result.needed_bytes}); raise max_header_bytes to read it",
                    len(buf),
                )
            target = config.max_header_bytes
        more = source.read(len(buf), target)
        if len(more) < target - len(buf):
            size = len(buf) + len(more)
        buf = buf + more
        resume = result.resume
