"""hf:// reads through the Hub's resolve URLs, against LocalHub: pinned, exact, concurrent, authorised, rate-limited."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from corpus import corpus_dir

from gguf_audit.audit import AuditConfig, AuditTarget, audit_file
from gguf_audit.cli import main
from gguf_audit.io.hub import HubURL, hub_token, parse_hf_url
from gguf_audit.io.limits import parse_rate_limit
from gguf_audit.io.source import ReadConfig
from gguf_audit.plan import SampleConfig
from gguf_audit.testing.http import RangeHTTPServer
from gguf_audit.testing.hub import LocalHub

SAMPLED = AuditConfig(samples=SampleConfig())
# configs/hf-mirror.toml's first read: these files' headers are ~46 KB, so 512 KiB would read ten times the header.
HUB_SAMPLED = AuditConfig(read=ReadConfig(initial_bytes=64 * 1024), samples=SampleConfig())
HEADER_ONLY = AuditConfig()


def _model(name: str) -> bytes:
    return (corpus_dir() / "models" / name).read_bytes()


def _file_type(audit_header: object) -> object:
    return audit_header.get("general.file_type")  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("hf://org", HubURL("org", None, None, "")),
        ("hf://org/", HubURL("org", None, None, "")),
        ("hf://org/repo", HubURL("org", "repo", None, "")),
        ("hf://models/org/repo/a/b.gguf", HubURL("org", "repo", None, "a/b.gguf")),
        ("hf://org/repo@refs%2Fpr%2F1/m.gguf", HubURL("org", "repo", "refs/pr/1", "m.gguf")),
    ],
)
def test_parse_hf_url(url: str, expected: HubURL) -> None:
    assert parse_hf_url(url) == expected


@pytest.mark.parametrize("url", ["hf://", "hf://datasets/org/d", "hf://org/@main", "s3://org/repo"])
def test_parse_hf_url_refuses(url: str) -> None:
    with pytest.raises(ValueError):
        parse_hf_url(url)


def test_url_for_keeps_the_revision_as_written() -> None:
    assert parse_hf_url("hf://o/r@refs%2Fpr%2F1").url_for("m.gguf") == "hf://o/r@refs%2Fpr%2F1/m.gguf"


def test_token_never_from_options(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_TOKEN", "from-env")
    assert hub_token({}) == "from-env"
    assert hub_token({"token": False}) is None
    with pytest.raises(PermissionError, match="HF_TOKEN"):
        hub_token({"token": "hf_secret"})


def test_parse_rate_limit() -> None:
    assert parse_rate_limit({"RateLimit": '"resolvers";r=0;t=12'}) == (0, 12.0)
    assert parse_rate_limit({"RateLimit": '"api";r=41;t=3'}) == (41, 3.0)
    assert parse_rate_limit({"Retry-After": "7"}) == (None, 7.0)
    assert parse_rate_limit({"RateLimit": "garbage", "Retry-After": "soon"}) == (None, None)
    policy = '"fixed window";"resolvers";q=5000;w=300'
    assert parse_rate_limit({"RateLimit": '"resolvers";r=0', "RateLimit-Policy": policy}) == (0, 300.0)
    assert parse_rate_limit({"RateLimit": '"resolvers";r=7', "RateLimit-Policy": policy}) == (7, None)


def test_pinned_revision_reads_exactly_the_asked_bytes() -> None:
    with LocalHub() as hub:
        hub.add_org("org")
        hub.create_repo("org/m")
        first = hub.add_files("org/m", {"m.gguf": _model("tiny-llama-Q8_0.gguf")})
        hub.add_files("org/m", {"m.gguf": _model("tiny-llama-Q4_0.gguf")})  # main moves on
        hub.reset_stats()
        size = hub.file("org/m", "m.gguf", first).size
        audit = audit_file(
            AuditTarget(
                "hf://org/m/m.gguf",
                storage_options={"endpoint": hub.endpoint, "token": False},
                size=size,
                revision=first,
            ),
            config=HUB_SAMPLED,
        )
        assert audit.header is not None and _file_type(audit.header) == 7  # Q8_0, not main's Q4_0
        assert audit.url == "hf://org/m/m.gguf"
        paths = {r.path for r in hub.requests}
        assert paths == {f"/org/m/resolve/{first}/m.gguf"}
        # Exactly the asked bytes were served: no read-ahead, every request counted.
        assert hub.resolve_bytes_sent == audit.io.bytes_read
        assert hub.resolve_requests == audit.io.requests
        sampled = sum(r.n_bytes for r in audit.samples)
        # The header costs its first request at least (64 KiB here), then what the parser asks for.
        header = max(audit.header.header_bytes, 64 * 1024)
        assert audit.io.bytes_read <= 1.1 * (header + sampled)


def test_token_from_the_environment_reads_a_private_repository(monkeypatch: pytest.MonkeyPatch) -> None:
    with LocalHub() as hub:
        hub.add_user("alice", token="alice-token")
        hub.create_repo("alice/secret", private=True)
        sha = hub.add_files("alice/secret", {"m.gguf": _model("tiny-llama-Q4_0.gguf")})
        options = {"endpoint": hub.endpoint}
        monkeypatch.delenv("HF_TOKEN", raising=False)
        monkeypatch.setenv("HF_HOME", str(Path("/nonexistent-hf-home")))
        anonymous = audit_file(
            AuditTarget("hf://alice/secret/m.gguf", storage_options=options, revision=sha), config=AuditConfig()
        )
        assert [f.code for f in anonymous.findings] == ["io.permission_denied"]
        monkeypatch.setenv("HF_TOKEN", "alice-token")
        audit = audit_file(
            AuditTarget("hf://alice/secret/m.gguf", storage_options=options, revision=sha), config=AuditConfig()
        )
        assert audit.header is not None and audit.status != "unreadable"
        assert "alice-token" not in repr(audit)


def test_a_missing_file_or_repository_is_a_finding() -> None:
    with LocalHub() as hub:
        hub.add_org("org")
        hub.create_repo("org/m")
        options = {"endpoint": hub.endpoint, "token": False}
        missing = audit_file(AuditTarget("hf://org/m/absent.gguf", storage_options=options), config=AuditConfig())
        gone = audit_file(AuditTarget("hf://org/gone/m.gguf", storage_options=options), config=AuditConfig())
        assert [f.code for f in missing.findings] == ["io.not_found"]
        assert [f.code for f in gone.findings] == ["io.permission_denied"]  # the Hub's 401 to an anonymous caller
        # Not a file URL, or not a model repository: rows with a code, never internal.unexpected.
        for url in ("hf://org/m", "hf://datasets/org/d/x.gguf"):
            assert [
                f.code for f in audit_file(AuditTarget(url, storage_options=options), config=AuditConfig()).findings
            ] == ["io.not_found"]


def test_a_429_is_waited_out_and_counted() -> None:
    with LocalHub() as hub:
        hub.add_org("org")
        hub.create_repo("org/m")
        sha = hub.add_files("org/m", {"m.gguf": _model("tiny-llama-Q4_0.gguf")})
        hub.fail_next_with_429(2, reset_s=1, resource="resolvers")
        audit = audit_file(
            AuditTarget("hf://org/m/m.gguf", storage_options={"endpoint": hub.endpoint, "token": False}, revision=sha),
            config=AuditConfig(),
        )
        assert audit.header is not None and not any(f.code.startswith("io.") for f in audit.findings)
        assert audit.io.rate_limited == 2
        assert audit.io.rate_limit_wait_s > 0.5
        assert audit.io.requests == hub.resolve_requests


def test_a_rate_limit_past_the_budget_is_a_warning_row() -> None:
    with LocalHub() as hub:
        hub.add_org("org")
        hub.create_repo("org/m")
        sha = hub.add_files("org/m", {"m.gguf": _model("tiny-llama-Q4_0.gguf")})
        hub.fail_next_with_429(1, reset_s=30, resource="resolvers")
        config = AuditConfig(read=ReadConfig(max_rate_limit_wait_s=1.0))
        audit = audit_file(
            AuditTarget("hf://org/m/m.gguf", storage_options={"endpoint": hub.endpoint, "token": False}, revision=sha),
            config=config,
        )
        assert [(f.code, str(f.severity)) for f in audit.findings] == [("io.rate_limited", "warning")]
        assert audit.io.rate_limited == 1 and hub.resolve_requests == 1


def test_lfs_redirect_to_a_cdn_keeps_the_range() -> None:
    with RangeHTTPServer() as cdn, LocalHub(cdn=cdn) as hub:
        hub.add_org("org")
        hub.create_repo("org/m")
        sha = hub.add_files("org/m", {"m.gguf": _model("tiny-llama-Q4_K_M.gguf")})
        hub.reset_stats()
        audit = audit_file(
            AuditTarget("hf://org/m/m.gguf", storage_options={"endpoint": hub.endpoint, "token": False}, revision=sha),
            config=SAMPLED,
        )
        assert audit.header is not None and audit.samples
        assert not any(f.code.startswith("io.") for f in audit.findings)
        assert hub.resolve_bytes_sent == 0  # the Hub only redirected
        # One resolve for the file; every range, the header's and the samples', from the CDN URL it gave.
        assert hub.resolve_requests == audit.io.resolve_requests == 1
        assert len(cdn.requests) == audit.io.cdn_requests > 1
        assert audit.io.requests == hub.resolve_requests + len(cdn.requests)
        assert all(r.range is not None and r.range.startswith("bytes=") for r in cdn.requests)
        assert all("Signature=" in r.path for r in cdn.requests)
        assert cdn.bytes_sent == audit.io.bytes_read


def test_an_expired_or_refused_cdn_url_is_resolved_again() -> None:
    from gguf_audit.io.hub_source import CDN_URLS
    from gguf_audit.io.source import open_source

    with RangeHTTPServer() as cdn, LocalHub(cdn=cdn) as hub:
        hub.add_org("org")
        hub.create_repo("org/m")
        sha = hub.add_files("org/m", {"m.gguf": _model("tiny-llama-Q4_K_M.gguf")})
        options = {"endpoint": hub.endpoint, "token": False}
        source = open_source("hf://org/m/m.gguf", storage_options=options, revision=sha)
        assert len(source.read(0, 64)) == 64 and len(source.read(64, 128)) == 64
        assert (source.stats.resolve_requests, source.stats.cdn_requests) == (1, 2)
        # Past its Expires (as the URL says; the process's copy too): resolved before the next range, no 403 asked for.
        CDN_URLS.drop(source.url, source.cdn_url)  # type: ignore[attr-defined]
        source.cdn_expires = 0.0  # type: ignore[attr-defined]
        assert len(source.read(128, 192)) == 64
        assert (source.stats.resolve_requests, source.stats.cdn_requests) == (2, 3)
        # The CDN's key rotated: its 403 costs one request, then one resolve, and the range is read.
        hub.presigner.rotate()
        cdn.reset_stats()
        assert len(source.read(192, 256)) == 64
        assert (source.stats.resolve_requests, source.stats.cdn_requests) == (3, 5)
        assert [r.range for r in cdn.requests] == ["bytes=192-255", "bytes=192-255"]
        assert source.stats.requests == 3 + 5
        # A CDN that refuses even a URL just resolved: io.permission_denied, not a loop.
        hub.presigner.ttl_s = -10.0
        hub.presigner.rotate()  # the URL this process keeps for the file is refused too
        audit = audit_file(
            AuditTarget("hf://org/m/m.gguf", storage_options={"endpoint": hub.endpoint, "token": False}, revision=sha),
            config=AuditConfig(),
        )
        assert [f.code for f in audit.findings] == ["io.permission_denied"]


def test_no_requests_left_pauses_before_the_next_request() -> None:
    """``RateLimit: ...;r=0;t=S`` on an answer holds the next request back: no 429 is ever answered."""
    with LocalHub() as hub:
        hub.add_org("org")
        hub.create_repo("org/m")
        data = {f"m{i}.gguf": _model("tiny-llama-Q4_0.gguf") for i in range(4)}
        sha = hub.add_files("org/m", data)
        hub.rate_limit(2, window_s=1)
        options = {"endpoint": hub.endpoint, "token": False}
        audits = [
            audit_file(
                AuditTarget(f"hf://org/m/{name}", storage_options=options, size=len(d), revision=sha),
                config=HEADER_ONLY,
            )
            for name, d in data.items()
        ]
        assert all(a.header is not None for a in audits)
        assert sum(a.io.rate_limited for a in audits) >= 1
        assert sum(a.io.rate_limit_wait_s for a in audits) > 0
        # One request per file: none was answered 429 and asked again.
        assert hub.resolve_requests == len(data) == sum(a.io.requests for a in audits)


def test_inspect_an_hf_file(capsys: pytest.CaptureFixture[str]) -> None:
    with LocalHub() as hub:
        hub.add_org("org")
        hub.create_repo("org/m")
        hub.add_files("org/m", {"m.gguf": _model("tiny-llama-Q4_0.gguf")})
        options = json.dumps({"endpoint": hub.endpoint, "token": False})
        assert main(["inspect", "hf://org/m@main/m.gguf", "--storage-options", options, "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert report["url"] == "hf://org/m@main/m.gguf" and report["status"] in ("ok", "warning")
        secret = json.dumps({"endpoint": hub.endpoint, "token": "hf_secret"})
        assert main(["inspect", "hf://org/m/m.gguf", "--storage-options", secret]) == 2
        assert "hf_secret" not in capsys.readouterr().err


def test_without_a_cdn_a_files_ranges_go_out_together() -> None:
    """A Hub whose resolve serves the bytes itself (no redirect): the sampled ranges of one file are in flight
    at once, as they are from a CDN, not one after another behind the file's resolve lock."""
    with LocalHub() as hub:
        hub.add_org("org")
        hub.create_repo("org/m")
        sha = hub.add_files("org/m", {"m.gguf": _model("tiny-llama-Q4_K_M.gguf")})
        hub.latency_s = 0.1  # every range still waiting when the next is sent
        hub.reset_stats()
        audit = audit_file(
            AuditTarget("hf://org/m/m.gguf", storage_options={"endpoint": hub.endpoint, "token": False}, revision=sha),
            config=HUB_SAMPLED,
        )
        assert audit.header is not None and len(audit.samples) > 2
        assert not any(f.code.startswith("io.") for f in audit.findings)
        assert hub.resolve_requests == audit.io.resolve_requests == audit.io.requests > 2
        assert hub.resolve_bytes_sent == audit.io.bytes_read
        assert hub.max_in_flight > 2
