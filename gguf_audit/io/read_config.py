"""How reads are made and what they cost: :class:`ReadConfig`, :class:`IOStats`, the :class:`ByteSource` protocol.

Re-exported by :mod:`gguf_audit.io.source`, where the sources that take and fill them live.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from gguf_audit.errors import SourceError
from gguf_audit.validate import check_int, check_number

__all__ = ["DEFAULT_READ_CONFIG", "ByteSource", "IOStats", "ReadConfig"]


@dataclass(frozen=True, slots=True)
class ReadConfig:
    """How reads are made. Every limit here bounds time or memory per file."""

    initial_bytes: int = 512 * 1024
    """First request of a header: one round trip covers small headers (later shards, projectors), and the
    parser's estimate sizes the second for the big tokenizer arrays. Chosen by ``benchmarks/bench_header.py``'s
    first-read table: the smallest first read after which every vocabulary there takes two requests (less
    leaves too few tokens to extrapolate the 152k and 256k ones from, and they take three)."""
    max_header_bytes: int = 512 * 1024 * 1024
    """A header claiming more is not read further (``header.too_large``)."""
    retries: int = 3
    """Attempts after the first, for transient failures only (header and sampled reads alike)."""
    backoff_s: float = 0.2
    """First retry delay; doubles each attempt."""
    timeout_s: float = 60.0
    """Per request, where the filesystem takes a timeout."""
    max_per_host: int = 8
    """Sampled-range requests in flight to one host at most, across every file
    the process reads (:class:`~gguf_audit.io.limits.HostLimits`). The S3
    connection pool is sized to match unless the storage options set
    ``max_pool_connections``."""
    max_per_s3_host: int = 64
    """The same cap for S3 (and S3-compatible) hosts, which serve thousands of requests a second per prefix:
    with a round trip of tens of milliseconds, a sampled file's GETs behind a few slots leave a process
    waiting on requests. ``benchmarks/bench_s3_cap.py`` measures the rate per cap (``benchmarks/README.md``)."""
    max_ignored_range_bytes: int = 64 << 20
    """A server that answers a Range request with 200 and the whole body is read
    from its start this far at most, and the asked bytes taken from that;
    asked bytes past it give ``io.range_ignored``."""
    max_rate_limit_wait_s: float = 330.0
    """Seconds a file may spend waiting for a host's rate limit to reset (429,
    ``RateLimit``/``Retry-After``), in all; past it the file gets ``io.rate_limited``.
    The Hub's windows are 5 minutes."""

    def __post_init__(self) -> None:
        for name in ("initial_bytes", "max_header_bytes", "max_per_host", "max_per_s3_host", "max_ignored_range_bytes"):
            check_int(f"ReadConfig.{name}", getattr(self, name), 1)
        check_int("ReadConfig.retries", self.retries, 0)
        check_number("ReadConfig.backoff_s", self.backoff_s, 0.0)
        check_number("ReadConfig.timeout_s", self.timeout_s, 0.0, above=True)
        check_number("ReadConfig.max_rate_limit_wait_s", self.max_rate_limit_wait_s, 0.0)


DEFAULT_READ_CONFIG = ReadConfig()


@dataclass(slots=True)
class IOStats:
    """What a file cost: requests made (retries included) and body bytes received."""

    requests: int = 0
    bytes_read: int = 0
    seconds: float = 0.0
    rate_limited: int = 0
    """Answers that said to wait (429s, and answers with no requests left in the window)."""
    rate_limit_wait_s: float = 0.0
    """Seconds spent waiting for a rate limit to reset."""
    resolve_requests: int | None = None
    """Hub files: requests to the Hub's ``/resolve/`` (each redirects to the CDN); None for other stores."""
    cdn_requests: int | None = None
    """Hub files: range requests sent to the CDN URL a resolve redirected to; None for other stores."""

    def add(self, nbytes: int, seconds: float) -> None:
        self.requests += 1
        self.bytes_read += nbytes
        self.seconds += seconds


class ByteSource(Protocol):
    """Something that serves byte ranges of one file."""

    url: str
    stats: IOStats

    @property
    def size(self) -> int | None: ...

    def read(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)``; fewer at the end of the file. Raises SourceError."""
        ...

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes | SourceError]:
        """Several ranges in one concurrent round; failures come back as values."""
        ...
