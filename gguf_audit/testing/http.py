"""A real HTTP/1.1 range server on 127.0.0.1 for tests and benchmarks, with misbehaviour knobs.

:class:`RangeHTTPServer` serves bytes from memory or files under a root,
honours single byte ranges as RFC 9110 says (:func:`parse_byte_range`),
records every request and the body bytes it sends, and can be told to
misbehave (ignore ranges, add latency, fail the next requests, cut the
next bodies short, send no length, refuse HEAD) while requests run, and
records the peak of requests in flight at once. Typical use::

    with RangeHTTPServer(files={"m/a.gguf": data}) as srv:
        fs = fsspec.filesystem("http", skip_instance_cache=True)
        fs.cat_file(srv.url_for("m/a.gguf"), 0, 64)
        assert srv.requests == [("GET", "/m/a.gguf", "bytes=0-63")]
"""

from __future__ import annotations

import hashlib
import re
import stat
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from os import PathLike
from pathlib import Path
from typing import Any, Final, Literal

from gguf_audit.testing.loopback import LOOPBACK, ConnectionTracking, LoopbackServer, RequestRecord

__all__ = ["RangeHTTPServer", "parse_byte_range"]

# Body bytes written per socket send; also the read size for files on disk.
_CHUNK_BYTES: Final = 1 << 20

# "bytes=first-last", "bytes=first-" or "bytes=-suffix" (RFC 9110, section 14.1.2).
_RANGE_RE: Final = re.compile(r"bytes=(\d*)-(\d*)")


def parse_byte_range(header: str, size: int) -> tuple[int, int] | Literal["ignore", "unsatisfiable"]:
    """Resolve a ``Range`` header against a representation of ``size`` bytes.

    Returns the half-open ``(start, end)`` to send with 206, ``"unsatisfiable"``
    for a 416, or ``"ignore"`` when the header is not one single byte range this
    server understands (other units, bad syntax, ``first > last``, several
    ranges); RFC 9110 lets a server answer those with 200 and the whole body.
    """
    match = _RANGE_RE.fullmatch(header.strip())
    if match is None:
        return "ignore"
    first, last = match.group(1), match.group(2)
    if not first and not last:
        return "ignore"
    if not first:
        suffix = int(last)
        if suffix == 0 or size == 0:
            return "unsatisfiable"
        return (max(0, size - suffix), size)
    start = int(first)
    if last and int(last) < start:
        return "ignore"
    if start >= size:
        return "unsatisfiable"
    end = size if not last else min(int(last) + 1, size)
    return (start, end)


@dataclass(frozen=True, slots=True)
class _Knobs:
    """The misbehaviour settings one request sees (a consistent snapshot)."""

    ignore_range: bool
    latency_s: float
    fail_status: int | None
    no_content_length: bool
    allow_head: bool
    truncate: bool
    lying_total: int | None
    trickle_bytes_per_s: float


@dataclass(frozen=True, slots=True)
class _Resource:
    size: int
    etag: str
    data: bytes | None
    file_path: Path | None
    reader: Callable[[int, int], bytes] | None = None

    def chunks(self, start: int, end: int) -> Iterator[bytes]:
        if self.reader is not None:
            for pos in range(start, end, _CHUNK_BYTES):
                yield self.reader(pos, min(pos + _CHUNK_BYTES, end))
            return
        if self.data is not None:
            view = memoryview(self.data)
            for pos in range(start, end, _CHUNK_BYTES):
                yield bytes(view[pos : min(pos + _CHUNK_BYTES, end)])
            return
        if self.file_path is None:
            return
        with self.file_path.open("rb") as f:
            f.seek(start)
            remaining = end - start
            while remaining > 0:
                chunk = f.read(min(_CHUNK_BYTES, remaining))
                if not chunk:
                    return  # the file shrank since stat(); the client sees a short body
                remaining -= len(chunk)
                yield chunk


