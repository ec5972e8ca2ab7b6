"""One night's run: the driver, the worker tasks, batches, incremental reuse, lineage, the cluster.

The only package that imports dask (lazily, once a scan starts).
"""

from __future__ import annotations

from gguf_audit.pipelines.scan.batches import MAX_SPLITS, Batch, auto_batch_size, make_batches, split_batch
from gguf_audit.pipelines.scan.collect import (
    Collector,
    IncompleteModel,
    ScanResult,
    incomplete_models,
    model_summaries,
    runs_row,
)
from gguf_audit.pipelines.scan.compare_task import (
    COMPARE_TABLES,
    CompareBatch,
    CompareOptions,
    CompareResult,
    compare_batch,
)
from gguf_audit.pipelines.scan.deadline import FILE_DEADLINE_SECONDS, deadline_message, wait_for_files
from gguf_audit.pipelines.scan.execute import (
    FILE_TABLES,
    WORKER_POOLS,
    AuditPools,
    BatchResult,
    TaskOptions,
    audit_batch,
    lost_result,
    write_file_rows,
)
from gguf_audit.pipelines.scan.lineage import (
    PAIRS_PER_TASK,
    Lineage,
    compare_batches,
    compare_options,
    judge_lineage,
    reload_member_facts,
    reload_shard_facts,
    run_compare,
    safetensors_dirs,
)
from gguf_audit.pipelines.scan.mirror import (
    MirrorCost,
    MirrorError,
    MirrorHead,
    SourceFingerprints,
    check_mirror,
    check_mirror_config,
    read_head,
    s3_checksum,
    source_fingerprints,
)
from gguf_audit.pipelines.scan.night import DRIVER_TABLES, CommitObserver, Night, RunError
from gguf_audit.pipelines.scan.reuse import (
    ReusePlan,
    base_run,
    carried_models,
    plan_reuse,
    reuse_rows,
    reused_files,
    reused_problem_tally,
    reused_shard_facts,
    stored_tables,
)
from gguf_audit.pipelines.scan.run import ScanObserver, run_scan
from gguf_audit.pipelines.scan.tally import FACT_COLUMNS, Tally, facts_of
from gguf_audit.pipelines.scan.workers import NEEDED, PIPELINE_MODULES, missing_pipeline_module, worker_problems

__all__ = [
    "COMPARE_TABLES",
    "DRIVER_TABLES",
    "FACT_COLUMNS",
    "FILE_DEADLINE_SECONDS",
    "FILE_TABLES",
    "MAX_SPLITS",
    "NEEDED",
    "PAIRS_PER_TASK",
    "PIPELINE_MODULES",
    "WORKER_POOLS",
    "AuditPools",
    "Batch",
    "BatchResult",
    "Collector",
    "CommitObserver",
    "CompareBatch",
    "CompareOptions",
    "CompareResult",
    "IncompleteModel",
    "Lineage",
    "MirrorCost",
    "MirrorError",
    "MirrorHead",
    "Night",
    "ReusePlan",
    "RunError",
    "ScanObserver",
    "ScanResult",
    "SourceFingerprints",
    "Tally",
    "TaskOptions",
    "audit_batch",
    "auto_batch_size",
    "base_run",
    "carried_models",
    "check_mirror",
    "check_mirror_config",
    "compare_batch",
    "compare_batches",
    "compare_options",
    "deadline_message",
    "facts_of",
    "incomplete_models",
    "judge_lineage",
    "lost_result",
    "make_batches",
    "missing_pipeline_module",
    "model_summaries",
    "plan_reuse",
    "read_head",
    "reload_member_facts",
    "reload_shard_facts",
    "reuse_rows",
    "reused_files",
    "reused_problem_tally",
    "reused_shard_facts",
    "run_compare",
    "run_scan",
    "runs_row",
    "s3_checksum",
    "safetensors_dirs",
    "source_fingerprints",
    "split_batch",
    "stored_tables",
    "wait_for_files",
    "worker_problems",
    "write_file_rows",
]
