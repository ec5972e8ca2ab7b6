"""Header reading: parse time, peak memory, and requests and bytes over HTTP.

Run as ``python benchmarks/bench_header.py [--quick] [--json OUT]``. In one run it

1. writes three realistic headers (32k, 152k and 256k-token vocabularies, see
   ``headers.py``) into a temporary directory, each file extended sparsely to
   its full model size;
2. times three readers on each, best of N (N=5, 2 with ``--quick``;
   ``GGUFReader`` stops early once its runs pass a time budget, and the table
   says how many runs each had; ours and the naive reader take turns), with
   the cyclic collector on as in real use: ours (``parse_header`` plus every
   structural check), gguf-py's ``GGUFReader`` (fields and tensors touched)
   and the naive reader in ``naive_reader.py``. Ours and the naive reader get
   the file's first ``data_offset`` bytes, read beforehand and not timed (the
   read is timed on its own and shown); ``GGUFReader`` takes the path and
   memory-maps the file, inside its time;
3. measures peak memory of each (reader, file) in a fresh subprocess: the
   ``tracemalloc`` peak (Python and numpy allocations beyond the input bytes;
   mmap pages are invisible to it; the cyclic collector off), and the
   ``ru_maxrss`` growth over the call (which sees the mmap pages
   ``GGUFReader`` touches; for the other two the prefix read is inside that
   window, so every reader pays for its input once). Linux carries
   ``ru_maxrss`` across ``exec`` from the parent, so the children are started
   by a launcher process started before this one grows; each child also
   reports its peak RSS growth from ``VmHWM`` after resetting the mark through
   ``/proc/self/clear_refs``, as a cross-check;
4. serves the files from ``RangeHTTPServer`` on 127.0.0.1 and runs
   ``audit_file`` with 0 and 50 ms added per request, with the size listed and
   unknown: requests, body bytes, bytes over the exact header size, wall time;
5. reads every corpus file and generated header at each candidate first read
   (``header_first_read.py``: 64 KiB to 2 MiB) and prints requests and bytes over
   header bytes per file, per header-size class and under a mirror's mix
   (``--mix``, ``--rtt-ms``, ``--mbps``), and the first read it chooses.
   ``--first-read-only`` runs this part alone (about a minute).

It prints the tables, then a Markdown version for the README, and with
``--json OUT`` writes every figure as JSON. The temporary directory is removed.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import queue
import resource
import shutil
import statistics
import sys
import tempfile
import time
import tracemalloc
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import gguf
import numpy as np
from header_first_read import DEFAULT_MIX, first_reads_alone, measure_first_reads, parse_mix, print_first_reads
from header_http import HTTPCase, measure_http
from header_tables import markdown_table, mb, mb_or_dash, ms, print_table, ratio

# Run as a script, benchmarks/ is sys.path[0]: the generator and the naive peer sit beside this file.
from headers import SPECS, GeneratedFile, write_model
from launcher import Launcher
from naive_reader import NaiveHeader, read_naive

from gguf_audit.checks.structure import check_structure
from gguf_audit.format.model import Header
from gguf_audit.format.parser import parse_header

READERS = ("ours", "gguf", "naive")


# ------------------------------------------------------------------ readers


def read_ours(path: Path, buf: bytes, file_size: int) -> tuple[Header, list[Any]]:
    """``parse_header`` and every structural check, as ``audit_file`` runs them."""
    header = parse_header(buf, file_size)
    if not isinstance(header, Header):
        raise RuntimeError(f"{path.name}: the prefix did not hold the header. Got {header!r}.")
    return header, list(check_structure(header, file_size))


def read_gguf(path: Path, buf: bytes, file_size: int) -> gguf.GGUFReader:
    """gguf-py's reader (it builds every field and tensor in its constructor); touch them all."""
    reader = gguf.GGUFReader(path)
    for f in reader.fields.values():
        _ = (f.name, f.types, len(f.data))
    for t in reader.tensors:
        _ = (t.name, t.tensor_type, t.shape, t.n_bytes, t.data_offset)
    return reader


def read_naive_reader(path: Path, buf: bytes, file_size: int) -> NaiveHeader:
    return read_naive(buf)


