"""``gguf-audit diff``: what changed between two nights, and an exit status a nightly job can alert on.

    gguf-audit diff OUT [--from RUN] [--to RUN] [--json] [--fail-on error|warning|info]

Default: the last two committed nights, or the only one against no night (every
problem of it is new, so the first night alerts once); the comparison itself is
:func:`gguf_audit.pipelines.nights.diff.diff_nights`.

Exit status: 1 when the later night has a new problem (or one that became this
severe) at or above ``--fail-on`` (default ``error``), or a file or model that
now makes llama.cpp abort (whatever ``--fail-on`` says: it crashes a server that
loads it), or a mirror copy that stopped being faithful to its source, 0 otherwise,
2 on a usage error (an unknown night, an output with no night, an output that
cannot be read). ``gguf-audit scan --fail-on new-error`` exits 1 on the same alerts
(:func:`~gguf_audit.pipelines.nights.diff.alerts`).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

from gguf_audit.cli import ExitStatus
from gguf_audit.codes import LLAMA_CPP_BUILD
from gguf_audit.errors import GGUFAuditError, UsageError
from gguf_audit.findings import Severity
from gguf_audit.pipelines.commands import SUMMARIES
from gguf_audit.pipelines.config import parse_storage_options_flag
from gguf_audit.pipelines.nights import alerts, diff_nights, night_row, nights
from gguf_audit.pipelines.store import Output
from gguf_audit.report.format import counted
from gguf_audit.report.json import dumps
from gguf_audit.report.nightly import diff_to_json, render_diff_text

__all__ = ["add_diff_parser", "cmd_diff"]


def add_diff_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``diff`` to ``gguf-audit``'s subparsers (a ``gguf_audit.commands`` entry point)."""
    parser: argparse.ArgumentParser = sub.add_parser(
        "diff",
        help=SUMMARIES["diff"],
        description="New, resolved and changed problems, files and model verdicts between two committed nights.",
        epilog="exit status: 0 no new problem at --fail-on, 1 a new one, 2 a usage error or OUT cannot be read",
    )
    parser.add_argument("out", metavar="OUT", help="the scan's --out")
    parser.add_argument("--from", dest="before", metavar="RUN", help="the earlier night (default: the one before --to)")
    parser.add_argument("--to", dest="after", metavar="RUN", help="the later night (default: the latest)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument(
        "--fail-on",
        choices=[str(s) for s in Severity],
        default="error",
        help="exit 1 when the later night has a new problem this severe or worse (default: error)",
    )
    parser.add_argument("--storage-options", metavar="JSON", help="fsspec options for OUT (no credentials) as JSON")
    parser.set_defaults(func=cmd_diff)
    return parser


def _pick(out: Output, before: str | None, after: str | None) -> tuple[str | None, str]:
    """The two nights to compare: ``--to`` (default the latest) and ``--from`` (default the one before it;
    None for the first night, compared with no night)."""
    later = str(night_row(out, after)["run_id"])
    if before is not None:
        return str(night_row(out, before)["run_id"]), later
    ordered = [str(r["run_id"]) for r in nights(out)]
    at = ordered.index(later)
    return (ordered[at - 1] if at else None), later


def cmd_diff(args: argparse.Namespace) -> int:
    try:
        options: dict[str, Any] = parse_storage_options_flag(args.storage_options) if args.storage_options else {}
        out = Output(args.out, options)
        before, after = _pick(out, args.before, args.after)
        diff = diff_nights(out, before, after)
    except (GGUFAuditError, OSError, ValueError) as exc:
        raise UsageError(f"diff: {exc}") from exc
    found = alerts(diff, args.fail_on)
    if args.json:
        payload = diff_to_json(diff)
        payload["fail_on"] = args.fail_on
        payload["new_at_fail_on"] = len(found.problems)
        payload["mirror_alerts"] = len(found.mirror)
        sys.stdout.write(dumps(payload) + "\n")
    else:
        print(render_diff_text(diff))
        print(f"{counted(len(found.problems), 'new problem')} at or above {args.fail_on}")
        if found.aborts:
            print(
                f"{counted(len(found.aborts), 'file or model', 'files or models')} now "
                f"abort{'s' if len(found.aborts) == 1 else ''} llama.cpp {LLAMA_CPP_BUILD}"
            )
        if found.mirror:
            print(
                f"{counted(len(found.mirror), 'mirror copy', 'mirror copies')} stopped being faithful to their source"
            )
    return ExitStatus.PROBLEMS if found else ExitStatus.OK


def main(argv: Sequence[str] | None = None) -> int:
    """``gguf-audit diff`` on its own (``python -m gguf_audit.pipelines.commands.diff``), through the boundary."""
    from gguf_audit.cli import main as cli_main

    return cli_main(["diff", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
