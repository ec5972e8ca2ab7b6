"""Range reads of plain ``http(s)://`` URLs and local paths with the standard library alone.

A one-file command (``gguf-audit inspect``) reads a header in one or two
requests; fsspec, aiohttp and asyncio cost about 0.2 s to import before the
first byte is asked for, far more than the reads themselves.
These sources make the same requests and apply the same rules as
:mod:`gguf_audit.io.source` (the size from the listing or the first
``Content-Range``, every answer checked by :mod:`gguf_audit.io.ranged`, a
server that ignores ``Range`` read only within ``max_ignored_range_bytes``,
the retries and rate-limit pauses, errors through
:func:`~gguf_audit.io.errors.classify_error`), over one kept-alive
``http.client`` connection. Scans, sampled reads and every other protocol
keep fsspec: :func:`open_plain_source` returns None for what it does not read.
"""

from __future__ import annotations

import os
import time
import urllib.parse
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Final

from gguf_audit import __version__
from gguf_audit.errors import GGUFAuditError, SourceError
from gguf_audit.io.base import RangeSource
from gguf_audit.io.errors import RangeAnswerError
from gguf_audit.io.gate import CpuGate
from gguf_audit.io.kept import kept_threads
from gguf_audit.io.limits import DEFAULT_HOST_PAUSES, HostPauses, host_key
from gguf_audit.io.ranged import check_body, check_partial, whole_body_end
from gguf_audit.io.read_config import DEFAULT_READ_CONFIG, IOStats, ReadConfig

if TYPE_CHECKING:
    import socket
    from http.client import HTTPConnection, HTTPResponse

__all__ = ["HTTPStatusError", "LocalFileSource", "PlainHTTPSource", "open_plain_source", "plain_protocol"]

_READ_CHUNK_BYTES: Final = 1 << 20
_MAX_REDIRECTS: Final = 10
"""Redirects followed per request, as many as aiohttp (fsspec's HTTP client) follows."""
_REDIRECTS: Final = frozenset({301, 302, 303, 307, 308})
_ERROR_BODY_BYTES: Final = 64 * 1024
"""An error answer's body read this far, so a short one keeps its connection alive."""
_USER_AGENT: Final = f"gguf-audit/{__version__}"
"""Sent with every request (some servers and CDNs refuse requests that name no client)."""
_URL_SAFE: Final = "/%:@!$&'()*+,;=-._~"
"""Characters of a path or query sent as they are: a URL already percent-encoded is not encoded twice."""


class HTTPStatusError(GGUFAuditError, OSError):
    """An HTTP answer whose status is an error; ``status`` is what :func:`~gguf_audit.io.errors.classify_error`
    maps to a code and a retry decision (401/403 permission denied; 408, 425, 429, 500, 502, 503, 504 retried)."""

    def __init__(self, status: int, reason: str, url: str) -> None:
        self.status = status
        super().__init__(f"{status}, message={reason!r}, url={url!r}")


def plain_protocol(url: str) -> str | None:
    """``"http"``/``"https"`` for a URL of those schemes, ``"file"`` for a local path without a scheme,
    None for anything else (read through fsspec)."""
    if "://" not in url:
        return None if "::" in url else "file"  # "a::b" chains fsspec filesystems
    scheme = url.split("://", 1)[0]  # as fsspec's registry spells them: "HTTP://" is no protocol it knows
    return scheme if scheme in ("http", "https") else None


def open_plain_source(
    url: str,
    *,
    storage_options: Mapping[str, Any] | None = None,
    size: int | None = None,
    config: ReadConfig = DEFAULT_READ_CONFIG,
    gate: CpuGate | None = None,
) -> PlainHTTPSource | LocalFileSource | None:
    """A standard-library source for ``url``, or None when fsspec must read it (another protocol, or
    storage options, which only fsspec's filesystems take)."""
    if storage_options:
        return None
    protocol = plain_protocol(url)
    if protocol == "file":
        return LocalFileSource(url=url, path=_local_path(url), known_size=size, config=config, gate=gate)
    if protocol in ("http", "https"):
        return PlainHTTPSource(url=url, known_size=size, config=config, gate=gate)
    return None


