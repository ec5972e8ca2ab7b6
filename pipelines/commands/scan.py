"""``gguf-audit scan``: audit a whole collection on dask and write the audit tables.

    gguf-audit scan ROOT... --out DIR [--config FILE] [--scheduler ADDR] [--workers N]
                    [--incremental] [--fail-on none|error|warning|new-error|aborts] [--storage-options JSON]

Flags override the config file, which overrides the defaults (``configs/local.toml``).
While it runs, a progress bar on stderr shows files done of the total and bytes
read, and the dask dashboard's address when there is one. At the end a summary
goes to stdout: files by status, the most frequent problem codes, incomplete
models, bytes read against the collection's size, and files per second, then a
DuckDB query of the new run.

Exit status: 0 when the night committed, whatever the collection holds (``--fail-on
none``, the default); 1 when it committed and ``--fail-on`` fails it
(:mod:`~gguf_audit.pipelines.scan.gate`: ``error``, ``warning``, ``new-error`` since
the previous night, ``aborts``); 2 when the run itself failed (nothing is committed
then), the output cannot be written (checked before anything is read), or the usage
is wrong.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Final, TextIO

from gguf_audit.cli import ExitStatus
from gguf_audit.codes import LLAMA_CPP_BUILD
from gguf_audit.errors import GGUFAuditError, Terminated, UsageError
from gguf_audit.io.options import options_for
from gguf_audit.io.upstream import require_upstream
from gguf_audit.pipelines.commands import SUMMARIES
from gguf_audit.pipelines.commands.sql import EXAMPLE_QUERY, QUIET, summary_lines
from gguf_audit.pipelines.config import FAIL_ON, ConfigError, ScanConfig, load_config, parse_storage_options_flag
from gguf_audit.pipelines.listing import Listing
from gguf_audit.pipelines.nights import VIEW_NAMES, check_writable, export_night
from gguf_audit.pipelines.scan import (
    Gate,
    ScanObserver,
    ScanResult,
    check_protocols,
    estimate_night,
    judge_gate,
    missing_pipeline_module,
    removed_if_left_empty,
    render_estimate,
    run_scan,
)
from gguf_audit.pipelines.store import LeaseError, Output, OutputError
from gguf_audit.redact import RedactFilter, redact_text
from gguf_audit.report.format import counted, escape, fmt_bytes, shown_url

__all__ = ["add_scan_parser", "cmd_scan", "main"]

TOP_CODES: Final = 8
SHOWN_MODELS: Final = 10


def add_scan_parser(sub: Any) -> argparse.ArgumentParser:
    """Add the ``scan`` subcommand to ``gguf-audit``'s subparsers (the ``gguf_audit.commands`` entry point)."""
    scan: argparse.ArgumentParser = sub.add_parser(
        "scan",
        help=SUMMARIES["scan"],
        description="Audit every GGUF file under the roots (and in the manifests) and write the audit tables.",
        epilog="exit status: 0 committed (whatever the collection holds, with the default --fail-on none); "
        "1 committed, and --fail-on error, warning, new-error or aborts fails it; 2 the run failed or --out "
        "cannot take it (nothing committed); 130/143 interrupted",
    )
    _add_arguments(scan)
    scan.add_argument(
        "--dry-run",
        action="store_true",
        help="list the collection and say which files a night would read and about what it would cost; read nothing",
    )
    scan.set_defaults(func=cmd_scan)
    return scan


def _add_arguments(scan: argparse.ArgumentParser) -> None:
    _add_collection_arguments(scan)
    _add_audit_arguments(scan)
    _add_output_arguments(scan)


