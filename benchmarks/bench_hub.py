"""hf:// reads over the local Hub: our concurrent resolve-URL reads against the huggingface_hub client's.

Run as ``python benchmarks/bench_hub.py [--latency-ms 30] [--cdn both|on|off] [--against COMMIT] [--markdown]``.
Uploads the corpus models and the four-shard split set (13 files, 25 MB) to
:class:`~gguf_audit.testing.hub.LocalHub` in two repositories, adds the
latency to every request, and reads the same files in each mode, header-only
and sampled (the default :class:`~gguf_audit.plan.SampleConfig`, 64 KiB first
header read as ``configs/hf-mirror.toml``):

- ``ours, 16 files at once``: ``audit_file`` on a pool of 16 threads, as a
  scan's worker runs its files (each file's sampled ranges concurrent too);
- ``ours, one file at a time``: ``audit_file`` in a loop;
- ``HfFileSystem.cat_ranges``: the same byte ranges our reads asked for
  (recorded from the hub's log), through huggingface_hub's filesystem with
  fsspec's generic ``cat_ranges``, one file after another (what reading
  ``hf://`` through fsspec did before);
- ``HfFileSystem.open, no cache``: the same ranges through
  ``open(..., cache_type="none")``, seek and read, one file after another.

With ``--against COMMIT`` (``1306658``: last week's figures), our two modes run
again with that commit's code in a child process against the same servers
(``hub_against.py``), right after this tree's.

Each with the Hub serving the bytes from its resolve URL itself (``--cdn off``) and with every LFS resolve
redirected to a presigned CDN URL on a second loopback server, with the same latency (``--cdn on``; the
real Hub's case). Per mode: wall time, resolve, CDN and API requests per file, bytes served per
file, and bytes served over the bytes the audit needs (header plus the
sampled blocks); each wall time is the best of three runs (listing caches
dropped before each of the client's). The client's modes only read bytes (they parse nothing), so
their wall time is a lower bound for an audit through them.
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from hub_against import OldTree, export

from gguf_audit.audit import AuditConfig, AuditTarget, FileAudit, audit_file
from gguf_audit.io.hub_source import CDN_URLS
from gguf_audit.io.source import ReadConfig
from gguf_audit.plan import SampleConfig
from gguf_audit.testing.http import RangeHTTPServer
from gguf_audit.testing.hub import LocalHub

CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "corpus"
READ = ReadConfig(initial_bytes=64 * 1024, backoff_s=0.01)
CONFIGS = {
    "header-only": AuditConfig(read=READ, templates=False),
    "sampled": AuditConfig(read=READ, samples=SampleConfig(), templates=False),
}


@dataclass(frozen=True, slots=True)
class HubFileRef:
    repo: str
    path: str
    sha: str
    size: int

    @property
    def url(self) -> str:
        return f"hf://{self.repo}/{self.path}"


@dataclass(frozen=True, slots=True)
class Row:
    cdn: bool
    scan: str
    mode: str
    files: int
    wall_s: float
    resolves: int
    cdn_requests: int
    api: int
    served: int
    needed: int

    def cells(self) -> list[str]:
        return [
            "yes" if self.cdn else "no",
            self.scan,
            self.mode,
            f"{self.wall_s:.2f}",
            f"{self.resolves / self.files:.1f}",
            f"{self.cdn_requests / self.files:.1f}",
            f"{self.api / self.files:.1f}",
            f"{self.served / self.files / 1e3:,.0f}",
            f"{self.served / self.needed:.2f}",
        ]


def _upload(hub: LocalHub) -> list[HubFileRef]:
    hub.add_org("org")
    refs: list[HubFileRef] = []
    for repo, folder in (("org/models", "models"), ("org/split", "split")):
        hub.create_repo(repo)
        files = {p.name: p.read_bytes() for p in sorted((CORPUS / folder).glob("*.gguf"))}
        sha = hub.add_files(repo, files)
        refs += [HubFileRef(repo, name, sha, len(data)) for name, data in files.items()]
    return refs


def _audit(hub: LocalHub, ref: HubFileRef, config: AuditConfig) -> FileAudit:
    options = {"endpoint": hub.endpoint, "token": False}
    return audit_file(AuditTarget(ref.url, storage_options=options, size=ref.size, revision=ref.sha), config=config)


def _needed(audits: Sequence[FileAudit]) -> int:
    """Bytes an audit needs: each header and the sampled blocks."""
    total = 0
    for a in audits:
        if a.header is None:
            raise RuntimeError(f"{a.url}: {[f.code for f in a.findings]}")
        total += a.header.header_bytes + sum(r.n_bytes for r in a.samples)
    return total


@dataclass(frozen=True, slots=True)
class Served:
    """What the servers saw in a run: requests to the Hub's resolve URLs, to the CDN and to the API, and the
    file bytes both sent."""

    resolves: int
    cdn_requests: int
    api: int
    served: int


def _measure(hub: LocalHub, run: Callable[[], object], repeat: int = 3) -> tuple[float, Served]:
    """The best wall time of ``repeat`` runs, and the last run's requests and bytes (the same every run)."""
    best = float("inf")
    for _ in range(repeat):
        hub.reset_stats()
        CDN_URLS.clear()  # each run as a night's first read of every file: one resolve each
        if hub.cdn is not None:
            hub.cdn.reset_stats()
        begun = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - begun)
    cdn_requests = len(hub.cdn.requests) if hub.cdn is not None else 0
    cdn_bytes = hub.cdn.bytes_sent if hub.cdn is not None else 0
    return best, Served(hub.resolve_requests, cdn_requests, hub.api_requests, hub.resolve_bytes_sent + cdn_bytes)


