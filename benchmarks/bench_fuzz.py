"""gguf-audit alone over seeded header mutants: no crash, no internal error, bounded time and memory.

Run as ``python benchmarks/bench_fuzz.py [--mutants 100000] [--seed 22] [--templates] [--samples] [--bulk]``.
Each mutant of the corpus models (:mod:`gguf_audit.testing.mutate`: byte flips, NULs in keys and names, inflated counts,
lengths and dims, type ids, alignments, duplicates, truncation points, MiB-long names, retyped values) is
written to one scratch file (a header over a sparse hole), audited with :func:`gguf_audit.audit.audit_file`
(parse and every header check; chat templates only with ``--templates``, as their renders are cached per
template and benchmarked by ``bench_templates.py``) and rendered in every format ``inspect`` has: text,
JSON and SARIF. ``--samples`` reads sampled blocks too; ``--bulk`` draws mutants of another kind
(:mod:`gguf_audit.testing.mutate_bulk`: 10^5 to 10^6 tiny entries, spliced headers, duplicated sections,
lengths equal to the bytes left). No oracle is asked. It prints:

- mutants, uncaught exceptions (any exception out of the audit or a renderer; must be 0), and files
  with an ``internal.*`` finding (must be 0), with the first few named;
- the slowest mutants (CPU time), each against its seed's through the same steps (median of 5; target at most 10x):
  first as measured once in the stream, then re-measured as the seeds are (median of 5), which takes a
  single garbage collection or scheduling hiccup out of a ratio over a ~7 ms seed;
- peak memory: of a fresh process auditing each of the slowest mutants (and a seed), and of this process
  (which also generates the mutants: 10^6 records encoded in Python take hundreds of MiB).
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
import traceback
from collections import Counter
from pathlib import Path
from tempfile import TemporaryDirectory

from gguf_audit.audit import AuditConfig, audit_file
from gguf_audit.report.json import audit_to_json, dumps
from gguf_audit.report.sarif import results_of_findings, sarif_json, sarif_log, sarif_run
from gguf_audit.report.text import render_text
from gguf_audit.samples import SampleConfig
from gguf_audit.testing.mutate import Mutant, Seed, encode, mutants, read_seed
from gguf_audit.testing.mutate_bulk import bulk_mutants

SHOWN = 5
SLOWEST = 10


def corpus_models() -> list[Path]:
    root = Path(os.environ.get("GGUF_AUDIT_CORPUS", Path(__file__).resolve().parents[2] / "shared" / "corpus"))
    return sorted(p for p in (root / "models").glob("*.gguf") if "-BE" not in p.name)


def judge(path: Path, config: AuditConfig) -> tuple[float, list[str]]:
    """Audit ``path`` and render it three ways; the CPU seconds taken (a shared machine's other
    load stays out of the ratios) and the finding codes."""
    began = time.process_time()
    audit = audit_file(os.fspath(path), config=config)
    render_text(audit)
    dumps(audit_to_json(audit))
    sarif_json(
        sarif_log([sarif_run(results_of_findings(audit.url, audit.findings), artifacts={audit.url: audit.size})])
    )
    return time.process_time() - began, [f.code for f in audit.findings]


def seed_times(seeds: list[Seed], folder: Path, config: AuditConfig) -> dict[str, float]:
    """Each seed's median time through :func:`judge`, written as the mutants are (header over a hole)."""
    times = {}
    for seed in seeds:
        content, _, size = encode(seed)
        path = Mutant(f"seed-{seed.name}", "seed", seed.name, content, size).write(folder)
        times[seed.name] = statistics.median(judge(path, config)[0] for _ in range(5))
    return times


def peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


_AUDIT_RSS = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from bench_fuzz import judge
from gguf_audit.audit import AuditConfig
from gguf_audit.samples import SampleConfig

def hwm():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))

