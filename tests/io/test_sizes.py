"""Sizes that cannot lie: the listing, the first answer and every later Content-Range must agree.

A lying total (a stale proxy, a CDN bug) is played by the range server's
``lie_next`` knob. A disagreement is asked again; one that outlasts the
retries is ``io.size_mismatch`` naming both sizes, never ``data.truncated``.
"""

from __future__ import annotations

import json

import pytest
from corpus import corpus_dir

from gguf_audit.audit import AuditConfig, AuditTarget, audit_file
from gguf_audit.cli import main
from gguf_audit.findings import is_loadable
from gguf_audit.io.source import ReadConfig
from gguf_audit.plan import SampleConfig
from gguf_audit.testing.http import RangeHTTPServer

REL = "models/tiny-llama-Q8_0.gguf"
FAST = AuditConfig(read=ReadConfig(retries=2, backoff_s=0.01), semantics=False, templates=False)


def _size() -> int:
    return (corpus_dir() / REL).stat().st_size


def test_one_lie_against_the_listing_is_asked_again(http: RangeHTTPServer) -> None:
    size = _size()
    http.lying_total, http.lie_next = size // 2, 1
    audit = audit_file(AuditTarget(http.url_for(REL), size=size), config=FAST)
    assert [f.code for f in audit.findings] == []
    assert audit.size == size and audit.io.requests == 2  # the lying answer, then the honest retry


def test_a_lie_that_persists_is_a_size_mismatch_naming_both(http: RangeHTTPServer) -> None:
    size = _size()
    http.lying_total, http.lie_next = size - 1000, 100
    audit = audit_file(AuditTarget(http.url_for(REL), size=size), config=FAST)
    assert [f.code for f in audit.findings] == ["io.size_mismatch"]
    message = audit.findings[0].message
    assert f"the listing says the file has {size} bytes, an answer says {size - 1000}" in message
    assert is_loadable(audit.findings) is None  # unknown, not "refused as truncated"


def test_a_lying_first_answer_gives_no_truncation_verdict(http: RangeHTTPServer) -> None:
    """No listing: the first answer's total would make an intact file truncated; asking again shows the lie."""
    size = _size()
    http.lying_total, http.lie_next = size // 2, 1
    audit = audit_file(http.url_for(REL), config=FAST)
    codes = [f.code for f in audit.findings]
    assert codes == ["io.size_mismatch"], audit.findings
    assert f"has {size // 2} bytes, an answer says {size}" in audit.findings[0].message
    # The same file, told the truth, is clean: the lie alone made the difference.
    assert [f.code for f in audit_file(http.url_for(REL), config=FAST).findings] == []


def test_a_lying_first_answer_caught_by_a_sampled_read(http: RangeHTTPServer) -> None:
    """A total too big (trailing bytes, on the first answer's word) contradicted by the sampled reads."""
    size = _size()
    http.lying_total, http.lie_next = size + 4096, 1
    config = AuditConfig(read=FAST.read, semantics=False, templates=False, samples=SampleConfig())
    audit = audit_file(http.url_for(REL), config=config)
    codes = {f.code for f in audit.findings}
    assert "io.size_mismatch" in codes and not codes & {"data.trailing_bytes", "data.truncated"}
    assert str(size + 4096) in next(f.message for f in audit.findings if f.code == "io.size_mismatch")


def test_inspect_reports_the_mismatch_not_truncation(http: RangeHTTPServer, capsys: pytest.CaptureFixture[str]) -> None:
    size = _size()
    http.lying_total, http.lie_next = size // 3, 1
    status = main(["inspect", http.url_for(REL), "--json"])
    report = json.loads(capsys.readouterr().out)
    codes = [p["code"] for p in report["problems"]]
    assert status == 1 and codes == ["io.size_mismatch"], codes
    assert report["loadable"] is None
