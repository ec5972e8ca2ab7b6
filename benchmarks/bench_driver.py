"""Driver memory of a full night at 1k, 10k and 100k header-only files, on a local cluster and an external one.

Run as ``python benchmarks/bench_driver.py [--sizes 1000,10000,100000] [--mode local,external] [--workers 2]
[--budget-s 900] [--json OUT] [--phases] [--references N] [--per-folder N] [--quiet] [--quiet-nights N]``.

``--quiet`` also runs, after each full night, an ``--incremental`` night with
nothing changed (every file's rows reused, no file read), in its own driver
process into the same output, and prints it as mode ``local-quiet`` or
``external-quiet``: the night a collection has most often. ``--quiet-nights 2``
runs a second one after it (``local-quiet2``): the usual night, built on a
quiet night's rows (the driver's own data files) rather than the workers'.

``--phases`` also prints, for each night, the driver's RSS
after each phase (its ``driver_phase`` boundaries: listing, models, plan, reuse, audit, lineage, compare,
judge, mirror, the one-row check, commit),
each phase's growth per file, and the peak RSS reached by the end of each.

The collection is one tiny llama-like GGUF (``gguf_audit.testing.builder``'s,
a tiny vocabulary) copied N times (sparse past its header), 1,000 files to a
directory: every file its own URL, inode and model, read header-only (``samples = false``). Each night runs
in a fresh driver process; printed per size and mode: the driver's resident
memory once the cluster is up and before the scan (``base``), its peak during
the scan (``ru_maxrss``), their difference per file, the night's wall time, and
the same two figures for its anonymous memory alone (``RssAnon``, its peak
sampled every 5 ms): the resident memory counts the pages of the files the
driver maps (its listing, its spills) once read, which the kernel may take back
at any time, the anonymous memory its heaps, which it cannot.

``local``: a LocalCluster of ``--workers`` processes started by the driver,
whose process hosts the scheduler too. ``external``: ``dask scheduler`` and
``dask worker`` started as subprocesses on 127.0.0.1, the scan given
``--scheduler``: the driver process is the client alone.

A size past the first runs only while the projected total stays within
``--budget-s`` (from the previous size's seconds per file); a size left out is
projected from the last two measured (linear in the files), and said so.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from gguf_audit.testing.cluster import external_cluster

PYTHON = sys.executable


def make_collection(root: Path, n: int, references: int = 0, per_folder: int = 1000) -> None:
    """``n`` copies of the tiny llama-like model, ``per_folder`` to a folder (1: a folder per model, the common
    layout of a mirror); with ``references``, every ``references``-th an F16 build of it (its full-precision
    sibling: the others are compared with it)."""
    from dataclasses import replace

    from gguf_audit.testing.builder import build_gguf, kv_u32, tiny_llama_like

    kvs, tensors = tiny_llama_like()
    data = build_gguf(kvs, tensors)
    f16 = 1  # ggml's type and llama.cpp's file type alike
    full = build_gguf(
        [kv_u32("general.file_type", f16) if kv.key == "general.file_type" else kv for kv in kvs],
        [replace(t, ggml_type=f16) if len(t.dims) > 1 else t for t in tensors],
    )
    # Its own inode each (the listing audits hard links of one file once), sparse past the header:
    # the tensor data is zeros, so 100,000 copies take a few hundred MB of disk, not 57 GB.
    root.mkdir(parents=True, exist_ok=True)
    for i in range(n):
        folder = root / f"d{i // per_folder:07d}"
        folder.mkdir(exist_ok=True)
        body = full if references and i % references == 0 else data
        with open(folder / f"m-{i:07d}.gguf", "wb") as f:
            f.write(body.rstrip(b"\0"))
            f.truncate(len(body))


def _heap_in_use() -> int:
    """The C heap's bytes in use (glibc's ``mallinfo2``: Arrow's system pool, NumPy, large Python objects), or -1."""
    import ctypes

    class MallInfo2(ctypes.Structure):
        _fields_ = [
            (name, ctypes.c_size_t)
            for name in (
                "arena",
                "ordblks",
                "smblks",
                "hblks",
                "hblkhd",
                "usmblks",
                "fsmblks",
                "uordblks",
                "fordblks",
                "keepcost",
            )
        ]

    try:
        call = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):
        return -1
    call.restype = MallInfo2
    info = call()
    return int(info.uordblks + info.hblkhd)


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def _anon_bytes() -> int:
    """The driver's anonymous resident memory (``RssAnon``): its heaps, not the pages of files it maps."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssAnon:"):
            return int(line.split()[1]) * 1024
    return 0


class _AnonPeak:
    """The highest ``RssAnon`` seen, sampled every ``interval_s`` on a thread of its own (the kernel keeps a
    peak of the whole RSS alone, whose mapped pages of the listing and spills it may drop at any time)."""

    def __init__(self, interval_s: float = 0.005) -> None:
        import threading

        self.peak = self.window = _anon_bytes()
        self._interval_s = interval_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="anon-peak", daemon=True)
        self._thread.start()

    def _watch(self) -> None:
        while not self._stop.wait(self._interval_s):
            now = _anon_bytes()
            self.peak = max(self.peak, now)
            self.window = max(self.window, now)

    def window_peak(self) -> int:
        """The highest ``RssAnon`` since the last call (or the start), the window then begun again."""
        now = _anon_bytes()
        peak, self.window = max(self.window, now), now
        return peak

    def stop(self) -> int:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, _anon_bytes())
        return self.peak


def _night_main(args: argparse.Namespace) -> int:
    """One night in this process: scan, then print its figures as one JSON line."""
    import logging

    from distributed import Client, LocalCluster

    from gguf_audit.pipelines.config import ScanConfig
    from gguf_audit.pipelines.scan.run import run_scan

    config = ScanConfig().replace(
        roots=(args.root,), out=args.out, samples=False, dashboard=False, incremental=args.incremental or None
    )
    with contextlib_cluster(args, LocalCluster, Client, logging.ERROR) as client:
        base, base_anon = _rss_bytes(), _anon_bytes()
        anon = _AnonPeak()
        phases = _watch_phases(anon) if args.phases else {}
        begun = time.perf_counter()
        result = run_scan(config, client=client)
        wall = time.perf_counter() - begun
        peak_anon = anon.stop()
    figures = {
        "files": result.n_files,
        "wall_s": wall,
        "base_rss_bytes": base,
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "base_anon_bytes": base_anon,
        "peak_anon_bytes": peak_anon,
        "rows_checked": result.rows_checked,
    }
    if phases:
        figures["phase_rss_bytes"] = {k: v for k, v in phases.items() if "." not in k}
        for suffix, key in (
            (_PEAK, "phase_peak_bytes"),
            (_HEAP, "phase_heap_bytes"),
            (_BLOCKS, "phase_blocks"),
            (_ANON, "phase_anon_bytes"),
            (_ANON_PEAK, "phase_anon_peak_bytes"),
        ):
            figures[key] = {k.removesuffix(suffix): v for k, v in phases.items() if k.endswith(suffix)}
    print("NIGHT " + json.dumps(figures), flush=True)
    return 0


_PEAK = ".peak"
_HEAP = ".heap"
_BLOCKS = ".blocks"
_ANON = ".anon"
_ANON_PEAK = ".anon_peak"


def _watch_phases(anon: _AnonPeak) -> dict[str, int]:
    """Record the driver's RSS at the end of each phase of the night (filled in as the night runs), and its
    anonymous memory: at the phase's end, and its peak during the phase (``anon``'s samples).

    The phases are the night's own (:func:`~gguf_audit.pipelines.spill.driver_phase`: listing, models, plan,
    reuse, audit, lineage, compare, judge, mirror, one_row, commit), each measured once its memory is handed
    back; the steps within a phase (``audit.batch``, ``judge.sort``, ...) are left out.
    """
    from gguf_audit.pipelines.spill import PhaseEnd, watch_phases

    phases: dict[str, int] = {}

    def ended(end: PhaseEnd) -> None:
        if "." in end.name:
            return
        name = end.name
        phases[name + _ANON] = _anon_bytes()
        phases[name + _ANON_PEAK] = anon.window_peak()
        phases[name] = _rss_bytes()
        phases[name + _PEAK] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
        phases[name + _HEAP] = _heap_in_use()
        phases[name + _BLOCKS] = sys.getallocatedblocks()

    watch_phases(ended)
    return phases


@contextmanager
def contextlib_cluster(args: argparse.Namespace, local_cluster: Any, client_type: Any, level: int) -> Iterator[Any]:
    """The night's client and cluster, made as ``gguf-audit scan`` makes its own (``run.py`` ``DASK_SETTINGS``)."""
    from gguf_audit.pipelines.scan.cluster import dask_settings

    with dask_settings():
        yield from _cluster_of(args, local_cluster, client_type, level)


