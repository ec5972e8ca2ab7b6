"""``gguf-audit export OUT [--run RUN] --sarif FILE --jsonl FILE``: any committed night as SARIF or JSON Lines.

The same files ``scan --sarif/--jsonl`` writes at the end of a night, for any
night already committed (a dashboard that missed one, a night from last week).
"""

from __future__ import annotations

import argparse
from typing import Any

from gguf_audit.cli import EXIT_STATUSES, ExitStatus
from gguf_audit.errors import GGUFAuditError, UsageError
from gguf_audit.pipelines.commands import SUMMARIES
from gguf_audit.pipelines.config import parse_storage_options_flag
from gguf_audit.pipelines.nights import check_writable, export_night, night_row
from gguf_audit.pipelines.store import Output
from gguf_audit.report.format import shown_url

__all__ = ["add_export_parser", "cmd_export"]


def add_export_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``export`` to ``gguf-audit``'s subparsers (a ``gguf_audit.commands`` entry point)."""
    parser: argparse.ArgumentParser = sub.add_parser(
        "export",
        help=SUMMARIES["export"],
        description="Write one committed night's problems as SARIF 2.1.0 and/or its files as JSON Lines.",
        epilog=EXIT_STATUSES,
    )
    parser.add_argument("out", metavar="OUT", help="the scan's --out")
    parser.add_argument("--run", metavar="RUN", help="the night's run id (default: the latest committed)")
    parser.add_argument("--sarif", metavar="FILE", help="write the night's problems as SARIF 2.1.0 (one run)")
    parser.add_argument("--jsonl", metavar="FILE", help="write the night's files as JSON Lines (one per line)")
    parser.add_argument("--storage-options", metavar="JSON", help="fsspec storage options for OUT (no credentials)")
    parser.set_defaults(func=cmd_export)
    return parser


def cmd_export(args: argparse.Namespace) -> int:
    if not (args.sarif or args.jsonl):
        raise UsageError("export: give --sarif FILE, --jsonl FILE or both")
    for path in (args.sarif, args.jsonl):
        if path:
            check_writable(path)
    try:
        options: dict[str, Any] = parse_storage_options_flag(args.storage_options) if args.storage_options else {}
        out = Output(args.out, options)
        night = str(night_row(out, args.run)["run_id"])
        for path in export_night(out, night, sarif=args.sarif, jsonl=args.jsonl):
            kind = "SARIF" if path == args.sarif else "JSON Lines"
            print(f"night {night}: {kind} written to {shown_url(path)}")
    except (GGUFAuditError, OSError, ValueError) as exc:
        raise UsageError(f"export: {exc}") from exc
    return ExitStatus.OK