def _ranges(hub: LocalHub, refs: Sequence[HubFileRef]) -> dict[str, list[tuple[int, int]]]:
    """The byte ranges each file's reads asked for in the last run, by resolve path: from the hub's log, or
    with a CDN from the CDN's (which names each file by its blob's sha256)."""
    asked: dict[str, list[tuple[int, int]]] = {}
    for r in hub.requests if hub.cdn is None else hub.cdn.requests:
        if r.range:
            first, _, last = r.range.removeprefix("bytes=").partition("-")
            asked.setdefault(r.path.split("?", 1)[0], []).append((int(first), int(last) + 1))
    out: dict[str, list[tuple[int, int]]] = {}
    for ref in refs:
        resolve = f"/{ref.repo}/resolve/{ref.sha}/{ref.path}"
        blob = resolve if hub.cdn is None else f"/lfs/{hub.file(ref.repo, ref.path, ref.sha).sha256}"
        out[resolve] = asked.get(blob, [])
    return out


def _client_reads(hub: LocalHub, refs: Sequence[HubFileRef]) -> dict[str, Callable[[], None]]:
    """huggingface_hub's reads of the byte ranges our last run asked for, one file after another."""
    from huggingface_hub import HfFileSystem

    asked = _ranges(hub, refs)
    fs = HfFileSystem(endpoint=hub.endpoint, token=False, skip_instance_cache=True)
    plan = [(f"{r.repo}@{r.sha}/{r.path}", asked[f"/{r.repo}/resolve/{r.sha}/{r.path}"]) for r in refs]

    def cat_ranges() -> None:
        fs.invalidate_cache()
        for path, ranges in plan:
            fs.cat_ranges([path] * len(ranges), [s for s, _ in ranges], [e for _, e in ranges])

    def no_cache() -> None:
        fs.invalidate_cache()
        for path, ranges in plan:
            with fs.open(path, "rb", cache_type="none") as fh:
                for start, end in ranges:
                    fh.seek(start)
                    fh.read(end - start)

    return {"HfFileSystem.cat_ranges": cat_ranges, "HfFileSystem.open, no cache": no_cache}


