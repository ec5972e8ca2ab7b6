"""gguf-audit against llama.cpp itself over seeded header mutants: the confusion matrix and the disagreement classes.

Run as ``python benchmarks/bench_conformance.py [--mutants 20000] [--seed 18] [--chunk 1000]``. It reads the
corpus models (``$GGUF_AUDIT_CORPUS`` or ``../shared/corpus``) as seeds, draws mutants from
:mod:`gguf_audit.testing.mutate`, writes them in chunks to a temporary folder (each a header over a sparse hole),
audits each (header checks, as ``inspect`` without sampling) and asks the oracle (``llama-verdict``, llama.cpp
b11312, ``$GGUF_AUDIT_LLAMA_CPP``) about the same files, then prints:

- the confusion matrix: gguf-audit's verdict (loads / refuses / aborts / unknown) by llama.cpp's
  (loaded / refused / aborted / timeout);
- every disagreement class with its count and one example, the classes the conformance suite lists as
  another area's (hyperparameters, vocabulary) marked ``known``;
- wall time, and mutants per second.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from known_classes import known_class

from gguf_audit.testing.conformance import Outcome, compare
from gguf_audit.testing.mutate import mutants, read_seed
from gguf_audit.testing.oracle import find_oracle

OURS = ("loads", "refuses", "aborts", "unknown")
THEIRS = ("loaded", "refused", "aborted", "timeout")


def corpus_models() -> list[Path]:
    root = Path(os.environ.get("GGUF_AUDIT_CORPUS", Path(__file__).resolve().parents[2] / "shared" / "corpus"))
    return sorted(p for p in (root / "models").glob("*.gguf") if "-BE" not in p.name)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mutants", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=18)
    parser.add_argument("--chunk", type=int, default=1000, help="mutants written and judged at a time")
    args = parser.parse_args(argv)
    oracle = find_oracle()
    if oracle is None:
        print("no llama.cpp oracle (set GGUF_AUDIT_LLAMA_CPP)", file=sys.stderr)
        return 2
    seeds = [read_seed(p) for p in corpus_models()]
    stream = mutants(seeds, args.mutants, seed=args.seed)
    outcomes: list[Outcome] = []
    kinds: dict[str, str] = {}
    began = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="bench-conformance-") as tmp:
        folder = Path(tmp)
        while len(outcomes) < args.mutants:
            chunk = [next(stream) for _ in range(min(args.chunk, args.mutants - len(outcomes)))]
            paths = [m.write(folder) for m in chunk]
            kinds.update((os.fspath(p), m.kind) for p, m in zip(paths, chunk, strict=True))
            outcomes += compare(oracle, paths)
            for p in paths:
                p.unlink()
    seconds = time.perf_counter() - began
    print(report(outcomes, kinds, seconds))
    return 0


def report(outcomes: list[Outcome], kinds: dict[str, str], seconds: float) -> str:
    matrix = Counter((o.ours, o.theirs) for o in outcomes)
    lines = [f"{len(outcomes)} mutants in {seconds:.0f} s ({len(outcomes) / seconds:.0f}/s)", ""]
    lines.append("| gguf-audit \\ llama.cpp | " + " | ".join(THEIRS) + " |")
    lines.append("|---|" + "---:|" * len(THEIRS))
    for ours in OURS:
        lines.append(f"| {ours} | " + " | ".join(str(matrix[(ours, t)]) for t in THEIRS) + " |")
    agree = sum(o.agrees for o in outcomes)
    lines += ["", f"agree: {agree} of {len(outcomes)} ({100 * agree / max(len(outcomes), 1):.2f}%)", ""]
    classes = Counter(o.klass for o in outcomes if not o.agrees)
    example = {}
    for o in outcomes:
        if not o.agrees:
            example.setdefault(o.klass, o)
    for klass, n in classes.most_common():
        o = example[klass]
        tag = known_class(o) or "NEW"
        lines.append(f"{n:6d}  [{tag}] {klass}  (e.g. a {kinds.get(o.path, '?')} mutant)")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