class _RangeHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "gguf-audit-range/1"
    sys_version = ""
    # Headers and body go out in two sends: with Nagle on, the body would wait
    # for the client's delayed ACK (about 40 ms on Linux) on every request.
    disable_nagle_algorithm = True
    server: _RangeServer

    def do_GET(self) -> None:
        self._answer(head=False)

    def do_HEAD(self) -> None:
        self._answer(head=True)

    def log_message(self, format: str, *args: Any) -> None:
        return  # keep test output clean; RangeHTTPServer.requests is the log

    def _answer(self, *, head: bool) -> None:
        owner = self.server.owner
        split = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(split.path)
        shown = f"{path}?{split.query}" if split.query else path
        range_header = self.headers.get("Range")
        knobs = owner._begin_request(RequestRecord(self.command, shown, range_header))
        self._counted = True
        try:
            authorize = owner.authorize
            if authorize is not None and not authorize(path, split.query):
                self._send_simple(403, head=head)
                return
            self._respond(knobs, path, range_header, head=head)
        finally:
            self._uncount()

    def send_response(self, code: int, message: str | None = None) -> None:
        # A request stops counting as in flight when its answer starts: a client
        # that waits for the body before sending the next must not be counted twice.
        self._uncount()
        super().send_response(code, message)

    def _uncount(self) -> None:
        if getattr(self, "_counted", False):
            self._counted = False
            self.server.owner._end_request()

    def _respond(self, knobs: _Knobs, path: str, range_header: str | None, *, head: bool) -> None:
        owner = self.server.owner
        if knobs.latency_s > 0:
            owner._closing.wait(knobs.latency_s)
        if knobs.fail_status is not None:
            self._send_simple(knobs.fail_status, head=head)
            return
        if head and not knobs.allow_head:
            self._send_simple(405, head=head, extra={"Allow": "GET"})
            return
        resource = owner._lookup(path)
        if resource is None:
            self._send_simple(404, head=head)
            return

        size = resource.size
        # A lying total (a stale proxy, a CDN bug): ranges are resolved against it and it is the total this
        # answer's Content-Range states; the body still holds only the bytes the file has.
        told = size if knobs.lying_total is None else knobs.lying_total
        status, start, end = 200, 0, size
        if range_header is not None and not knobs.ignore_range:
            parsed = parse_byte_range(range_header, told)
            if parsed == "unsatisfiable" or (parsed != "ignore" and parsed[0] >= size):
                self._send_simple(416, head=head, extra={"Content-Range": f"bytes */{told}", "ETag": resource.etag})
                return
            if parsed != "ignore":
                status, (start, end) = 206, (parsed[0], min(parsed[1], size))

        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("ETag", resource.etag)
        if not knobs.ignore_range:
            self.send_header("Accept-Ranges", "bytes")
        if status == 206:
            self.send_header("Content-Range", f"bytes {start}-{end - 1}/{told}")
        if knobs.no_content_length:
            # Without a length the only end-of-body marker is the connection closing.
            self.send_header("Connection", "close")
            self.close_connection = True
        else:
            self.send_header("Content-Length", str(end - start))
        self.end_headers()
        if head:
            return
        sent = 0
        # A cut body: the length promised, half of it sent, the connection closed.
        stop = start + (end - start) // 2 if knobs.truncate else end
        for chunk in resource.chunks(start, stop):
            if knobs.trickle_bytes_per_s > 0:
                trickled = self._trickle(chunk, knobs.trickle_bytes_per_s)
                sent += trickled
                if trickled < len(chunk):
                    break  # the server is closing
                continue
            # Counted before the write, so a client that has the bytes sees them counted.
            owner._add_bytes(len(chunk))
            self.wfile.write(chunk)
            sent += len(chunk)
        if sent != end - start:
            self.close_connection = True

    def _trickle(self, chunk: bytes, rate: float) -> int:
        """Send ``chunk`` a byte at a time, ``1 / rate`` seconds apart; the bytes sent (fewer on close)."""
        owner = self.server.owner
        for i in range(len(chunk)):
            if owner._closing.wait(1.0 / rate):
                return i
            owner._add_bytes(1)
            self.wfile.write(chunk[i : i + 1])
            self.wfile.flush()
        return len(chunk)

    def _send_simple(self, status: int, *, head: bool, extra: Mapping[str, str] | None = None) -> None:
        phrase = self.responses.get(status, ("Error",))[0]
        body = f"{status} {phrase}\n".encode()
        self.send_response(status)
        for name, value in (extra or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if not head:
            self.server.owner._add_bytes(len(body))
            self.wfile.write(body)


class _RangeServer(ConnectionTracking, ThreadingHTTPServer):
    daemon_threads = True
    # socketserver's default backlog of 5 drops SYNs under a parallel fan-out,
    # and the client's retransmit costs a second.
    request_queue_size = 128

    def __init__(self, owner: RangeHTTPServer) -> None:
        self.owner = owner
        self._init_tracking(owner._note_connection)
        super().__init__((LOOPBACK, 0), _RangeHandler)


class RangeHTTPServer(LoopbackServer):
    """A threaded HTTP/1.1 server on 127.0.0.1 that honours single byte ranges.

    Serves ``files`` (an in-memory ``{path: bytes}``, paths without a leading
    slash), files made on demand (:meth:`put_virtual`) and, for paths not in
    those, regular files under ``root``. Answers GET
    and HEAD: 206 with ``Content-Range`` for ``bytes=a-b``, ``bytes=a-`` and
    ``bytes=-n``; 416 with ``Content-Range: bytes */size`` when unsatisfiable;
    200 and the whole body without a Range (or with one it ignores, see
    :func:`parse_byte_range`); 404 for anything else. Every response has an
    ``ETag`` (a hash of the bytes in memory, size and mtime on disk) and a
    ``Content-Length``; nothing is ever compressed.

    The misbehaviour knobs are keyword arguments and properties, safe to change
    while requests run:

    - ``ignore_range``: answer 200 with the whole body, without
      ``Accept-Ranges``, as a server unaware of ranges does;
    - ``latency_s``: wait this long before answering each request;
    - ``fail_next`` / ``fail_status``: answer the next N requests with
      ``fail_status`` (503 by default) and a short body;
    - ``truncate_next``: send only the first half of the next N GET bodies
      (headers promising all of it), then close the connection;
    - ``no_content_length``: send no ``Content-Length`` and close the
      connection after each body, so a client cannot learn the size up front;
    - ``allow_head``: when False, answer HEAD with 405;
    - ``authorize``: ``(path, query) -> bool``; a request it refuses gets 403 (a CDN's presigned URLs);
    - ``lie_next`` / ``lying_total``: the next N GET answers state ``lying_total`` as the file's size in
      their ``Content-Range`` (and resolve the range against it), as a stale proxy or a CDN bug would;
    - ``trickle_bytes_per_s``: send every body a byte at a time at this rate (0: at once), as a server
      built to hold a client would.

    :attr:`max_in_flight` records the most requests answered at once (a
    client's concurrency, as the server sees it).
    """

    def __init__(
        self,
        root: str | PathLike[str] | None = None,
        files: Mapping[str, bytes] | None = None,
        *,
        ignore_range: bool = False,
        latency_s: float = 0.0,
        fail_next: int = 0,
        fail_status: int = 503,
        truncate_next: int = 0,
        no_content_length: bool = False,
        allow_head: bool = True,
        lie_next: int = 0,
        lying_total: int = 0,
        trickle_bytes_per_s: float = 0.0,
    ) -> None:
        super().__init__()
        self._closing = threading.Event()
        self._root = Path(root).resolve() if root is not None else None
        self._files: dict[str, tuple[bytes, str]] = {}
        self._virtual: dict[str, _Resource] = {}
        for path, data in (files or {}).items():
            self.put(path, data)
        self._ignore_range = ignore_range
        self._latency_s = float(latency_s)
        self._fail_next = int(fail_next)
        self._fail_status = int(fail_status)
        self._truncate_next = int(truncate_next)
        self._no_content_length = no_content_length
        self._allow_head = allow_head
        self._lie_next = int(lie_next)
        self.authorize: Callable[[str, str], bool] | None = None
        self._lying_total = int(lying_total)
        self.trickle_bytes_per_s = float(trickle_bytes_per_s)
        self._serve(_RangeServer(self))

    # -- addresses

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``, without a trailing slash."""
        return f"http://{LOOPBACK}:{self.port}"

    def url_for(self, path: str) -> str:
        """The URL of ``path`` (relative to the root; percent-encoded as needed)."""
        return f"{self.base_url}/{urllib.parse.quote(path.lstrip('/'))}"

    # -- content

    def put(self, path: str, data: bytes) -> None:
        """Serve ``data`` at ``path`` from memory (replacing what was there)."""
        etag = '"' + hashlib.blake2b(data, digest_size=10).hexdigest() + '"'
        with self._lock:
            self._files[path.lstrip("/")] = (bytes(data), etag)

    def put_virtual(self, path: str, size: int, read: Callable[[int, int], bytes]) -> None:
        """Serve ``size`` bytes at ``path`` made on demand: ``read(start, end)`` returns bytes ``[start, end)``.

        For files too big to hold (a 44 GB model whose data is invented as it
        is read, see :class:`~gguf_audit.testing.layouts.SyntheticGGUF`); ``read``
        is called from the handler threads, at most 1 MiB at a time.
        """
        etag = '"' + hashlib.blake2b(f"{path}:{size}:{id(read)}".encode(), digest_size=10).hexdigest() + '"'
        with self._lock:
            self._virtual[path.lstrip("/")] = _Resource(size, etag, None, None, read)

    def remove(self, path: str) -> None:
        """Stop serving the in-memory or virtual ``path`` (a no-op when absent)."""
        with self._lock:
            self._files.pop(path.lstrip("/"), None)
            self._virtual.pop(path.lstrip("/"), None)

    def _lookup(self, path: str) -> _Resource | None:
        key = path.lstrip("/")
        with self._lock:
            entry = self._files.get(key)
            virtual = self._virtual.get(key)
        if virtual is not None:
            return virtual
        if entry is not None:
            return _Resource(len(entry[0]), entry[1], entry[0], None)
        if self._root is None or not key:
            return None
        candidate = (self._root / key).resolve()
        if not candidate.is_relative_to(self._root):
            return None  # "../" must not escape the root
        try:
            st = candidate.stat()
        except OSError:
            return None
        if not stat.S_ISREG(st.st_mode):
            return None
        return _Resource(st.st_size, f'"{st.st_size:x}-{st.st_mtime_ns:x}"', None, candidate)

    # -- knobs

    @property
    def ignore_range(self) -> bool:
        with self._lock:
            return self._ignore_range

    @ignore_range.setter
    def ignore_range(self, value: bool) -> None:
        with self._lock:
            self._ignore_range = value

    @property
    def fail_next(self) -> int:
        """Requests still to be failed with ``fail_status``."""
        with self._lock:
            return self._fail_next

    @fail_next.setter
    def fail_next(self, value: int) -> None:
        with self._lock:
            self._fail_next = int(value)

    @property
    def fail_status(self) -> int:
        with self._lock:
            return self._fail_status

    @fail_status.setter
    def fail_status(self, value: int) -> None:
        with self._lock:
            self._fail_status = int(value)

    @property
    def truncate_next(self) -> int:
        """GET bodies still to be cut to half their length."""
        with self._lock:
            return self._truncate_next

    @truncate_next.setter
    def truncate_next(self, value: int) -> None:
        with self._lock:
            self._truncate_next = int(value)

    @property
    def no_content_length(self) -> bool:
        with self._lock:
            return self._no_content_length

    @no_content_length.setter
    def no_content_length(self, value: bool) -> None:
        with self._lock:
            self._no_content_length = value

    @property
    def allow_head(self) -> bool:
        with self._lock:
            return self._allow_head

    @allow_head.setter
    def allow_head(self, value: bool) -> None:
        with self._lock:
            self._allow_head = value

    @property
    def lie_next(self) -> int:
        """GET answers still to state :attr:`lying_total` as the size."""
        with self._lock:
            return self._lie_next

    @lie_next.setter
    def lie_next(self, value: int) -> None:
        with self._lock:
            self._lie_next = int(value)

    @property
    def lying_total(self) -> int:
        with self._lock:
            return self._lying_total

    @lying_total.setter
    def lying_total(self, value: int) -> None:
        with self._lock:
            self._lying_total = int(value)

    # -- accounting

    @property
    def bytes_sent(self) -> int:
        """Total body bytes handed to sockets (error bodies included, headers not).

        A chunk is counted just before it is written, so a client that hangs
        up mid-body leaves up to one chunk (1 MiB) counted but never sent.
        """
        return super().bytes_sent

    def _begin_request(self, record: RequestRecord) -> _Knobs:
        self._arrived(record)
        with self._lock:
            fail_status: int | None = None
            if self._fail_next > 0:
                self._fail_next -= 1
                fail_status = self._fail_status
            truncate = False
            if fail_status is None and record.method == "GET" and self._truncate_next > 0:
                self._truncate_next -= 1
                truncate = True
            lying_total: int | None = None
            if fail_status is None and record.method == "GET" and self._lie_next > 0:
                self._lie_next -= 1
                lying_total = self._lying_total
            return _Knobs(
                self._ignore_range,
                self._latency_s,
                fail_status,
                self._no_content_length,
                self._allow_head,
                truncate,
                lying_total,
                self.trickle_bytes_per_s,
            )

    # -- lifecycle

    def _before_close(self) -> None:
        self._closing.set()  # wakes handlers sleeping on latency_s

    def __repr__(self) -> str:
        return f"RangeHTTPServer({self.base_url!r}, root={self._root!r})"
