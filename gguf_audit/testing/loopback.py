"""What the loopback test servers share: the address, the request record and connection tracking.

:class:`~gguf_audit.testing.http.RangeHTTPServer` and
:class:`~gguf_audit.testing.s3.MotoS3Server` both bind :data:`LOOPBACK` on
an ephemeral port, log every request as a :class:`RequestRecord`, and end
idle keep-alive connections on close through :class:`ConnectionTracking`.
"""

from __future__ import annotations

import contextlib
import socket
import socketserver
import sys
import threading
from collections.abc import Callable
from typing import Any, Final, NamedTuple

__all__ = ["LOOPBACK", "POLL_INTERVAL_S", "ConnectionTracking", "RequestRecord"]

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