def _add_collection_arguments(scan: argparse.ArgumentParser) -> None:
    """What the night covers, where it runs, and when it fails."""
    scan.add_argument("roots", nargs="*", metavar="ROOT", help="fsspec URLs or paths to list (s3://, hf://, dirs)")
    scan.add_argument("--out", metavar="DIR", help="where the tables go (any fsspec URL); default audit-out")
    scan.add_argument("--config", metavar="FILE", help="a TOML config (see configs/); flags override it")
    scan.add_argument("--scheduler", metavar="ADDR", help="address of a running dask scheduler")
    scan.add_argument("--workers", type=int, metavar="N", help="local cluster worker processes (default: one per core)")
    scan.add_argument(
        "--incremental",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="re-read only files new or changed since the last committed run",
    )
    scan.add_argument(
        "--fail-on",
        choices=FAIL_ON,
        help="exit 1 on: an error (or a file llama.cpp refuses), a warning or worse, an error new since the "
        "previous night, a file or model that aborts llama.cpp (default none: exit 0 once committed)",
    )
    scan.add_argument("--storage-options", metavar="JSON", help="fsspec storage options (no credentials) as JSON")
    scan.add_argument("--manifest", action="append", metavar="URL", help="a text, CSV or Parquet list of URLs")
    scan.add_argument("--include", action="append", metavar="GLOB", help="file name glob to audit (default *.gguf)")
    scan.add_argument("--exclude", action="append", metavar="GLOB", help="file name glob to skip")


def _add_audit_arguments(scan: argparse.ArgumentParser) -> None:
    """How each file is read and what it is compared with."""
    scan.add_argument("--batch-size", type=int, metavar="N", help="files per dask task (default: chosen)")
    scan.add_argument("--threads", type=int, metavar="N", help="files in flight per worker process (default 64)")
    scan.add_argument(
        "--samples",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="read sampled tensor blocks and check their data (default; --no-samples reads headers only)",
    )
    scan.add_argument(
        "--sample-requests", type=int, metavar="N", help="range requests per file for samples at most (default 32)"
    )
    scan.add_argument(
        "--upstream-auto",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="compare each model with its upstream config.json and tokenizer files, beside it or linked (upstream.*)",
    )
    scan.add_argument(
        "--upstream", metavar="DIR_OR_URL", help="compare every model with the upstream there (implies --upstream-auto)"
    )
    scan.add_argument(
        "--compare",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="compare quantized files with their family's full-precision file (default; --no-compare skips)",
    )


def _add_output_arguments(scan: argparse.ArgumentParser) -> None:
    """The output's lease, the mirror check, the extra reports and the terminal."""
    scan.add_argument(
        "--lease-wait",
        type=float,
        metavar="SECONDS",
        help="wait this long while another scan or vacuum writes to --out, then exit 2 (default 0: exit at once)",
    )
    scan.add_argument(
        "--source",
        metavar="ROOT",
        help="check the one ROOT as a mirror of this root (hf://ORG, s3://...): the mirror table",
    )
    scan.add_argument(
        "--verify",
        choices=("sampled", "full"),
        help="mirror copies no checksum proves: judged on sampled blocks (default) or read whole and hashed (full)",
    )
    scan.add_argument("--sarif", metavar="FILE", help="also write the night's problems as SARIF 2.1.0 (one run)")
    scan.add_argument("--jsonl", metavar="FILE", help="also write the night's files as JSON Lines (one per line)")
    scan.add_argument("--no-progress", action="store_true", help="no progress bar")
    scan.add_argument("--no-dashboard", action="store_true", help="start the local cluster without its dashboard")


def _config_from_args(args: argparse.Namespace) -> ScanConfig:
    config = load_config(args.config) if args.config else ScanConfig()
    options: dict[str, Any] | None = None
    if args.upstream is not None and not args.upstream.strip():
        raise ConfigError(f"--upstream needs a directory or URL. Got {args.upstream!r}.")
    if args.storage_options:
        options = parse_storage_options_flag(args.storage_options)
    return config.replace(
        roots=tuple(args.roots) or None,
        manifests=tuple(args.manifest) if args.manifest else None,
        include=tuple(args.include) if args.include else None,
        exclude=tuple(args.exclude) if args.exclude else None,
        out=args.out,
        scheduler=args.scheduler,
        workers=args.workers,
        incremental=args.incremental,
        fail_on=args.fail_on,
        storage_options=options,
        batch_size=args.batch_size,
        threads=args.threads,
        dashboard=False if args.no_dashboard else None,
        samples=args.samples,
        sample_requests=args.sample_requests,
        upstream=True if args.upstream else args.upstream_auto,
        upstream_location=args.upstream,
        compare=args.compare,
        lease_wait_s=args.lease_wait,
        source=args.source,
        verify=args.verify,
    )


