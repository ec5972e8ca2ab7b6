"""moto's S3 on 127.0.0.1 for tests, with request accounting like the HTTP range server's.

:class:`MotoS3Server` runs moto's WSGI app on werkzeug's threaded server in
this process, counts the requests a client under test makes (not its own
set-up requests) and the body bytes they get, and ends every connection on
close. Typical use::

    with MotoS3Server() as s3:
        s3.make_bucket("b")
        s3.put("b", "a.gguf", data)
        fs = s3fs.S3FileSystem(skip_instance_cache=True, **s3.storage_options())
"""

from __future__ import annotations

import http.client
import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any, Final

import boto3  # type: ignore[import-untyped]
from botocore.config import Config  # type: ignore[import-untyped]
from moto.core.models import DEFAULT_ACCOUNT_ID
from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
from moto.s3.models import s3_backends
from werkzeug.serving import ThreadedWSGIServer

from gguf_audit.testing.loopback import LOOPBACK, ConnectionTracking, LoopbackServer, RequestRecord

if TYPE_CHECKING:
    from _typeshed.wsgi import StartResponse, WSGIApplication, WSGIEnvironment

__all__ = ["FAKE_AWS_ENV", "MotoS3Server"]

FAKE_AWS_ENV: Final = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
    "AWS_EC2_METADATA_DISABLED": "true",
    "AWS_CONFIG_FILE": os.devnull,
    "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
}
"""Credentials and settings for moto, and nothing from this machine's own AWS files or instance metadata."""

# Marks the helper's own boto3 requests (in User-Agent) so accounting skips them.
_HELPER_MARK: Final = "gguf-audit-testing-helper"


class MotoS3Server(LoopbackServer):
    """moto's S3 on 127.0.0.1 (an ephemeral port), with request accounting.

    This runs the WSGI app ``moto.server.ThreadedMotoServer`` runs
    (``DomainDispatcherApplication(create_backend_app)`` with
    ``MotoRequestHandler``) on werkzeug's threaded server, wrapped in a
    middleware that records requests, and with the same connection handling
    as :class:`~gguf_audit.testing.http.RangeHTTPServer`. ``ThreadedMotoServer(ip_address="127.0.0.1",
    port=0, verbose=False)`` works too (its port is ``get_host_and_port()[1]``
    after ``start()``), but it cannot count requests and logs every one.

    moto keeps its state in process-global backends: every MotoS3Server in a
    process (and any ``mock_aws``) sees the same buckets, and :meth:`reset`
    clears them all. Requests made by :meth:`make_bucket`, :meth:`put` and
    :meth:`reset` are not counted.
    """

    region: Final = "us-east-1"
    key: Final = "testing"
    secret: Final = "testing"

    def __init__(self) -> None:
        super().__init__()
        self._client: Any = None
        self.latency_s = 0.0
        """Seconds added before answering each counted request (benchmarks: a real store's round trip)."""
        app = DomainDispatcherApplication(create_backend_app)
        self._serve(_TrackedWSGIServer(self._counting(app), self._note_connection))

    @property
    def endpoint_url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def storage_options(self) -> dict[str, Any]:
        """Keyword arguments for ``s3fs.S3FileSystem`` (or fsspec's ``storage_options``).

        Explicit credentials keep botocore away from the instance metadata
        service; ``proxies={}`` keeps it from routing loopback through an
        ``HTTP_PROXY`` set in the environment.
        """
        return {
            "key": self.key,
            "secret": self.secret,
            "client_kwargs": {"endpoint_url": self.endpoint_url, "region_name": self.region},
            "config_kwargs": {"proxies": {}},
        }

    def client(self) -> Any:
        """A boto3 S3 client for this server (its requests are not counted)."""
        if self._client is None:
            self._client = boto3.session.Session().client(
                "s3",
                endpoint_url=self.endpoint_url,
                region_name=self.region,
                aws_access_key_id=self.key,
                aws_secret_access_key=self.secret,
                config=Config(proxies={}, user_agent_extra=_HELPER_MARK),
            )
        return self._client

    def make_bucket(self, name: str) -> None:
        self.client().create_bucket(Bucket=name)

    def put(self, bucket: str, key: str, data: bytes) -> str:
        """Store ``data`` at ``s3://bucket/key``; returns the object's ETag."""
        response = self.client().put_object(Bucket=bucket, Key=key, Body=data)
        return str(response["ETag"])

    def put_many(self, bucket: str, objects: Iterable[tuple[str, bytes]]) -> int:
        """Store each ``(key, data)`` in ``bucket`` straight into moto's backend (no request: thousands a second,
        where :meth:`put` manages tens); returns how many were stored. The bucket must exist."""
        backend = s3_backends[DEFAULT_ACCOUNT_ID]["aws"]
        n = 0
        for key, data in objects:
            backend.put_object(bucket, key, data)
            n += 1
        return n

    def reset(self) -> None:
        """Drop every bucket and object in moto (all of moto's state, process-wide)."""
        conn = http.client.HTTPConnection(LOOPBACK, self.port, timeout=30)
        try:
            conn.request("POST", "/moto-api/reset")
            response = conn.getresponse()
            response.read()
            if response.status != 200:
                raise RuntimeError(f"moto reset failed with HTTP {response.status}.")
        finally:
            conn.close()

    # -- accounting (requests exclude the helper's own; connections include them)

    def _counting(self, app: WSGIApplication) -> WSGIApplication:
        def counting_app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
            path = str(environ.get("PATH_INFO", ""))
            query = str(environ.get("QUERY_STRING", ""))
            counted = _HELPER_MARK not in str(environ.get("HTTP_USER_AGENT", "")) and not path.startswith("/moto-api")
            if not counted:
                return app(environ, start_response)
            record = RequestRecord(
                str(environ.get("REQUEST_METHOD", "")),
                f"{path}?{query}" if query else path,
                environ.get("HTTP_RANGE"),
            )
            self._record(record)
            if self.latency_s > 0:
                time.sleep(self.latency_s)  # a store's round trip (each request has its own server thread)
            return self._count_body(app(environ, start_response))

        return counting_app

    def _count_body(self, body: Iterable[bytes]) -> Iterator[bytes]:
        try:
            for chunk in body:
                self._add_bytes(len(chunk))
                yield chunk
        finally:
            close = getattr(body, "close", None)
            if close is not None:
                close()

    def __repr__(self) -> str:
        return f"MotoS3Server({self.endpoint_url!r})"


class _QuietHandler(MotoRequestHandler):
    """moto's request handler without werkzeug's per-request log."""

    # werkzeug would set HTTP/1.1 on the handler class; say it here instead.
    protocol_version = "HTTP/1.1"

    def log(self, type: str, message: str, *args: Any) -> None:
        return  # werkzeug logs every request at INFO; MotoS3Server.requests is the log


class _TrackedWSGIServer(ConnectionTracking, ThreadedWSGIServer):
    """werkzeug's threaded WSGI server with connection tracking and no request log."""

    def __init__(self, app: WSGIApplication, on_connect: Callable[[], None]) -> None:
        self._init_tracking(on_connect)
        super().__init__(LOOPBACK, 0, app, handler=_QuietHandler)
