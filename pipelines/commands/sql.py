"""``gguf-audit sql``: ask one night's audit tables a SQL question, through views that cannot be read wrong.

    gguf-audit sql OUT "SELECT ..." [--run RUN] [--format table|csv|jsonl] [--full-values] [--storage-options JSON]
    gguf-audit sql OUT --views [--run RUN]

DuckDB opens with the views ``runs``, ``files``, ``models``, ``tensors``,
``metadata``, ``samples``, ``problems`` and ``compare`` of one committed night
(default: the latest), each the night's picture (:mod:`~gguf_audit.pipelines.nights.views`):
a file the night reused keeps the rows the night that read it wrote. Its
extensions load from the ``duckdb-ext-*`` wheels, so nothing is downloaded.
``--views`` prints the statements instead (``LOAD`` lines included), ready for
DuckDB's own shell or any client.

Exit status: 0 the query ran, 2 a usage error, an unknown night, an output that
cannot be read or a query DuckDB refuses (one line, DuckDB's message).
"""

from __future__ import annotations

import argparse
import csv
import io
import shlex
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from decimal import Decimal
from typing import Any, Final

import pyarrow.compute as pc

from gguf_audit.cli import ExitStatus
from gguf_audit.errors import GGUFAuditError, UsageError
from gguf_audit.io.options import s3_endpoint, s3_region
from gguf_audit.pipelines.commands import SUMMARIES
from gguf_audit.pipelines.config import parse_storage_options_flag
from gguf_audit.pipelines.nights import VIEW_NAMES, night_row, night_views, sql_literal
from gguf_audit.pipelines.store import Output, connect, extension_path, table_uri
from gguf_audit.redact import REDACTED, redact_text, redact_url
from gguf_audit.report.format import counted, escape
from gguf_audit.report.json import dumps
from gguf_audit.tables.schema import SCHEMAS

__all__ = [
    "EXAMPLE_QUERY",
    "QUIET",
    "NightViews",
    "add_sql_parser",
    "cmd_sql",
    "duckdb_preamble",
    "night_statements",
    "open_night",
    "s3_secret",
    "summary_lines",
]

CELL_WIDTH: Final = 60
"""Characters of a cell the table format shows (the csv and jsonl formats show all)."""
NO_AUTOINSTALL: Final = (
    "SET autoinstall_known_extensions = false;",
    "SET autoload_known_extensions = false;",
)
"""DuckDB fetches a known extension a query needs from its server by default; these make it say so instead."""
QUIET: Final = "SET enable_progress_bar = false;"
"""A slow query draws DuckDB's progress bar on standard output, inside the answer a command prints."""


EXAMPLE_QUERY: Final = (
    "SELECT f.status, f.llama_cpp, count(DISTINCT f.url) AS files, count(p.code) AS problems "
    "FROM files f LEFT JOIN problems p ON p.url = f.url GROUP BY ALL ORDER BY ALL"
)
"""The query the scan summary prints and runs: files and their problems by status and llama.cpp verdict."""


@dataclass(frozen=True, slots=True)
class NightViews:
    """The statements that make one night's views, and the night they show."""

    run_id: str
    statements: tuple[str, ...]
    empty: tuple[str, ...]
    """Tables the output never wrote (the views over them are empty)."""


def _is_s3(url: str) -> bool:
    return url.startswith(("s3://", "s3a://"))


def duckdb_preamble(out_url: str) -> list[str]:
    """The lines that load DuckDB's extensions from their wheels (never from the network) for ``out_url``."""
    names = ("delta", "httpfs", "aws") if _is_s3(out_url) else ("delta",)
    return [*NO_AUTOINSTALL, *(f"LOAD {sql_literal(extension_path(name))};" for name in names)]


