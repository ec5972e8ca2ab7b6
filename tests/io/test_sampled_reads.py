"""Sampled reads against misbehaving servers: retried, checked, capped per host, never decoded from the wrong bytes."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator

import pytest
from corpus import corpus_dir

from gguf_audit.audit import AuditConfig, FileAudit, audit_file
from gguf_audit.io.header import read_header
from gguf_audit.io.limits import HostLimits, host_key
from gguf_audit.io.source import ReadConfig, open_source
from gguf_audit.plan import SampleConfig, plan_samples
from gguf_audit.samples import SampleRead, read_samples
from gguf_audit.testing.http import RangeHTTPServer
from gguf_audit.testing.layouts import LLAMA_70B_LIKE, SyntheticGGUF, llama_table
from gguf_audit.testing.s3 import MotoS3Server

REL = "models/tiny-llama-Q4_K_M.gguf"
FAST = ReadConfig(backoff_s=0.01)
SAMPLING = AuditConfig(read=FAST, samples=SampleConfig(), semantics=False, templates=False)


@pytest.fixture(scope="module")
def local() -> FileAudit:
    """The audit of the corpus file read from disk: what every server must give."""
    audit = audit_file(str(corpus_dir() / REL), config=SAMPLING)
    assert audit.fingerprint is not None and audit.samples
    return audit


def _sample_over(http: RangeHTTPServer, config: ReadConfig = FAST) -> tuple[SampleRead, int]:
    """Read the header, then let the test's knobs act on the sampled reads only; (result, requests made)."""
    source = open_source(http.url_for(REL), config=config)
    head = read_header(source)
    before = source.stats.requests
    plan = plan_samples(head.header, file_size=source.size)
    return read_samples(source, head.header, plan, held=head.buffer), source.stats.requests - before


def _same_as(result: SampleRead, local: FileAudit) -> None:
    assert result.findings == () and result.fingerprint == local.fingerprint
    assert list(result.rows) == local.samples


# --- retries --------------------------------------------------------------------------


def test_a_503_on_sample_requests_is_retried_and_the_samples_are_right(http: RangeHTTPServer, local: FileAudit) -> None:
    source = open_source(http.url_for(REL), config=FAST)
    head = read_header(source)
    plan = plan_samples(head.header, file_size=source.size)
    http.reset_stats()
    http.fail_next = 3
    result = read_samples(source, head.header, plan, held=head.buffer)
    _same_as(result, local)
    statuses_failed = 3
    assert len(http.requests) == len(result.fetched) + statuses_failed
    assert source.stats.requests == 1 + len(result.fetched) + statuses_failed


def test_persistent_503s_give_sample_unread_after_the_header_retries(http: RangeHTTPServer) -> None:
    config = ReadConfig(retries=2, backoff_s=0.01)
    source = open_source(http.url_for(REL), config=config)
    head = read_header(source)
    plan = plan_samples(head.header, file_size=source.size)
    http.fail_next = 1000
    result = read_samples(source, head.header, plan, held=head.buffer)
    (f,) = result.findings
    assert f.code == "data.sample_unread" and "io.error" in f.message and "after 3 attempts" in f.message
    # Only the blocks the header read already held were decoded.
    assert result.fingerprint is None and all(r.offset + r.n_bytes <= len(head.buffer) for r in result.rows)
    assert result.sampled_tensors < plan.n_tensors


def test_a_short_body_is_retried_then_reported_never_decoded(http: RangeHTTPServer, local: FileAudit) -> None:
    source = open_source(http.url_for(REL), config=FAST)
    head = read_header(source)
    plan = plan_samples(head.header, file_size=source.size)
    http.truncate_next = 2
    _same_as(read_samples(source, head.header, plan, held=head.buffer), local)
    assert http.truncate_next == 0
    # Every answer cut: the blocks are unread, and nothing wrong was decoded.
    http.truncate_next = 10_000
    result = read_samples(source, head.header, plan, held=head.buffer)
    assert [f.code for f in result.findings] == ["data.sample_unread"]
    assert result.fingerprint is None
    assert set(result.rows) <= set(local.samples)
    assert all(r.offset + r.n_bytes <= len(head.buffer) for r in result.rows)  # only what the header read held


# --- servers that ignore Range ------------------------------------------------------------


def test_a_server_ignoring_range_gives_the_right_samples_within_the_limit(
    http: RangeHTTPServer, local: FileAudit
) -> None:
    http.ignore_range = True
    audit = audit_file(http.url_for(REL), config=SAMPLING)
    assert audit.findings == [] and audit.fingerprint == local.fingerprint and audit.samples == local.samples
    # The header read, then one read from byte 0 to the last window's end.
    assert audit.io.requests == 2 and len(http.requests) == 2
    assert audit.sampled_strata == local.sampled_strata == 0xFFFF


