"""The ``gguf-audit`` command. ``main(argv)`` returns the exit status, so tests call it in-process.

Exit status: 0 when no problem is an error, 1 when one is (or, for ``inspect``,
when llama.cpp would refuse the file), 2 for usage errors
(and, for a run, when the run itself failed), 141 when the reader of standard
output went away (``gguf-audit codes | head -1``), as for a Unix tool that
SIGPIPE ended, without a traceback.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import threading
from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import Any, Final

from gguf_audit import __version__
from gguf_audit.audit import DEFAULT_AUDIT_CONFIG, AuditConfig, audit_file
from gguf_audit.compare import CompareUsageError, compare_files
from gguf_audit.errors import FormatError, GGUFAuditError, SourceError, Terminated, describe_exception
from gguf_audit.findings import CODES, LLAMA_CPP_BUILD, CodeInfo, Severity, llama_cpp_label
from gguf_audit.format.safetensors import ReferenceFormatError
from gguf_audit.io.options import StorageOptionsError, parse_storage_options
from gguf_audit.io.protocols import EXTRAS, ProtocolUnavailable, check_protocol, local_directory
from gguf_audit.io.upstream import UpstreamConfig
from gguf_audit.plan import SampleConfig, SelectionError
from gguf_audit.redact import install_log_redaction, redact_text, redact_url
from gguf_audit.report.json import audit_to_json, comparison_to_json, dumps, file_samples_to_json
from gguf_audit.report.sarif import results_of_findings, sarif_json, sarif_log, sarif_run
from gguf_audit.report.text import render_comparison, render_file_samples, render_text
from gguf_audit.samples import read_file_samples

__all__ = ["EXIT_STATUSES", "main"]

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2
EXIT_BROKEN_PIPE: Final = 128 + 13
"""What a shell reports for a tool that SIGPIPE ended: the reader of its output went away."""
EXIT_INTERRUPTED: Final = 128 + signal.SIGINT
EXIT_TERMINATED: Final = 128 + signal.SIGTERM
EXIT_STATUSES: Final = (
    "exit status: 0 done, 1 a problem is an error (inspect: or llama.cpp refuses the file), "
    "2 a usage error or the command failed, 130/143 interrupted (SIGINT/SIGTERM), 141 output pipe closed"
)
"""The exit statuses every command's ``--help`` ends with (docs/cli.md says what each failure prints)."""
TRACEBACK_ENV: Final = "GGUF_AUDIT_TRACEBACK"
"""Set to 1 to see the traceback of a failure the command otherwise reports in one line."""

COMMANDS_GROUP: Final = "gguf_audit.commands"
"""The entry-point group of plugged-in subcommands: ``name = "module:add_parser"``."""


class _UsageError(Exception):
    pass


def _parse_storage_options(text: str | None) -> dict[str, Any]:
    """The flag's options under the one rule every command applies (no credentials, a JSON object)."""
    try:
        return parse_storage_options(text)
    except StorageOptionsError as exc:
        raise _UsageError(str(exc)) from None


def _readable(url: str) -> str:
    """The URL, once its protocol is known and installed and it is not a local directory."""
    try:
        check_protocol(url)
    except ProtocolUnavailable as exc:
        raise _UsageError(str(exc)) from None
    directory = local_directory(url)
    if directory is not None:
        hint = f"gguf-audit scan {directory} --out OUT"
        raise _UsageError(f"{directory!r} is a directory; audit a collection with: {hint}")
    return url


def _sample_config(args: argparse.Namespace) -> SampleConfig:
    if args.sample_requests is None:
        return SampleConfig()
    try:
        return SampleConfig(max_requests=args.sample_requests)
    except ValueError as exc:
        raise _UsageError(f"--sample-requests must be at least 1. Got {args.sample_requests}.") from exc