def s3_secret(out_options: Mapping[str, Any]) -> str:
    """A DuckDB S3 secret taking credentials from the chain a scan uses; the endpoint (the options', else
    ``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``: an S3-compatible store) and the region spelt out."""
    endpoint = s3_endpoint(out_options)
    region = s3_region(out_options)
    extra = f", REGION {sql_literal(region)}" if region else ""
    if endpoint is not None and "://" in endpoint:
        # DuckDB's ENDPOINT is a host: a userinfo there is no credential it uses, only one it would print.
        scheme, host = redact_url(endpoint).split("://", 1)
        host = host.removeprefix(REDACTED + "@")
        ssl = "true" if scheme.lower() == "https" else "false"
        extra += f", ENDPOINT {sql_literal(host.rstrip('/'))}, URL_STYLE 'path', USE_SSL {ssl}"
    return f"CREATE SECRET (TYPE s3, PROVIDER credential_chain{extra});"


def summary_lines(out_url: str, run_id: str, out_options: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    """What the scan summary prints to query its night: the ``gguf-audit sql`` line, and DuckDB's own statements
    (extensions from their wheels, the views the example query reads, the query); the latter empty when the
    ``duckdb-ext-*`` wheels are not installed."""
    command = [f"gguf-audit sql {shlex.quote(out_url)} {shlex.quote(EXAMPLE_QUERY)}"]
    try:
        preamble = duckdb_preamble(out_url)
    except ImportError:
        return command, []
    if _is_s3(out_url):
        preamble.append(s3_secret(out_options))
    views = night_views({t: table_uri(out_url, t) for t in VIEW_NAMES}, run_id, names=("problems",))
    return command, [*preamble, *views, EXAMPLE_QUERY + ";"]


def night_statements(out: Output, run_id: str | None = None, names: Sequence[str] = VIEW_NAMES) -> NightViews:
    """The views of night ``run_id`` (default: the latest committed) over ``out``'s tables."""
    night = str(night_row(out, run_id)["run_id"])
    files = out.read("files", [night], columns=["source_run_id"])
    models = out.read("models", [night], columns=["source_run_id"])
    file_sources = [str(s) for s in pc.unique(files["source_run_id"]).to_pylist()]
    model_sources = [str(s) for s in pc.unique(pc.fill_null(models["source_run_id"], night)).to_pylist()]
    empty = tuple(t for t in VIEW_NAMES if out.delta.open(t) is None)
    statements = night_views(
        {t: table_uri(out.url, t) for t in VIEW_NAMES},
        night,
        names=names,
        file_sources=file_sources,
        model_sources=model_sources,
        empty=empty,
    )
    return NightViews(night, tuple(statements), empty)


def open_night(out: Output, run_id: str | None = None) -> tuple[Any, str]:
    """A DuckDB connection with night ``run_id``'s views (extensions from their wheels), and the night."""
    views = night_statements(out, run_id)
    con = connect(("delta", "httpfs", "aws") if _is_s3(out.url) else ("delta",))
    try:
        for statement in (*NO_AUTOINSTALL, QUIET):
            con.execute(statement)
        if _is_s3(out.url):
            con.execute(s3_secret(out.fsspec_options))
        for table in views.empty:
            con.register(f"_empty_{table}", SCHEMAS[table].empty_table())
        for statement in views.statements:
            con.execute(statement)
    except BaseException:
        con.close()
        raise
    return con, views.run_id


def add_sql_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``sql`` to ``gguf-audit``'s subparsers (a ``gguf_audit.commands`` entry point)."""
    parser: argparse.ArgumentParser = sub.add_parser(
        "sql",
        help=SUMMARIES["sql"],
        description=(
            "Run a SQL query with DuckDB over one committed night: the views runs, files, models, tensors, "
            "metadata, samples, problems and compare show that night's picture, carried rows included."
        ),
        epilog="exit status: 0 the query ran, 2 a usage error, an unknown night, OUT unreadable or the query refused",
    )
    parser.add_argument("out", metavar="OUT", help="the scan's --out")
    parser.add_argument("query", nargs="?", metavar="SQL", help='the query, such as "SELECT count(*) FROM problems"')
    parser.add_argument("--run", metavar="RUN", help="the night's run id (default: the latest committed)")
    parser.add_argument(
        "--format",
        choices=("table", "csv", "jsonl"),
        default="table",
        help="table (default; strings escaped and cut), csv (strings escaped), or jsonl (one JSON object per row)",
    )
    parser.add_argument(
        "--full-values",
        action="store_true",
        help=f"--format table: show every value whole (by default a value over {CELL_WIDTH} characters is cut)",
    )
    parser.add_argument(
        "--views",
        action="store_true",
        help="print the statements that make the night's views (for DuckDB's shell) instead of running a query",
    )
    parser.add_argument("--storage-options", metavar="JSON", help="fsspec options for OUT (no credentials) as JSON")
    parser.set_defaults(func=cmd_sql)
    return parser


def _cell(value: Any, width: int | None) -> str:
    if value is None:
        return "NULL"
    return escape(str(value), width)


def _table(names: Sequence[str], rows: Sequence[tuple[Any, ...]], *, full_values: bool = False) -> str:
    width = None if full_values else CELL_WIDTH
    cells = [[_cell(v, width) for v in row] for row in rows]
    n_cut = 0 if full_values else sum(v is not None and len(str(v)) > CELL_WIDTH for row in rows for v in row)
    widths = [max([len(n), *(len(r[i]) for r in cells)]) for i, n in enumerate(names)]
    lines = ["  ".join(f"{n:{w}}" for n, w in zip(names, widths, strict=True)).rstrip()]
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(f"{c:{w}}" for c, w in zip(r, widths, strict=True)).rstrip() for r in cells]
    lines.append(f"({counted(len(rows), 'row')})")
    if n_cut:
        cut = counted(n_cut, "value")
        lines.append(f"({cut} cut to {CELL_WIDTH} characters, each with its length; --full-values shows them whole)")
    return "\n".join(lines)


