"""What the loopback test servers share: the address, the request record, accounting and lifecycle.

:class:`~gguf_audit.testing.http.RangeHTTPServer` and
:class:`~gguf_audit.testing.s3.MotoS3Server` are both a :class:`LoopbackServer`:
they bind :data:`LOOPBACK` on an ephemeral port, serve from a daemon thread,
log every request as a :class:`RequestRecord` with the body bytes sent, and end
idle keep-alive connections on close through :class:`ConnectionTracking`.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import sys
import threading
from collections.abc import Callable
from types import TracebackType
from typing import Any, Final, NamedTuple, Self

__all__ = ["LOOPBACK", "POLL_INTERVAL_S", "ConnectionTracking", "LoopbackServer", "RequestRecord"]

LOOPBACK: Final = "127.0.0.1"

# serve_forever's select() timeout: how long close() can wait for the accept loop.
POLL_INTERVAL_S: Final = 0.05

_Request = socket.socket | tuple[bytes, socket.socket]


class RequestRecord(NamedTuple):
    """One request a server answered.

    ``path`` is percent-decoded and keeps the query string (``/b?list-type=2``);
    ``range`` is the raw ``Range`` header, or None when the request had none.
    A plain tuple compares equal: ``("GET", "/a.gguf", "bytes=0-9")``.
    """

    method: str
    path: str
    range: str | None


class ConnectionTracking(socketserver.TCPServer):
    """Remembers open client sockets so close() can end idle keep-alive connections.

    Handler threads are daemons, so ``server_close`` does not wait for them;
    one idle on a keep-alive connection would otherwise live on after close(),
    still answering that client. Shutting its socket down gives it EOF.
    """

    _conns: set[socket.socket]
    _conns_lock: threading.Lock
    _on_connect: Callable[[], None]
    server_name: str
    server_port: int

    def _init_tracking(self, on_connect: Callable[[], None]) -> None:
        self._conns = set()
        self._conns_lock = threading.Lock()
        self._on_connect = on_connect

    def server_bind(self) -> None:
        # HTTPServer.server_bind would call socket.getfqdn(), a resolver lookup.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name = str(host)
        self.server_port = int(port)

    def process_request(self, request: _Request, client_address: Any) -> None:
        if isinstance(request, socket.socket):
            with self._conns_lock:
                self._conns.add(request)
        self._on_connect()
        super().process_request(request, client_address)

    def shutdown_request(self, request: _Request) -> None:
        if isinstance(request, socket.socket):
            with self._conns_lock:
                self._conns.discard(request)
        super().shutdown_request(request)

    def drop_connections(self) -> None:
        with self._conns_lock:
            conns = list(self._conns)
        for conn in conns:
            # OSError: already closed by the peer or the handler.
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)

    def handle_error(self, request: _Request, client_address: Any) -> None:
        # A client that hangs up mid-response is normal for range readers.
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class LoopbackServer:
    """A server on 127.0.0.1 run from a daemon thread, with thread-safe request accounting.

    Subclasses build their ``socketserver`` server (a :class:`ConnectionTracking`
    that calls :meth:`_note_connection`), hand it to :meth:`_serve`, and record
    what they answer with :meth:`_record` and :meth:`_add_bytes`.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: list[RequestRecord] = []
        self._bytes_sent = 0
        self._connections = 0
        self._in_flight = 0
        self._max_in_flight = 0
        self._closed = False
        self._latency_s = 0.0
        self._server: ConnectionTracking | None = None
        self._thread: threading.Thread | None = None

    def _serve(self, server: ConnectionTracking) -> None:
        """Start answering on ``server`` from a daemon thread."""
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": POLL_INTERVAL_S},
            name=f"{type(self).__name__}:{self.port}",
            daemon=True,
        )
        self._thread.start()

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError(f"{type(self).__name__} is not serving yet.")
        return int(self._server.server_address[1])

    # -- knobs

    @property
    def latency_s(self) -> float:
        """Seconds each request waits before it is answered (safe to change while requests run)."""
        with self._lock:
            return self._latency_s

    @latency_s.setter
    def latency_s(self, value: float) -> None:
        with self._lock:
            self._latency_s = float(value)

    # -- accounting

    @property
    def requests(self) -> list[RequestRecord]:
        """A copy of the requests answered so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def bytes_sent(self) -> int:
        """Total response body bytes handed to sockets (headers not counted)."""
        with self._lock:
            return self._bytes_sent

    @property
    def connections(self) -> int:
        """TCP connections accepted; with keep-alive, fewer than requests."""
        with self._lock:
            return self._connections

    @property
    def max_in_flight(self) -> int:
        """The most requests waiting for their answer at once since the start (or :meth:`reset_stats`), for
        servers that count them (:meth:`_arrived`, :meth:`_end_request`).

        A request counts from its arrival until its answer starts, so with
        ``latency_s`` set this is the client's concurrency as the server sees it.
        """
        with self._lock:
            return self._max_in_flight

    def reset_stats(self) -> None:
        with self._lock:
            self._requests.clear()
            self._bytes_sent = 0
            self._connections = 0
            self._max_in_flight = self._in_flight

    def _record(self, record: RequestRecord) -> None:
        with self._lock:
            self._requests.append(record)

    def _arrived(self, record: RequestRecord) -> None:
        """:meth:`_record` a request and count it in flight until :meth:`_end_request`."""
        with self._lock:
            self._requests.append(record)
            self._in_flight += 1
            self._max_in_flight = max(self._max_in_flight, self._in_flight)

    def _end_request(self) -> None:
        """The answer to a request counted by :meth:`_arrived` starts."""
        with self._lock:
            self._in_flight -= 1

    def _add_bytes(self, n_bytes: int) -> None:
        with self._lock:
            self._bytes_sent += n_bytes

    def _note_connection(self) -> None:
        with self._lock:
            self._connections += 1

    # -- lifecycle

    def _before_close(self) -> None:
        """Hook: what a subclass does before the accept loop stops (wake sleeping handlers)."""

    def close(self) -> None:
        """Stop serving, end open connections and join every thread (idempotent)."""
        if self._closed or self._server is None or self._thread is None:
            return
        self._closed = True
        self._before_close()
        self._server.shutdown()
        self._server.drop_connections()
        self._thread.join()
        self._server.server_close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
