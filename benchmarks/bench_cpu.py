"""Per-file CPU of a worker: this tree against an older commit, in the same run, alternating.

Run as ``python benchmarks/bench_cpu.py [--against 70205bb] [--files 20] [--repeats 3] [--specs 32k]``.

What a scan's worker spends on one local file: ``audit_file`` (header read,
every check, and with sampling its blocks read and decoded) and the file's
table rows built (``audits_to_tables``), measured as the process's CPU time
(``time.process_time``, all threads), header-only and sampled. Each side runs
in a child process of its own with its tree first on ``PYTHONPATH`` (the older
commit exported by ``git archive`` into a temporary folder), after one warm-up
file, so imports and first-use caches are not counted. The sides alternate, and
the ratio printed is this tree's median over the older commit's median.

The files are the header benchmark's models (:mod:`headers`): a real header
written in full, the tensor data a sparse hole, so sampled blocks decode zeros
on both sides alike. Run it alone: a second process on the same cores changes
the figures.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))

_CHILD = r"""
import json, sys, time
from pathlib import Path
import gguf_audit
from gguf_audit.audit import AuditConfig, audit_file
from gguf_audit.plan.model import SampleConfig
from gguf_audit.tables.listed import ListedFile
from gguf_audit.tables.per_file import AuditedFile, audits_to_tables

mode, paths = sys.argv[1], sys.argv[2:]
config = AuditConfig(samples=SampleConfig() if mode == "sampled" else None)

def one(path):
    audit = audit_file(path, config=config)
    listed = ListedFile(url=path, size=Path(path).stat().st_size)
    audits_to_tables([AuditedFile(audit, listed, "m")], run_id="bench")

one(paths[0])
started = time.process_time()
for path in paths:
    one(path)
cpu = time.process_time() - started
print(json.dumps({"ms_per_file": 1000 * cpu / len(paths), "module": gguf_audit.__file__}))
"""


def _export(commit: str, into: Path) -> Path:
    tree = into / f"tree-{commit}"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
    return tree


def _side(tree: Path, mode: str, paths: list[str]) -> float:
    env = dict(os.environ, PYTHONPATH=str(tree))
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, mode, *paths], env=env, check=True, capture_output=True, text=True, cwd=tree
    )
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    if not str(answer["module"]).startswith(str(tree)):
        raise SystemExit(f"the child imported {answer['module']}, not the tree under {tree}")
    return float(answer["ms_per_file"])


def main(argv: list[str] | None = None) -> int:
    from headers import SPECS, write_model

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--against", default="70205bb", help="the older commit (default: the main issue 36 measured)")
    parser.add_argument("--files", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--specs", default="32k", help="comma-separated header specs (32k, 152k, 256k)")
    args = parser.parse_args(argv)
    print(f"load average before: {os.getloadavg()[0]:.2f}  cpus: {os.cpu_count()}")
    with tempfile.TemporaryDirectory(prefix="bench-cpu-") as tmp:
        base = Path(tmp)
        old = _export(args.against, base)
        paths: list[str] = []
        for label in args.specs.split(","):
            made = write_model(SPECS[label], base)
            for i in range(args.files):
                copy = base / f"{label}-{i:03d}.gguf"
                os.link(made.path, copy)
                paths.append(str(copy))
        rows = []
        for mode in ("header", "sampled"):
            figures: dict[str, list[float]] = {"old": [], "new": []}
            for _ in range(args.repeats):
                figures["old"].append(_side(old, mode, paths))
                figures["new"].append(_side(ROOT, mode, paths))
            old_ms, new_ms = statistics.median(figures["old"]), statistics.median(figures["new"])
            rows.append((mode, figures, old_ms, new_ms))
        print(f"load average after: {os.getloadavg()[0]:.2f}")
        print(f"| mode | {args.against} ms/file (min-max) | this tree ms/file (min-max) | ratio |")
        print("|---|---|---|---|")
        for mode, figures, old_ms, new_ms in rows:
            o, n = figures["old"], figures["new"]
            print(
                f"| {mode} | {old_ms:.1f} ({min(o):.1f}-{max(o):.1f}) | {new_ms:.1f} ({min(n):.1f}-{max(n):.1f}) "
                f"| {new_ms / old_ms:.2f} |"
            )
    return 0


if __name__ == "__main__":
    started = time.monotonic()
    status = main()
    print(f"took {time.monotonic() - started:.0f} s")
    raise SystemExit(status)