READER_FUNCS: dict[str, Callable[[Path, bytes, int], Any]] = {
    "ours": read_ours,
    "gguf": read_gguf,
    "naive": read_naive_reader,
}


def summarize(reader: str, result: Any) -> dict[str, Any]:
    """What each reader saw: key and tensor counts, vocabulary length, our findings."""
    if reader == "ours":
        header, findings = result
        tokens = header.metadata["tokenizer.ggml.tokens"]
        return {
            "n_kv": len(header.kvs),
            "n_tensors": len(header.tensors),
            "n_tokens": tokens.length,
            "header_bytes": header.header_bytes,
            "findings": sorted({f.code for f in findings}),
        }
    if reader == "gguf":
        fields = [name for name in result.fields if not name.startswith("GGUF.")]
        return {
            "n_kv": len(fields),
            "n_tensors": len(result.tensors),
            "n_tokens": len(result.fields["tokenizer.ggml.tokens"].data),
        }
    return {
        "n_kv": len(result.kvs),
        "n_tensors": len(result.tensors),
        "n_tokens": len(result.kvs["tokenizer.ggml.tokens"][1]),
        "header_bytes": result.header_bytes,
    }


def read_prefix(path: Path, n_bytes: int) -> bytes:
    with path.open("rb") as f:
        return f.read(n_bytes)


# ------------------------------------------------------------------ timing


@dataclass
class Timing:
    reader: str
    label: str
    runs_s: list[float]
    summary: dict[str, Any] = field(default_factory=dict)

    @property
    def min_s(self) -> float:
        return min(self.runs_s)

    @property
    def median_s(self) -> float:
        return statistics.median(self.runs_s)


def _time_once(timing: Timing, g: GeneratedFile, buf: bytes) -> None:
    gc.collect()
    begun = time.perf_counter()
    result = READER_FUNCS[timing.reader](g.path, buf, g.file_size)
    timing.runs_s.append(time.perf_counter() - begun)
    if not timing.summary:
        timing.summary = summarize(timing.reader, result)
    del result


def time_readers(g: GeneratedFile, buf: bytes, repeats: int, budget_s: float) -> dict[str, Timing]:
    """Up to ``repeats`` timed calls of every reader.

    ``GGUFReader`` first, until its runs pass ``budget_s`` (after at least one).
    Then ours and the naive reader in turns, so a burst of load from other work
    on the machine falls on both alike; they come after ``GGUFReader`` because
    the first allocations after it has freed half a gigabyte fault fresh pages
    in, which would be charged to whichever reader ran next.
    """
    timings = {r: Timing(r, g.label, []) for r in READERS}
    for _ in range(repeats):
        _time_once(timings["gguf"], g, buf)
        if sum(timings["gguf"].runs_s) > budget_s:
            break
    for _ in range(repeats):
        for reader in ("ours", "naive"):
            _time_once(timings[reader], g, buf)
    return timings


def time_prefix_read(g: GeneratedFile, repeats: int) -> list[float]:
    runs = []
    for _ in range(repeats):
        begun = time.perf_counter()
        read_prefix(g.path, g.data_offset)
        runs.append(time.perf_counter() - begun)
    return runs


# ------------------------------------------------------------------ memory (child processes)


def _proc_status_bytes(field_name: str) -> int | None:
    """A ``kB`` line of ``/proc/self/status`` (Linux), in bytes."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field_name + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def _reset_peak_rss() -> bool:
    """Reset VmHWM to the current RSS (Linux 4.0+: ``echo 5 > /proc/self/clear_refs``)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        return False
    return True


