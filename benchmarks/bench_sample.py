"""What sampling costs: requests and bytes per file, against the sampled blocks' own size.

Run as ``python benchmarks/bench_sample.py [--latency-ms 20]``. Serves the
corpus models and two synthetic models with real tensor tables (7B-like and
70B-like Q4_K_M layouts, written as sparse files) from the loopback HTTP
range server, reads each header, samples it with the default
:class:`~gguf_audit.plan.SampleConfig`, and prints per file:

- ``blocks`` and ``block B``: the sampled blocks and their own bytes;
- ``ranges``: the merged ranges fetched for them (one GET each, all in one
  concurrent round), after dropping what the header read already held;
- ``fetch B`` and ``x own``: bytes fetched for samples, and that over the
  blocks' own bytes (merging adds the gaps it bridges; the held header
  prefix can make it less than one);
- ``hdr req``/``hdr B``: the header read; ``ms``: the sampling round.

Writes nothing but the table to stdout; the synthetic files go to a
temporary directory and are removed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from gguf_audit.format.ggml_types import ggml_type_info
from gguf_audit.io.header import read_header
from gguf_audit.io.source import open_source
from gguf_audit.plan import SampleConfig, plan_fetch, plan_samples
from gguf_audit.samples import read_samples
from gguf_audit.testing.builder import Tensor, build_gguf_layout, kv_str
from gguf_audit.testing.http import RangeHTTPServer

F32, Q4_K, Q6_K = 0, 12, 14
CORPUS = Path(__file__).resolve().parent.parent.parent / "shared" / "corpus"


def _llama_tensors(
    n_layer: int, n_embd: int, n_ff: int, n_vocab: int, n_embd_kv: int
) -> list[tuple[str, tuple[int, ...], int]]:
    """The tensor table of a llama model quantized Q4_K_M (Q6_K for output and ffn_down)."""
    out: list[tuple[str, tuple[int, ...], int]] = [("token_embd.weight", (n_embd, n_vocab), Q4_K)]
    for i in range(n_layer):
        b = f"blk.{i}."
        out += [
            (b + "attn_norm.weight", (n_embd,), F32),
            (b + "attn_q.weight", (n_embd, n_embd), Q4_K),
            (b + "attn_k.weight", (n_embd, n_embd_kv), Q4_K),
            (b + "attn_v.weight", (n_embd, n_embd_kv), Q6_K),
            (b + "attn_output.weight", (n_embd, n_embd), Q4_K),
            (b + "ffn_norm.weight", (n_embd,), F32),
            (b + "ffn_gate.weight", (n_embd, n_ff), Q4_K),
            (b + "ffn_up.weight", (n_embd, n_ff), Q4_K),
            (b + "ffn_down.weight", (n_ff, n_embd), Q6_K),
        ]
    out += [("output_norm.weight", (n_embd,), F32), ("output.weight", (n_embd, n_vocab), Q6_K)]
    return out


def write_sparse_model(path: Path, table: list[tuple[str, tuple[int, ...], int]]) -> int:
    """A GGUF with this tensor table, its data a sparse hole; returns the file size."""
    tensors = []
    offset = 0
    for name, dims, type_id in table:
        info = ggml_type_info(type_id)
        n = 1
        for d in dims:
            n *= d
        tensors.append(Tensor(name, dims, type_id, offset=offset, data=b""))
        offset += -(-info.n_bytes(n) // 32) * 32
    layout = build_gguf_layout([kv_str("general.architecture", "llama")], tensors, include_data=False)
    size = layout.data_section_offset + offset
    with open(path, "wb") as f:
        f.write(layout.content)
        f.truncate(size)
    return size


def _row(label: str, url: str, config: SampleConfig) -> str:
    source = open_source(url)
    head = read_header(source)
    hdr_req, hdr_bytes = source.stats.requests, source.stats.bytes_read
    plan = plan_samples(head.header, config=config, file_size=source.size)
    fetch = plan_fetch(plan, held_bytes=len(head.buffer), max_gap_bytes=config.max_gap_bytes)
    begun = time.perf_counter()
    result = read_samples(source, head.header, plan, held=head.buffer, max_gap_bytes=config.max_gap_bytes)
    ms = (time.perf_counter() - begun) * 1000
    req = source.stats.requests - hdr_req
    fetched = source.stats.bytes_read - hdr_bytes
    if req != len(fetch) or result.fetched != tuple(fetch):
        raise SystemExit(f"benchmark bug: {label} made {req} sample requests for {len(fetch)} ranges")
    own = plan.block_bytes
    size = source.size or 0
    return (
        f"{label:<28} {size / 2**20:>9.1f} {len(head.header.tensors):>5} {len(plan.blocks):>6} {own:>8} "
        f"{req:>6} {fetched:>8} {fetched / own if own else 0:>6.2f} {hdr_req:>7} {hdr_bytes:>8} {ms:>7.1f}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--latency-ms", type=float, default=20.0, help="server latency per request")
    args = parser.parse_args(argv)
    config = SampleConfig()
    print(
        f"{'file':<28} {'MiB':>9} {'tens':>5} {'blocks':>6} {'block B':>8} {'ranges':>6} {'fetch B':>8} "
        f"{'x own':>6} {'hdr req':>7} {'hdr B':>8} {'ms':>7}"
    )
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_sparse_model(root / "llama-7b-like-Q4_K_M.gguf", _llama_tensors(32, 4096, 11008, 32000, 4096))
        write_sparse_model(root / "llama-70b-like-Q4_K_M.gguf", _llama_tensors(80, 8192, 28672, 32000, 1024))
        with (
            RangeHTTPServer(root=CORPUS, latency_s=args.latency_ms / 1000) as corpus,
            RangeHTTPServer(root=root, latency_s=args.latency_ms / 1000) as synthetic,
        ):
            for path in sorted((CORPUS / "models").glob("*.gguf")):
                print(_row(path.name.removeprefix("tiny-llama-"), corpus.url_for(f"models/{path.name}"), config))
            print(_row("Q8_0-BE", corpus.url_for("bigendian/tiny-llama-Q8_0-BE.gguf"), config))
            for name in ("llama-7b-like-Q4_K_M.gguf", "llama-70b-like-Q4_K_M.gguf"):
                print(_row(name.removesuffix(".gguf"), synthetic.url_for(name), config))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