def _local_path(path: str) -> str:
    """The absolute path fsspec's local filesystem would open for ``path`` (so messages name the same file)."""
    if path.startswith("~"):
        path = os.path.expanduser(path)
    elif not path.startswith("/"):
        path = f"{os.getcwd()}/{path.removeprefix('./') if path != '.' else ''}"
    return path if path == "/" else path.rstrip("/")


@dataclass(eq=False)
class LocalFileSource(RangeSource):
    """Reads of a local file: its size from ``stat`` (one counted look-up, as fsspec's ``info``), each range
    from a fresh open."""

    url: str
    path: str
    known_size: int | None = None
    config: ReadConfig = DEFAULT_READ_CONFIG
    stats: IOStats = field(default_factory=IOStats)
    gate: CpuGate | None = None
    range_ignored: bool = False
    size_from: str | None = None
    size_conflict: tuple[int, int] | None = None

    def __post_init__(self) -> None:
        self._note_listed_size()

    def ensure_size(self) -> int | None:
        if self.known_size is None:
            with self._waiting():
                self.known_size = self._call(lambda: os.stat(self.path).st_size, count_bytes=False)
        return self.known_size

    def read(self, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        with self._waiting():
            return self._call(lambda: self._fetch(start, end))

    def _fetch(self, start: int, end: int) -> bytes:
        end = self._clip(start, end)
        if end <= start:
            return b""
        with open(self.path, "rb") as f:
            f.seek(start)
            return f.read(end - start)

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes | SourceError]:
        return self._each_range(ranges)


