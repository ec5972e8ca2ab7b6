"""``gguf-audit report``: one night of the audit tables as a self-contained HTML page.

    gguf-audit report OUT [--run RUN] --html FILE [--nights N] [--storage-options JSON]

The page (:mod:`gguf_audit.report.html`) shows the night's headline, its problems
by code and severity, the trend over the last ``N`` nights (default 14), what is
new and resolved since the previous night (:mod:`~gguf_audit.pipelines.nights.diff`),
the incomplete shard sets, the models (a sortable table), each file collapsed
with its problems and provenance (files with errors first, then warnings),
each distinct chat template once, the files holding the same weights
(:mod:`~gguf_audit.pipelines.nights.duplicates`), the mirror against its source
where the night checked one, and the quantization error per type where the
output has a ``compare`` table. Every read names its columns
(:mod:`~gguf_audit.pipelines.nights.nightview`). Exit status 0, or 2 when the output or
the night cannot be read or FILE cannot be written.
"""

from __future__ import annotations

import argparse
from typing import Any, Final

from fsspec.core import url_to_fs

from gguf_audit import __version__
from gguf_audit.cli import ExitStatus
from gguf_audit.errors import GGUFAuditError, UsageError
from gguf_audit.pipelines.commands import SUMMARIES
from gguf_audit.pipelines.config import parse_storage_options_flag
from gguf_audit.pipelines.nights import (
    DUPLICATE_COLUMNS,
    check_writable,
    compare_stats,
    diff_nights,
    duplicate_groups,
    file_derivations,
    file_rows,
    model_rows,
    night_mirror,
    night_problems,
    night_row,
    night_summary,
    night_templates,
    nights,
    problems_of,
)
from gguf_audit.pipelines.store import Output, is_local_fs
from gguf_audit.report.format import shown_url as shown
from gguf_audit.report.html import render_html
from gguf_audit.report.nightly import NightReport

__all__ = ["add_report_parser", "build_report", "cmd_report", "write_report"]

DEFAULT_NIGHTS: Final = 14


def add_report_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``report`` to ``gguf-audit``'s subparsers (a ``gguf_audit.commands`` entry point)."""
    parser: argparse.ArgumentParser = sub.add_parser(
        "report",
        help=SUMMARIES["report"],
        description="One committed night (default: the latest) as one HTML file with inline SVG charts.",
        epilog="exit status: 0 written, 2 OUT or the night cannot be read, or the usage is wrong",
    )
    parser.add_argument("out", metavar="OUT", help="the scan's --out")
    parser.add_argument("--run", metavar="RUN", help="the night's run id (default: the latest committed)")
    parser.add_argument("--html", required=True, metavar="FILE", help="the page to write (a path or fsspec URL)")
    parser.add_argument(
        "--nights",
        type=int,
        default=DEFAULT_NIGHTS,
        metavar="N",
        help=f"nights in the trend (default {DEFAULT_NIGHTS})",
    )
    parser.add_argument("--storage-options", metavar="JSON", help="fsspec options for OUT (no credentials) as JSON")
    parser.set_defaults(func=cmd_report)
    return parser


def build_report(out: Output, run_id: str | None = None, *, trend_nights: int = DEFAULT_NIGHTS) -> NightReport:
    """Everything the page shows for night ``run_id`` (default: the latest)."""
    run = night_row(out, run_id)
    night = str(run["run_id"])
    ordered = nights(out)
    at = [str(r["run_id"]) for r in ordered].index(night)
    window = ordered[max(0, at - max(1, trend_nights) + 1) : at + 1]
    trend = [night_summary(out, r) for r in window]
    previous = str(ordered[at - 1]["run_id"]) if at > 0 else None
    problems = problems_of(night_problems(out, night))
    files = file_rows(out, night, file_derivations(out, night))
    fingerprints = out.read("files", [night], columns=list(DUPLICATE_COLUMNS)).to_pylist()
    return NightReport(
        out=out.url,
        night=trend[-1],
        trend=trend,
        problems=problems,
        files=files,
        models=model_rows(out, night),
        diff=diff_nights(out, previous, night) if previous is not None else None,
        compare=compare_stats(out, night),
        mirror=night_mirror(out, night),
        tool_version=__version__,
        templates=night_templates(out, files),
        duplicates=duplicate_groups(fingerprints) if any(r["weights_fingerprint"] for r in fingerprints) else None,
    )


def write_report(out: Output, path: str, run_id: str | None = None, *, trend_nights: int = DEFAULT_NIGHTS) -> str:
    """Write the page of night ``run_id`` to ``path``; the night's run id."""
    report = build_report(out, run_id, trend_nights=trend_nights)
    page = render_html(report)
    fs, target = url_to_fs(path)
    parent = target.rsplit("/", 1)[0] if "/" in target else ""
    if parent and is_local_fs(fs):
        fs.makedirs(parent, exist_ok=True)
    fs.pipe_file(target, page.encode("utf-8"))
    return report.night.run_id


def cmd_report(args: argparse.Namespace) -> int:
    if args.nights < 1:
        raise UsageError(f"report: --nights must be at least 1. Got {args.nights}.")
    check_writable(args.html)  # a page that cannot be written is refused before the night is read
    try:
        options: dict[str, Any] = parse_storage_options_flag(args.storage_options) if args.storage_options else {}
        out = Output(args.out, options)
        night = write_report(out, args.html, args.run, trend_nights=args.nights)
    except (GGUFAuditError, OSError, ValueError) as exc:
        raise UsageError(f"report: {exc}") from exc
    print(f"night {night} of {shown(args.out)}: report written to {shown(args.html)}")
    return ExitStatus.OK
