"""CPU per file of a worker's batch with and without the CPU gate, across pool sizes.

Run as ``python benchmarks/bench_gate.py [--files 64] [--threads 1,8,64] [--slots 0,2] [--repeat 2]``.

Writes ``--files`` Llama-2-7B-like files (``headers.py``'s ``32k`` spec, the
data a sparse hole) to a temporary directory, then for each pool size and
gate setting runs one :func:`~gguf_audit.pipelines.work.execute.audit_batch`
(sampling on, the default budget, rows written to a temporary output) in a
fresh process, as a dask worker would, and prints the process's CPU seconds
per file (``process_time``: every thread) and the batch's wall time. Slots 0
is no gate (every pool thread does CPU work at once); 2 is a two-thread
worker's gate. Each figure is the best of ``--repeat`` runs; the machine's
load average is printed with them, since other processes take cores too.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

# Run as a script, benchmarks/ is sys.path[0]: the generator sits beside this file.
from headers import SPECS, build_header

CHILD = """
import json, sys, time
from gguf_audit.audit import AuditConfig
from gguf_audit.pipelines.work.batches import make_batches
from gguf_audit.pipelines.work.execute import TaskOptions, audit_batch
from gguf_audit.plan import SampleConfig
from gguf_audit.tables.listed import ListedFile

paths, out, threads, slots = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
listed = [ListedFile("file://" + p) for p in paths]
[batch] = make_batches(listed, {f.url: f.url for f in listed}, len(listed))
options = TaskOptions("r1", {}, AuditConfig(samples=SampleConfig()), threads, out=out, cpu_slots=slots)
# Warm up (imports, the template render child) on one file, outside the measurement.
[warm] = make_batches(listed[:1], {f.url: f.url for f in listed[:1]}, 1)
audit_batch(warm, TaskOptions("w", {}, options.audit, 1, out=out + "-warm", cpu_slots=slots))
cpu, wall = time.process_time(), time.perf_counter()
result = audit_batch(batch, options)
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
print(json.dumps({"cpu_s": cpu, "wall_s": wall, "files": len(result.urls)}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=64)
    parser.add_argument("--threads", default="1,8,64")
    parser.add_argument("--slots", default="0,2")
    parser.add_argument("--repeat", type=int, default=2)
    args = parser.parse_args(argv)
    content, _, _, file_size, _, _ = build_header(SPECS["32k"])
    with tempfile.TemporaryDirectory(prefix="gguf-audit-gate-") as tmp_dir:
        tmp = Path(tmp_dir)
        paths = []
        for i in range(args.files):
            path = tmp / "in" / f"model-{i:04d}-Q4_K_M.gguf"
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("wb") as f:
                f.write(content)
                f.truncate(file_size)
            paths.append(str(path))
        print(f"load average before: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
        print("| threads | gate slots | CPU per file | batch wall | load average |")
        print("|---:|---:|---:|---:|---:|")
        run = 0
        for threads in (int(t) for t in args.threads.split(",")):
            for slots in (int(s) for s in args.slots.split(",")):
                best: dict[str, float] | None = None
                for _ in range(args.repeat):
                    run += 1
                    out = str(tmp / f"out-{run}")
                    done = subprocess.run(
                        [sys.executable, "-c", CHILD, json.dumps(paths), out, str(threads), str(slots)],
                        capture_output=True,
                        text=True,
                        check=True,
                    )
                    got = json.loads(done.stdout.strip().splitlines()[-1])
                    if best is None or got["cpu_s"] < best["cpu_s"]:
                        best = got
                assert best is not None
                per_file = best["cpu_s"] / args.files
                gate = str(slots) if slots else "none"
                print(
                    f"| {threads} | {gate} | {per_file * 1000:.0f} ms | {best['wall_s']:.2f} s "
                    f"| {os.getloadavg()[0]:.2f} |",
                    flush=True,
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