class _Progress(ScanObserver):
    """The progress bar (tqdm on stderr) and the cluster line."""

    def __init__(self, enabled: bool, stream: TextIO, *, quiet: bool = False) -> None:
        self.enabled = enabled and not quiet
        self.stream = stream
        self.quiet = quiet
        self.bar: Any = None
        self.total = 0
        self.read = ""

    def listed(self, listing: Listing, n_reused: int) -> None:
        self.total = len(listing.files)
        if self.quiet:
            return
        reused = f", {n_reused} unchanged since the last run" if n_reused else ""
        n, unsized = len(listing.files), listing.unsized
        if unsized == n:
            sizes = "sizes learnt from the first read"
        elif unsized:
            sizes = f"{fmt_bytes(listing.total_bytes)}, {unsized} sizes learnt from the first read"
        else:
            sizes = fmt_bytes(listing.total_bytes)
        print(f"listed {counted(n, 'file')} ({sizes}) in {listing.seconds:.2f} s{reused}", file=self.stream)

    def cluster(self, scheduler: str, dashboard: str | None, n_workers: int) -> None:
        where = "a local cluster" if scheduler == "local" else f"the scheduler at {scheduler}"
        # The cluster line (with the dashboard link) first and once, then the bar below it.
        link = f"; dashboard {dashboard}" if dashboard else ""
        if not self.quiet:
            print(f"dask: {where}, {n_workers} workers{link}", file=self.stream)
        if self.enabled and self.bar is None:
            from tqdm import tqdm  # optional dependency (the pipeline extra), imported when a bar is shown

            self.bar = tqdm(total=self.total, unit="file", file=self.stream, dynamic_ncols=True, leave=True)

    def progress(self, done: int, total: int, bytes_read: int) -> None:
        if self.bar is not None:
            self.bar.update(done - self.bar.n)
            self.read = f"{fmt_bytes(bytes_read)} read"
            self.bar.set_postfix_str(self.read, refresh=False)

    def comparing(self, requests: int, bytes_read: int) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(f"{self.read}; compare: {counted(requests, 'request')}, {fmt_bytes(bytes_read)}")

    def committing(self) -> None:
        self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def _is_local(url: str) -> bool:
    return "://" not in url or url.startswith("file://")


def _problem_lines(result: ScanResult) -> list[str]:
    """The summary's most frequent problem codes and its incomplete models."""
    lines: list[str] = []
    if result.problem_codes:
        lines.append("most frequent problems:")
        ranked = sorted(result.problem_codes.items(), key=lambda kv: (-kv[1], kv[0]))
        width = max(len(code) for code, _ in ranked[:TOP_CODES])
        for code, n in ranked[:TOP_CODES]:
            lines.append(f"  {n:6d}  {code:{width}}  {result.code_severities.get(code, '?')}")
        if len(ranked) > TOP_CODES:
            lines.append(f"  … {counted(len(ranked) - TOP_CODES, 'more code')}")
    else:
        lines.append("problems: none")
    if result.incomplete_models:
        lines.append(f"incomplete models ({len(result.incomplete_models)}):")
        for m in result.incomplete_models[:SHOWN_MODELS]:
            missing = ", ".join(f"{i:05d}" for i in m.missing[:8]) + (" …" if len(m.missing) > 8 else "")
            lines.append(f"  {escape(m.model_id, 160)}: missing {missing} of {m.count:05d}")
        if len(result.incomplete_models) > SHOWN_MODELS:
            lines.append(f"  … {len(result.incomplete_models) - SHOWN_MODELS} more")
    return lines


