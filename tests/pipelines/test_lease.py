"""The output's lease: one writer at a time, on a local disk and on moto's S3, without a scan.

Writers here are :func:`acquire_lease` calls and :class:`Output` commits; the
scans and vacuums that take the lease for real are in ``test_writers.py``.
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pipeline_helpers import file_row, s3_options

from gguf_audit.pipelines.store.lease import LEASE_DIR, LeaseHeld, LeaseLost, process_space, read_lease
from gguf_audit.pipelines.store.output import NightLost, Output
from gguf_audit.pipelines.store.parts import PartFile, RunParts
from gguf_audit.tables.schema import SCHEMAS, rows_to_table
from gguf_audit.testing.s3 import MotoS3Server

pytestmark = pytest.mark.slow  # writers in subprocesses, leases expiring: outside the fast loop


@pytest.fixture(params=["local", "s3"])
def out_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, dict[str, object]]]:
    """An empty output on a local disk, or in a fresh moto bucket (with its storage options)."""
    if request.param == "local":
        yield str(tmp_path / "out"), {}
        return
    moto: MotoS3Server = request.getfixturevalue("moto")
    bucket = f"lease-{uuid.uuid4().hex[:10]}"
    moto.make_bucket(bucket)
    yield f"s3://{bucket}/out", s3_options(moto)


def _output(out_url: tuple[str, dict[str, object]]) -> Output:
    out = Output(out_url[0], out_url[1])
    out.preflight()
    return out


def _stale(out: Output, generation: int, **fields: object) -> None:
    """Write a lease generation by hand, as a writer elsewhere left it."""
    now = datetime.now(UTC)
    state = {
        "owner": "elsewhere", "host": "build-7", "pid": 4242, "purpose": "scan r0", "since": now.isoformat(),
        "heartbeat": now.isoformat(), "expiry_s": 60.0, "released": False, **fields,
    }  # fmt: skip
    if out.local:
        out.fs.makedirs(out.path(LEASE_DIR), exist_ok=True)
    out.fs.pipe_file(out.path(LEASE_DIR, f"{generation:020d}.json"), json.dumps(state).encode())


def test_a_second_writer_is_refused_with_one_line_naming_the_holder(out_url: tuple[str, dict[str, object]]) -> None:
    first, second = _output(out_url), _output(out_url)
    lease = first.acquire("scan r1", expiry_s=30)
    with pytest.raises(LeaseHeld) as held:
        second.acquire("vacuum")
    message = str(held.value)
    assert "\n" not in message
    assert f"is being written by scan r1 (host {socket.gethostname()}, pid {lease.state.pid}, since " in message
    assert "--lease-wait SECONDS" in message and "when its lease expires" in message
    first.release()
    assert read_lease(first.fs, first.root, local=first.local).released  # type: ignore[union-attr]
    taken = second.acquire("vacuum")
    assert taken.state.generation == 2 and taken.taken_over is None  # a released lease is free, not expired
    second.release()
    gens = sorted(p.rsplit("/", 1)[-1] for p in second.fs.ls(second.path(LEASE_DIR), detail=False))
    assert gens == ["00000000000000000002.json"]  # release clears the generations below its own


def test_writers_racing_for_a_free_lease_get_exactly_one(out_url: tuple[str, dict[str, object]]) -> None:
    outs = [_output(out_url) for _ in range(6)]
    start = threading.Barrier(len(outs))
    won: list[int] = []
    refused: list[int] = []

    def race(i: int) -> None:
        start.wait()
        try:
            outs[i].acquire(f"scan r{i}", expiry_s=30)
            won.append(i)
        except LeaseHeld:
            refused.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(len(outs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(won) == 1 and len(refused) == len(outs) - 1
    state = read_lease(outs[0].fs, outs[0].root, local=outs[0].local)
    assert state is not None and state.purpose == f"scan r{won[0]}" and state.generation == 1
    outs[won[0]].release()


def test_a_waiting_writer_gets_the_lease_when_the_holder_releases(tmp_path: Path) -> None:
    holder, waiter = _output((str(tmp_path / "out"), {})), _output((str(tmp_path / "out"), {}))
    holder.acquire("scan r1", expiry_s=30)
    threading.Timer(0.5, holder.release).start()
    begun = time.monotonic()
    lease = waiter.acquire("scan r2", wait_s=20)
    assert 0.4 < time.monotonic() - begun < 10 and lease.taken_over is None
    waiter.release()
    holder.acquire("scan r3", expiry_s=30)
    with pytest.raises(LeaseHeld):
        waiter.acquire("scan r4", wait_s=0.3)  # waits, then refuses
    holder.release()


def test_heartbeats_keep_a_lease_alive_past_its_expiry(tmp_path: Path) -> None:
    holder, other = _output((str(tmp_path / "out"), {})), _output((str(tmp_path / "out"), {}))
    lease = holder.acquire("scan r1", expiry_s=0.4)
    first_beat = lease.state.heartbeat
    time.sleep(1.2)  # three expiries: only heartbeats keep it
    with pytest.raises(LeaseHeld):
        other.acquire("vacuum")
    state = read_lease(holder.fs, holder.root, local=True)
    assert state is not None and state.heartbeat > first_beat + timedelta(seconds=0.5)
    lease.check()
    holder.release()


def test_an_expired_lease_is_taken_over_and_its_holder_learns_it_lost(out_url: tuple[str, dict[str, object]]) -> None:
    out = _output(out_url)
    _stale(out, 1, heartbeat=(datetime.now(UTC) - timedelta(seconds=61)).isoformat())
    lease = out.acquire("scan r2")
    assert lease.taken_over is not None and lease.taken_over.purpose == "scan r0" and lease.state.generation == 2
    # The other way round: this writer's lease taken by one that found it expired.
    _stale(out, 3)
    with pytest.raises(LeaseLost, match=r"lease on the output expired .* scan r0 \(host build-7, pid 4242"):
        lease.check()
    out.release()  # a lost lease is left to its new holder
    state = read_lease(out.fs, out.root, local=out.local)
    assert state is not None and state.generation == 3 and not state.released


def test_a_dead_holder_on_this_host_frees_the_lease_at_once(tmp_path: Path) -> None:
    out = _output((str(tmp_path / "out"), {}))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    here = {"host": socket.gethostname(), "space": process_space()}
    _stale(out, 1, **here, pid=int(gone.stdout))  # a fresh heartbeat, a dead pid
    assert out.acquire("scan r2").taken_over is not None
    out.release()
    # The same host name in another pid namespace (a container): its pid cannot be looked up here.
    _stale(out, 3, host=socket.gethostname(), space="other-container", pid=int(gone.stdout))
    with pytest.raises(LeaseHeld):
        out.acquire("scan r3")
    _stale(out, 4, host="build-7", pid=int(gone.stdout))  # on another host the pid means nothing here
    with pytest.raises(LeaseHeld, match="host build-7"):
        out.acquire("scan r4")


def _write(out: Output, run_id: str, table: str, rows: list[dict[str, object]]) -> PartFile:
    parts = RunParts(out.url, out.fsspec_options, run_id, "t", (table,))
    parts.write(table, rows_to_table(table, rows))
    [part] = parts.close()
    return part


def _runs_part(out: Output, run_id: str) -> PartFile:
    now = datetime.now(UTC)
    row = {
        "schema_version": 1, "tool_version": "t", "status": "committed", "started_at": now, "finished_at": now,
        "incremental": False, **{k: 0 for k in SCHEMAS["runs"].names if k.startswith("n_")},
        "requests": 0, "bytes_read": 0, "collection_bytes": 0, "listing_seconds": 0.0, "seconds": 0.0,
        "files_per_second": 0.0,
    }  # fmt: skip
    return _write(out, run_id, "runs", [row])


def test_a_commit_whose_rows_were_rolled_back_records_nothing(out_url: tuple[str, dict[str, object]]) -> None:
    """The bug of issue 22: another writer rolls a live night back mid-commit; the commit must not record it."""
    out, intruder = _output(out_url), _output(out_url)
    parts = {
        "files": [_write(out, "r1", "files", [file_row("a", "r1"), file_row("b", "r1")])],
        "problems": [],
    }

    def roll_back_under_it(table: str, version: int) -> None:
        if table == "files":  # what recover() did to a live run before the lease
            intruder.roll_back("r1")

    with pytest.raises(NightLost, match=r"run r1's rows are gone from files \(1 of 1 data files\)"):
        out.commit("r1", parts, lambda v: _runs_part(out, "r1"), on_committed=roll_back_under_it)
    assert out.committed_runs().num_rows == 0  # no night without its rows
    assert out.read("files", ["r1"]).num_rows == 0 and out.pending() == []


def test_a_commit_after_its_lease_was_lost_records_nothing(tmp_path: Path) -> None:
    out = _output((str(tmp_path / "out"), {}))
    out.acquire("scan r1", expiry_s=30)
    parts = {"files": [_write(out, "r1", "files", [file_row("a", "r1")])]}

    def taken_mid_commit(table: str, version: int) -> None:
        if table == "files":
            _stale(out, 2)  # another writer found this lease expired and took it

    with pytest.raises(LeaseLost, match="nothing was recorded"):
        out.commit("r1", parts, lambda v: _runs_part(out, "r1"), on_committed=taken_mid_commit)
    assert out.committed_runs().num_rows == 0
    assert out.read("files", ["r1"]).num_rows == 0  # its own partitions undone
    out.release()


def test_the_create_is_exclusive_on_the_store_itself(out_url: tuple[str, dict[str, object]]) -> None:
    """The atomic create, not the listing before it, decides a race: a second create of a generation fails."""
    from gguf_audit.pipelines.store.lease import _Store

    out = _output(out_url)
    store = _Store(out.fs, out.root, out.local)
    assert store.create(1, b'{"owner": "x"}') is True
    assert store.create(1, b'{"owner": "y"}') is False
    assert json.loads(out.fs.cat_file(store.path(1))) == {"owner": "x"}