def test_a_server_ignoring_range_past_the_limit_gives_range_ignored(http: RangeHTTPServer, local: FileAudit) -> None:
    http.ignore_range = True
    size = (corpus_dir() / REL).stat().st_size
    config = dataclasses.replace(SAMPLING, read=dataclasses.replace(FAST, max_ignored_range_bytes=size // 2))
    audit = audit_file(http.url_for(REL), config=config)
    assert [f.code for f in audit.findings] == ["io.range_ignored"]
    assert "max_ignored_range_bytes" in audit.findings[0].message
    # No statistics from the wrong bytes (only blocks the header read held are decoded),
    # no fingerprint, and no byte read past the limit.
    assert set(audit.samples) <= set(local.samples) and audit.fingerprint is None
    assert all(r.offset + r.n_bytes <= FAST.initial_bytes for r in audit.samples)
    assert audit.sampled_tensors is not None and audit.sampled_tensors < (local.sampled_tensors or 0)
    assert audit.io.bytes_read <= size // 2


def test_range_ignored_found_in_the_sample_round_is_sliced_right_or_refused(
    http: RangeHTTPServer, local: FileAudit
) -> None:
    # The header was served with ranges; the sampled reads meet a server that ignores them.
    source = open_source(http.url_for(REL), config=FAST)
    head = read_header(source)
    plan = plan_samples(head.header, file_size=source.size)
    http.ignore_range = True
    _same_as(read_samples(source, head.header, plan, held=head.buffer), local)
    source = open_source(http.url_for(REL), config=dataclasses.replace(FAST, max_ignored_range_bytes=600_000))
    http.ignore_range = False
    head = read_header(source)
    http.ignore_range = True
    result = read_samples(source, head.header, plan, held=head.buffer)
    assert {f.code for f in result.findings} == {"io.range_ignored"}
    assert result.fingerprint is None and set(result.rows) <= set(local.samples)


def test_a_header_past_the_limit_on_a_server_ignoring_range_is_range_ignored(http: RangeHTTPServer) -> None:
    http.ignore_range = True
    config = AuditConfig(read=dataclasses.replace(FAST, max_ignored_range_bytes=4096), semantics=False)
    audit = audit_file(http.url_for(REL), config=config)
    assert [f.code for f in audit.findings] == ["io.range_ignored"] and audit.header is None
    assert audit.io.bytes_read == 0


# --- the budget and the per-host cap on a 70B-like file -------------------------------------


@pytest.fixture(scope="module")
def big() -> Iterator[tuple[RangeHTTPServer, SyntheticGGUF]]:
    model = SyntheticGGUF(llama_table(*LLAMA_70B_LIKE))
    with RangeHTTPServer(latency_s=0.02) as server:
        server.put_virtual("70b.gguf", model.size, model.read)
        yield server, model


def test_a_70b_like_file_costs_one_header_round_and_32_sample_requests(
    big: tuple[RangeHTTPServer, SyntheticGGUF],
) -> None:
    server, model = big
    server.reset_stats()
    audit = audit_file(server.url_for("70b.gguf"), config=SAMPLING)
    assert audit.header is not None and audit.size == model.size > 40 * 10**9
    header_requests = 1 + (len(model.header) > FAST.initial_bytes)
    assert len(server.requests) == audit.io.requests <= header_requests + 32
    assert audit.sampled_strata == 0xFFFF and audit.findings == []
    types = {t.type_name for t in audit.header.tensors}
    assert {r.type for r in audit.samples} == types == {"F32", "Q4_K", "Q6_K"}
    last = max(audit.header.tensors, key=lambda t: t.end_offset)
    assert any(r.tensor == last.name and r.offset + r.n_bytes == last.end_offset for r in audit.samples)
    assert audit.sampled_tensors == len({r.tensor for r in audit.samples}) >= 48
    assert 1 < server.max_in_flight <= FAST.max_per_host


def test_the_per_host_cap_holds_across_files_read_at_once(big: tuple[RangeHTTPServer, SyntheticGGUF]) -> None:
    server, _ = big
    config = dataclasses.replace(FAST, max_per_host=3)
    sources = [open_source(server.url_for("70b.gguf"), config=config) for _ in range(4)]
    heads = [read_header(s) for s in sources]
    server.reset_stats()
    results: list[SampleRead] = []
    lock = threading.Lock()

    def sample(i: int) -> None:
        plan = plan_samples(heads[i].header, file_size=sources[i].size)
        result = read_samples(sources[i], heads[i].header, plan, held=heads[i].buffer)
        with lock:
            results.append(result)

    threads = [threading.Thread(target=sample, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4 and all(r.findings == () for r in results)
    assert len(server.requests) == sum(len(r.fetched) for r in results) > 3 * 4
    assert 1 < server.max_in_flight <= 3


def test_host_limits_give_one_semaphore_per_host_and_limit(http: RangeHTTPServer) -> None:
    import asyncio

    limits = HostLimits()

    async def slots() -> tuple[object, ...]:
        return (
            limits.slot("http://a", 8),
            limits.slot("http://a", 8),
            limits.slot("http://b", 8),
            limits.slot("http://a", 2),
        )

    a, same, other, smaller = asyncio.run(slots())
    assert a is same and a is not other and a is not smaller
    source = open_source(http.url_for(REL))
    assert host_key(source.url, source.fs) == http.base_url
    assert host_key("s3://bucket/key", None) == "s3:aws"


# --- S3 ---------------------------------------------------------------------------------


def test_the_s3_pool_matches_the_per_host_cap_unless_set(s3_corpus: MotoS3Server, local: FileAudit) -> None:
    options = s3_corpus.storage_options()
    source = open_source(
        f"s3://corpus/{REL}", storage_options=options, config=dataclasses.replace(FAST, max_per_s3_host=5)
    )
    assert source.fs.config_kwargs["max_pool_connections"] == 5  # type: ignore[attr-defined]
    mine = {**options, "config_kwargs": {**options.get("config_kwargs", {}), "max_pool_connections": 3}}
    assert open_source(f"s3://corpus/{REL}", storage_options=mine).fs.config_kwargs["max_pool_connections"] == 3  # type: ignore[attr-defined]
    head = read_header(source)
    result = read_samples(source, head.header, plan_samples(head.header, file_size=source.size), held=head.buffer)
    _same_as(result, local)
