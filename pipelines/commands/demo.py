"""``gguf-audit demo``: the README's main job.

Writes the sample collection (valid files, a truncated download, a corrupt
header, a sharded model missing a shard, one with a wrong index) and scans it
on a local dask cluster, ending with the summary and a DuckDB query of the
tables. The planted problems are the point, so the demo succeeds (exit 0)
whenever the scan itself ran and committed.
"""

from __future__ import annotations

import argparse
from typing import Any

from gguf_audit.cli import ExitStatus
from gguf_audit.pipelines.commands import SUMMARIES
from gguf_audit.pipelines.commands.scan import main as scan_main
from gguf_audit.pipelines.commands.scan import needs_pipeline_extra
from gguf_audit.report.format import counted
from gguf_audit.testing.sample_collection import build_sample_collection

__all__ = ["add_demo_parser", "run_demo"]


def add_demo_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``demo`` subcommand to ``gguf-audit``'s subparsers (the ``gguf_audit.commands`` entry point)."""
    demo: argparse.ArgumentParser = sub.add_parser(
        "demo",
        help=SUMMARIES["demo"],
        epilog="exit status: 0 the scan committed (the collection's problems are on purpose), 2 it failed, "
        "130/143 interrupted",
    )
    demo.add_argument("dir", nargs="?", default="sample-collection", help="where to write the collection")
    demo.add_argument("--out", default="audit-out", help="where the tables go (default audit-out)")
    demo.add_argument("--workers", type=int, help="local cluster worker processes (default: one per core)")
    demo.add_argument("--no-progress", action="store_true", help="no progress bar")
    demo.set_defaults(func=_cmd_demo)
    return demo


def _cmd_demo(args: argparse.Namespace) -> int:
    return run_demo(
        args.dir, args.out, workers=args.workers, progress=not args.no_progress, quiet=getattr(args, "quiet", False)
    )


def run_demo(
    directory: str, out: str, *, workers: int | None = None, progress: bool = True, quiet: bool = False
) -> int:
    """Write the sample collection to ``directory``, scan it into ``out``; 0 when the scan committed."""
    needs_pipeline_extra("demo")
    urls = build_sample_collection(directory)
    print(f"sample collection: {counted(len(urls), 'file')} under {directory}/")
    argv = [directory, "--out", out]
    if workers is not None:
        argv += ["--workers", str(workers)]
    if not progress:
        argv.append("--no-progress")
    if quiet:
        argv.append("--quiet")
    status = scan_main(argv)
    if status == ExitStatus.PROBLEMS:
        print("(exit status 0: the demo's collection has these problems on purpose)")
        return 0
    return ExitStatus.USAGE if status != 0 else 0