def _cmd_inspect(args: argparse.Namespace) -> int:
    options = _parse_storage_options(args.storage_options)
    sample_config = _sample_config(args)
    config = AuditConfig(samples=sample_config) if args.samples else DEFAULT_AUDIT_CONFIG
    config = _with_upstream(config, args)
    url = _readable(args.url)
    audit = audit_file(url, display_url=redact_url(url), storage_options=options, config=config)
    fmt = "json" if args.json else args.format
    if fmt in ("json", "jsonl"):
        out = audit_to_json(audit, full_arrays=args.full_arrays, samples=args.samples)
        sys.stdout.write(dumps(out) + "\n")  # one line: a JSON object and a JSON Lines record alike
    elif fmt == "sarif":
        run = sarif_run(results_of_findings(audit.url, audit.findings), artifacts={audit.url: audit.size})
        sys.stdout.write(sarif_json(sarif_log([run])) + "\n")
    else:
        print(render_text(audit, samples=args.samples))
    # A file llama.cpp refuses fails the command even when its findings are
    # warnings (a big-endian file): "1" must mean "this will not load" too.
    return EXIT_PROBLEMS if audit.errors or audit.loadable is False else EXIT_OK


def _with_upstream(config: AuditConfig, args: argparse.Namespace) -> AuditConfig:
    """``--upstream LOCATION`` compares with that place only; ``--upstream-auto`` looks beside the file,
    then where its header points. Neither: no upstream requests (the default)."""
    if args.upstream is not None:
        return dataclasses.replace(config, upstream=UpstreamConfig(location=args.upstream))
    if args.upstream_auto:
        return dataclasses.replace(config, upstream=UpstreamConfig())
    return config


def _parse_blocks(text: str | None) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(part) for part in text.split(",")]
    except ValueError:
        raise _UsageError(f"--blocks takes comma-separated block indices, such as 0,5,-1. Got {text!r}.") from None


def _cmd_sample(args: argparse.Namespace) -> int:
    options = _parse_storage_options(args.storage_options)
    blocks = _parse_blocks(args.blocks)
    try:
        url = _readable(args.url)
        samples = read_file_samples(
            url, tensors=args.tensor, blocks=blocks, storage_options=options, config=_sample_config(args)
        )
    except SelectionError as exc:
        raise _UsageError(str(exc)) from exc
    except (FormatError, SourceError) as exc:
        print(redact_text(f"gguf-audit: {args.url}: {exc}"), file=sys.stderr)
        return EXIT_PROBLEMS
    samples = dataclasses.replace(samples, url=redact_url(samples.url))
    if args.json:
        sys.stdout.write(dumps(file_samples_to_json(samples)) + "\n")
    else:
        print(render_file_samples(samples))
    return EXIT_PROBLEMS if any(f.severity is Severity.ERROR for f in samples.read.findings) else EXIT_OK


def _cmd_compare(args: argparse.Namespace) -> int:
    options = _parse_storage_options(args.storage_options)
    try:
        result = compare_files(_readable(args.quant), _readable(args.reference), storage_options=options)
    except CompareUsageError as exc:
        raise _UsageError(str(exc)) from None
    except (FormatError, SourceError, ReferenceFormatError) as exc:
        print(redact_text(f"gguf-audit: {exc}"), file=sys.stderr)
        return EXIT_PROBLEMS
    shown = tuple(dataclasses.replace(f, message=redact_text(f.message)) for f in result.findings)
    result = dataclasses.replace(
        result, quant_url=redact_url(result.quant_url), reference_url=redact_url(result.reference_url), findings=shown
    )
    if args.json:
        sys.stdout.write(dumps(comparison_to_json(result)) + "\n")
    else:
        print(render_comparison(result))
    return EXIT_PROBLEMS if any(f.severity is Severity.ERROR for f in result.findings) else EXIT_OK


