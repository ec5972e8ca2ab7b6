"""``gguf-audit snapshot`` and ``gguf-audit tables``: the audit tables for tools that read no Delta, and retention.

    gguf-audit snapshot OUT [--run RUN] --to DIR [--storage-options JSON]
    gguf-audit tables OUT [--vacuum --keep-nights N [--min-age-hours H] [--lease-wait S]] [--storage-options JSON]

``snapshot`` writes the picture as of one night (default: the latest) as
plain Parquet, ``DIR/<table>.parquet`` for each table, every row's ``run_id``
the night's (see :mod:`~gguf_audit.pipelines.nights.picture`). ``tables`` lists the
committed nights and each table's version; with ``--vacuum`` it keeps the last
``N`` nights and reclaims the rest (:mod:`~gguf_audit.pipelines.store.retention`).
Exit status 0, or 2 when the output cannot be read or the usage is wrong.
"""

from __future__ import annotations

import argparse
from typing import Any

import pyarrow.parquet as pq
from fsspec.core import url_to_fs

from gguf_audit.cli import ExitStatus
from gguf_audit.errors import GGUFAuditError, UsageError
from gguf_audit.pipelines.commands import SUMMARIES
from gguf_audit.pipelines.config import parse_storage_options_flag
from gguf_audit.pipelines.nights import night_row, picture
from gguf_audit.pipelines.store import (
    COMMIT_ORDER,
    DEFAULT_MIN_AGE_HOURS,
    Output,
    Retention,
    is_local_fs,
    vacuum_nights,
)
from gguf_audit.report.format import counted
from gguf_audit.report.format import shown_url as shown
from gguf_audit.tables.schema import SCHEMAS, TABLE_NAMES

__all__ = ["add_snapshot_parser", "add_tables_parser", "cmd_snapshot", "cmd_tables", "vacuum_lines", "write_snapshot"]


def _add_storage_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--storage-options", metavar="JSON", help="fsspec options for OUT (no credentials) as JSON")


def add_snapshot_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``snapshot`` to ``gguf-audit``'s subparsers (a ``gguf_audit.commands`` entry point)."""
    parser: argparse.ArgumentParser = sub.add_parser(
        "snapshot",
        help=SUMMARIES["snapshot"],
        description="Write the picture as of one committed night as DIR/<table>.parquet, for tools that read no Delta.",
        epilog="exit status: 0 written, 2 OUT or the night cannot be read, or the usage is wrong",
    )
    parser.add_argument("out", metavar="OUT", help="the scan's --out")
    parser.add_argument("--run", metavar="RUN", help="the night's run id (default: the latest committed)")
    parser.add_argument("--to", required=True, metavar="DIR", help="where the Parquet files go (any fsspec URL)")
    _add_storage_options(parser)
    parser.set_defaults(func=cmd_snapshot)
    return parser


def add_tables_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``tables`` to ``gguf-audit``'s subparsers (a ``gguf_audit.commands`` entry point)."""
    parser: argparse.ArgumentParser = sub.add_parser(
        "tables",
        help=SUMMARIES["tables"],
        description="The audit tables under OUT: committed nights and versions, and retention (--vacuum).",
        epilog="exit status: 0 listed (or vacuumed), 2 OUT cannot be read or the usage is wrong",
    )
    parser.add_argument("out", metavar="OUT", help="the scan's --out")
    parser.add_argument("--vacuum", action="store_true", help="drop older nights, compact and vacuum every table")
    parser.add_argument("--keep-nights", type=int, metavar="N", help="nights --vacuum keeps (required with it)")
    parser.add_argument(
        "--min-age-hours",
        type=int,
        default=DEFAULT_MIN_AGE_HOURS,
        metavar="H",
        help=f"vacuum only files older than this (default {DEFAULT_MIN_AGE_HOURS}; 0 when no scan is running)",
    )
    parser.add_argument(
        "--lease-wait",
        type=float,
        default=0.0,
        metavar="SECONDS",
        help="with --vacuum: wait this long while a scan writes to OUT, then exit 2 (default 0: exit at once)",
    )
    _add_storage_options(parser)
    parser.set_defaults(func=cmd_tables)
    return parser


