"""``gguf-audit demo``: the README's main job.

Writes the sample collection (valid files, a truncated download, a corrupt
header, a sharded model missing a shard, one with a wrong index) and scans it
on a local dask cluster, ending with the summary and a DuckDB query of the
tables. The planted problems are the point, so the demo succeeds (exit 0)
whenever the scan itself ran and committed.
"""

from __future__ import annotations

from pipelines.cli import EXIT_FAILED, EXIT_PROBLEMS
from pipelines.cli import main as scan_main
from pipelines.sample_collection import build_sample_collection

__all__ = ["run_demo"]


def run_demo(directory: str, out: str, *, workers: int | None = None, progress: bool = True) -> int:
    urls = build_sample_collection(directory)
    print(f"sample collection: {len(urls)} files under {directory}/")
    argv = [directory, "--out", out]
    if workers is not None:
        argv += ["--workers", str(workers)]
    if not progress:
        argv.append("--no-progress")
    status = scan_main(argv)
    if status == EXIT_PROBLEMS:
        print("(exit status 0: the demo's collection has these problems on purpose)")
        return 0
    return EXIT_FAILED if status != 0 else 0