def _rows(hub: LocalHub, refs: Sequence[HubFileRef], scan: str, config: AuditConfig) -> list[Row]:
    n, cdn = len(refs), hub.cdn is not None
    audits: list[FileAudit] = []

    def pooled() -> None:
        audits.clear()
        with ThreadPoolExecutor(16) as pool:
            audits.extend(pool.map(lambda r: _audit(hub, r, config), refs))

    def one_at_a_time() -> None:
        for ref in refs:
            _audit(hub, ref, config)

    rows = []
    wall, seen = _measure(hub, pooled)
    needed = _needed(audits)
    rows.append(Row(cdn, scan, "ours, 16 files at once", n, wall, *_counts(seen), needed))
    wall, seen = _measure(hub, one_at_a_time)
    rows.append(Row(cdn, scan, "ours, one file at a time", n, wall, *_counts(seen), needed))
    for mode, fn in _client_reads(hub, refs).items():
        wall, seen = _measure(hub, fn)
        rows.append(Row(cdn, scan, mode, n, wall, *_counts(seen), needed))
    return rows


def _counts(seen: Served) -> tuple[int, int, int, int]:
    return seen.resolves, seen.cdn_requests, seen.api, seen.served


def _old_rows(hub: LocalHub, refs: Sequence[HubFileRef], scan: str, against: tuple[str, Path]) -> list[Row]:
    """Our two modes with an older commit's code (a child process), on the same servers."""
    commit, tree = against
    n, cdn = len(refs), hub.cdn is not None
    old = OldTree(tree, hub.endpoint, [asdict(r) for r in refs], scan)
    try:
        rows = []
        for mode, line in (("16 files at once", "pooled"), ("one file at a time", "serial")):
            answers: list[tuple[float, int]] = []
            wall, seen = _measure(hub, functools.partial(_append, answers, old, line))
            rows.append(Row(cdn, scan, f"ours at {commit}, {mode}", n, wall, *_counts(seen), answers[-1][1]))
        return rows
    finally:
        old.close()


def _append(answers: list[tuple[float, int]], old: OldTree, line: str) -> None:
    answers.append(old.run(line))


def run(latency_s: float, cdn: bool, against: tuple[str, Path] | None = None) -> list[Row]:
    rows: list[Row] = []
    with RangeHTTPServer() as cdn_server, LocalHub(cdn=cdn_server if cdn else None) as hub:
        refs = _upload(hub)
        for ref in refs:  # warm up: imports, the template sandbox, the IO loop and its session
            _audit(hub, ref, CONFIGS["sampled"])
        hub.latency_s = cdn_server.latency_s = latency_s
        for scan, config in CONFIGS.items():
            rows += _rows(hub, refs, scan, config)
            if against is not None:
                rows += _old_rows(hub, refs, scan, against)
    return rows


HEADERS = ["CDN", "scan", "reads", "wall s", "resolves / file", "CDN / file", "API / file", "kB served / file",
           "served / needed"]  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=30.0)
    parser.add_argument(
        "--cdn",
        choices=("both", "on", "off"),
        default="both",
        help="LFS resolves redirect to a CDN server (on), are served by the Hub (off), or both runs",
    )
    parser.add_argument("--against", metavar="COMMIT", help="our reads at COMMIT too (1306658: last week's)")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="gguf-bench-hub-") as tmp:
        against = (args.against, export(args.against, Path(tmp))) if args.against else None
        rows = [row for cdn in (False, True) if args.cdn in ("both", "on" if cdn else "off")
                for row in run(args.latency_ms / 1000, cdn, against)]  # fmt: skip
    if args.markdown:
        print("| " + " | ".join(HEADERS) + " |")
        print("|---|---|---|" + "---:|" * (len(HEADERS) - 3))
        for row in rows:
            print("| " + " | ".join(row.cells()) + " |")
    else:
        widths = [max(len(h), *(len(r.cells()[i]) for r in rows)) for i, h in enumerate(HEADERS)]
        print("  ".join(h.ljust(w) for h, w in zip(HEADERS, widths, strict=True)))
        for row in rows:
            print("  ".join(c.ljust(w) for c, w in zip(row.cells(), widths, strict=True)))
    print(f"\nload average {load:.2f} before, {os.getloadavg()[0]:.2f} after ({os.cpu_count()} CPUs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
