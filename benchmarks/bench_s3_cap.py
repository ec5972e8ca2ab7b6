"""Files per second of one worker process reading files from S3, by per-host cap, with added latency; the
store in a process of its own, its CPU counted apart; and the million-file night re-derived from it.

Run as ``python benchmarks/bench_s3_cap.py [--files 40] [--caps 8,16,32,64] [--latency-ms 0,30]
[--modes header-only,sampled] [--pin-store]``.

Puts ``--files`` copies of a corpus model (``--model``, Q8_0 by default: its
sampled plan costs a header read and tens of range GETs), or with ``--spec 32k``
(``152k``, ``256k``) of the header benchmark's model of that vocabulary (its
real header and tensor table, the widths shrunk so moto can hold the copies:
26 MB for the 32k one, 96 and 72 MB for the others; its data zeros), into moto's S3, run by
``s3_store.py`` in a process of its own on 127.0.0.1. Then, for each mode
(header-only, sampled), added latency and per-host cap
(``ReadConfig.max_per_s3_host``), one
:func:`~gguf_audit.pipelines.work.execute.audit_batch` (64 files in flight, a
CPU gate of 2 slots: a two-thread dask worker) runs in a fresh process after a
warm-up file, and the bench prints files/s (wall), the scanner's CPU per file
(its process time: audit, rows and Parquet parts), the store's CPU per file
(moto's process time over the same run, counted apart: a real store's CPU is
not the worker's), and requests and bytes per file. ``--pin-store`` puts the
store on the last CPU and the scanner on the others (on two cores the scanner
then has one), so the store's work takes nothing from the scanner's cores.

The scanner's CPU bound is ``cores / (CPU s per file)``: a cap past the point
where files/s reaches it buys nothing, a cap below it leaves the process waiting
on round trips. Last, for each mode, the million-file night from the scanner's
CPU per file and the store's requests and bytes per file at the largest cap and
latency: 1,000,000 files on 50 two-core workers, cores fully used, at S3
Standard prices (GET $0.0004 and LIST $0.005 per 1,000).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))  # headers.py beside this file
CHILD = """
import json, sys, time
from gguf_audit.audit import AuditConfig
from gguf_audit.io.source import ReadConfig
try:
    from gguf_audit.pipelines.work.batches import make_batches
    from gguf_audit.pipelines.work.execute import TaskOptions, audit_batch
except ImportError:  # a tree from before the work room
    from gguf_audit.pipelines.scan.batches import make_batches
    from gguf_audit.pipelines.scan.execute import TaskOptions, audit_batch
from gguf_audit.plan import SampleConfig
from gguf_audit.tables.listed import ListedFile