@dataclass(eq=False)
class PlainHTTPSource(RangeSource):
    """HTTP(S) range reads over one kept-alive ``http.client`` connection, checked as
    :class:`~gguf_audit.io.source.HTTPSource` checks fsspec's: a 206 must name the bytes asked and bring
    exactly that many; a 200 (the server ignores ``Range``) is read from byte 0 only as far as asked,
    within ``max_ignored_range_bytes``, and its connection dropped; 429s pause the host."""

    url: str
    known_size: int | None = None
    config: ReadConfig = DEFAULT_READ_CONFIG
    stats: IOStats = field(default_factory=IOStats)
    gate: CpuGate | None = None
    pauses: HostPauses = DEFAULT_HOST_PAUSES
    range_ignored: bool = False
    size_from: str | None = None
    size_conflict: tuple[int, int] | None = None
    _conn: HTTPConnection | None = field(default=None, repr=False)
    _conn_key: tuple[str, str] | None = field(default=None, repr=False)
    _ahead: _ReadAhead | None = field(default=None, repr=False)

    sizes_from_response: ClassVar[bool] = True

    def __post_init__(self) -> None:
        self._note_listed_size()

    def ensure_size(self) -> int | None:
        if self.known_size is None:
            # A one-byte ranged GET tells the size as well as a HEAD would, and works where HEAD is refused.
            self.read(0, 1)
        return self.known_size

    def close(self) -> None:
        """Close the kept-alive connection, if any (the next read opens another)."""
        if self._conn is not None:
            self._conn.close()
        self._conn, self._conn_key = None, None

    def read_ahead(self, start: int, end: int) -> None:
        """Start reading bytes ``[start, end)`` on a thread now; the next :meth:`read` takes them when it
        asks for exactly that range (any other read waits for this one first, then reads its own).

        A one-file ``inspect`` asks for the header's first bytes before it imports the audit: the
        request's round trip then hides those imports, and the request is counted as any other.
        """
        if self._ahead is None and end > start:
            self._ahead = _ReadAhead(start, end, lambda: self._read_now(start, end))

    def read(self, start: int, end: int) -> bytes:
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            taken = ahead.take()
            if (ahead.start, ahead.end) == (start, end):
                if isinstance(taken, BaseException):
                    raise taken
                return taken
        return self._read_now(start, end)

    def _read_now(self, start: int, end: int) -> bytes:
        if end <= start:
            return b""
        with self._waiting():
            return self._call(lambda: self._get(start, end))

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes | SourceError]:
        if not ranges:
            return []
        if self.range_ignored:
            # Every answer is the body from byte 0: one read as far as the last range, sliced.
            try:
                whole = self.read(0, max(e for _, e in ranges))
            except SourceError as exc:
                return [exc for _ in ranges]
            return [whole[s:e] for s, e in ranges]
        return self._each_range(ranges)

    # --- one request

    def _get(self, start: int, end: int) -> bytes:
        """One ranged GET; a 429 (or an answer with no requests left) pauses the host and asks again,
        within ``max_rate_limit_wait_s`` per file (waits are counted, not retries)."""
        host = host_key(self.url, None)
        while True:
            budget = self._wait_budget(host)
            self.stats.rate_limit_wait_s += self.pauses.wait_blocking(host, budget)
            body = self._get_once(start, end, host)
            if body is not None:
                return body

    def _get_once(self, start: int, end: int, host: str) -> bytes | None:
        end = self._clip(start, end)
        if end <= start:
            return b""
        deadline = time.monotonic() + self.config.timeout_s
        url = self.url
        for _ in range(_MAX_REDIRECTS + 1):
            resp, sock = self._request(url, start, end, deadline)
            location = resp.getheader("Location") if resp.status in _REDIRECTS else None
            if location is None:
                try:
                    body = self._ranged_answer(resp, start, end, host, deadline, sock)
                except BaseException:
                    self.close()  # a body cut short or a refusal: the next attempt starts on a fresh connection
                    raise
                self._settle(resp)
                return body
            self._settle(resp)
            url = urllib.parse.urljoin(url, location)
        raise HTTPStatusError(310, f"more than {_MAX_REDIRECTS} redirects", self.url)

    def _connection(self, scheme: str, netloc: str, deadline: float) -> HTTPConnection:
        if self._conn is not None and self._conn_key == (scheme, netloc):
            return self._conn
        self.close()
        import http.client  # here: importing the module that uses it costs nothing until a read

        connect_s = max(0.001, min(deadline - time.monotonic(), 20.0))
        conn: HTTPConnection
        if scheme == "https":
            import ssl

            conn = http.client.HTTPSConnection(netloc, timeout=connect_s, context=ssl.create_default_context())
        else:
            conn = http.client.HTTPConnection(netloc, timeout=connect_s)
        self._conn, self._conn_key = conn, (scheme, netloc)
        return conn

    def _request(self, url: str, start: int, end: int, deadline: float) -> tuple[HTTPResponse, socket.socket | None]:
        """Send the ranged GET and read the answer's status and headers; the answer and its socket."""
        split = urllib.parse.urlsplit(url)
        scheme = split.scheme.lower()
        if scheme not in ("http", "https"):
            raise HTTPStatusError(400, f"a redirect to a {scheme}:// URL is not followed", self.url)
        target = urllib.parse.quote(split.path or "/", safe=_URL_SAFE)
        if split.query:
            target += "?" + urllib.parse.quote(split.query, safe=_URL_SAFE + "?")
        headers = {"Range": f"bytes={start}-{end - 1}", "Accept-Encoding": "identity", "User-Agent": _USER_AGENT}
        userinfo, _, hostport = split.netloc.rpartition("@")
        credentials = userinfo or self._own_userinfo(scheme, hostport)
        if credentials:
            headers["Authorization"] = _basic_auth(credentials)
        conn = self._connection(scheme, hostport, deadline)
        try:
            conn.request("GET", target, headers=headers)
            sock = conn.sock
            if sock is not None:
                sock.settimeout(max(0.001, deadline - time.monotonic()))
            return conn.getresponse(), sock
        except BaseException:
            self.close()  # a half-sent request or a half-read status line: the connection is not reusable
            raise

    def _own_userinfo(self, scheme: str, hostport: str) -> str:
        """The ``user:password`` of the URL read, for a request to its own origin only (a redirect elsewhere
        does not carry it, as aiohttp does not)."""
        own = urllib.parse.urlsplit(self.url)
        userinfo, _, own_hostport = own.netloc.rpartition("@")
        return userinfo if (own.scheme, own_hostport) == (scheme, hostport) else ""

    def _settle(self, resp: HTTPResponse) -> None:
        """Keep the connection for the next request only when this answer was read to its end."""
        if not resp.isclosed() or resp.will_close:
            self.close()

    def _ranged_answer(
        self, resp: HTTPResponse, start: int, end: int, host: str, deadline: float, sock: socket.socket | None
    ) -> bytes | None:
        """The asked bytes ``[start, end)`` from the answer to a ranged GET; None when it was a 429."""
        asked = f"bytes={start}-{end - 1}"
        # Lower-cased: header names are case-insensitive, and parse_rate_limit looks each up in two spellings.
        self._note_rate_limit({name.lower(): value for name, value in resp.getheaders()}, resp.status, host)
        status = resp.status
        if status == 429:
            _read_upto(resp, _ERROR_BODY_BYTES, deadline, sock)
            return None
        if status == 416:
            # Asked past the end: the size is in Content-Range ("bytes */N").
            _read_upto(resp, _ERROR_BODY_BYTES, deadline, sock)
            self._learn_size(resp.getheader("Content-Range"))
            return b""
        if status == 404:
            _read_upto(resp, _ERROR_BODY_BYTES, deadline, sock)
            raise FileNotFoundError(self.url)
        if status >= 400:
            _read_upto(resp, _ERROR_BODY_BYTES, deadline, sock)
            raise HTTPStatusError(status, resp.reason, self.url)
        if status == 206:
            content_range = resp.getheader("Content-Range")
            self._learn_size(content_range)
            expected = check_partial(start, end, content_range)
            return check_body(_read_upto(resp, expected, deadline, sock), expected, asked)
        if status != 200:
            raise RangeAnswerError(f"asked {asked}, the server answered {status}")
        # 200: the server ignored Range and sends the whole file from byte 0.
        self.range_ignored = True
        length = resp.getheader("Content-Length")
        total = int(length) if length is not None and length.isdigit() else None
        if total is not None:
            self._agree(total, None)
        stop = whole_body_end(start, end, total, self.config.max_ignored_range_bytes)
        body = _read_upto(resp, stop, deadline, sock)
        if total is not None:
            check_body(body, stop, asked)
        return body[start:stop]


