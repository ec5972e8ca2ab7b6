"""Files per second of one worker process reading sampled files from S3, by per-host cap, with added latency.

Run as ``python benchmarks/bench_s3_cap.py [--files 40] [--caps 4,8,16,32] [--latency-ms 0,30]``.

Puts ``--files`` copies of a corpus model (``--model``, Q8_0 by default: its
sampled plan costs a header read and tens of range GETs) into moto's S3 on
127.0.0.1, then, for each added latency and each per-host cap
(``ReadConfig.max_per_host``), runs one
:func:`~gguf_audit.pipelines.work.execute.audit_batch` (sampling on, 64 files in
flight, a CPU gate of 2 slots: a two-thread dask worker) in a fresh process
and prints files/s (wall), CPU seconds per file and requests per file. The
CPU bound is ``1 / (CPU s per file)`` per core: a cap past the point where
files/s reaches it buys nothing, a cap below it leaves the process waiting on
round trips. moto answers each request in its own thread after
``latency_s`` (:class:`~gguf_audit.testing.s3.MotoS3Server`), as a store
far away would.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

CHILD = """
import json, sys, time
from gguf_audit.audit import AuditConfig
from gguf_audit.io.source import ReadConfig
from gguf_audit.pipelines.work.batches import make_batches
from gguf_audit.pipelines.work.execute import TaskOptions, audit_batch
from gguf_audit.plan import SampleConfig
from gguf_audit.tables.listed import ListedFile

urls, options, out, cap = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3], int(sys.argv[4])
audit = AuditConfig(samples=SampleConfig(), read=ReadConfig(max_per_host=cap))
listed = [ListedFile(u) for u in urls]
[warm] = make_batches(listed[:1], {f.url: f.url for f in listed[:1]}, 1)
audit_batch(warm, TaskOptions("w", {"s3": options}, audit, 1, out=out + "-warm", cpu_slots=2))
[batch] = make_batches(listed, {f.url: f.url for f in listed}, len(listed))
cpu, wall = time.process_time(), time.perf_counter()
result = audit_batch(batch, TaskOptions("r1", {"s3": options}, audit, 64, out=out, cpu_slots=2))
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
print(json.dumps({"cpu_s": cpu, "wall_s": wall, "files": len(result.urls)}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=40)
    parser.add_argument("--caps", default="4,8,16,32")
    parser.add_argument("--latency-ms", default="0,30")
    parser.add_argument("--model", default="models/tiny-llama-Q8_0.gguf")
    parser.add_argument("--corpus", default=str(Path(__file__).resolve().parents[1].parent / "shared" / "corpus"))
    args = parser.parse_args(argv)
    from gguf_audit.testing.s3 import FAKE_AWS_ENV, MotoS3Server

    os.environ.update(FAKE_AWS_ENV)

    data = (Path(args.corpus) / args.model).read_bytes()
    with MotoS3Server() as moto, tempfile.TemporaryDirectory(prefix="gguf-audit-s3cap-") as tmp:
        moto.make_bucket("bench")
        urls = []
        for i in range(args.files):
            moto.put("bench", f"m{i:03d}/model-{i:03d}.gguf", data)
            urls.append(f"s3://bench/m{i:03d}/model-{i:03d}.gguf")
        options = {"client_kwargs": {"endpoint_url": moto.endpoint_url}, "config_kwargs": {"proxies": {}}}
        print(f"{args.files} x {args.model} ({len(data)} bytes); load average {os.getloadavg()[0]:.2f}")
        print("| latency | cap | files/s | CPU s/file | CPU bound files/s/core | requests/file |")
        print("|---:|---:|---:|---:|---:|---:|")
        run = 0
        for latency_ms in (int(x) for x in args.latency_ms.split(",")):
            moto.latency_s = latency_ms / 1000
            for cap in (int(c) for c in args.caps.split(",")):
                run += 1
                moto.reset_stats()
                done = subprocess.run(
                    [sys.executable, "-c", CHILD, json.dumps(urls), json.dumps(options), f"{tmp}/o{run}", str(cap)],
                    capture_output=True,
                    text=True,
                    check=True,
                )
                r = json.loads(done.stdout.strip().splitlines()[-1])
                per_file = r["cpu_s"] / r["files"]
                requests = (len(moto.requests)) / (r["files"] + 1)  # the warm-up file's too
                print(
                    f"| {latency_ms} ms | {cap} | {r['files'] / r['wall_s']:.1f} | {per_file * 1000:.0f} ms "
                    f"| {1 / per_file:.1f} | {requests:.1f} |"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