def child_memory(mode: str, reader: str, path: Path, file_size: int, data_offset: int) -> dict[str, Any]:
    """One measurement in this (fresh) process: its figures, to print as JSON."""
    fn = READER_FUNCS[reader]
    gc.collect()
    if mode == "tracemalloc":
        buf = read_prefix(path, data_offset) if reader != "gguf" else b""
        # The cyclic collector off: none of the readers makes cyclic garbage, so
        # the peak is the same (GGUFReader: 83.4 MB and 665.7 MB either way), and
        # full collections over GGUFReader's millions of traced objects would
        # add half a minute to the 256k file.
        gc.disable()
        tracemalloc.start()
        tracemalloc.reset_peak()
        result = fn(path, buf, file_size)
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        gc.enable()
        del result
        return {"tracemalloc_peak_bytes": peak}
    # ru_maxrss is in KiB on Linux. The prefix read is inside the window, as
    # the mmap pages GGUFReader touches are.
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    rss_before = _proc_status_bytes("VmRSS")
    hwm_reset = _reset_peak_rss()
    buf = read_prefix(path, data_offset) if reader != "gguf" else b""
    result = fn(path, buf, file_size)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    hwm_after = _proc_status_bytes("VmHWM")
    del result
    hwm_growth = hwm_after - rss_before if hwm_reset and hwm_after is not None and rss_before is not None else None
    return {
        "maxrss_before_bytes": before * 1024,
        "maxrss_delta_bytes": (after - before) * 1024,
        "rss_before_bytes": rss_before,
        "hwm_growth_bytes": hwm_growth,
    }


_MEMORY_FIELDS = {
    "tracemalloc": ("tracemalloc_peak_bytes", "tracemalloc_child_s"),
    "rss": ("maxrss_before_bytes", "maxrss_delta_bytes", "rss_before_bytes", "hwm_growth_bytes", "rss_child_s"),
}


def measure_memory(
    files: Sequence[GeneratedFile], launchers: Sequence[Launcher], *, skip: set[tuple[str, str, str]]
) -> dict[tuple[str, str], dict[str, Any]]:
    """Every (reader, file) in fresh subprocesses, one per launcher at a time (no timing runs meanwhile).

    ``skip`` holds (mode, reader, label) cells not measured; their figures are None.
    """
    out: dict[tuple[str, str], dict[str, Any]] = {}
    jobs: list[tuple[str, str, GeneratedFile]] = []
    for g in files:
        for reader in READERS:
            cell = out.setdefault((reader, g.label), {})
            for mode, names in _MEMORY_FIELDS.items():
                if (mode, reader, g.label) in skip:
                    cell.update(dict.fromkeys(names))
                else:
                    jobs.append((mode, reader, g))
    # Longest first, so the launchers finish together: GGUFReader under
    # tracemalloc takes a minute or more on the big vocabularies, the rest seconds.
    jobs.sort(key=lambda j: (j[1] == "gguf", j[0] == "tracemalloc", j[2].header_bytes), reverse=True)
    free: queue.Queue[Launcher] = queue.Queue()
    for launcher in launchers:
        free.put(launcher)

    def run(job: tuple[str, str, GeneratedFile]) -> tuple[str, str, dict[str, Any]]:
        mode, reader, g = job
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child-memory", mode, reader, str(g.path),
               str(g.file_size), str(g.data_offset)]  # fmt: skip
        launcher = free.get()
        begun = time.perf_counter()
        try:
            code, stdout, stderr = launcher.run(cmd)
        finally:
            free.put(launcher)
        if code != 0:
            raise RuntimeError(f"memory child {mode}/{reader}/{g.label} failed: {stderr.strip()[-2000:]}")
        figures = json.loads(stdout.strip().splitlines()[-1])
        figures[f"{mode}_child_s"] = time.perf_counter() - begun
        return reader, g.label, figures

    with ThreadPoolExecutor(max_workers=len(launchers)) as pool:
        for reader, label, figures in pool.map(run, jobs):
            out[(reader, label)].update(figures)
    return out


# ------------------------------------------------------------------ HTTP


# ------------------------------------------------------------------ output


def check_agreement(files: Sequence[GeneratedFile], timings: dict[tuple[str, str], Timing]) -> list[str]:
    """Problems if the readers did not read the same counts (the smoke test checks far more)."""
    problems = []
    for g in files:
        seen = {r: timings[(r, g.label)].summary for r in READERS}
        expected = {"n_kv": g.n_kv, "n_tensors": g.n_tensors, "n_tokens": g.spec.vocab_size}
        for key, want in expected.items():
            values = {r: s[key] for r, s in seen.items()}
            if set(values.values()) != {want}:
                problems.append(f"{g.label}: {key} should be {want}; the readers saw {values}")
        if seen["ours"]["header_bytes"] != g.header_bytes or seen["naive"]["header_bytes"] != g.header_bytes:
            problems.append(f"{g.label}: header end differs from the builder's {g.header_bytes}")
    return problems


