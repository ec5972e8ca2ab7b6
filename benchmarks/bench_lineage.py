"""Lineage on the driver at family sizes 10^3 to 10^5: the time a night spends judging one family.

Run as ``python benchmarks/bench_lineage.py [--sizes 1000,10000,100000] [--quadratic-up-to 3000]``.

One family of F models (an F16 reference and F - 1 quantized fine-tunes of
the same base model, every model a single file), as a quiet night sees it:
each model carried with its stored family columns
(:func:`~gguf_audit.checks.lineage.carried_lineage`). Timed, as
:func:`~gguf_audit.pipelines.scan.lineage.judge_lineage` runs them: grouping into
families, judging each family (``lineage.*`` findings, compare pairs) and
each model's family columns (:func:`~gguf_audit.tables.lineage.model_lineage_cells`).

``--quadratic-up-to`` also times the columns as they were computed before
(the family's anchor looked up per member, each lookup a pass over the
family) at the sizes up to that bound, for comparison.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

from gguf_audit.checks.lineage import FamilyVerdict, ModelLineage, carried_lineage, families, judge_family
from gguf_audit.tables.lineage import ModelLineageCells, model_lineage_cells

KEY = "f" * 32


def family_models(size: int) -> list[ModelLineage]:
    """One carried family of ``size`` models: the F16 reference first, then quantized fine-tunes."""
    models = []
    for i in range(size):
        full = i == 0
        row = {
            "family_key": KEY,
            "full_precision": full,
            "architecture": "llama",
            "file_type_name": "F16" if full else "Q4_K_M",
        }
        model_id = f"s3://hub/org-{i:06d}/model-{i:06d}"
        models.append(carried_lineage(model_id, [f"{model_id}.gguf"], row))
    return models


def judge(models: Sequence[ModelLineage]) -> tuple[list[FamilyVerdict], dict[str, ModelLineageCells]]:
    verdicts = [judge_family(f) for f in families(models)]
    return verdicts, model_lineage_cells(verdicts)


def quadratic_cells(verdicts: Sequence[FamilyVerdict]) -> int:
    """The columns as computed before: ``family.anchor`` per member (each a pass over the family)."""
    n = 0
    for v in verdicts:
        for m in v.family.models:
            n += m.model_id == v.family.anchor or v.family.anchor is None
    return n


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--quadratic-up-to", type=int, default=3000)
    args = parser.parse_args(argv)
    print(f"{'members':>9} {'lineage s':>10} {'us/member':>10} {'pairs':>8} {'before s':>9}")
    for size in (int(s) for s in args.sizes.split(",")):
        models = family_models(size)
        begun = time.perf_counter()
        verdicts, cells = judge(models)
        seconds = time.perf_counter() - begun
        pairs = sum(len(v.pairs) for v in verdicts)
        if len(cells) != size or pairs != size - 1:
            raise SystemExit(f"lineage judged {len(cells)} models and {pairs} pairs of {size}")
        before = "-"
        if size <= args.quadratic_up_to:
            begun = time.perf_counter()
            quadratic_cells(verdicts)
            before = f"{time.perf_counter() - begun:.2f}"
        print(f"{size:>9} {seconds:>10.3f} {seconds / size * 1e6:>10.1f} {pairs:>8} {before:>9}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