def render_summary(result: ScanResult, gate: Gate) -> str:
    """The end-of-run summary; its last line is the ``--fail-on`` gate's outcome."""
    lines = []
    base = (
        f" (incremental on {result.base_run_id}: {counted(result.n_reused, 'file')} reused)"
        if result.base_run_id
        else ""
    )
    lines.append(f"run {result.run_id} committed to {escape(result.out)}{base}")
    if result.reuse_note:
        lines.append(f"  ({result.reuse_note})")
    for r in result.recovered:
        lines.append(f"  (first {r.action} the earlier run {r.run_id})")
    by_status = ", ".join(f"{s} {result.statuses.get(s, 0)}" for s in ("ok", "warning", "error", "unreadable"))
    aborts = f", {result.n_aborts} of them abort it" if result.n_aborts else ""
    unloadable = (
        f"; {result.n_unloadable} llama.cpp {LLAMA_CPP_BUILD} would refuse{aborts}" if result.n_unloadable else ""
    )
    lines.append(f"files: {result.n_files} ({by_status}{unloadable}) in {counted(result.n_models, 'model')}")
    lines.extend(_problem_lines(result))
    share = f" ({result.bytes_read / result.collection_bytes:.2%})" if result.collection_bytes else ""
    lines.append(
        f"read {fmt_bytes(result.bytes_read)} of {fmt_bytes(result.collection_bytes)}{share} "
        f"in {counted(result.requests, 'request')}"
    )
    lines.append(_timing_line(result))
    dropped = (
        f" ({counted(result.duplicates_dropped, 'duplicate row')} of rerun batches dropped)"
        if result.duplicates_dropped
        else ""
    )
    lines.append(f"every listed file has exactly one row: {result.rows_checked} of {result.n_files}{dropped}")
    if result.skipped:
        lines.append(
            f"skipped {counted(len(result.skipped), 'listed entry', 'listed entries')} "
            "(no row; runs.skipped names them):"
        )
        lines.extend(f"  {escape(s, 600)}" for s in result.skipped[:SHOWN_MODELS])
        if len(result.skipped) > SHOWN_MODELS:
            lines.append(f"  … {len(result.skipped) - SHOWN_MODELS} more")
    if result.mirror:
        counts = ", ".join(f"{n} {status}" for status, n in sorted(result.mirror.items()))
        lines.append(f"mirror against its source: {counts} (the mirror table names each path)")
    lines.append(gate.line())
    return "\n".join(lines)


def _timing_line(result: ScanResult) -> str:
    """Files read and how fast; the listing's time, requests and waits; the whole run's time."""
    listed = "" if result.listing_requests is None else f" ({counted(result.listing_requests, 'request')})"
    if result.listing_wait_s:
        listed += f", {result.listing_wait_s:.1f} s of it waiting out the Hub's rate limit"
    return (
        f"{counted(result.n_read, 'file')} read in {result.audit_seconds:.2f} s "
        f"({result.files_per_second:.1f} files/s); "
        f"listing {result.listing_seconds:.2f} s{listed}, whole run {result.seconds:.2f} s"
    )


def _duckdb_block(result: ScanResult, out_options: Mapping[str, Any]) -> str:
    """How to query the night: ``gguf-audit sql`` and DuckDB's own statements, right for every table (views
    through the night's files and models rows) and offline as printed (extensions from their wheels); for a
    local ``--out`` the query's answer too."""
    command, statements = summary_lines(result.out, result.run_id, out_options)
    lines = ["", f"query this night (views {', '.join(VIEW_NAMES)}):", *(f"  {c}" for c in command)]
    if not statements:
        lines.append("  (for DuckDB's own shell: pip install duckdb-ext-delta, then gguf-audit sql OUT --views)")
        return "\n".join(lines)
    lines.append(
        "or in DuckDB (the extension from its wheel, nothing downloaded; gguf-audit sql OUT --views: all views):"
    )
    lines += [f"  {s}" for s in statements]
    if not _is_local(result.out):
        return "\n".join(lines)
    import duckdb  # optional dependency (the pipeline extra): present, since the statements were made

    con = duckdb.connect()
    try:
        for statement in [QUIET, *statements[:-1]]:
            con.execute(statement)
        lines.append(str(con.sql(EXAMPLE_QUERY)))
    except duckdb.Error as exc:
        lines.append(f"  (DuckDB could not run it: {exc})")
    finally:
        con.close()
    return "\n".join(lines)


def needs_pipeline_extra(command: str) -> None:
    """Refuse (a usage error, nothing written yet) when the ``pipeline`` extra is not installed."""
    missing = missing_pipeline_module()
    if missing is not None:
        hint = "pip install 'gguf-audit[pipeline]'"
        raise UsageError(f"{command} needs an extra that is not installed ({missing}): {hint}")