def print_report(
    files: Sequence[GeneratedFile],
    timings: dict[tuple[str, str], Timing],
    prefix_runs: dict[str, list[float]],
    memory: dict[tuple[str, str], dict[str, Any]],
    http: Sequence[HTTPCase],
    repeats: int,
) -> None:
    """The tables on stdout, then their Markdown for the README."""
    print_table(
        "Generated files",
        ["vocab", "model", "tokenizer", "tokens", "kvs", "tensors", "header MB", "file size", "on disk"],
        [
            [g.label, g.spec.name, g.spec.tokenizer, str(g.spec.vocab_size), str(g.n_kv), str(g.n_tensors),
             mb(g.header_bytes), f"{g.file_size / 1e9:.1f} GB", f"{g.on_disk_bytes / 1e6:.1f} MB"]
            for g in files
        ],
    )  # fmt: skip

    def t(reader: str, g: GeneratedFile) -> Timing:
        return timings[(reader, g.label)]

    def m(reader: str, g: GeneratedFile, key: str) -> int | None:
        value = memory[(reader, g.label)][key]
        return None if value is None else int(value)

    print_table(
        "Local parse time, ms: min / median (runs); the input prefix read is not included (shown apart)",
        ["vocab", "header MB", "prefix read", "ours", "GGUFReader", "naive", "ours/naive", "ours/GGUFReader"],
        [
            [g.label, mb(g.header_bytes), ms(min(prefix_runs[g.label]))]
            + [f"{ms(t(r, g).min_s)} / {ms(t(r, g).median_s)} ({len(t(r, g).runs_s)})" for r in READERS]
            + [ratio(t("ours", g).min_s, t("naive", g).min_s, 2), ratio(t("ours", g).min_s, t("gguf", g).min_s)]
            for g in files
        ],
    )
    print_table(
        "Peak memory, MB, a fresh process per cell: tracemalloc peak | ru_maxrss growth | VmHWM growth"
        " (both RSS figures include reading the input)",
        ["vocab", "tm ours", "tm GGUFReader", "tm naive", "rss ours", "rss GGUFReader", "rss naive",
         "hwm ours", "hwm GGUFReader", "hwm naive", "tm ours/GGUF", "rss ours/GGUF"],
        [
            [g.label]
            + [mb_or_dash(m(r, g, key)) for key in ("tracemalloc_peak_bytes", "maxrss_delta_bytes",
                                                       "hwm_growth_bytes") for r in READERS]
            + [ratio(m("ours", g, "tracemalloc_peak_bytes"), m("gguf", g, "tracemalloc_peak_bytes")),
               ratio(m("ours", g, "maxrss_delta_bytes"), m("gguf", g, "maxrss_delta_bytes"))]
            for g in files
        ],
    )  # fmt: skip
    print_table(
        "audit_file over HTTP (RangeHTTPServer on 127.0.0.1): wall ms min / median",
        ["vocab", "latency ms", "size", "requests", "MB sent", "x header", "wall ms", "status", "ranges"],
        [
            [c.label, f"{c.latency_ms:.0f}", "listed" if c.size_listed else "unknown", str(c.requests),
             mb(c.bytes_sent), f"{c.bytes_ratio:.3f}", f"{ms(min(c.runs_s))} / {ms(statistics.median(c.runs_s))}",
             c.status, " ".join(r or "-" for r in c.ranges)]
            for c in http
        ],
    )  # fmt: skip

    print("\n<!-- Markdown for README.md -->")
    print(
        f"Parse time: best of up to {repeats} runs (GGUFReader: see runs in the text table), on the file's first "
        "`data_offset` bytes already in memory; *ours* is `parse_header` plus every structural check. "
        "Peak memory: `tracemalloc` peak, and `ru_maxrss` growth (input read or mapped included), "
        "each in a fresh process.\n"
    )
    print(
        markdown_table(
            ["vocab", "header", "ours", "naive", "GGUFReader", "ours / naive", "ours / GGUFReader",
             "peak ours", "peak GGUFReader", "RSS ours", "RSS GGUFReader"],
            [
                [g.label, f"{mb(g.header_bytes)} MB", f"{ms(t('ours', g).min_s)} ms", f"{ms(t('naive', g).min_s)} ms",
                 f"{ms(t('gguf', g).min_s)} ms", ratio(t("ours", g).min_s, t("naive", g).min_s, 2),
                 ratio(t("ours", g).min_s, t("gguf", g).min_s),
                 mb_or_dash(m('ours', g, 'tracemalloc_peak_bytes'), " MB"),
                 mb_or_dash(m('gguf', g, 'tracemalloc_peak_bytes'), " MB"),
                 mb_or_dash(m('ours', g, 'maxrss_delta_bytes'), " MB"),
                 mb_or_dash(m('gguf', g, 'maxrss_delta_bytes'), " MB")]
                for g in files
            ],
        )
    )  # fmt: skip
    print("\n`audit_file` over HTTP from the loopback range server; bytes read against the exact header size:\n")
    print(
        markdown_table(
            ["vocab", "added latency", "size", "requests", "bytes read", "× header", "wall"],
            [
                [c.label, f"{c.latency_ms:.0f} ms", "listed" if c.size_listed else "unknown", str(c.requests),
                 f"{mb(c.bytes_sent)} MB", f"{c.bytes_ratio:.3f}", f"{ms(min(c.runs_s))} ms"]
                for c in http
            ],
        )
    )  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="best of 2 instead of 5, fewer HTTP repeats, no tracemalloc of GGUFReader past the 32k vocabulary",
    )
    parser.add_argument("--json", type=Path, metavar="OUT", help="write every figure as JSON to OUT")
    parser.add_argument("--sizes", default=",".join(SPECS), help=f"comma-separated subset of {','.join(SPECS)}")
    parser.add_argument("--first-read-only", action="store_true", help="only the first-read table (step 5)")
    parser.add_argument(
        "--mix",
        default=",".join(f"{k}={v}" for k, v in DEFAULT_MIX.items()),
        help="a mirror's header-size classes and their weights for the first-read table",
    )
    parser.add_argument("--rtt-ms", type=float, default=30.0, help="a request's round trip, for the first-read model")
    parser.add_argument("--mbps", type=float, default=100.0, help="MB/s a read streams at, for the first-read model")
    parser.add_argument("--child-memory", nargs=5, metavar=("MODE", "READER", "PATH", "SIZE", "DATA_OFFSET"),
                        help=argparse.SUPPRESS)  # fmt: skip
    args = parser.parse_args(argv)
    if args.child_memory:
        mode, reader, path, size, data_offset = args.child_memory
        print(json.dumps(child_memory(mode, reader, Path(path), int(size), int(data_offset))))
        return 0

    labels = [s.strip() for s in args.sizes.split(",") if s.strip()]
    unknown = [s for s in labels if s not in SPECS]
    if unknown or not labels:
        parser.error(f"--sizes takes a subset of {','.join(SPECS)}. Got {args.sizes!r}.")
    try:
        mix = parse_mix(args.mix)
    except ValueError as exc:
        parser.error(str(exc))
    if args.first_read_only:
        print_first_reads(
            first_reads_alone([SPECS[label] for label in labels], mix, args.rtt_ms / 1e3, args.mbps * 1e6)
        )
        return 0
    repeats = 2 if args.quick else 5
    budget_s = 4.0 if args.quick else 10.0
    http_repeats = 2 if args.quick else 3
    # GGUFReader under tracemalloc runs about 4x slower than plain: over a minute a big vocabulary.
    skip = {("tracemalloc", "gguf", label) for label in labels if label != "32k"} if args.quick else set()

    begun = time.perf_counter()
    load_before = os.getloadavg()
    launchers = [Launcher(), Launcher()]  # before this process grows: see Launcher
    phases: dict[str, float] = {}
    tmp = Path(tempfile.mkdtemp(prefix="gguf-bench-"))
    try:
        t0 = time.perf_counter()
        files = [write_model(SPECS[label], tmp) for label in labels]
        phases["generate_s"] = time.perf_counter() - t0
        print(f"generated {len(files)} files in {phases['generate_s']:.1f} s under {tmp} (sparse)", flush=True)

        # Local parse time: one file at a time, the readers in turns, nothing else of ours running.
        t0 = time.perf_counter()
        timings: dict[tuple[str, str], Timing] = {}
        prefix_runs: dict[str, list[float]] = {}
        for g in files:
            buf = read_prefix(g.path, g.data_offset)
            prefix_runs[g.label] = time_prefix_read(g, repeats)
            for reader, timing in time_readers(g, buf, repeats, budget_s).items():
                timings[(reader, g.label)] = timing
            del buf
        phases["local_s"] = time.perf_counter() - t0
        problems = check_agreement(files, timings)
        print(f"timed the readers in {phases['local_s']:.1f} s", flush=True)

        t0 = time.perf_counter()
        memory = measure_memory(files, launchers, skip=skip)
        phases["memory_s"] = time.perf_counter() - t0
        print(f"measured memory in {phases['memory_s']:.1f} s", flush=True)

        t0 = time.perf_counter()
        http = measure_http(files, tmp, http_repeats)
        phases["http_s"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        first_reads = measure_first_reads(files, mix, args.rtt_ms / 1e3, args.mbps * 1e6)
        phases["first_read_s"] = time.perf_counter() - t0
    finally:
        for launcher in launchers:
            launcher.close()
        shutil.rmtree(tmp, ignore_errors=True)
    total_s = time.perf_counter() - begun
    load_after = os.getloadavg()

    print_report(files, timings, prefix_runs, memory, http, repeats)
    print_first_reads(first_reads)
    print(
        f"\ntotal {total_s:.0f} s ({', '.join(f'{k[:-2]} {v:.0f} s' for k, v in phases.items())}); "
        f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after"
    )
    for p in problems:
        print(f"DISAGREEMENT: {p}")

    if args.json:
        report = {
            "environment": {
                "python": sys.version.split()[0],
                "platform": platform.platform(),
                "cpus": os.cpu_count(),
                "gguf": _dist_version("gguf"),
                "numpy": np.__version__,
                "load_average_before": load_before,
                "load_average_after": load_after,
            },
            "settings": {
                "quick": args.quick,
                "repeats": repeats,
                "budget_s": budget_s,
                "http_repeats": http_repeats,
                "input": "ours and naive: the first data_offset bytes, read before timing; GGUFReader: the path",
            },
            "phases": phases,
            "total_s": total_s,
            "files": [
                {
                    "label": g.label,
                    "model": g.spec.name,
                    "tokenizer": g.spec.tokenizer,
                    "vocab_size": g.spec.vocab_size,
                    "n_kv": g.n_kv,
                    "n_tensors": g.n_tensors,
                    "header_bytes": g.header_bytes,
                    "data_offset": g.data_offset,
                    "file_size": g.file_size,
                    "on_disk_bytes": g.on_disk_bytes,
                }
                for g in files
            ],
            "local": [
                {
                    "label": g.label,
                    "prefix_read_runs_s": prefix_runs[g.label],
                    **{f"{r}_runs_s": timings[(r, g.label)].runs_s for r in READERS},
                    **{f"{r}_min_s": timings[(r, g.label)].min_s for r in READERS},
                    **{f"{r}_median_s": timings[(r, g.label)].median_s for r in READERS},
                    "ours_over_naive": timings[("ours", g.label)].min_s / timings[("naive", g.label)].min_s,
                    "ours_over_gguf": timings[("ours", g.label)].min_s / timings[("gguf", g.label)].min_s,
                    "ours_findings": timings[("ours", g.label)].summary["findings"],
                }
                for g in files
            ],
            "memory": [{"reader": r, "label": label, **figures} for (r, label), figures in memory.items()],
            "http": [{**asdict(c), "bytes_ratio": c.bytes_ratio} for c in http],
            "first_reads": asdict(first_reads),
            "problems": problems,
        }
        args.json.write_text(json.dumps(report, indent=2) + "\n")
        print(f"\nwrote {args.json}")
    return 1 if problems else 0


def _dist_version(name: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    sys.exit(main())
