"""bench_header.py's HTTP part: audits of generated headers over the loopback range server, requests and bytes.

Each header is audited with its size listed and unlisted, at each added latency; a
run's requests, the ranges asked and the bytes the server sent are recorded against
the header's own size (the peer figure: bytes read over header bytes).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from headers import GeneratedFile

__all__ = ["LATENCIES_S", "HTTPCase", "measure_http"]

LATENCIES_S = (0.0, 0.05)


@dataclass
class HTTPCase:
    label: str
    latency_ms: float
    size_listed: bool
    requests: int
    """The most any run made (they all make the same, unless a retry happened)."""
    request_counts: list[int]
    ranges: list[str | None]
    bytes_sent: int
    bytes_read: int
    header_bytes: int
    runs_s: list[float]
    status: str
    findings: list[str]

    @property
    def bytes_ratio(self) -> float:
        return self.bytes_sent / self.header_bytes


def measure_http(files: Sequence[GeneratedFile], root: Path, repeats: int) -> list[HTTPCase]:
    # Imported here: fsspec and aiohttp would grow the memory children's
    # import footprint (they import this module) for nothing.
    from gguf_audit.audit import AuditConfig, AuditTarget, audit_file
    from gguf_audit.testing.http import RangeHTTPServer

    cases: list[HTTPCase] = []
    with RangeHTTPServer(root=root) as server:
        # The first audit opens fsspec's HTTP filesystem and its session: not counted.
        audit_file(AuditTarget(server.url_for(files[0].path.name), size=files[0].file_size), config=AuditConfig())
        for latency_s in LATENCIES_S:
            server.latency_s = latency_s
            for g in files:
                url = server.url_for(g.path.name)
                for size_listed in (True, False):
                    runs: list[float] = []
                    counts: list[int] = []
                    for _ in range(repeats):
                        server.reset_stats()
                        begun = time.perf_counter()
                        result = audit_file(
                            AuditTarget(url, size=g.file_size if size_listed else None), config=AuditConfig()
                        )
                        runs.append(time.perf_counter() - begun)
                        counts.append(len(server.requests))
                    requests = server.requests  # the last run's; counts has every run's
                    cases.append(
                        HTTPCase(
                            label=g.label,
                            latency_ms=latency_s * 1000,
                            size_listed=size_listed,
                            requests=max(counts),
                            request_counts=counts,
                            ranges=[r.range for r in requests],
                            bytes_sent=server.bytes_sent,
                            bytes_read=result.io.bytes_read,
                            header_bytes=g.header_bytes,
                            runs_s=runs,
                            status=str(result.status),
                            findings=sorted({f.code for f in result.findings}),
                        )
                    )
        server.latency_s = 0.0
    return cases
