"""What sampling costs and what it still finds: requests, bytes and coverage per file, and planted defects.

Run as ``python benchmarks/bench_sample.py [--latency-ms 20] [--markdown]``.
Serves the corpus models and two synthetic models with real tensor tables
(7B-like and 70B-like Q4_K_M layouts, 4.3 and 44 GB, their data made on
demand by :class:`~gguf_audit.testing.layouts.SyntheticGGUF`) from the
loopback HTTP range server, and with the default
:class:`~gguf_audit.plan.SampleConfig` (32 requests, 1 MiB) prints:

1. per file: the header's requests and the samples' (``total`` is both),
   bytes fetched for samples, blocks decoded, tensors sampled (of all),
   strata of the data section touched (of 16), tensor types sampled (of
   those present), whether the last tensor's last block was read, and the
   sampling round's wall time;
2. per defect planted in the synthetic files (before anything is read,
   without looking at the plan) at the data section's start, middle and
   end: whether the audit still reports it. Zero-filled and NaN-scale
   defects are planted in one tensor (the first, the middle matrix, the
   last) and over one sixteenth of the data section; a cut is judged with
   a stale listing that says the file is whole (with the true size the
   header check reports ``data.truncated`` whatever is sampled). The last
   line says how likely a defect confined to one tensor is to be found:
   the share of tensors sampled.

Writes nothing but the tables to stdout.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gguf_audit.audit import AuditConfig, AuditTarget, audit_file
from gguf_audit.io.header import read_header
from gguf_audit.io.source import ReadConfig, open_source
from gguf_audit.plan import SampleConfig, plan_fetch, plan_samples, stratum_bounds, tensor_geometry
from gguf_audit.samples import read_samples
from gguf_audit.testing.http import RangeHTTPServer
from gguf_audit.testing.layouts import LLAMA_7B_LIKE, LLAMA_70B_LIKE, SyntheticGGUF, TensorRegion, llama_table

CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "corpus"
CONFIG = SampleConfig()
AUDIT = AuditConfig(read=ReadConfig(backoff_s=0.01), samples=CONFIG, semantics=False, templates=False)
MODELS = {"7B-like Q4_K_M": LLAMA_7B_LIKE, "70B-like Q4_K_M": LLAMA_70B_LIKE}


@dataclass(frozen=True, slots=True)
class Cost:
    label: str
    size: int
    n_tensors: int
    header_requests: int
    sample_requests: int
    fetch_bytes: int
    blocks: int
    tensors: int
    strata: int
    types: int
    n_types: int
    last_block: bool
    ms: float

    def row(self) -> list[str]:
        return [
            self.label,
            f"{self.size / 2**20:,.1f}",
            f"{self.header_requests}",
            f"{self.sample_requests}",
            f"{self.header_requests + self.sample_requests}",
            f"{self.fetch_bytes:,}",
            f"{self.blocks:,}",
            f"{self.tensors} of {self.n_tensors}",
            f"{bin(self.strata).count('1')} of 16",
            f"{self.types} of {self.n_types}",
            "yes" if self.last_block else "no",
            f"{self.ms:.0f}",
        ]


COST_HEADER = [
    "file", "MiB", "header req", "sample req", "total req", "sample bytes", "blocks",
    "tensors sampled", "strata", "types", "last block", "ms",
]  # fmt: skip


def measure(label: str, url: str) -> Cost:
    source = open_source(url, config=AUDIT.read)
    head = read_header(source)
    header = head.header
    hdr_requests = source.stats.requests
    hdr_bytes = source.stats.bytes_read
    plan = plan_samples(header, config=CONFIG, file_size=source.size)
    fetch = plan_fetch(plan, held_bytes=len(head.buffer), max_gap_bytes=CONFIG.max_gap_bytes)
    begun = time.perf_counter()
    result = read_samples(source, header, plan, held=head.buffer, max_gap_bytes=CONFIG.max_gap_bytes)
    ms = (time.perf_counter() - begun) * 1000
    requests = source.stats.requests - hdr_requests
    if requests != len(fetch) or result.findings:
        raise SystemExit(f"benchmark bug: {label}: {requests} requests for {len(fetch)} ranges, {result.findings}")
    present = {t.type_id for t in header.tensors if tensor_geometry(t) is not None}
    read_types = {d.block.type_id for d in result.decoded}
    last = max(range(len(header.tensors)), key=lambda i: header.tensors[i].end_offset)
    last_end = header.tensors[last].end_offset
    return Cost(
        label=label,
        size=source.size or 0,
        n_tensors=len(header.tensors),
        header_requests=hdr_requests,
        sample_requests=requests,
        fetch_bytes=source.stats.bytes_read - hdr_bytes,
        blocks=len(plan.blocks),
        tensors=result.sampled_tensors,
        strata=result.sampled_strata,
        types=len(read_types & present),
        n_types=len(present),
        last_block=any(d.block.tensor_index == last and d.block.end_offset == last_end for d in result.decoded),
        ms=ms,
    )


# --- planted defects -------------------------------------------------------------------

Plant = Callable[[SyntheticGGUF], tuple[int, int]]
"""Plants a defect into a model and returns the byte range it spoils."""


def _middle_matrix(model: SyntheticGGUF) -> TensorRegion:
    regions = model.regions
    return next(r for r in regions[len(regions) // 2 :] if r.type_id != 0)


def _tensor(which: str) -> Callable[[SyntheticGGUF], TensorRegion]:
    if which == "first":
        return lambda m: m.regions[0]
    if which == "last":
        return lambda m: max(m.regions, key=lambda r: r.end)
    return _middle_matrix


def _sixteenth(which: str) -> Callable[[SyntheticGGUF], tuple[int, int]]:
    k = {"first": 0, "middle": 7, "last": 15}[which]
    return lambda m: tuple(stratum_bounds(k, m.data_offset, m.full_size))  # type: ignore[return-value]


def _zero_tensor(which: str) -> Plant:
    def plant(m: SyntheticGGUF) -> tuple[int, int]:
        r = _tensor(which)(m)
        m.zero(r.start, r.end)
        return r.start, r.end

    return plant


def _nan_tensor(which: str) -> Plant:
    def plant(m: SyntheticGGUF) -> tuple[int, int]:
        r = _tensor(which)(m)
        m.nan_scales(r.start, r.end)
        return r.start, r.end

    return plant


def _zero_region(which: str) -> Plant:
    def plant(m: SyntheticGGUF) -> tuple[int, int]:
        lo, hi = _sixteenth(which)(m)
        m.zero(lo, hi)
        return lo, hi

    return plant


def _nan_region(which: str) -> Plant:
    def plant(m: SyntheticGGUF) -> tuple[int, int]:
        lo, hi = _sixteenth(which)(m)
        m.nan_scales(lo, hi)
        return lo, hi

    return plant


def _cut(which: str) -> Plant:
    fraction = {"first": 1 / 16, "middle": 1 / 2, "last": 15 / 16}[which]

    def plant(m: SyntheticGGUF) -> tuple[int, int]:
        at = m.data_offset + int((m.full_size - m.data_offset) * fraction)
        m.cut(at)
        return at, m.full_size

    return plant


DEFECTS: list[tuple[str, Callable[[str], Plant], str]] = [
    ("zero-filled tensor", _zero_tensor, "data.zero_filled"),
    ("zero-filled sixteenth", _zero_region, "data.zero_filled"),
    ("NaN scales, one tensor", _nan_tensor, "data.nonfinite"),
    ("NaN scales, a sixteenth", _nan_region, "data.nonfinite"),
    ("cut, stale listed size", _cut, "data.sample_unread"),
]
POSITIONS = ("first", "middle", "last")


def found(server: RangeHTTPServer, dims: tuple[int, int, int, int, int], plant: Plant, code: str) -> bool:
    model = SyntheticGGUF(llama_table(*dims))
    lo, hi = plant(model)
    server.put_virtual("m.gguf", model.size, model.read)
    try:
        audit = audit_file(AuditTarget(server.url_for("m.gguf"), size=model.full_size), config=AUDIT)
    finally:
        server.remove("m.gguf")
    spoiled = {r.name for r in model.regions if r.start < hi and r.end > lo}
    return any(f.code == code and (f.tensor in spoiled or code == "data.sample_unread") for f in audit.findings)


def _table(header: list[str], rows: list[list[str]], markdown: bool) -> str:
    if markdown:
        align = ["---"] + ["---:"] * (len(header) - 1)
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    fmt = [f"{{:<{w}}}" if i == 0 else f"{{:>{w}}}" for i, w in enumerate(widths)]
    return "\n".join("  ".join(f.format(c) for f, c in zip(fmt, r, strict=True)) for r in [header, *rows])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--latency-ms", type=float, default=20.0, help="server latency per request")
    parser.add_argument("--markdown", action="store_true", help="print the tables as Markdown")
    args = parser.parse_args(argv)
    latency = args.latency_ms / 1000
    costs: list[Cost] = []
    defect_rows: list[list[str]] = []
    with RangeHTTPServer(root=CORPUS, latency_s=latency) as server:
        for path in sorted((CORPUS / "models").glob("*.gguf")):
            costs.append(
                measure("corpus " + path.name.removeprefix("tiny-llama-"), server.url_for(f"models/{path.name}"))
            )
        costs.append(measure("corpus Q8_0-BE", server.url_for("bigendian/tiny-llama-Q8_0-BE.gguf")))
        for label, dims in MODELS.items():
            model = SyntheticGGUF(llama_table(*dims))
            server.put_virtual("model.gguf", model.size, model.read)
            costs.append(measure(label, server.url_for("model.gguf")))
            server.remove("model.gguf")
        for name, make, code in DEFECTS:
            for position in POSITIONS:
                cells = [f"{name}, {position}"]
                for dims in MODELS.values():
                    cells.append("found" if found(server, dims, make(position), code) else "missed")
                defect_rows.append(cells)
    synthetic = costs[-len(MODELS) :]
    defect_rows.append(
        ["one bad tensor, anywhere (share sampled)"]
        + [f"{c.tensors / c.n_tensors:.0%} ({c.tensors} of {c.n_tensors})" for c in synthetic]
    )
    print(_table(COST_HEADER, [c.row() for c in costs], args.markdown))
    print()
    print(_table(["defect planted", *MODELS], defect_rows, args.markdown))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
