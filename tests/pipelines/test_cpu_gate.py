"""A worker's batch on the CPU gate: reads overlap, CPU work does not, slots come back when reads fail."""

from __future__ import annotations

from pathlib import Path

import pytest

from gguf_audit.audit import AuditConfig
from gguf_audit.pipelines.work.batches import make_batches
from gguf_audit.pipelines.work.execute import WORKER_POOLS, AuditPools, TaskOptions, audit_batch
from gguf_audit.plan import SampleConfig
from gguf_audit.tables.listed import ListedFile
from gguf_audit.testing.http import RangeHTTPServer

pytestmark = pytest.mark.slow  # worker pools under load: outside the fast loop


def _files(sample: dict[str, bytes], copies: int) -> dict[str, bytes]:
    names = [n for n in sorted(sample) if n.endswith(".gguf")]
    return {f"m/{i}-{n.replace('/', '-')}": sample[n] for i, n in enumerate(names * copies)}


def test_a_batch_on_one_slot_keeps_reads_overlapping(tmp_path: Path, sample: dict[str, bytes]) -> None:
    """Files on one CPU slot over a slow server: reads still overlap, CPU work never does, no deadlock."""
    files = _files(sample, 2)
    with RangeHTTPServer(files=files, latency_s=0.05) as srv:
        listed = [ListedFile(srv.url_for(k), size=len(v)) for k, v in files.items()]
        [batch] = make_batches(listed, {f.url: "m" for f in listed}, len(listed))
        options = TaskOptions("r1", {}, AuditConfig(samples=SampleConfig()), 8, out=str(tmp_path / "out"), cpu_slots=1)
        result = audit_batch(batch, options)
        in_flight = srv.max_in_flight
    assert sorted(result.urls) == sorted(f.url for f in listed)
    assert not result.failures and sum(result.tally.statuses.values()) == len(listed)
    assert in_flight > 1  # reads overlapped while one thread at a time did CPU work
    gate = WORKER_POOLS.gate(1)
    assert gate is not None and gate.stats.peak == 1 and gate.holding == 0
    assert gate.stats.acquired >= len(listed)


def test_failed_reads_give_their_slots_back(tmp_path: Path, sample: dict[str, bytes]) -> None:
    """Every read failing (503s past the retries): each file gets its io row, and no slot stays taken."""
    files = _files(sample, 1)
    with RangeHTTPServer(files=files, fail_next=10_000, fail_status=503) as srv:
        listed = [ListedFile(srv.url_for(k), size=len(v)) for k, v in files.items()]
        [batch] = make_batches(listed, {f.url: "m" for f in listed}, len(listed))
        options = TaskOptions("r1", {}, AuditConfig(), 4, out=str(tmp_path / "out"), cpu_slots=2)
        result = audit_batch(batch, options)
    assert result.tally.statuses == {"unreadable": len(listed)}
    assert any(code.startswith("io.") for code in result.tally.codes)
    gate = WORKER_POOLS.gate(2)
    assert gate is not None and gate.holding == 0 and gate.stats.peak <= 2


def test_pools_make_one_gate_per_slot_count() -> None:
    pools = AuditPools()
    assert pools.gate(0) is None
    first = pools.gate(3)
    assert first is not None and first is pools.gate(3) and first.slots == 3
    assert pools.gate(2) is not first
