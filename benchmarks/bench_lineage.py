"""Lineage on the driver at family sizes 10^3 to 10^5: the time a night spends judging one family.

Run as ``python benchmarks/bench_lineage.py [--sizes 1000,10000,100000] [--objects-up-to 100000]``.

One family of F models (an F16 reference and F - 1 quantized fine-tunes of
the same base model, every model a single file), each carried with stored
family columns that no longer hold (the family gained its reference this
night), so every model is judged again and every quantized one paired. Timed,
as :func:`~gguf_audit.pipelines.scan.lineage.judge_lineage` runs it
(:func:`~gguf_audit.pipelines.scan.lineage.lineage_of`): the members as
columns, the families judged over them, the models judged again, the pairs,
then each model's family columns made 2,048 models at a time, as the models'
chunks are judged.

``--objects-up-to`` also times, at the sizes up to that bound, the path it
replaced: a :class:`~gguf_audit.checks.lineage.ModelLineage` per model,
:func:`~gguf_audit.checks.lineage.families`,
:func:`~gguf_audit.checks.lineage.judge_family` and
:func:`~gguf_audit.tables.lineage.model_lineage_cells`.
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

from gguf_audit.checks.lineage import FamilyVerdict, ModelLineage, carried_lineage, families, judge_family
from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.scan.collect import Collector
from gguf_audit.pipelines.scan.groups import ModelGroups
from gguf_audit.pipelines.scan.night import MODELS_PER_CHUNK
from gguf_audit.tables.lineage import ModelLineageCells, model_lineage_cells

KEY = "f" * 32


def family_rows(size: int) -> list[dict[str, object]]:
    """The stored ``models`` columns of one carried family of ``size`` models: the F16 reference first."""
    rows = []
    for i in range(size):
        full = i == 0
        model_id = f"s3://hub/org-{i:06d}/model-{i:06d}"
        rows.append(
            {
                "model_id": model_id,
                "url": f"{model_id}.gguf",
                "family_key": KEY,
                "full_precision": full,
                "architecture": "llama",
                "file_type_name": "F16" if full else "Q4_K_M",
                "family_anchor": None,  # stale: every model is judged again
                "family_source": None,
                "reference_url": None,
            }
        )
    return rows


def family_models(size: int) -> list[ModelLineage]:
    """The same family as one :class:`ModelLineage` per model (the path lineage took before)."""
    return [carried_lineage(str(r["model_id"]), [str(r["url"])], r) for r in family_rows(size)]


def judge(models: Sequence[ModelLineage]) -> tuple[list[FamilyVerdict], dict[str, ModelLineageCells]]:
    """The path lineage took before: families of objects, each family's verdict, a dict of every model's cells."""
    verdicts = [judge_family(f) for f in families(models)]
    return verdicts, model_lineage_cells(verdicts)


def judge_columns(rows: Sequence[dict[str, object]]) -> tuple[Any, int, float]:
    """Lineage as a night takes it now, how many models' cells were made (a chunk at a time), and the
    seconds both took (the groups and the carried table, made before, are not timed)."""
    groups = ModelGroups(str(r["url"]) for r in rows)
    columns = ("model_id", "architecture", "file_type_name", *ModelLineageCells().columns())
    types = {"full_precision": pa.bool_()}
    carried = pa.table({c: pa.array([r[c] for r in rows], types.get(c, pa.string())) for c in columns})
    from gguf_audit.pipelines.scan.lineage import lineage_of

    collector = Collector(groups.model_ids)
    ids = list(groups)
    begun = time.perf_counter()
    try:
        lineage = lineage_of(ScanConfig(), groups, collector, carried, ())
    finally:
        collector.close()
    made = 0
    for start in range(0, len(ids), MODELS_PER_CHUNK):
        made += sum(c is not None for c in lineage.cells.of(ids[start : start + MODELS_PER_CHUNK]))
    return lineage, made, time.perf_counter() - begun


def _rss_bytes() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    return 0


def memory(n: int, trace: bool = False) -> dict[str, float]:
    """What a first night's lineage phase keeps per model, in this process: ``n`` single-file models of
    one quantized family (bench_driver.py's collection), their facts spilled a batch of 1,024 at a time.

    ``judge_lineage`` runs with its answer kept (a night keeps it until the models are judged), Arrow on
    the system allocator as a night's driver has it; returned: the RSS it added per model, or with ``trace``
    the Python and NumPy heap it keeps and its peak (tracemalloc, which adds RSS of its own).
    """
    pa.set_memory_pool(pa.system_memory_pool())
    from gguf_audit.pipelines.scan.lineage import judge_lineage
    from gguf_audit.pipelines.work.tally import facts_of
    from gguf_audit.tables.schema import SCHEMAS, rows_to_table

    urls = [f"file:///c/d{i // 1000:04d}/m-{i:07d}.gguf" for i in range(n)]
    groups = ModelGroups(urls)
    collector = Collector(groups.model_ids)
    for start in range(0, n, 1024):
        rows = [
            {
                "url": u, "model_id": groups.model_of(u), "status": "ok", "n_problems": 0, "n_errors": 0,
                "n_warnings": 0, "bytes_read": 1, "requests": 1, "io_seconds": 0.0, "seconds": 0.0,
                "source_run_id": "r", "reused": False, "architecture": "llama", "name": "Tiny",
                "file_type_name": "Q4_K_M", "tensor_set_digest": f"{7:032x}", "full_precision": False,
            }
            for u in urls[start : start + 1024]
        ]  # fmt: skip
        collector.facts.append(facts_of(rows_to_table("files", rows)))
    del rows
    gc.collect()
    if trace:
        tracemalloc.start()
    before_heap = tracemalloc.get_traced_memory()[0]
    before_rss = _rss_bytes()
    lineage = judge_lineage(None, ScanConfig(), groups, collector, SCHEMAS["models"].empty_table(), iter(()))  # type: ignore[arg-type]
    gc.collect()
    heap, peak = tracemalloc.get_traced_memory()
    rss = _rss_bytes()
    tracemalloc.stop()
    collector.close()
    del lineage
    if trace:
        return {"heap_kept_per_model": (heap - before_heap) / n, "heap_peak_per_model": (peak - before_heap) / n}
    return {"rss_per_model": (rss - before_rss) / n}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--objects-up-to", type=int, default=100_000)
    parser.add_argument("--memory", type=int, metavar="N", help="only measure what lineage keeps for N models")
    parser.add_argument("--trace", action="store_true", help="with --memory: the Python heap (tracemalloc)")
    args = parser.parse_args(argv)
    if args.memory:
        figures = memory(args.memory, args.trace)
        print(f"{args.memory} models: " + ", ".join(f"{k} {v:.0f} B" for k, v in figures.items()))
        return 0
    print(f"{'members':>9} {'lineage s':>10} {'us/member':>10} {'pairs':>8} {'objects s':>10} {'us/member':>10}")
    for size in (int(s) for s in args.sizes.split(",")):
        rows = family_rows(size)
        lineage, made, seconds = judge_columns(rows)
        pairs = len(lineage.pairs)
        if made != size or pairs != size - 1 or len(lineage.rejudge) != size:
            raise SystemExit(f"lineage judged {made} models and {pairs} pairs of {size}")
        before = per_member = "-"
        if size <= args.objects_up_to:
            models = family_models(size)
            begun = time.perf_counter()
            judge(models)
            elapsed = time.perf_counter() - begun
            before, per_member = f"{elapsed:.3f}", f"{elapsed / size * 1e6:.1f}"
        print(f"{size:>9} {seconds:>10.3f} {seconds / size * 1e6:>10.1f} {pairs:>8} {before:>10} {per_member:>10}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