class _ReadAhead:
    """One read run on a kept thread (:mod:`~gguf_audit.io.kept`), its outcome (the bytes, or what it raised)
    kept for :meth:`take`."""

    def __init__(self, start: int, end: int, run: Callable[[], bytes]) -> None:
        self.start, self.end = start, end
        self._outcome: bytes | BaseException = b""

        def target() -> None:
            try:
                self._outcome = run()
            except BaseException as exc:  # noqa: BLE001 - handed to the reader that takes it
                self._outcome = exc

        self._done = kept_threads.start(target)

    def take(self) -> bytes | BaseException:
        """The outcome, once the read is done."""
        self._done.wait()
        return self._outcome


def _basic_auth(userinfo: str) -> str:
    """The ``Authorization`` value for a URL's ``user:password@`` (percent-decoded, as aiohttp sends it)."""
    import base64

    user, _, password = userinfo.partition(":")
    pair = f"{urllib.parse.unquote(user)}:{urllib.parse.unquote(password)}"
    try:
        raw = pair.encode("latin-1")
    except UnicodeEncodeError:
        raw = pair.encode("utf-8")
    return "Basic " + base64.b64encode(raw).decode("ascii")


def _read_upto(resp: HTTPResponse, n: int, deadline: float, sock: socket.socket | None) -> bytes:
    """Up to ``n`` bytes of an answer's body (fewer where it ends), within the request's ``deadline``
    (the whole request's time, as aiohttp's total timeout, not each socket read's); ``sock`` is the
    connection's socket, whose timeout is set to what is left before each read."""
    chunks: list[bytes] = []
    got = 0
    while got < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"the answer took more than the request's timeout, {got} of {n} bytes read")
        if sock is not None:
            sock.settimeout(left)
        chunk = resp.read(min(n - got, _READ_CHUNK_BYTES))
        if not chunk:
            break
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)