urls, options = json.loads(sys.argv[1]), json.loads(sys.argv[2])
out, cap, mode = sys.argv[3], int(sys.argv[4]), sys.argv[5]
samples = SampleConfig() if mode == "sampled" else None
audit = AuditConfig(samples=samples, read=ReadConfig(max_per_s3_host=cap, max_per_host=cap))
listed = [ListedFile(u) for u in urls]
[warm] = make_batches(listed[:1], {f.url: f.url for f in listed[:1]}, 1)
audit_batch(warm, TaskOptions("w", {"s3": options}, audit, 1, out=out + "-warm", cpu_slots=2))
[batch] = make_batches(listed, {f.url: f.url for f in listed}, len(listed))
cpu, wall = time.process_time(), time.perf_counter()
result = audit_batch(batch, TaskOptions("r1", {"s3": options}, audit, 64, out=out, cpu_slots=2))
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
print(json.dumps({"cpu_s": cpu, "wall_s": wall, "files": len(result.urls)}))
"""

MILLION = 1_000_000
WORKERS, CORES_PER_WORKER = 50, 2
GET_PER_1000, LIST_PER_1000 = 0.0004, 0.005


@dataclass(frozen=True, slots=True)
class Row:
    mode: str
    latency_ms: int
    cap: int
    files: int
    wall_s: float
    cpu_s: float
    store_cpu_s: float
    requests: int
    bytes_sent: int

    def cells(self, scanner_cores: int) -> list[str]:
        per_file = self.cpu_s / self.files
        n = self.files + 1  # the warm-up file's requests are the store's too
        return [
            self.mode,
            f"{self.latency_ms} ms",
            str(self.cap),
            f"{self.files / self.wall_s:.1f}",
            f"{per_file * 1000:.0f} ms",
            f"{self.store_cpu_s / n * 1000:.0f} ms",
            f"{scanner_cores / per_file:.1f}",
            f"{self.requests / n:.1f}",
            f"{self.bytes_sent / n / 1e6:.2f}",
        ]


HEADERS = ["mode", "latency", "cap", "files/s", "scanner CPU/file", "store CPU/file",
           "CPU bound files/s", "requests/file", "MB/file"]  # fmt: skip


class Store:
    """``s3_store.py`` in its own process: moto's S3, told what to do one line at a time."""

    def __init__(self, objects: list[tuple[str, str]]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(HERE / "s3_store.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.endpoint_url = str(self.ask({"objects": objects})["endpoint_url"])

    def ask(self, command: dict[str, object]) -> dict[str, Any]:
        if self.proc.stdin is None or self.proc.stdout is None:
            raise RuntimeError("the store's pipes are closed")
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        answer: dict[str, Any] = json.loads(self.proc.stdout.readline())
        return answer

    def close(self) -> None:
        if self.proc.poll() is None:
            self.ask({"quit": True})
            self.proc.wait(timeout=30)


def _run_one(store: Store, urls: list[str], out: str, cap: int, mode: str, scanner_cpus: set[int] | None) -> Row:
    options = {"client_kwargs": {"endpoint_url": store.endpoint_url}, "config_kwargs": {"proxies": {}}}
    before = store.ask({"reset": True})
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, json.dumps(urls), json.dumps(options), out, str(cap), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    if scanner_cpus is not None:
        os.sched_setaffinity(child.pid, scanner_cpus)
    stdout, stderr = child.communicate()
    if child.returncode != 0:
        raise SystemExit(f"the scanner failed: {stderr.strip()[-2000:]}")
    after = store.ask({"stats": True})
    r = json.loads(stdout.strip().splitlines()[-1])
    return Row(mode, 0, cap, r["files"], r["wall_s"], r["cpu_s"], float(after["cpu_s"]) - float(before["cpu_s"]),
               int(after["requests"]), int(after["bytes_sent"]))  # fmt: skip


def night(rows: list[Row], scanner_cores: int) -> list[str]:
    """The million-file night per mode, from its row at the largest latency and cap (its files/s scaled from the
    scanner's cores to a worker's)."""
    lines = []
    for mode in dict.fromkeys(r.mode for r in rows):
        r = max((r for r in rows if r.mode == mode), key=lambda r: (r.latency_ms, r.cap))
        cpu = r.cpu_s / r.files
        n = r.files + 1
        gets, mb = r.requests / n, r.bytes_sent / n / 1e6
        hours_cpu = MILLION * cpu / (WORKERS * CORES_PER_WORKER) / 3600
        hours_rate = MILLION / (r.files / r.wall_s * CORES_PER_WORKER / scanner_cores) / WORKERS / 3600
        dollars = MILLION * gets * GET_PER_1000 / 1000 + MILLION / 1000 * LIST_PER_1000 / 1000
        lines.append(
            f"| {mode} | {cpu * 1000:.0f} ms | {hours_cpu:.2f} h | {hours_rate:.2f} h | {gets:.1f} "
            f"({MILLION * gets / 1e6:.1f} M) | {mb:.2f} MB ({MILLION * mb / 1e6:.2f} TB) | ${dollars:.2f} |"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--caps", default="8,16,32,64")
    parser.add_argument("--latency-ms", default="0,30")
    parser.add_argument("--modes", default="header-only,sampled")
    parser.add_argument("--model", default="models/tiny-llama-Q8_0.gguf")
    parser.add_argument("--corpus", default=str(HERE.parents[1] / "shared" / "corpus"))
    parser.add_argument("--spec", help="the header benchmark's model of this vocabulary (32k, 152k, 256k), shrunk")
    parser.add_argument("--pin-store", action="store_true", help="the store on the last CPU, the scanner on the rest")
    args = parser.parse_args(argv)
    from gguf_audit.testing.s3 import FAKE_AWS_ENV

    os.environ.update(FAKE_AWS_ENV)
    with tempfile.TemporaryDirectory(prefix="gguf-audit-s3cap-") as tmp:
        path = _shrunk_model(args.spec, Path(tmp)) if args.spec else Path(args.corpus) / args.model
        return _bench(args, path, tmp)


def _shrunk_model(label: str, into: Path) -> Path:
    """The header benchmark's model of ``label``'s vocabulary with 256-wide layers (the K-quants' block): its
    header and tensor count, a file of tens of megabytes."""
    from headers import SPECS, write_model

    spec = dataclasses.replace(SPECS[label], n_embd=256, n_ff=512, n_head=4, n_head_kv=4, head_dim=64)
    return write_model(spec, into).path


def _bench(args: argparse.Namespace, path: Path, tmp: str) -> int:
    keys = [f"m{i:03d}/model-{i:03d}.gguf" for i in range(args.files)]
    cpus = sorted(os.sched_getaffinity(0))
    store = Store([(k, str(path)) for k in keys])
    scanner_cpus = set(cpus[:-1]) if args.pin_store and len(cpus) > 1 else None
    if scanner_cpus is not None:
        os.sched_setaffinity(store.proc.pid, {cpus[-1]})
    scanner_cores = len(scanner_cpus) if scanner_cpus is not None else len(cpus)
    load = os.getloadavg()[0]
    rows: list[Row] = []
    try:
        urls = [f"s3://bench/{k}" for k in keys]
        for mode in args.modes.split(","):
            for latency_ms in (int(x) for x in args.latency_ms.split(",")):
                store.ask({"latency_s": latency_ms / 1000})
                for cap in (int(c) for c in args.caps.split(",")):
                    row = _run_one(store, urls, f"{tmp}/o{len(rows)}", cap, mode, scanner_cpus)
                    rows.append(dataclasses.replace(row, latency_ms=latency_ms))
                    print("| " + " | ".join(rows[-1].cells(scanner_cores)) + " |", flush=True)
    finally:
        store.close()
    print(f"\n{args.files} x {path.name} ({path.stat().st_size} bytes); scanner on {scanner_cores} CPU(s), "
          f"store {'pinned to CPU ' + str(cpus[-1]) if scanner_cpus else 'unpinned, its CPU counted apart'}; "
          f"load average {load:.2f} before, {os.getloadavg()[0]:.2f} after\n")  # fmt: skip
    print("| " + " | ".join(HEADERS) + " |")
    print("|---|" + "---:|" * (len(HEADERS) - 1))
    for row in rows:
        print("| " + " | ".join(row.cells(scanner_cores)) + " |")
    print(f"\nThe million-file night ({WORKERS} two-core workers; GET ${GET_PER_1000} and LIST ${LIST_PER_1000} per "
          "1,000; wall from the CPU per file with the cores fully used, and from this run's files/s):\n")  # fmt: skip
    print("| mode | CPU/file | wall (CPU bound) | wall (measured rate) | GETs/file | read/file | dollars |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    print("\n".join(night(rows, scanner_cores)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
