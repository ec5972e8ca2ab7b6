"""A read sent ahead (``PlainHTTPSource.read_ahead``): the next read of that range takes it, at no extra request.

``inspect`` of a plain http(s) URL sends the header's first request before it
imports the audit; the file's audit then reads through that source.
"""

from __future__ import annotations

import json

import pytest
from corpus import corpus_dir

from gguf_audit.cli import main
from gguf_audit.errors import SourceError
from gguf_audit.io.plain import PlainHTTPSource
from gguf_audit.io.read_config import ReadConfig
from gguf_audit.testing.http import RangeHTTPServer

SMALL = "models/tiny-llama-Q8_0.gguf"
FAST = ReadConfig(retries=2, backoff_s=0.01)


def _bytes(rel: str, start: int, end: int) -> bytes:
    return (corpus_dir() / rel).read_bytes()[start:end]


def test_the_read_sent_ahead_is_the_next_read_of_its_range(http: RangeHTTPServer) -> None:
    http.latency_s = 0.2  # still in flight when the read asks for it
    source = PlainHTTPSource(url=http.url_for(SMALL), config=FAST)
    source.read_ahead(0, 4096)
    assert source.read(0, 4096) == _bytes(SMALL, 0, 4096)
    assert [r.range for r in http.requests] == ["bytes=0-4095"]
    assert source.stats.requests == 1 and source.stats.bytes_read == 4096


def test_a_read_of_another_range_waits_for_it_then_reads_its_own(http: RangeHTTPServer) -> None:
    source = PlainHTTPSource(url=http.url_for(SMALL), config=FAST)
    source.read_ahead(0, 100)
    assert source.read(0, 200) == _bytes(SMALL, 0, 200)
    assert source.read(0, 100) == _bytes(SMALL, 0, 100)  # taken once: asked again, it is read again
    assert [r.range for r in http.requests] == ["bytes=0-99", "bytes=0-199", "bytes=0-99"]
    assert source.stats.requests == 3


def test_what_the_read_ahead_raised_is_raised_by_the_read(http: RangeHTTPServer) -> None:
    http.fail_next, http.fail_status = 1, 403
    source = PlainHTTPSource(url=http.url_for(SMALL), config=FAST)
    source.read_ahead(0, 100)
    with pytest.raises(SourceError) as raised:
        source.read(0, 100)
    assert raised.value.code == "io.permission_denied"


def test_inspect_of_a_url_reads_its_header_in_the_request_sent_ahead(
    http: RangeHTTPServer, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", http.url_for(SMALL), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["io"] == {"requests": 1, "bytes_read": 512 * 1024}
    assert [r.range for r in http.requests] == ["bytes=0-524287"]