config = AuditConfig(templates=sys.argv[3] == "1", samples=SampleConfig() if sys.argv[4] == "1" else None)
# ru_maxrss would carry the parent's peak across exec: reset the high-water mark (Linux) and read VmHWM.
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")
start = hwm()
judge(Path(sys.argv[2]), config)
print(start, hwm())
"""


def audit_rss_bytes(path: Path, args: argparse.Namespace) -> tuple[int, int]:
    """Peak RSS of a fresh process that audits ``path`` (as :func:`judge` does), and its growth over the audit.

    This process's own peak also holds the mutants it generated (10^6 records encoded in Python), so the
    audit's memory is measured apart."""
    flags = ["1" if args.templates else "0", "1" if args.samples else "0"]
    here = os.fspath(Path(__file__).resolve().parent)
    out = subprocess.run(
        [sys.executable, "-c", _AUDIT_RSS, here, os.fspath(path), *flags], capture_output=True, check=True, text=True
    )
    start, peak = (int(v) for v in out.stdout.split()[-2:])
    return peak, peak - start


def mib(n: int) -> str:
    return f"{n / 2**20:.0f} MiB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=22)
    parser.add_argument("--templates", action="store_true", help="audit chat templates too (rendered, cached)")
    parser.add_argument("--samples", action="store_true", help="read and decode sampled blocks too")
    parser.add_argument("--bulk", action="store_true", help="whole-header shapes (mutate_bulk), not field edits")
    args = parser.parse_args(argv)
    config = AuditConfig(templates=args.templates, samples=SampleConfig() if args.samples else None)
    seeds = [read_seed(p) for p in corpus_models()]
    stream = bulk_mutants if args.bulk else mutants
    start_rss = peak_rss_bytes()
    crashes: list[tuple[str, str]] = []
    internal: list[tuple[str, list[str]]] = []
    slow: list[tuple[float, float, str, Mutant]] = []
    kinds: Counter[str] = Counter()
    began = time.perf_counter()
    with TemporaryDirectory(prefix="bench-fuzz-") as tmp:
        folder = Path(tmp)
        base = seed_times(seeds, folder, config)
        for m in stream(seeds, args.mutants, seed=args.seed):
            kinds[m.kind] += 1
            path = m.write(folder)
            try:
                seconds, codes = judge(path, config)
            except Exception:  # noqa: BLE001 - counting what escapes is the point
                crashes.append((m.ident, traceback.format_exc(limit=3).splitlines()[-1]))
                path.unlink()
                continue
            path.unlink()
            if any(c.startswith("internal.") for c in codes):
                internal.append((m.ident, codes))
            slow.append((seconds / base[m.seed], seconds, m.ident, m))
            slow.sort(reverse=True, key=lambda s: s[:3])
            del slow[SLOWEST:]
        wall = time.perf_counter() - began
        again, memory = {}, {}
        for _, _, ident, m in slow:
            path = m.write(folder)
            again[ident] = statistics.median(judge(path, config)[0] for _ in range(5))
            memory[ident] = audit_rss_bytes(path, args)
            path.unlink()
        content, _, size = encode(seeds[0])
        seed_path = Mutant("seed-rss", "seed", seeds[0].name, content, size).write(folder)
        seed_memory = audit_rss_bytes(seed_path, args)
    peak = peak_rss_bytes()
    print(f"mutants: {args.mutants} in {wall:.0f} s ({args.mutants / wall:.0f}/s), seed {args.seed}")
    print(f"kinds: {dict(sorted(kinds.items()))}")
    print(f"uncaught exceptions: {len(crashes)}")
    for ident, line in crashes[:SHOWN]:
        print(f"  {ident}: {line}")
    print(f"internal.* findings: {len(internal)}")
    for ident, codes in internal[:SHOWN]:
        print(f"  {ident}: {codes}")
    print("seed times (ms): " + ", ".join(f"{k.removesuffix('.gguf')} {v * 1e3:.1f}" for k, v in base.items()))
    print(
        "slowest mutants against their seed (once in the stream; re-measured, median of 5; "
        "peak RSS of a fresh process auditing it, and its growth over the audit):"
    )
    for ratio, seconds, ident, m in slow:
        median = again[ident]
        remeasured = f"{median / base[m.seed]:6.1f}x  {median * 1e3:8.1f} ms"
        rss, grown = memory[ident]
        print(f"  {ratio:6.1f}x  {seconds * 1e3:8.1f} ms  |  {remeasured}  {mib(rss)} (+{mib(grown)})  {ident}")
    print(f"a seed audited the same way: {mib(seed_memory[0])} (+{mib(seed_memory[1])})")
    print(f"peak RSS: {mib(peak)} ({mib(peak - start_rss)} over the start; this process, mutant generation included)")
    return 1 if crashes or internal else 0


if __name__ == "__main__":
    sys.exit(main())
