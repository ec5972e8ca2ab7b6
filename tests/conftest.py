from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import settings

# Tests import their shared helpers (tests/corpus.py) as top-level modules.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from corpus import S3_FILES, corpus_dir

from gguf_audit.testing.http import RangeHTTPServer
from gguf_audit.testing.s3 import MotoS3Server

# Property tests assert what holds, never how fast: a 2-core machine shared with a
# dask cluster makes one example slow now and then, which is not a failure.
settings.register_profile("gguf-audit", deadline=None)
settings.load_profile("gguf-audit")


_ARROW_POOLS: list[pa.MemoryPool] = []
"""Every pool a test counted Arrow's allocations on, kept for the session: a buffer may outlive its test (a
reader's cache, a scan's thread) and must find its pool when freed."""


@pytest.fixture
def counting_pool() -> Iterator[Callable[[], pa.MemoryPool]]:
    """A function that makes Arrow allocate on a new pool remembering its peak (``max_memory``) and returns it;
    the default pool comes back after the test."""
    previous = pa.default_memory_pool()

    def start() -> pa.MemoryPool:
        pool = pa.proxy_memory_pool(pa.system_memory_pool())
        _ARROW_POOLS.append(pool)
        pa.set_memory_pool(pool)
        return pool

    try:
        yield start
    finally:
        pa.set_memory_pool(previous)


@pytest.fixture(scope="session")
def http_corpus() -> Iterator[RangeHTTPServer]:
    """The corpus served over HTTP with Range support, on 127.0.0.1."""
    with RangeHTTPServer(root=corpus_dir()) as server:
        yield server


@pytest.fixture
def http(http_corpus: RangeHTTPServer) -> Iterator[RangeHTTPServer]:
    """The corpus server with clean accounting and default behaviour."""
    http_corpus.reset_stats()
    yield http_corpus
    http_corpus.ignore_range = False
    http_corpus.latency_s = 0.0
    http_corpus.fail_next = 0
    http_corpus.fail_status = 503
    http_corpus.truncate_next = 0
    http_corpus.lie_next = 0


@pytest.fixture(scope="session")
def s3_corpus() -> Iterator[MotoS3Server]:
    """moto's S3 on 127.0.0.1 with a bucket 'corpus' holding a few corpus files."""
    with MotoS3Server() as server:
        server.make_bucket("corpus")
        for rel in S3_FILES:
            server.put("corpus", rel, (corpus_dir() / rel).read_bytes())
        yield server


# The markers a test's fixtures imply, so that the fast loop (README: -m "not slow and not cluster ...") leaves
# out every test that starts a cluster, an S3 server or a night of scans, whether or not its author marked it.
_IMPLIED_BY_FIXTURE: dict[str, tuple[str, ...]] = {
    "dask_client": ("cluster", "slow"),
    "client": ("cluster", "slow"),
    "report_nights": ("cluster", "slow"),
    "moto": ("slow",),
    "bucket": ("slow",),
    "s3_corpus": ("slow",),
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        fixtures = set(getattr(item, "fixturenames", ()))
        for name in sorted({m for f, marks in _IMPLIED_BY_FIXTURE.items() if f in fixtures for m in marks}):
            if item.get_closest_marker(name) is None:
                item.add_marker(name)
