"""The standard-library reads (gguf_audit/io/plain.py) against fsspec's, over the real range server.

Every case runs both readers on the same file and the same misbehaving server
(``reader`` is ``fsspec`` or ``stdlib``) and asserts the same outcome of each:
findings' codes, the size, what was read and what the server saw. A last set
audits both ways back to back and compares the results whole.
"""

from __future__ import annotations

import os
import urllib.parse
from dataclasses import replace
from pathlib import Path

import pytest
from corpus import corpus_dir

from gguf_audit.audit import AuditConfig, AuditResources, AuditTarget, FileAudit, audit_file
from gguf_audit.format.model import Header
from gguf_audit.format.parser import parse_header
from gguf_audit.io.plain import LocalFileSource, PlainHTTPSource, _basic_auth, open_plain_source, plain_protocol
from gguf_audit.io.read_config import ReadConfig
from gguf_audit.report.json import audit_to_json, dumps
from gguf_audit.testing.http import RangeHTTPServer
from gguf_audit.testing.hub import LocalHub

SMALL = "models/tiny-llama-Q8_0.gguf"
BIG_HEADER = "vocab/ggml-vocab-deepseek-llm.gguf"
"""A file that is all header, bigger than the first request: two requests."""
FAST = ReadConfig(retries=2, backoff_s=0.01)
HEADER_ONLY = AuditConfig(semantics=False, templates=False)