def _cmd_codes(args: argparse.Namespace) -> int:
    rows = sorted(CODES.values(), key=lambda c: c.code)
    if args.markdown:
        print(codes_markdown())
        return EXIT_OK
    if args.json:
        json.dump([_code_json(c) for c in rows], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return EXIT_OK
    width = max(len(c.code) for c in rows)
    print(f"{'code':{width}}  {'severity':8} {'llama.cpp ' + LLAMA_CPP_BUILD:16} explanation")
    for c in rows:
        print(f"{c.code:{width}}  {c.severity:8} {llama_cpp_label(c.llama_cpp):16} {c.doc}")
    return EXIT_OK


def _code_json(c: CodeInfo) -> dict[str, object]:
    """One code in ``codes --json``: ``llama_cpp`` its verdict for ``llama_cpp_build`` (``refused`` the boolean)."""
    return {
        "code": c.code,
        "severity": str(c.severity),
        "llama_cpp": llama_cpp_label(c.llama_cpp),
        "llama_cpp_build": LLAMA_CPP_BUILD,
        "refused": c.refused,
        "doc": c.doc,
    }


def codes_markdown() -> str:
    """The README's table of codes, generated from the registry."""
    lines = [f"| code | severity | llama.cpp {LLAMA_CPP_BUILD} | what it means |", "|---|---|---|---|"]
    for c in sorted(CODES.values(), key=lambda c: c.code):
        lines.append(f"| `{c.code}` | {c.severity} | {llama_cpp_label(c.llama_cpp)} | {c.doc} |")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gguf-audit",
        description="Audit GGUF model files where they are stored, reading only headers and a few blocks.",
    )
    parser.add_argument("--version", action="version", version=f"gguf-audit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    inspect = sub.add_parser("inspect", help="read one file's header and report every problem", epilog=EXIT_STATUSES)
    inspect.add_argument("url", help="any fsspec URL or local path (s3://, hf://, https://, gs://, file)")
    inspect.add_argument(
        "--format",
        choices=("text", "json", "jsonl", "sarif"),
        default="text",
        help="text (default), json (one object), jsonl (one object per file, a line each) or sarif (SARIF 2.1.0)",
    )
    inspect.add_argument("--json", action="store_true", help="the same as --format json")
    inspect.add_argument("--full-arrays", action="store_true", help="include array values in --json")
    inspect.add_argument("--storage-options", metavar="JSON", help="fsspec storage options as a JSON object")
    inspect.add_argument("--samples", action="store_true", help="also read sampled tensor blocks and check their data")
    inspect.add_argument(
        "--sample-requests", type=int, metavar="N", help="range requests for samples at most, with --samples (32)"
    )
    inspect.add_argument(
        "--upstream",
        metavar="DIR_OR_URL",
        help="compare with the config.json, tokenizer_config.json, generation_config.json there (upstream.*)",
    )
    inspect.add_argument(
        "--upstream-auto",
        action="store_true",
        help="compare with the upstream found beside the file or in the repository its header names",
    )
    inspect.set_defaults(func=_cmd_inspect)

    codes = sub.add_parser("codes", help="print the catalogue of problem codes", epilog=EXIT_STATUSES)
    codes.add_argument("--json", action="store_true")
    codes.add_argument("--markdown", action="store_true", help="the README's table")
    codes.set_defaults(func=_cmd_codes)

    sample = sub.add_parser(
        "sample", help="decode chosen tensor blocks of one file, with statistics", epilog=EXIT_STATUSES
    )
    sample.add_argument("url", help="any fsspec URL or local path")
    sample.add_argument("--tensor", action="append", metavar="NAME", help="a tensor to sample (repeatable)")
    sample.add_argument("--blocks", metavar="LIST", help="block indices, such as 0,5,-1 (default: the sampling plan)")
    sample.add_argument("--json", action="store_true", help="print one JSON object with every value")
    sample.add_argument(
        "--sample-requests", type=int, metavar="N", help="range requests at most for the sampling plan (default 32)"
    )
    sample.add_argument("--storage-options", metavar="JSON", help="fsspec storage options as a JSON object")
    sample.set_defaults(func=_cmd_sample)

    compare = sub.add_parser(
        "compare", help="measure a quantized file's error against its reference at sampled blocks", epilog=EXIT_STATUSES
    )
    compare.add_argument("quant", help="the quantized GGUF")
    compare.add_argument("reference", help="an F32, F16 or BF16 GGUF, or a safetensors file")
    compare.add_argument("--json", action="store_true", help="print one JSON object")
    compare.add_argument("--storage-options", metavar="JSON", help="fsspec storage options for both files")
    compare.set_defaults(func=_cmd_compare)

    _add_plugged_in_commands(sub)
    return parser


def _add_plugged_in_commands(sub: Any) -> None:
    """The subcommands other packages plug in through the :data:`COMMANDS_GROUP` entry points.

    Each entry point names a function that takes the subparsers and adds its
    command (``scan`` and ``demo`` come from ``gguf_audit.pipelines`` this way,
    so the library never imports the pipelines). One that cannot be imported is
    left out; the other commands still work.
    """
    for plugin in sorted(entry_points(group=COMMANDS_GROUP), key=lambda ep: ep.name):
        try:
            add_parser = plugin.load()
        except ImportError as exc:
            _add_missing_command(sub, plugin.name, exc)
            continue
        add_parser(sub)


def _extra_for(exc: ImportError) -> str:
    """The pip command that brings the module an import failed on."""
    top = (exc.name or "").split(".")[0]
    extra = _PIPELINE_MODULES.get(top) or EXTRAS.get(top.removesuffix("fs"))
    return f"pip install 'gguf-audit[{extra or 'pipeline'}]'"


_PIPELINE_MODULES: Final = dict.fromkeys(("dask", "distributed", "deltalake", "duckdb", "tqdm", "bokeh"), "pipeline")


def _add_missing_command(sub: Any, name: str, exc: ImportError) -> None:
    """A command whose module cannot be imported still answers, with what to install, before doing anything."""
    hint = _extra_for(exc)
    parser = sub.add_parser(name, help=f"(not installed: {hint})", add_help=False)
    parser.add_argument("rest", nargs=argparse.REMAINDER)

    def missing(args: argparse.Namespace) -> int:
        raise _UsageError(f"{name} needs an extra that is not installed ({exc.name or exc}): {hint}")

    parser.set_defaults(func=missing)


def _silence_stdout() -> None:
    """Point standard output at /dev/null, so the interpreter's last flush meets no closed pipe."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError, AttributeError):  # stdout without a descriptor (a test's capture)
        pass


def _raise_terminated(signum: int, frame: object) -> None:
    raise Terminated(signum)


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its exit status, whatever happens.

    A closed output pipe ends it quietly (:data:`EXIT_BROKEN_PIPE`); Ctrl-C and
    SIGTERM unwind it like an exception, so clusters, child processes and
    pending commits are cleaned up on the way out, and end it with one line
    and 130 or 143; any other failure is one line and exit 2
    (:data:`TRACEBACK_ENV` shows the traceback).
    """
    previous = None
    if threading.current_thread() is threading.main_thread():
        previous = signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        status = _run(argv)
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except Terminated:
        print("gguf-audit: terminated (SIGTERM)", file=sys.stderr)
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        print("gguf-audit: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)
    return status


def _run(argv: Sequence[str] | None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code not in (0, None) else EXIT_OK
    install_log_redaction()  # the loggers imported so far; run_scan adds its own
    try:
        return int(args.func(args))
    except _UsageError as exc:
        print(redact_text(f"gguf-audit: {exc}"), file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        raise  # main's to end quietly
    except (GGUFAuditError, OSError) as exc:
        print(redact_text(f"gguf-audit: {args.command} failed: {exc}"), file=sys.stderr)
        return EXIT_USAGE
    except Exception as exc:
        if os.environ.get(TRACEBACK_ENV) == "1":
            raise
        print(
            redact_text(f"gguf-audit: {args.command} failed: {describe_exception(exc)}")
            + f" (set {TRACEBACK_ENV}=1 for the traceback)",
            file=sys.stderr,
        )
        return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
