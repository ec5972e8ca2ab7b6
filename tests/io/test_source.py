"""The range reader against real backends: memory, local files, HTTP and moto's S3.

One conformance suite runs over every backend: the header an audit reads must
equal the local parse, at the byte and request cost the header implies.
"""

from __future__ import annotations

import socket
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import fsspec
import pytest
from corpus import S3_FILES, corpus_dir

from gguf_audit.audit import AuditConfig, AuditTarget, FileAudit
from gguf_audit.audit import audit_file as _audit_file
from gguf_audit.format.model import Header
from gguf_audit.format.parser import parse_header
from gguf_audit.io.source import ReadConfig
from gguf_audit.testing.http import RangeHTTPServer
from gguf_audit.testing.s3 import MotoS3Server

Backend = Callable[[str], tuple[str, dict[str, Any]]]


def audit_file(target: AuditTarget | str, *, config: AuditConfig | None = None) -> FileAudit:
    """The structural audit only: these tests are about what reading costs."""
    base = config or AuditConfig()
    return _audit_file(target, config=replace(base, semantics=False, templates=False))


def _local_header(rel: str) -> Header:
    data = (corpus_dir() / rel).read_bytes()
    header = parse_header(data, len(data))
    assert isinstance(header, Header)
    return header


@pytest.fixture(params=["memory", "local", "http", "s3"])
def backend(request: pytest.FixtureRequest) -> Backend:
    kind = request.param
    if kind == "memory":
        fs = fsspec.filesystem("memory")

        def to_memory(rel: str) -> tuple[str, dict[str, Any]]:
            fs.pipe(f"/corpus/{rel}", (corpus_dir() / rel).read_bytes())
            return f"memory://corpus/{rel}", {}

        return to_memory
    if kind == "local":
        return lambda rel: (str(corpus_dir() / rel), {})
    if kind == "http":
        server: RangeHTTPServer = request.getfixturevalue("http")
        return lambda rel: (server.url_for(rel), {})
    s3: MotoS3Server = request.getfixturevalue("s3_corpus")
    return lambda rel: (f"s3://corpus/{rel}", s3.storage_options())


@pytest.mark.parametrize("rel", S3_FILES)
def test_every_backend_reads_the_same_header(backend: Backend, rel: str) -> None:
    url, options = backend(rel)
    audit = audit_file(AuditTarget(url, storage_options=options))
    expected = _local_header(rel)
    assert audit.findings == []
    assert audit.header is not None
    assert audit.size == (corpus_dir() / rel).stat().st_size
    assert [(k.key, k.type_name, k.length) for k in audit.header.kvs] == [
        (k.key, k.type_name, k.length) for k in expected.kvs
    ]
    assert [(t.name, t.data_offset, t.n_bytes) for t in audit.header.tensors] == [
        (t.name, t.data_offset, t.n_bytes) for t in expected.tensors
    ]
    # One size look-up (none over HTTP: the first response tells it) and at
    # most two reads: the read-ahead, then what the estimate says is missing.
    assert audit.io.requests <= 3
    assert audit.io.bytes_read <= max(int(expected.header_bytes * 1.15), 512 * 1024)


def test_http_costs_one_request_for_a_small_header(http: RangeHTTPServer) -> None:
    rel = "models/tiny-llama-Q4_K_M.gguf"
    audit = audit_file(http.url_for(rel))
    assert audit.findings == [] and audit.size == (corpus_dir() / rel).stat().st_size
    # The size came from Content-Range: no HEAD, no second request.
    assert [r.method for r in http.requests] == ["GET"]
    assert http.requests[0].range == "bytes=0-524287"
    assert audit.io.requests == 1
    assert http.bytes_sent == audit.io.bytes_read == 512 * 1024


def test_http_big_header_costs_two_requests(http: RangeHTTPServer) -> None:
    rel = "vocab/ggml-vocab-deepseek-llm.gguf"
    audit = audit_file(http.url_for(rel))
    header = _local_header(rel)
    assert audit.findings == []
    assert len(http.requests) == 2 and audit.io.requests == 2
    assert audit.io.bytes_read == header.header_bytes  # the file ends with its header
    assert http.bytes_sent == audit.io.bytes_read


def test_http_listed_size_is_used(http: RangeHTTPServer) -> None:
    rel = "split/tiny-llama-Q4_K_M-00004-of-00004.gguf"
    size = (corpus_dir() / rel).stat().st_size
    audit = audit_file(AuditTarget(http.url_for(rel), size=size))
    assert audit.findings == []
    assert http.requests[0].range == f"bytes=0-{size - 1}"


def test_server_that_ignores_range(http: RangeHTTPServer) -> None:
    http.ignore_range = True
    rel = "models/tiny-llama-F32.gguf"
    audit = audit_file(http.url_for(rel))
    size = (corpus_dir() / rel).stat().st_size
    assert audit.findings == [] and audit.size == size
    # The body is read only as far as asked, then the connection dropped: the server could not send the
    # whole 10 MB file. What it did send is what the client read plus what the kernel's loopback buffers took
    # before the close (up to tcp_rmem's 6 MiB on Linux when the machine is loaded), so the bound is the file.
    assert audit.io.bytes_read == 512 * 1024
    assert http.bytes_sent < size