@pytest.fixture(params=["fsspec", "stdlib"])
def reader(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _audit(target: AuditTarget | str, reader: str, *, read: ReadConfig | None = None) -> FileAudit:
    config = HEADER_ONLY if read is None else replace(HEADER_ONLY, read=read)
    target = target if isinstance(target, AuditTarget) else AuditTarget(target)
    return audit_file(target, config=config, resources=AuditResources(stdlib_reads=reader == "stdlib"))


def _size(rel: str) -> int:
    return (corpus_dir() / rel).stat().st_size


def _local_header(rel: str) -> Header:
    data = (corpus_dir() / rel).read_bytes()
    header = parse_header(data, len(data))
    assert isinstance(header, Header)
    return header


def test_the_stdlib_reader_is_chosen_only_for_plain_urls_without_options() -> None:
    assert plain_protocol("http://h/m.gguf") == "http" and plain_protocol("https://h/m.gguf") == "https"
    assert plain_protocol("HTTPS://h/m.gguf") is None  # fsspec knows no such protocol: the usage error stays its
    assert plain_protocol("/models/m.gguf") == "file" and plain_protocol("m.gguf") == "file"
    assert plain_protocol("s3://b/m.gguf") is None and plain_protocol("hf://o/r/m.gguf") is None
    assert plain_protocol("file:///m.gguf") is None and plain_protocol("simplecache::http://h/m") is None
    assert isinstance(open_plain_source("http://127.0.0.1:1/m.gguf"), PlainHTTPSource)
    assert isinstance(open_plain_source("m.gguf"), LocalFileSource)
    assert open_plain_source("http://127.0.0.1:1/m.gguf", storage_options={"headers": {"a": "b"}}) is None
    assert open_plain_source("s3://b/m.gguf") is None


def test_a_small_header_costs_one_request(http: RangeHTTPServer, reader: str) -> None:
    audit = _audit(http.url_for(SMALL), reader)
    assert audit.findings == [] and audit.size == _size(SMALL)
    assert [(r.method, r.range) for r in http.requests] == [("GET", "bytes=0-524287")]
    assert audit.io.requests == 1 and http.bytes_sent == audit.io.bytes_read == 512 * 1024


def test_a_big_header_costs_two_requests_on_one_connection(http: RangeHTTPServer, reader: str) -> None:
    audit = _audit(http.url_for(BIG_HEADER), reader)
    header = _local_header(BIG_HEADER)
    assert audit.findings == [] and audit.header is not None
    assert [t.name for t in audit.header.tensors] == [t.name for t in header.tensors]
    assert [k.key for k in audit.header.kvs] == [k.key for k in header.kvs]
    assert len(http.requests) == 2 and audit.io.requests == 2
    assert audit.io.bytes_read == header.header_bytes == http.bytes_sent
    if reader == "stdlib":
        assert http.connections == 1  # kept alive between the two


def test_a_listed_size_is_used(http: RangeHTTPServer, reader: str) -> None:
    rel = "split/tiny-llama-Q4_K_M-00004-of-00004.gguf"
    audit = _audit(AuditTarget(http.url_for(rel), size=_size(rel)), reader)
    assert audit.findings == []
    assert http.requests[0].range == f"bytes=0-{_size(rel) - 1}"


def test_a_server_that_ignores_range_is_read_only_as_far_as_asked(http: RangeHTTPServer, reader: str) -> None:
    http.ignore_range = True
    rel = "models/tiny-llama-F32.gguf"
    audit = _audit(http.url_for(rel), reader)
    assert audit.findings == [] and audit.size == _size(rel)
    assert audit.io.bytes_read == 512 * 1024
    assert http.bytes_sent < _size(rel)  # the connection was dropped before the whole body went out


def test_a_server_that_ignores_range_past_the_limit_is_range_ignored(http: RangeHTTPServer, reader: str) -> None:
    http.ignore_range = True
    audit = _audit(http.url_for(SMALL), reader, read=replace(FAST, max_ignored_range_bytes=1000))
    assert [f.code for f in audit.findings] == ["io.range_ignored"]
    assert "max_ignored_range_bytes (1000)" in audit.findings[0].message
    assert audit.header is None


def test_transient_failures_are_retried(http: RangeHTTPServer, reader: str) -> None:
    http.fail_next = 2
    audit = _audit(http.url_for(SMALL), reader, read=FAST)
    assert audit.findings == []
    assert audit.io.requests == 3 and len(http.requests) == 3


def test_a_persistent_server_error_is_io_error_after_the_retries(http: RangeHTTPServer, reader: str) -> None:
    http.fail_next = 100
    audit = _audit(http.url_for(SMALL), reader, read=FAST)
    assert [f.code for f in audit.findings] == ["io.error"]
    assert "503" in audit.findings[0].message and "3 attempts" in audit.findings[0].message
    assert audit.io.requests == 3 and len(http.requests) == 3


def test_forbidden_is_permission_denied_without_a_retry(http: RangeHTTPServer, reader: str) -> None:
    http.fail_next, http.fail_status = 1, 403
    audit = _audit(http.url_for(SMALL), reader, read=FAST)
    assert [f.code for f in audit.findings] == ["io.permission_denied"]
    assert audit.io.requests == 1


def test_missing_is_not_found(http: RangeHTTPServer, reader: str) -> None:
    audit = _audit(http.url_for("nope.gguf"), reader, read=FAST)
    assert [f.code for f in audit.findings] == ["io.not_found"]
    assert audit.io.requests == 1


def test_a_body_cut_short_is_retried(http: RangeHTTPServer, reader: str) -> None:
    http.truncate_next = 1
    audit = _audit(http.url_for(SMALL), reader, read=FAST)
    assert audit.findings == [] and audit.size == _size(SMALL)
    assert audit.io.requests == 2 and audit.io.bytes_read == 512 * 1024


def test_bodies_always_cut_short_are_io_error(http: RangeHTTPServer, reader: str) -> None:
    http.truncate_next = 100
    audit = _audit(http.url_for(SMALL), reader, read=FAST)
    assert [f.code for f in audit.findings] == ["io.error"]
    assert "3 attempts" in audit.findings[0].message and audit.header is None


def test_a_slow_server_times_out(http: RangeHTTPServer, reader: str) -> None:
    http.latency_s = 1.0
    audit = _audit(http.url_for(SMALL), reader, read=ReadConfig(timeout_s=0.2, retries=1, backoff_s=0.01))
    assert [f.code for f in audit.findings] == ["io.timeout"]
    assert audit.io.requests == 2


def test_a_rate_limited_answer_waits_and_asks_again(http: RangeHTTPServer, reader: str) -> None:
    http.fail_next, http.fail_status = 1, 429
    audit = _audit(http.url_for(SMALL), reader, read=FAST)
    assert audit.findings == []
    assert audit.io.rate_limited == 1 and audit.io.requests == 2 and len(http.requests) == 2


def test_a_lying_total_that_persists_is_a_size_mismatch(http: RangeHTTPServer, reader: str) -> None:
    size = _size(SMALL)
    http.lying_total, http.lie_next = size - 1000, 100
    audit = _audit(AuditTarget(http.url_for(SMALL), size=size), reader, read=FAST)
    assert [f.code for f in audit.findings] == ["io.size_mismatch"]
    assert f"the listing says the file has {size} bytes, an answer says {size - 1000}" in audit.findings[0].message


def test_a_lying_first_answer_is_asked_again_before_a_truncation_verdict(http: RangeHTTPServer, reader: str) -> None:
    size = _size(SMALL)
    http.lying_total, http.lie_next = size // 2, 1
    audit = _audit(http.url_for(SMALL), reader, read=FAST)
    assert [f.code for f in audit.findings] == ["io.size_mismatch"]
    assert f"has {size // 2} bytes, an answer says {size}" in audit.findings[0].message


def test_no_content_length(http: RangeHTTPServer, reader: str) -> None:
    http.no_content_length = True
    try:
        audit = _audit(http.url_for(BIG_HEADER), reader)
    finally:
        http.no_content_length = False
    assert audit.findings == [] and audit.size == _size(BIG_HEADER)
    assert audit.io.bytes_read == _local_header(BIG_HEADER).header_bytes


@pytest.mark.parametrize(
    "rel", [SMALL, BIG_HEADER, "models/tiny-llama-Q4_K_M.gguf", "split/tiny-llama-Q4_K_M-00004-of-00004.gguf"]
)
def test_both_readers_give_the_same_audit(http: RangeHTTPServer, rel: str) -> None:
    """The whole audit (semantics and templates included), over HTTP and from the local file."""
    for target in (http.url_for(rel), str(corpus_dir() / rel)):
        fsspec_audit, stdlib_audit = (
            audit_file(target, config=AuditConfig(), resources=AuditResources(stdlib_reads=stdlib))
            for stdlib in (False, True)
        )
        assert stdlib_audit.findings == fsspec_audit.findings
        # The JSON report holds every key and value (arrays too), the tensors, the size and the requests made.
        assert dumps(audit_to_json(stdlib_audit, full_arrays=True)) == dumps(
            audit_to_json(fsspec_audit, full_arrays=True)
        )


def test_local_paths_name_the_same_file_as_fsspec(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    missing = [_audit(path, reader) for path in ("nope.gguf", "./nope.gguf") for reader in ("fsspec", "stdlib")]
    assert {f.code for a in missing for f in a.findings} == {"io.not_found"}
    assert missing[0].findings == missing[1].findings and missing[2].findings == missing[3].findings
    assert f"'{os.fspath(tmp_path)}/nope.gguf'" in missing[1].findings[0].message


def test_a_redirect_to_another_origin_is_followed_as_fsspec_follows_it() -> None:
    """A Hub resolve URL given as plain https: 302 to the blob on a CDN (another port, a presigned URL)."""
    data = (corpus_dir() / BIG_HEADER).read_bytes()
    with RangeHTTPServer() as cdn, LocalHub(cdn=cdn) as hub:
        hub.add_org("org")
        hub.create_repo("org/m")
        hub.add_files("org/m", {"m.gguf": data})
        url = hub.resolve_url("org/m", "m.gguf")
        audits: dict[str, FileAudit] = {}
        for reader in ("fsspec", "stdlib"):
            cdn.reset_stats()
            audits[reader] = _audit(url, reader)
            assert len(cdn.requests) == 2 and cdn.bytes_sent == len(data)  # both reads went on to the CDN
    assert audits["stdlib"].findings == audits["fsspec"].findings == []
    assert audits["stdlib"].size == audits["fsspec"].size == len(data)
    assert audits["stdlib"].io.requests == audits["fsspec"].io.requests == 2
    assert audits["stdlib"].io.bytes_read == audits["fsspec"].io.bytes_read == len(data)


def test_a_429_naming_its_reset_pauses_and_asks_again_as_fsspec_does() -> None:
    data = (corpus_dir() / SMALL).read_bytes()
    with LocalHub() as hub:
        hub.add_org("org")
        hub.create_repo("org/m")
        hub.add_files("org/m", {"m.gguf": data})
        url = hub.resolve_url("org/m", "m.gguf")
        audits: dict[str, FileAudit] = {}
        for reader in ("fsspec", "stdlib"):
            hub.fail_next_with_429(1, reset_s=1)
            audits[reader] = _audit(url, reader, read=FAST)
    for audit in audits.values():
        assert audit.findings == [] and audit.size == len(data)
        assert audit.io.rate_limited == 1 and audit.io.requests == 2
        assert audit.io.rate_limit_wait_s >= 0.9  # the reset the 429 named, waited for


@pytest.mark.parametrize(("user", "password"), [("alice", "hunter2"), ("al@ice", "p:ss wörd"), ("bob", "")])
def test_a_urls_credentials_are_sent_as_aiohttp_sends_them(user: str, password: str) -> None:
    """``http://user:password@host/...``: HTTP Basic auth, the parts percent-decoded and encoded as Latin-1, as
    aiohttp encodes a URL's credentials (``BasicAuth.from_url``)."""
    import aiohttp

    userinfo = f"{urllib.parse.quote(user, safe='')}:{urllib.parse.quote(password, safe='')}"
    assert _basic_auth(userinfo) == aiohttp.encode_basic_auth(user, password, encoding="latin1")
