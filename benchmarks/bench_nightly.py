"""What a night costs: full, quiet and churn nights over N realistic files, and CPU per file by phase.

Run as ``python benchmarks/bench_nightly.py [--sizes 1000,5000] [--budget-s 600] [--workers 2]
[--no-samples] [--data dense|sparse] [--json OUT]``.

For each N it writes N Llama-2-7B-like files (the header benchmark's ``32k``
spec: 291 tensors, a 32k SentencePiece vocabulary, a 0.76 MB header) in a
temporary directory, the tensor data a hole except, with ``--data dense`` (the
default), the ranges the sampling plan reads, which hold weight-like data of
the file's own (``SyntheticGGUF``): samples that differ from file to file, as
real models' do, rather than zero blocks that compress to nothing (``--data
sparse``; header-only nights, ``--no-samples``, are always sparse). It
runs three nights into one ``--out``, each in a fresh driver
process on a LocalCluster of ``--workers`` worker processes:

- ``full``: the first night, every file read;
- ``quiet``: ``--incremental`` with nothing changed;
- ``churn``: ``--incremental`` after 1% new files, 0.1% rewritten (another
  header), 0.1% truncated (a cut upload) and 0.1% removed.

Per night it prints wall time, files/s (listed files over the whole run), the
bytes the night added under ``--out``, rows written per table, and the
driver's peak resident memory (``ru_maxrss`` of the driver process, which also
hosts the scheduler; the workers are other processes) and what it wrote two
ways: ``driver output``, the bytes of the files under ``--out`` the driver
writes (every table's Delta log entries, its own data files: reused ``files``
rows, ``models``, model ``problems``, ``runs``; the pending marker), and
``/proc/self/io`` ``write_bytes`` (what the process sent to storage, counted
in whole pages per file, with whatever else the process writes; strace shows
it 3 to 4 times the output bytes on a full night of small files).

It then measures CPU seconds per file by phase in this process, on 20 of the
files with the phases called one by one as ``audit_file`` calls them:
listing (``discover`` over the whole collection, divided by N), header read
and parse, checks (structure and semantics), template render (first file:
the child process; later files share the rendered set, as a collection's
quantizations do), sampled reads and decode, writing (the rows as Parquet).

Sizes past the first run only while the whole benchmark stays within
``--budget-s`` (estimated from the previous size's files and nights). At the end it prints the
extrapolation to 1,000,000 files on 50 two-core workers, with its model.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

sys.path.insert(0, str(Path(__file__).resolve().parent))

from headers import SPECS, build_header

CHURN: Final = {"new": 0.01, "rewritten": 0.001, "truncated": 0.001, "removed": 0.001}
PROFILED_FILES: Final = 20
PROJECTION_MARGIN: Final = 1.2
"""A next size runs when the time so far plus its projection (last size's seconds per file times N times this) fits."""


# ------------------------------------------------------------------ the collection


class Collection:
    """How the benchmark's files are written: the 32k spec's header, the data a hole or weight-like where sampled.

    ``dense``: each file's sampled ranges (the plan's fetch, the same for every
    file of one tensor table) hold weight-like data made by
    :class:`~gguf_audit.testing.layouts.SyntheticGGUF` with the file's own
    seed, so no two files' samples are alike, as no two models' are; the rest
    of the file is a hole. ``sparse``: all data a hole (every block zero).
    """

    def __init__(self, dense: bool) -> None:
        from gguf_audit.format.parser import parse_header
        from gguf_audit.plan import plan_samples

        self.dense = dense
        self.content, _, _, self.file_size, _, _ = build_header(SPECS["32k"])
        header = parse_header(self.content, self.file_size)
        self.header: Any = header
        self.ranges = [(r.start, r.end) for r in plan_samples(header, file_size=self.file_size).fetch]

    def write(self, path: Path, seed: int, content: bytes | None = None) -> None:
        from gguf_audit.testing.layouts import SyntheticGGUF

        path.parent.mkdir(parents=True, exist_ok=True)
        content = self.content if content is None else content
        if self.dense:
            synth = SyntheticGGUF.over_header(self.header, content, size=self.file_size, seed=seed)
            synth.write_ranges(path, self.ranges)
            return
        with path.open("wb") as f:
            f.write(content)
            f.truncate(self.file_size)


def make_collection(root: Path, n: int, collection: Collection) -> None:
    """N files of the 32k spec under ``root`` (100 per folder)."""
    for i in range(n):
        collection.write(root / f"m{i // 100:05d}" / f"model-{i:07d}-Q4_K_M.gguf", seed=i)


def churn(root: Path, collection: Collection, n: int) -> dict[str, int]:
    """Apply the churn pattern to the first files of the collection; how many files each change touched."""
    counts = {k: max(1, round(n * share)) for k, share in CHURN.items()}
    files = sorted(root.rglob("*.gguf"))
    at = 0
    for i, path in enumerate(files[at : at + counts["rewritten"]]):
        # Another conversion of the same model: a different header and data, the same size.
        rewritten = collection.content.replace(b"Llama-2-7B-like", b"Llama-2-7B-liky", 1)
        collection.write(path, seed=10_000_000 + i, content=rewritten)
    at += counts["rewritten"]
    for path in files[at : at + counts["truncated"]]:
        with path.open("r+b") as f:
            f.truncate(collection.file_size // 2)
    at += counts["truncated"]
    for path in files[at : at + counts["removed"]]:
        path.unlink()
    for i in range(counts["new"]):
        collection.write(root / "new" / f"model-new-{i:07d}-Q4_K_M.gguf", seed=20_000_000 + i)
    return counts


def _tree_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


# ------------------------------------------------------------------ one night, in its own driver process


def _night_main(args: argparse.Namespace) -> int:
    """The driver of one night: scan, then print its figures as one JSON line."""
    import logging

    from distributed import Client, LocalCluster

    from gguf_audit.pipelines.config import ScanConfig
    from gguf_audit.pipelines.scan.run import run_scan

    config = ScanConfig().replace(
        roots=(args.root,),
        out=args.out,
        incremental=args.incremental,
        samples=not args.no_samples,
        dashboard=False,
    )
    with (
        LocalCluster(  # type: ignore[no-untyped-call]
            n_workers=args.workers,
            threads_per_worker=2,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster) as client,  # type: ignore[no-untyped-call]
    ):
        io_before = _proc_io()
        begun = time.perf_counter()
        result = run_scan(config, client=client)
        wall = time.perf_counter() - begun
        io_after = _proc_io()
    figures = {
        "wall_s": wall,
        "files": result.n_files,
        "read": result.n_read,
        "reused": result.n_reused,
        "files_per_s": result.n_files / wall if wall else 0.0,
        "rows_written": dict(getattr(result, "rows_written", {}) or {}),
        "driver_peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "driver_write_bytes": io_after.get("write_bytes", 0) - io_before.get("write_bytes", 0),
        "driver_wchar": io_after.get("wchar", 0) - io_before.get("wchar", 0),
        "requests": result.requests,
        "bytes_read": result.bytes_read,
        "statuses": dict(result.statuses),
    }
    print("NIGHT " + json.dumps(figures), flush=True)
    return 0


def _proc_io() -> dict[str, int]:
    try:
        lines = Path("/proc/self/io").read_text().splitlines()
    except OSError:
        return {}
    return {k: int(v) for k, v in (line.split(": ") for line in lines)}


def _driver_bytes(root: Path) -> int:
    """Bytes of the files under an output the driver writes: the Delta logs, its own data files, the marker."""
    return sum(
        p.stat().st_size
        for p in root.rglob("*")
        if p.is_file() and ("_delta_log" in p.parts or "_pending" in p.parts or p.name.startswith("part-driver-"))
    )


def run_night(root: Path, out: Path, *, incremental: bool, workers: int, samples: bool) -> dict[str, Any]:
    before = _tree_bytes(out) if out.exists() else 0
    driver_before = _driver_bytes(out) if out.exists() else 0
    cmd = [sys.executable, __file__, "--night", "--root", str(root), "--out", str(out), "--workers", str(workers)]
    if incremental:
        cmd.append("--incremental")
    if not samples:
        cmd.append("--no-samples")
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=3600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("NIGHT ")]
    if not lines:
        raise RuntimeError(f"night failed (exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    figures: dict[str, Any] = json.loads(lines[-1][len("NIGHT ") :])
    figures["bytes_added"] = _tree_bytes(out) - before
    figures["driver_output_bytes"] = _driver_bytes(out) - driver_before
    return figures


# ------------------------------------------------------------------ CPU per file by phase


def cpu_by_phase(root: Path, n_files: int, samples: bool) -> dict[str, float]:
    """CPU seconds per file of each phase, calling them one by one as audit_file does."""
    from gguf_audit.audit import AuditConfig, AuditResources, audit_file
    from gguf_audit.checks.header import check_header
    from gguf_audit.io.header import read_header
    from gguf_audit.io.source import open_source
    from gguf_audit.pipelines.listing.discover import discover
    from gguf_audit.pipelines.store.parts import RunParts
    from gguf_audit.pipelines.work.execute import FILE_TABLES
    from gguf_audit.plan import SampleConfig
    from gguf_audit.samples import sample_file
    from gguf_audit.tables.listed import ListedFile
    from gguf_audit.tables.per_file import AuditedFile, audits_to_tables
    from gguf_audit.templates.audit import TemplateCache, audit_header_templates

    cpu = time.process_time
    phases = dict.fromkeys(("listing", "header", "checks", "templates", "samples", "writing"), 0.0)
    t = cpu()
    listing = discover((str(root),))
    phases["listing"] = (cpu() - t) / max(1, len(listing.files))
    urls = [f.url for f in listing.files[:n_files]]
    cache = TemplateCache()
    first_template = 0.0
    sample_config = SampleConfig()
    audits = []
    config = AuditConfig(samples=sample_config if samples else None)
    for i, url in enumerate(urls):
        source = open_source(url)
        t = cpu()
        read = read_header(source)
        phases["header"] += cpu() - t
        t = cpu()
        audit_header_templates(read.header, cache=cache)
        spent = cpu() - t
        if i == 0:
            first_template = spent
        else:
            phases["templates"] += spent
        t = cpu()
        list(check_header(read.header, file_size=source.size, url=url))
        phases["checks"] += cpu() - t
        if samples:
            t = cpu()
            sample_file(source, read, config=sample_config)
            phases["samples"] += cpu() - t
        audits.append(audit_file(url, config=config, resources=AuditResources(template_cache=cache)))
    listed = {f.url: f for f in listing.files}
    items = [AuditedFile(a, listed.get(a.url) or ListedFile(a.url), "m") for a in audits]

    def write(some: list[AuditedFile]) -> None:  # rows built and written as a worker does for a batch
        tables = audits_to_tables(some, run_id="bench")
        with tempfile.TemporaryDirectory() as tmp:
            parts = RunParts(tmp, None, "bench", "b0", FILE_TABLES)
            for name in FILE_TABLES:
                parts.write(name, getattr(tables, name))
            parts.close()

    write(items[:1])  # the first write pays one-time imports and set-up, as a worker's first batch does
    t = cpu()
    write(items)
    phases["writing"] = (cpu() - t) / len(urls)
    for key in ("header", "checks", "samples"):
        phases[key] /= len(urls)
    phases["templates"] /= max(1, len(urls) - 1)
    phases["templates_first_file"] = first_template
    t = cpu()
    for url in urls:
        audit_file(url, config=config, resources=AuditResources(template_cache=cache))
    phases["audit_file_total"] = (cpu() - t) / len(urls)
    return phases


# ------------------------------------------------------------------ the report


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def _kb(n: float) -> str:
    return f"{n / 1e3:,.0f} kB"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,5000")
    parser.add_argument("--budget-s", type=float, default=600.0)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--no-samples", action="store_true")
    parser.add_argument(
        "--data",
        choices=("dense", "sparse"),
        default="dense",
        help="sampled data: weight-like (dense, the default) or a hole (sparse); header-only nights are sparse",
    )
    parser.add_argument("--json", metavar="OUT")
    parser.add_argument("--night", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--incremental", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.night:
        return _night_main(args)

    samples = not args.no_samples
    sizes = [int(s) for s in args.sizes.split(",")]
    report: dict[str, Any] = {
        "cpus": os.cpu_count(),
        "workers": args.workers,
        "samples": samples,
        "data": args.data if samples else "sparse",
        "load_average_before": os.getloadavg()[0],
        "sizes": {},
    }
    begun = time.perf_counter()
    last_seconds_per_file: float | None = None
    for n in sizes:
        if last_seconds_per_file is not None:
            # Writing the files and the three nights grow linearly with N (N=5,000 took 0.92 times N=1,000's time
            # per file here); the margin covers a slower machine minute.
            projected = time.perf_counter() - begun + last_seconds_per_file * n * PROJECTION_MARGIN
            if projected > args.budget_s:
                print(f"N={n:,}: skipped (projected {projected:.0f} s past the {args.budget_s:.0f} s budget)")
                continue
        size_begun = time.perf_counter()
        with tempfile.TemporaryDirectory(prefix="gguf-audit-nightly-") as tmp_dir:
            tmp = Path(tmp_dir)
            root, out = tmp / "collection", tmp / "out"
            collection = Collection(dense=args.data == "dense" and samples)
            make_collection(root, n, collection)
            nights: dict[str, Any] = {"data": "dense" if collection.dense else "sparse"}
            nights["full"] = run_night(root, out, incremental=False, workers=args.workers, samples=samples)
            nights["quiet"] = run_night(root, out, incremental=True, workers=args.workers, samples=samples)
            nights["churn_counts"] = churn(root, collection, n)
            nights["churn"] = run_night(root, out, incremental=True, workers=args.workers, samples=samples)
            nights_seconds = time.perf_counter() - size_begun
            if n == sizes[0]:
                report["cpu_per_file"] = cpu_by_phase(root, PROFILED_FILES, samples)
            shutil.rmtree(out, ignore_errors=True)
        report["sizes"][str(n)] = nights
        last_seconds_per_file = nights_seconds / n
        _print_size(n, nights)
    _print_summary(report)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


def _print_size(n: int, nights: dict[str, Any]) -> None:
    full = nights["full"]
    print(
        f"\nN = {n:,} files, data {nights['data']} (churn: {nights['churn_counts']}; "
        f"load average after: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores)"
    )
    print(
        "| night | wall | files/s | bytes added | share of full | rows written | driver peak RSS "
        "| driver output | driver write_bytes |"
    )
    print("|---|---:|---:|---:|---:|---|---:|---:|---:|")
    for name in ("full", "quiet", "churn"):
        r = nights[name]
        rows = ", ".join(f"{k} {v:,}" for k, v in sorted(r["rows_written"].items()))
        share = r["bytes_added"] / full["bytes_added"] if full["bytes_added"] else 0.0
        writes = r["driver_write_bytes"] / full["bytes_added"] if full["bytes_added"] else 0.0
        output = r["driver_output_bytes"] / full["bytes_added"] if full["bytes_added"] else 0.0
        print(
            f"| {name} | {r['wall_s']:.1f} s | {r['files_per_s']:.0f} | {_mb(r['bytes_added'])} | {share:.1%} "
            f"| {rows} | {_mb(r['driver_peak_rss_bytes'])} | {_kb(r['driver_output_bytes'])} ({output:.1%}) "
            f"| {_kb(r['driver_write_bytes'])} ({writes:.1%}) |"
        )


def _print_summary(report: dict[str, Any]) -> None:
    cpu = report.get("cpu_per_file", {})
    if cpu:
        print("\nCPU seconds per file by phase (in-process, 20 files, templates shared):")
        for key, value in cpu.items():
            print(f"  {key:22} {value * 1000:8.1f} ms")
    sizes = report["sizes"]
    if len(sizes) >= 2:
        first, last = sizes[min(sizes, key=int)], sizes[max(sizes, key=int)]
        kind = "sampled" if report["samples"] else "header-only (--no-samples)"
        print(f"\ndriver peak RSS, {kind} nights, N={max(sizes, key=int)} against N={min(sizes, key=int)}:")
        for night in ("full", "quiet", "churn"):
            ratio = last[night]["driver_peak_rss_bytes"] / first[night]["driver_peak_rss_bytes"]
            print(f"  {night:5} {ratio:.2f}x")
    if cpu and sizes:
        per_file = cpu["audit_file_total"] + cpu["writing"]
        n = min(sizes, key=int)
        full = sizes[n]["full"]
        requests = full["requests"] / max(1, full["read"])
        read_bytes = full["bytes_read"] / max(1, full["read"])
        out_bytes = full["bytes_added"] / max(1, full["read"])
        hours = per_file * 1_000_000 / (50 * 2) / 3600
        # What this run's whole pipeline got per core (listing, scheduling, commit and machine load included).
        measured = full["wall_s"] * report["workers"] / max(1, full["read"]) * 1_000_000 / (50 * 2) / 3600
        gets = requests * 1_000_000
        print(
            "\n1,000,000 files on 50 two-core workers (model: CPU per file from the phase run, audit and "
            "rows, cores fully used, reads overlapped with CPU by each worker's threads):"
        )
        print(
            f"  full night: {hours:.2f} h of wall time ({measured:.2f} h at this run's files per core-second); "
            f"{gets / 1e6:.1f} M range GETs ({requests:.1f} per file), {read_bytes / 1e6:.2f} MB read "
            f"and {out_bytes / 1e3:.1f} kB of tables written per file ({out_bytes * 1e6 / 1e9:,.1f} GB a night)"
        )
        print(
            f"  S3 GETs at $0.0004 per 1,000: ${gets * 0.0004 / 1000:,.2f} a full night; a quiet night "
            f"reads no object and lists 1,000 keys per LIST at $0.005 per 1,000: "
            f"{1_000_000 / 1000:,.0f} LISTs, ${1_000_000 / 1000 * 0.005 / 1000:,.3f}"
        )


if __name__ == "__main__":
    sys.exit(main())