def test_transient_errors_are_retried(http: RangeHTTPServer) -> None:
    http.fail_next = 2
    audit = audit_file(http.url_for("models/tiny-llama-Q8_0.gguf"), config=AuditConfig(read=ReadConfig(backoff_s=0.01)))
    assert audit.findings == []
    assert audit.io.requests == 3 and len(http.requests) == 3


def test_persistent_server_errors_become_io_error(http: RangeHTTPServer) -> None:
    http.fail_next = 100
    audit = audit_file(
        http.url_for("models/tiny-llama-Q8_0.gguf"), config=AuditConfig(read=ReadConfig(retries=2, backoff_s=0.01))
    )
    assert [f.code for f in audit.findings] == ["io.error"]
    assert "503" in audit.findings[0].message and "3 attempts" in audit.findings[0].message
    assert audit.io.requests == 3


def test_forbidden_is_permission_denied(http: RangeHTTPServer) -> None:
    http.fail_next, http.fail_status = 1, 403
    audit = audit_file(http.url_for("models/tiny-llama-Q8_0.gguf"))
    assert [f.code for f in audit.findings] == ["io.permission_denied"]
    assert audit.io.requests == 1


def test_slow_server_times_out(http: RangeHTTPServer) -> None:
    http.latency_s = 1.0
    config = AuditConfig(read=ReadConfig(timeout_s=0.2, retries=1, backoff_s=0.01))
    audit = audit_file(http.url_for("models/tiny-llama-Q8_0.gguf"), config=config)
    assert [f.code for f in audit.findings] == ["io.timeout"]
    assert audit.io.requests == 2
    assert audit.seconds < 1.5


def test_missing_over_http_and_s3(http: RangeHTTPServer, s3_corpus: MotoS3Server) -> None:
    assert [f.code for f in audit_file(http.url_for("nope.gguf")).findings] == ["io.not_found"]
    audit = audit_file(AuditTarget("s3://corpus/nope.gguf", storage_options=s3_corpus.storage_options()))
    assert [f.code for f in audit.findings] == ["io.not_found"]


def test_s3_with_listed_size_makes_one_request(s3_corpus: MotoS3Server) -> None:
    rel = "models/tiny-llama-Q4_K_M.gguf"
    s3_corpus.reset_stats()
    size = (corpus_dir() / rel).stat().st_size
    audit = audit_file(AuditTarget(f"s3://corpus/{rel}", storage_options=s3_corpus.storage_options(), size=size))
    assert audit.findings == []
    assert audit.io.requests == 1
    gets = [r for r in s3_corpus.requests if r.method == "GET"]
    assert len(gets) == 1 and gets[0].range == "bytes=0-524287"


def test_s3_learns_the_size_from_the_first_response(s3_corpus: MotoS3Server) -> None:
    rel = "models/tiny-llama-Q4_K_M.gguf"
    s3_corpus.reset_stats()
    audit = audit_file(AuditTarget(f"s3://corpus/{rel}", storage_options=s3_corpus.storage_options()))
    assert audit.findings == [] and audit.size == (corpus_dir() / rel).stat().st_size
    # No HEAD to size it: the ranged GET's Content-Range told the size.
    assert [r.method for r in s3_corpus.requests] == ["GET"]
    assert audit.io.requests == 1


def test_empty_object_on_s3(s3_corpus: MotoS3Server) -> None:
    s3_corpus.put("corpus", "empty/zero.gguf", b"")
    audit = audit_file(AuditTarget("s3://corpus/empty/zero.gguf", storage_options=s3_corpus.storage_options()))
    assert [f.code for f in audit.findings] == ["header.truncated"]
    assert audit.size == 0


def test_truncated_upload_on_s3(s3_corpus: MotoS3Server) -> None:
    data = (corpus_dir() / "models/tiny-llama-Q8_0.gguf").read_bytes()
    s3_corpus.put("corpus", "cut/tiny.gguf", data[: len(data) // 2])
    audit = audit_file(AuditTarget("s3://corpus/cut/tiny.gguf", storage_options=s3_corpus.storage_options()))
    assert [f.code for f in audit.findings] == ["data.truncated"]
    assert audit.loadable is False
    # The truncation rests on the first answer's size: one more byte asked confirms it (a lying total would not).
    assert audit.io.bytes_read <= 512 * 1024 + 1 and audit.io.requests == 2


def test_storage_options_reach_the_filesystem(s3_corpus: MotoS3Server) -> None:
    # The same object through an endpoint nobody listens on: the options are
    # what decides where the request goes, and refusal is an io.error row.
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        dead_port = sock.getsockname()[1]
    options = s3_corpus.storage_options()
    options["client_kwargs"] = {**options["client_kwargs"], "endpoint_url": f"http://127.0.0.1:{dead_port}"}
    config = AuditConfig(read=ReadConfig(retries=1, backoff_s=0.01, timeout_s=2))
    audit: FileAudit = audit_file(AuditTarget(f"s3://corpus/{S3_FILES[0]}", storage_options=options), config=config)
    assert [f.code for f in audit.findings] == ["io.error"]
    assert audit.header is None