def _cluster_of(args: argparse.Namespace, local_cluster: Any, client_type: Any, level: int) -> Iterator[Any]:
    if args.scheduler:
        with client_type(args.scheduler, timeout="30s") as client:
            client.wait_for_workers(1, timeout=60)
            yield client
        return
    with (
        local_cluster(
            n_workers=args.workers,
            threads_per_worker=2,
            processes=True,
            host="127.0.0.1",
            dashboard_address=None,
            silence_logs=level,
        ) as cluster,
        client_type(cluster) as client,
    ):
        yield client


def run_night(
    root: Path, out: Path, workers: int, scheduler: str | None, *, phases: bool = False, incremental: bool = False
) -> dict[str, Any]:
    cmd = [PYTHON, __file__, "--night", "--root", str(root), "--out", str(out), "--workers", str(workers)]
    if scheduler:
        cmd += ["--scheduler", scheduler]
    if phases:
        cmd.append("--phases")
    if incremental:
        cmd.append("--incremental")
    done = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=7200)
    lines = [line for line in done.stdout.splitlines() if line.startswith("NIGHT ")]
    if not lines:
        raise RuntimeError(f"night failed (exit {done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-4000:]}")
    figures: dict[str, Any] = json.loads(lines[-1][len("NIGHT ") :])
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--mode", default="local,external")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--budget-s", type=float, default=900.0)
    parser.add_argument("--json", metavar="OUT")
    parser.add_argument("--phases", action="store_true", help="also print the driver's RSS after each phase")
    parser.add_argument(
        "--references",
        type=int,
        default=0,
        metavar="N",
        help="every N-th file an F16 build: the compare phase pairs the others with one (0: none, no pairs)",
    )
    parser.add_argument(
        "--per-folder",
        type=int,
        default=1000,
        metavar="N",
        help="files to a folder (1: a folder per model, as mirrors lay them out; default 1000)",
    )
    parser.add_argument(
        "--quiet", action="store_true", help="after each full night, an incremental night with nothing changed"
    )
    parser.add_argument(
        "--quiet-nights",
        type=int,
        default=1,
        metavar="N",
        help="with --quiet, N quiet nights in a row (the second builds on a quiet night's rows, as most nights do)",
    )
    parser.add_argument("--night", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--incremental", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--root", help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    parser.add_argument("--scheduler", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.night:
        return _night_main(args)

    sizes = [int(s) for s in args.sizes.split(",")]
    modes = [m for m in args.mode.split(",") if m]
    report: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    quiet_names = [f"quiet{k + 1}" if k else "quiet" for k in range(max(1, args.quiet_nights))] if args.quiet else []
    report.update({f"{m}-{q}": [] for m in modes for q in quiet_names})
    spent = 0.0
    with tempfile.TemporaryDirectory(prefix="gguf-audit-driver-") as tmp_dir:
        tmp = Path(tmp_dir)
        print(
            f"{'mode':>14} {'files':>8} {'base MB':>8} {'peak MB':>8} {'KB/file':>8} {'wall s':>7}"
            f" {'anon MB':>8} {'anon peak':>9}"
        )
        for n in sizes:
            per_file = max((r["wall_s"] / r["files"] for rs in report.values() for r in rs), default=0.0)
            if per_file and spent + per_file * n * len(modes) * 1.2 > args.budget_s:
                _project(report, n)
                continue
            root = tmp / f"c{n}"
            make_collection(root, n, args.references, args.per_folder)
            for mode in modes:
                out = tmp / f"out-{mode}-{n}"
                for night in [mode, *(f"{mode}-{q}" for q in quiet_names)]:
                    incremental = night != mode
                    if mode == "external":
                        with external_cluster(tmp, workers=args.workers) as address:
                            figures = run_night(
                                root, out, args.workers, address, phases=args.phases, incremental=incremental
                            )
                    else:
                        figures = run_night(root, out, args.workers, None, phases=args.phases, incremental=incremental)
                    spent += figures["wall_s"]
                    figures["measured"] = True
                    report[night].append(figures)
                    _print(night, figures)
                    _print_phases(figures)
                shutil.rmtree(out, ignore_errors=True)
            shutil.rmtree(root, ignore_errors=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))
    return 0


def _print(mode: str, f: dict[str, Any]) -> None:
    growth = (f["peak_rss_bytes"] - f["base_rss_bytes"]) / max(1, f["files"]) / 1024
    tag = "" if f.get("measured") else "  (projected)"
    anon = f" {f['base_anon_bytes'] / 1e6:>8.0f} {f['peak_anon_bytes'] / 1e6:>9.0f}" if "peak_anon_bytes" in f else ""
    print(
        f"{mode:>14} {f['files']:>8} {f['base_rss_bytes'] / 1e6:>8.0f} {f['peak_rss_bytes'] / 1e6:>8.0f} "
        f"{growth:>8.2f} {f['wall_s']:>7.1f}{anon}{tag}",
        flush=True,
    )


def _print_phases(f: dict[str, Any]) -> None:
    """Each phase's RSS growth over the previous one, per file, and the peak so far (``--phases``)."""
    phases: dict[str, int] = f.get("phase_rss_bytes") or {}
    peaks: dict[str, int] = f.get("phase_peak_bytes") or {}
    heaps: dict[str, int] = f.get("phase_heap_bytes") or {}
    blocks: dict[str, int] = f.get("phase_blocks") or {}
    anons: dict[str, int] = f.get("phase_anon_bytes") or {}
    anon_peaks: dict[str, int] = f.get("phase_anon_peak_bytes") or {}
    previous = f["base_rss_bytes"]
    for name, rss in phases.items():
        growth = (rss - previous) / max(1, f["files"])
        peak = f"  peak so far {peaks[name] / 1e6:>7.1f} MB" if name in peaks else ""
        heap = f"  C heap in use {heaps[name] / 1e6:>6.1f} MB" if heaps.get(name, -1) >= 0 else ""
        objects = f"  Python blocks {blocks[name]:>9,}" if name in blocks else ""
        anon = f"  anon {anons[name] / 1e6:>6.1f} MB (peak {anon_peaks[name] / 1e6:>6.1f})" if name in anons else ""
        print(f"{'':>14} {name:>10} RSS {rss / 1e6:>7.1f} MB  +{growth:>7.0f} B/file{peak}{anon}{heap}{objects}")
        previous = rss


def _project(report: dict[str, list[dict[str, Any]]], n: int) -> None:
    """A size the budget leaves out, from the last two measured sizes (peak RSS linear in the files)."""
    for mode, rows in report.items():
        measured = [r for r in rows if r.get("measured")]
        if len(measured) < 2:
            continue
        a, b = measured[-2], measured[-1]
        slope = (b["peak_rss_bytes"] - a["peak_rss_bytes"]) / max(1, b["files"] - a["files"])
        wall = (b["wall_s"] - a["wall_s"]) / max(1, b["files"] - a["files"])
        figures = {
            "files": n,
            "base_rss_bytes": b["base_rss_bytes"],
            "peak_rss_bytes": int(b["peak_rss_bytes"] + slope * (n - b["files"])),
            **_projected_anon(a, b, n),
            "wall_s": b["wall_s"] + wall * (n - b["files"]),
            "measured": False,
        }
        rows.append(figures)
        _print(mode, figures)


def _projected_anon(a: dict[str, Any], b: dict[str, Any], n: int) -> dict[str, int]:
    if "peak_anon_bytes" not in a or "peak_anon_bytes" not in b:
        return {}
    slope = (b["peak_anon_bytes"] - a["peak_anon_bytes"]) / max(1, b["files"] - a["files"])
    return {
        "base_anon_bytes": b["base_anon_bytes"],
        "peak_anon_bytes": int(b["peak_anon_bytes"] + slope * (n - b["files"])),
    }


if __name__ == "__main__":
    raise SystemExit(main())
