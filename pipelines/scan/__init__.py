"""One night's run on the driver: listing to commit, incremental reuse, lineage, the cluster.

The only package that imports dask (lazily, once a scan starts). What the workers run is
:mod:`~gguf_audit.pipelines.work`'s. The names below are what the commands use.
"""

from __future__ import annotations

from gguf_audit.pipelines.scan.collect import ScanResult
from gguf_audit.pipelines.scan.dry_run import check_protocols, estimate_night, removed_if_left_empty, render_estimate
from gguf_audit.pipelines.scan.gate import Gate, judge_gate
from gguf_audit.pipelines.scan.run import ScanObserver, run_scan
from gguf_audit.pipelines.scan.workers import missing_pipeline_module

__all__ = [
    "Gate",
    "ScanObserver",
    "ScanResult",
    "check_protocols",
    "estimate_night",
    "judge_gate",
    "missing_pipeline_module",
    "removed_if_left_empty",
    "render_estimate",
    "run_scan",
]