def _csv_cell(value: Any) -> Any:
    """A CSV cell as standard output may show it: text with its control and bidi characters escaped, as the
    table and JSON Lines formats escape them (a file name may hold ESC, OSC, BEL, CR, C1 controls or a
    right-to-left override); numbers and NULL (an empty cell) as they are."""
    if value is None or isinstance(value, bool | int | float | Decimal):
        return value
    return escape(str(value))


def _json_value(value: Any) -> Any:
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, float) and value != value:
        return "NaN"
    return value


def _render(names: Sequence[str], rows: Sequence[tuple[Any, ...]], fmt: str, *, full_values: bool = False) -> str:
    if fmt == "jsonl":
        return "".join(dumps({n: _json_value(v) for n, v in zip(names, row, strict=True)}) + "\n" for row in rows)
    if fmt == "csv":
        buffer = io.StringIO()
        writer = csv.writer(buffer, lineterminator="\n")
        writer.writerow([escape(n) for n in names])
        writer.writerows([_csv_cell(v) for v in row] for row in rows)
        return buffer.getvalue()
    return _table(names, rows, full_values=full_values) + "\n"


def cmd_sql(args: argparse.Namespace) -> int:
    import duckdb  # optional dependency (the pipeline extra)

    if not args.views and not args.query:
        raise UsageError("sql: give a query (or --views to print the views' statements)")
    try:
        options: dict[str, Any] = parse_storage_options_flag(args.storage_options) if args.storage_options else {}
        out = Output(args.out, options)
        if args.views:
            views = night_statements(out, args.run)
            lines = duckdb_preamble(out.url) + ([s3_secret(options)] if _is_s3(out.url) else [])
            empty = [f"-- {t}: never written to this output, no view" for t in views.empty]
            shown = [s for s in views.statements if not any(f"_empty_{t}" in s for t in views.empty)]
            sys.stdout.write(redact_text("\n".join([f"-- night {views.run_id}", *lines, *empty, *shown])) + "\n")
            return ExitStatus.OK
        con, _ = open_night(out, args.run)
    except (GGUFAuditError, OSError, ValueError, ImportError, duckdb.Error) as exc:
        raise UsageError(f"sql: {exc}") from exc
    try:
        result = con.execute(args.query)
        names = [d[0] for d in result.description] if result.description else []
        rows = result.fetchall() if names else []
    except duckdb.Error as exc:
        raise UsageError(f"sql: {exc}") from exc
    finally:
        con.close()
    if names:
        sys.stdout.write(_render(names, rows, args.format, full_values=args.full_values))
    return ExitStatus.OK
