"""The header parse against ggml's own ``gguf_init_from_file``, in one process, alternating.

Run as ``python benchmarks/bench_parse.py [--sizes 32k,152k,256k] [--rounds 11]``.

For each of the header benchmark's models (:mod:`headers`: 32k, 152k and 256k vocabularies), ggml's
parser (the oracle's ``libggml-base`` through ctypes, ``no_alloc``: the header and tensor infos, no
data) and ours (``parse_header`` on the header's bytes, already in memory; then with the structural
checks that judge what ``gguf.cpp`` refuses) take turns, and the best CPU time (``process_time``) of
each is kept. ggml reads the file itself (from the page cache once warm), ours is given the bytes: the
read is the header benchmark's to measure. Prints our time over ggml's. Run it alone.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from headers import SPECS, write_model

from gguf_audit.checks.structure import check_structure
from gguf_audit.format.parser import parse_header
from gguf_audit.testing.oracle import find_oracle


class _InitParams(ctypes.Structure):
    _fields_ = [("no_alloc", ctypes.c_bool), ("ctx", ctypes.c_void_p)]


def _ggml() -> ctypes.CDLL:
    oracle = find_oracle()  # its runnable copy: the shared folder's library links may be text stubs
    if oracle is None:
        raise SystemExit("no llama.cpp oracle found (../shared/llama.cpp or GGUF_AUDIT_LLAMA_CPP)")
    lib = ctypes.CDLL(str(Path(oracle.binary).parent.parent / "lib" / "libggml-base.so"))
    lib.gguf_init_from_file.restype = ctypes.c_void_p
    lib.gguf_init_from_file.argtypes = [ctypes.c_char_p, _InitParams]
    lib.gguf_free.argtypes = [ctypes.c_void_p]
    return lib


def _cpu(work: object) -> float:
    started = time.process_time()
    work()  # type: ignore[operator]
    return time.process_time() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="32k,152k,256k")
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args(argv)
    lib = _ggml()
    print(f"load average before: {os.getloadavg()[0]:.2f}")
    print("| vocabulary | ggml ms | parse ms | parse / ggml | parse + checks ms | (parse + checks) / ggml |")
    print("|---|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory(prefix="bench-parse-") as tmp:
        for label in args.sizes.split(","):
            made = write_model(SPECS[label], Path(tmp))
            size = made.path.stat().st_size
            with made.path.open("rb") as f:
                data = f.read(made.data_offset)
            name = str(made.path).encode()

            def ggml(name: bytes = name) -> None:
                ctx = lib.gguf_init_from_file(name, _InitParams(True, None))
                if not ctx:
                    raise SystemExit(f"ggml refused {name!r}")
                lib.gguf_free(ctx)

            def ours(data: bytes = data, size: int = size) -> None:
                parse_header(data, size)

            def checked(data: bytes = data, size: int = size) -> None:
                list(check_structure(parse_header(data, size), size))  # type: ignore[arg-type]

            times: dict[str, list[float]] = {"ggml": [], "ours": [], "checked": []}
            for _ in range(args.rounds):
                for key, work in (("ggml", ggml), ("ours", ours), ("checked", checked)):
                    times[key].append(_cpu(work))
            g, p, c = (min(times[k]) * 1e3 for k in ("ggml", "ours", "checked"))
            print(f"| {label} | {g:.1f} | {p:.1f} | {p / g:.2f}x | {c:.1f} | {c / g:.2f}x |")
    print(f"load average after: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