def cmd_scan(args: argparse.Namespace) -> int:
    """Run ``scan`` from parsed arguments; returns the exit status."""
    needs_pipeline_extra("scan")
    try:
        config = _config_from_args(args)
    except ConfigError as exc:
        raise UsageError(f"scan: {exc}") from exc
    if args.upstream:
        require_upstream(args.upstream)  # a typo or an empty folder is refused before anything is listed
    if not config.scan.roots and not config.scan.manifests:
        raise UsageError("scan: give at least one ROOT or --manifest (or roots in --config)")
    check_protocols(config)  # an extra not installed is one line with what to install, before anything is made
    if args.dry_run:
        print(redact_text(render_estimate(estimate_night(config))))
        return ExitStatus.OK
    for path in (args.sarif, args.jsonl):
        if path:
            check_writable(path)  # before the night's work, not after it
    quiet = getattr(args, "quiet", False)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("gguf-audit: %(message)s"))
    handler.addFilter(RedactFilter())
    logger = logging.getLogger("gguf_audit.pipelines")
    if not getattr(args, "verbose", False):  # verbose: gguf_audit.cli's handler shows these lines already
        logger.addHandler(handler)
    progress = _Progress(enabled=not args.no_progress, stream=sys.stderr, quiet=quiet)
    try:
        with removed_if_left_empty(config):  # a failed scan leaves no empty --out it made
            result = run_scan(config, observer=progress)
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM through gguf_audit.cli (Terminated)
        signum = exc.signum if isinstance(exc, Terminated) else signal.SIGINT
        progress.close()  # the bar ends its line first: the message is a line of its own
        print(f"gguf-audit scan: {signal.Signals(signum).name} received; nothing was committed", file=sys.stderr)
        return 128 + signum
    except (OutputError, LeaseError) as exc:
        raise UsageError(f"scan: {exc}") from exc
    except ImportError as exc:
        raise UsageError(f"scan: needs the pipeline extra (pip install 'gguf-audit[pipeline]'): {exc}") from exc
    except (GGUFAuditError, OSError) as exc:
        raise UsageError(f"scan: the run failed, nothing was committed: {exc}") from exc
    finally:
        progress.close()
        logger.removeHandler(handler)
    try:
        gate = judge_gate(result, config.scan.fail_on, _output(config))
    except (GGUFAuditError, OSError, ValueError) as exc:
        fail_on = config.scan.fail_on
        raise UsageError(f"scan: the night was committed, but --fail-on {fail_on} could not read it: {exc}") from exc
    summary = render_summary(result, gate).splitlines()
    print(redact_text("\n".join([summary[0], summary[-1]] if quiet else summary)))  # quiet: the run and its gate
    if not quiet:
        out_options = options_for(config.scan.out, config.out_storage_options or config.storage_options)
        print(redact_text(_duckdb_block(result, out_options)))
    _export(args, config, result.run_id, quiet=quiet)
    return ExitStatus.PROBLEMS if gate.fails else ExitStatus.OK


def _output(config: ScanConfig) -> Output:
    """The committed night's output, read back (by the gate and the exports)."""
    options = config.out_storage_options
    return Output(
        str(config.scan.out),
        dict(options) if options is not None else options_for(config.scan.out, config.storage_options),
    )


def _export(args: argparse.Namespace, config: ScanConfig, run_id: str, *, quiet: bool = False) -> None:
    """``--sarif`` and ``--jsonl``: the committed night written out; a usage error when one cannot be."""
    if not (args.sarif or args.jsonl):
        return
    try:
        for path in export_night(_output(config), run_id, sarif=args.sarif, jsonl=args.jsonl):
            if not quiet:
                print(f"{'SARIF' if path == args.sarif else 'JSON Lines'} written to {shown_url(path)}")
    except (GGUFAuditError, OSError, ValueError) as exc:
        raise UsageError(f"scan: the night was committed, but its export failed: {exc}") from exc


def main(argv: Sequence[str] | None = None) -> int:
    """``gguf-audit scan`` on its own (``python -m gguf_audit.pipelines.commands.scan``): the command through the one
    boundary every command has (:func:`gguf_audit.cli.main`)."""
    from gguf_audit.cli import main as cli_main

    return cli_main(["scan", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