def _output(args: argparse.Namespace) -> Output:
    options: dict[str, Any] = {}
    if args.storage_options:
        options = parse_storage_options_flag(args.storage_options)
    return Output(args.out, options)


def write_snapshot(out: Output, to: str, run_id: str | None = None) -> dict[str, int]:
    """Write the picture as of night ``run_id`` (default: the latest) as ``<to>/<table>.parquet``; rows per table."""
    night = str(night_row(out, run_id)["run_id"])
    fs, root = url_to_fs(to)
    root = root.rstrip("/") or root
    if is_local_fs(fs):
        fs.makedirs(root, exist_ok=True)
    counts: dict[str, int] = {}
    for table in TABLE_NAMES:
        rows = 0
        with (
            fs.open(f"{root}/{table}.parquet", "wb") as f,
            pq.ParquetWriter(f, SCHEMAS[table], compression="zstd") as writer,
        ):
            for batch in picture(out, table, night):
                writer.write_batch(batch)
                rows += batch.num_rows
        counts[table] = rows
    return counts


def cmd_snapshot(args: argparse.Namespace) -> int:
    try:
        out = _output(args)
        counts = write_snapshot(out, args.to, args.run)
        night = str(night_row(out, args.run)["run_id"])
    except (GGUFAuditError, OSError, ValueError) as exc:
        raise UsageError(f"snapshot: {exc}") from exc
    print(f"night {night} of {shown(args.out)} written to {shown(args.to)}:")
    for table, n in counts.items():
        print(f"  {table}.parquet  {counted(n, 'row')}")
    return ExitStatus.OK


def vacuum_lines(report: Retention) -> list[str]:
    """What ``tables --vacuum`` did: nights kept and dropped, per table what went and what the minimum age kept."""
    lines = [f"first {r.action} the interrupted run {r.run_id}" for r in report.recovered]
    dropped = f": {', '.join(report.dropped)}" if report.dropped else ""
    lines.append(f"kept {counted(len(report.kept), 'night')}, dropped {len(report.dropped)}{dropped}")
    for table in COMMIT_ORDER:
        young = report.files_kept_young.get(table, 0)
        kept = f", files kept (younger than {report.min_age_hours} h) {young}" if young else ""
        lines.append(
            f"  {table:9} rows dropped {report.rows_dropped.get(table, 0)}, files compacted "
            f"{report.files_compacted.get(table, 0)}, files vacuumed {report.files_vacuumed.get(table, 0)}{kept}"
        )
    removed = sum(report.files_vacuumed.values())
    young = sum(report.files_kept_young.values())
    line = f"removed {counted(removed, 'data file')} no kept version names"
    if young:
        line += (
            f"; kept {young} more for being younger than --min-age-hours {report.min_age_hours} "
            f"(--min-age-hours 0 removes them when no scan is running)"
        )
    lines.append(line)
    return lines


def cmd_tables(args: argparse.Namespace) -> int:
    if args.vacuum and (args.keep_nights is None or args.keep_nights < 1):
        raise UsageError(f"tables: --vacuum needs --keep-nights N (at least 1). Got {args.keep_nights}.")
    try:
        out = _output(args)
        if args.vacuum:
            report = vacuum_nights(
                out, args.keep_nights, min_age_hours=max(0, args.min_age_hours), lease_wait_s=max(0.0, args.lease_wait)
            )
            print("\n".join(vacuum_lines(report)))
        runs = sorted(out.committed_runs().to_pylist(), key=lambda r: (r["finished_at"], r["run_id"]))
        versions = {t: out.delta.version(t) for t in COMMIT_ORDER}
    except (GGUFAuditError, OSError, ValueError) as exc:
        raise UsageError(f"tables: {exc}") from exc
    if versions["runs"] is None:
        # fsspec's HTTP and some object stores answer "not there" for a host that cannot be reached: say both.
        raise UsageError(f"tables: no audit tables at {args.out!r} (no scan committed there, or it cannot be reached)")
    print(f"{counted(len(runs), 'committed night')} in {shown(args.out)}")
    for row in runs:
        print(
            f"  {row['run_id']}  {counted(row['n_files'], 'file')}, {row['n_read']} read, "
            f"{counted(row['n_problems'], 'problem')}"
        )
    print("table versions: " + ", ".join(f"{t} {v}" for t, v in versions.items()))
    return ExitStatus.OK
