"""Decode throughput of gguf_audit.decode, per ggml type.

Run as ``python benchmarks/bench_decode.py``. For every type with a decoder it
builds about 1 MiB of random blocks whose scales are small finite numbers (so
no NaN/Inf path is timed), decodes them a few times and prints the best run
as input MB/s and output Melem/s. Where ggml has a ``to_float`` for the type and
the oracle's ``libggml-base`` is there (:mod:`gguf_audit.testing.ggml_decode`),
ggml's decoder is timed the same way, alternating with ours, and the table adds
its MB/s and our speed as a fraction of it (``ratio``); it also checks the two
agree bit for bit on those blocks. Times are this process's CPU time (both
decoders run on one thread), so other processes on the machine skew them less
than wall time would. It writes nothing but that table to stdout;
``--types Q4_K Q5_K`` limits it to those types.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from functools import partial

import numpy as np
import numpy.typing as npt

from gguf_audit.decode.kernels import decode_blocks, has_decoder
from gguf_audit.decode.scales import block_scale_problems
from gguf_audit.format.ggml_types import GGML_TYPE_COUNT, ggml_type_info
from gguf_audit.testing.ggml_decode import ggml_to_float

TARGET_BYTES = 1 << 20
REPEATS = 9

# Byte offsets of the fp16 scale fields in each block (ggml-common.h), set to
# small finite values so the timing is of the ordinary path.
FP16_SCALES: dict[str, tuple[int, ...]] = {
    "Q1_0": (0,),
    "Q2_0": (0,),
    "Q4_0": (0,),
    "Q4_1": (0, 2),
    "Q5_0": (0,),
    "Q5_1": (0, 2),
    "Q8_0": (0,),
    "Q8_1": (0, 2),
    "Q2_K": (80, 82),
    "Q3_K": (108,),
    "Q4_K": (0, 2),
    "Q5_K": (0, 2),
    "Q6_K": (208,),
    "TQ1_0": (52,),
    "TQ2_0": (64,),
    "IQ2_XXS": (0,),
    "IQ2_XS": (0,),
    "IQ2_S": (0,),
    "IQ3_XXS": (0,),
    "IQ3_S": (0,),
    "IQ1_S": (0,),
    "IQ4_NL": (0,),
    "IQ4_XS": (0,),
}

ELEMENT_DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8"}
INTEGER_DTYPES = {"I8": "i1", "I16": "<i2", "I32": "<i4", "I64": "<i8"}


def small_floats(rng: np.random.Generator, n: int) -> npt.NDArray[np.float64]:
    return rng.uniform(-0.05, 0.05, n)


def fp16_bytes(rng: np.random.Generator, n: int) -> npt.NDArray[np.uint8]:
    """n small random fp16 values as (n, 2) little-endian bytes."""
    return small_floats(rng, n).astype("<f2").view(np.uint8).reshape(n, 2)


def valid_blocks(name: str, block_bytes: int, n_blocks: int, rng: np.random.Generator) -> bytes:
    """About ``n_blocks`` random blocks of type ``name`` with finite scales."""
    if name in ELEMENT_DTYPES:
        return small_floats(rng, n_blocks).astype(ELEMENT_DTYPES[name]).tobytes()
    if name == "BF16":
        f32 = small_floats(rng, n_blocks).astype("<f4").view("<u4")
        return (f32 >> 16).astype("<u2").tobytes()
    if name in INTEGER_DTYPES:
        info = np.iinfo(np.dtype(INTEGER_DTYPES[name]))
        return (
            rng.integers(info.min, info.max, n_blocks, dtype=np.int64, endpoint=True)
            .astype(INTEGER_DTYPES[name])
            .tobytes()
        )
    blocks = rng.integers(0, 256, (n_blocks, block_bytes), dtype=np.uint8)
    for offset in FP16_SCALES.get(name, ()):
        blocks[:, offset : offset + 2] = fp16_bytes(rng, n_blocks)
    if name == "Q8_K":
        blocks[:, 0:4] = small_floats(rng, n_blocks).astype("<f4").view(np.uint8).reshape(n_blocks, 4)
    elif name == "MXFP4":
        blocks[:, 0] = rng.integers(110, 130, n_blocks, dtype=np.uint8)
    elif name == "NVFP4":
        # d[4]: one UE4M3 scale byte per 16 values; 0x7F and 0xFF are NaN in the NVFP4 spec.
        blocks[:, 0:4] = rng.integers(0x20, 0x50, (n_blocks, 4), dtype=np.uint8)
    elif name == "IQ1_M":
        # Its fp16 scale is the top nibble of each uint16 word of scales[8] (bytes 48..56).
        scale = fp16_bytes(rng, n_blocks).view("<u2").reshape(-1)
        for k in range(4):
            word = blocks[:, 48 + 2 * k : 50 + 2 * k].copy().view("<u2").reshape(-1)
            word = (word & 0x0FFF) | (((scale >> (4 * k)) & 0xF) << 12)
            blocks[:, 48 + 2 * k : 50 + 2 * k] = word.astype("<u2").view(np.uint8).reshape(n_blocks, 2)
    return blocks.tobytes()


def _best(runs: list[Callable[[], object]]) -> list[float]:
    """The best time of each callable over REPEATS rounds, the callables alternating within a round."""
    best = [float("inf")] * len(runs)
    for _ in range(REPEATS):
        for i, run in enumerate(runs):
            start = time.process_time()
            run()
            best[i] = min(best[i], time.process_time() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description="Decode throughput per ggml type, beside ggml's to_float.")
    parser.add_argument("--types", nargs="+", metavar="NAME", help="only these types (e.g. Q4_K Q5_K)")
    args = parser.parse_args()
    wanted = {name.upper() for name in args.types} if args.types else None
    rng = np.random.default_rng(0)
    print(f"{'type':<8} {'id':>3} {'block':>6} {'MiB':>6} {'MB/s':>9} {'Melem/s':>9} {'ggml MB/s':>10} {'ratio':>6}")
    for type_id in range(GGML_TYPE_COUNT):
        if not has_decoder(type_id):
            continue
        info = ggml_type_info(type_id)
        if wanted is not None and info.name not in wanted:
            continue
        n_blocks = max(1, TARGET_BYTES // info.block_bytes)
        raw = valid_blocks(info.name, info.block_bytes, n_blocks, rng)
        n_elems = len(raw) // info.block_bytes * info.block_elems
        problems = block_scale_problems(raw, type_id)
        if problems.nonfinite_scale_blocks or problems.bad_exponent_blocks:
            raise SystemExit(f"benchmark bug: {info.name} blocks have bad scales: {problems}")
        ours = decode_blocks(raw, type_id)  # warm-up: gguf-py builds its IQ grids on first use
        runs: list[Callable[[], object]] = [partial(decode_blocks, raw, type_id)]
        ggml = ggml_to_float(type_id)
        if ggml is not None:
            theirs = ggml(raw)
            if not np.array_equal(ours.view(np.uint32), theirs.view(np.uint32)):
                raise SystemExit(f"{info.name}: gguf-audit and ggml decode these blocks differently")
            runs.append(partial(ggml, raw))
        best = _best(runs)
        mb_s = len(raw) / best[0] / 1e6
        versus = f"{len(raw) / best[1] / 1e6:>10.1f} {best[1] / best[0]:>6.2f}" if ggml is not None else ""
        print(
            f"{info.name:<8} {type_id:>3} {info.block_bytes:>6} {len(raw) / (1 << 20):>6.2f} "
            f"{mb_s:>9.1f} {n_elems / best[0] / 1e6:>9.1f} {versus}".rstrip()
        )


if __name__ == "__main__":
    main()
