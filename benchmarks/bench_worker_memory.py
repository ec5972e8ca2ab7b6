"""A worker's peak memory against its batch size: rows go out as each file is audited, so it should stay flat.

Run as ``python benchmarks/bench_worker_memory.py [--sizes 8,32,128] [--threads 8]``.
Writes the largest batch's worth of Llama-2-7B-like files (``headers.py``: a
32k vocabulary, 291 tensors, the data a sparse hole) to a temporary
directory, then for each batch size runs one
:func:`~gguf_audit.pipelines.work.execute.audit_batch` (sampling on, the default
budget) in a fresh process, as a dask worker would, writing its data files
under a temporary output, and prints the process's peak resident memory
(``ru_maxrss``), Arrow's peak allocation and the rows written.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# Run as a script, benchmarks/ is sys.path[0]: the generator sits beside this file.
from headers import SPECS, build_header

CHILD = """
import json, resource, sys
import pyarrow as pa
from gguf_audit.audit import AuditConfig
from gguf_audit.pipelines.work.batches import make_batches
from gguf_audit.pipelines.work.execute import TaskOptions, audit_batch
from gguf_audit.plan import SampleConfig
from gguf_audit.tables.listed import ListedFile

paths, out, threads = json.loads(sys.argv[1]), sys.argv[2], int(sys.argv[3])
listed = [ListedFile("file://" + p) for p in paths]
[batch] = make_batches(listed, {f.url: f.url for f in listed}, len(listed))
result = audit_batch(batch, TaskOptions("r1", {}, AuditConfig(samples=SampleConfig()), threads, out=out))
print(json.dumps({
    "maxrss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    "arrow_peak_mb": pa.default_memory_pool().max_memory() / 2**20,
    "rows": dict(result.rows),
}))
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="8,32,128")
    parser.add_argument("--threads", type=int, default=8)
    args = parser.parse_args(argv)
    sizes = [int(s) for s in args.sizes.split(",")]
    work = Path(tempfile.mkdtemp(prefix="bench-worker-"))
    try:
        content, _, _, file_size, _, _ = build_header(SPECS["32k"])
        paths = []
        for i in range(max(sizes)):
            path = work / f"m{i:04d}-Q4_K_M.gguf"
            with path.open("wb") as f:
                f.write(content)
                f.truncate(file_size)
            paths.append(str(path))
        print("| files in the batch | peak RSS | Arrow peak | rows written (tensors, samples) |")
        print("|---:|---:|---:|---|")
        for size in sizes:
            out = work / f"out-{size}"
            proc = subprocess.run(
                [sys.executable, "-c", CHILD, json.dumps(paths[:size]), str(out), str(args.threads)],
                capture_output=True,
                text=True,
                check=True,
            )
            r = json.loads(proc.stdout.strip().splitlines()[-1])
            rows = f"{r['rows']['tensors']}, {r['rows']['samples']}"
            print(f"| {size} | {r['maxrss_mb']:.0f} MB | {r['arrow_peak_mb']:.0f} MB | {rows} |")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"(driver process, for scale: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
