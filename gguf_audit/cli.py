"""The ``gguf-audit`` command. ``main(argv)`` returns the exit status, so tests call it in-process.

Exit status: 0 when no problem is an error, 1 when one is (or, for ``inspect``,
when llama.cpp would refuse the file), 2 for usage errors
(and, for a run, when the run itself failed), 141 when the reader of standard
output went away (``gguf-audit codes | head -1``), as for a Unix tool that
SIGPIPE ended, without a traceback.
"""

from __future__ import annotations

import argparse
import atexit
import contextlib
import dataclasses
import json
import os
import signal
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from enum import IntEnum
from typing import TYPE_CHECKING, Any, Final, NoReturn

from gguf_audit import __version__
from gguf_audit.errors import (
    FormatError,
    GGUFAuditError,
    SourceError,
    Terminated,
    UsageError,
    describe_exception,
    one_line,
)
from gguf_audit.findings import CODES, LLAMA_CPP_BUILD, CodeInfo, Severity, llama_cpp_label
from gguf_audit.io.options import StorageOptionsError, parse_storage_options
from gguf_audit.redact import install_log_redaction, redact_known, redact_text, redact_url, secrets_in
from gguf_audit.shell import SHELLS, add_verbosity_flags, completion_script, parse_command_line, verbosity

if TYPE_CHECKING:
    from gguf_audit.audit import AuditConfig
    from gguf_audit.io.base import RangeSource
    from gguf_audit.plan import SampleConfig

# A command imports what only it needs inside its function (the audit, the
# decoders, the reports, compare), so a one-file ``inspect`` loads no more than
# it runs, and ``codes`` or ``--version`` hardly anything (tests/test_cli_startup.py).

__all__ = ["EXIT_STATUSES", "ExitStatus", "main", "run", "say_error"]


class ExitStatus(IntEnum):
    """Every status a ``gguf-audit`` command exits with (``docs/cli.md`` lists them)."""

    OK = 0
    PROBLEMS = 1
    """A problem at or above the command's threshold (inspect: llama.cpp refuses or aborts on the file)."""
    USAGE = 2
    """A usage error, or the command could not do its work (a store that cannot be reached); one line says why."""
    INTERRUPTED = 128 + signal.SIGINT
    BROKEN_PIPE = 128 + signal.SIGPIPE
    """What a shell reports for a tool that SIGPIPE ended: the reader of its output went away."""
    TERMINATED = 128 + signal.SIGTERM


EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = ExitStatus.OK, ExitStatus.PROBLEMS, ExitStatus.USAGE
EXIT_BROKEN_PIPE: Final = ExitStatus.BROKEN_PIPE
EXIT_INTERRUPTED: Final = ExitStatus.INTERRUPTED
EXIT_TERMINATED: Final = ExitStatus.TERMINATED
EXIT_STATUSES: Final = (
    "exit status: 0 done, 1 a problem is an error (inspect: or llama.cpp refuses the file), "
    "2 a usage error or the command failed, 130/143 interrupted (SIGINT/SIGTERM), 141 output pipe closed"
)
"""The exit statuses every command's ``--help`` ends with (docs/cli.md says what each failure prints)."""
TRACEBACK_ENV: Final = "GGUF_AUDIT_TRACEBACK"
"""Set to 1 to see the traceback of a failure the command otherwise reports in one line."""

COMMANDS_GROUP: Final = "gguf_audit.commands"
"""The entry-point group of plugged-in subcommands: ``name = "module:add_parser"``."""
SUMMARIES_GROUP: Final = "gguf_audit.command_summaries"
"""Entry points naming a mapping of plugged-in commands to their one-line helps (for the top-level help)."""


_UsageError = UsageError


_argv_secrets: frozenset[str] = frozenset()
"""The secrets the command line's URLs hold (:func:`~gguf_audit.redact.secrets_in`), set by :func:`_run`."""


def say_error(text: str) -> None:
    """Print one error line on standard error: redacted first (every URL, and the command line's own secrets
    wherever an error quotes them), then made one line (so a cut never shows half a secret)."""
    print(one_line(redact_known(redact_text(f"gguf-audit: {text}"), _argv_secrets)), file=sys.stderr)


def _parse_storage_options(text: str | None) -> dict[str, Any]:
    """The flag's options under the one rule every command applies (no credentials, a JSON object)."""
    try:
        return parse_storage_options(text)
    except StorageOptionsError as exc:
        raise _UsageError(str(exc)) from None


def _readable(url: str) -> str:
    """The URL, once its protocol is known and installed and it is not a local directory."""
    from gguf_audit.io.plain import plain_protocol

    protocol = plain_protocol(url)
    if protocol in ("http", "https"):
        return url  # the standard library reads these: no fsspec to ask
    if protocol == "file" and not os.path.isdir(url):
        return url
    from gguf_audit.io.protocols import ProtocolUnavailable, check_protocol, local_directory

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
    from gguf_audit.plan import SampleConfig

    if args.sample_requests is None:
        return SampleConfig()
    try:
        return SampleConfig(max_requests=args.sample_requests)
    except ValueError as exc:
        raise _UsageError(f"--sample-requests must be at least 1. Got {args.sample_requests}.") from exc


def _cmd_inspect(args: argparse.Namespace) -> int:
    if args.deadline is not None and not 0 < args.deadline < float("inf"):
        raise _UsageError(f"--deadline must be a positive number of seconds. Got {args.deadline}.")
    options = _parse_storage_options(args.storage_options)
    # Most model files hold a chat template: its render child starts now, beside the imports and the read.
    from gguf_audit.templates.sandbox.runner import prestart

    prestart()
    url = _readable(args.url)
    early = _read_ahead(url, args, options)
    from gguf_audit.audit import DEFAULT_AUDIT_CONFIG, AuditConfig, AuditResources, AuditTarget, audit_file_within

    # --sample-requests is checked even without --samples (a bad value is a usage error either way).
    sample_config = _sample_config(args) if args.samples or args.sample_requests is not None else None
    config = AuditConfig(samples=sample_config) if args.samples else DEFAULT_AUDIT_CONFIG
    config = _with_upstream(config, args, options)
    # The header alone: a plain http(s) URL or local path is read with the standard library, the same requests
    # and checks without fsspec's and aiohttp's start-up. Sampled blocks keep fsspec's concurrent reads.
    resources = AuditResources(stdlib_reads=not args.samples)
    target = AuditTarget(url, storage_options=options, display_url=redact_url(url), source=early)
    audit = audit_file_within(target, config=config, resources=resources, deadline_s=args.deadline)
    fmt = "json" if args.json else args.format
    if fmt in ("json", "jsonl"):
        from gguf_audit.report.json import audit_to_json, dumps

        out = audit_to_json(audit, full_arrays=args.full_arrays, samples=args.samples)
        sys.stdout.write(dumps(out) + "\n")  # one line: a JSON object and a JSON Lines record alike
    elif fmt == "sarif":
        from gguf_audit.report.sarif import results_of_findings, sarif_json, sarif_log, sarif_run

        run = sarif_run(results_of_findings(audit.url, audit.findings), artifacts={audit.url: audit.size})
        sys.stdout.write(sarif_json(sarif_log([run])) + "\n")
    else:
        from gguf_audit.report.text import render_text

        print(render_text(audit, samples=args.samples))
    if audit.header is None and any(f.code.startswith(("io.", "run.")) for f in audit.findings):
        # The store, not the file: a gate must tell "store down" from "file bad". The report above still says why.
        return ExitStatus.USAGE
    # A file llama.cpp refuses fails the command even when its findings are
    # warnings (a big-endian file): "1" must mean "this will not load" too.
    return EXIT_PROBLEMS if audit.errors or audit.loadable is False else EXIT_OK


def _read_ahead(url: str, args: argparse.Namespace, options: Mapping[str, Any]) -> RangeSource | None:
    """The source of a plain http(s) URL read header-only with the default read settings, its first
    read already sent (before the audit's imports: on a remote store its round trip hides them)."""
    if args.samples or options or args.upstream is not None or args.upstream_auto:
        return None
    from gguf_audit.io.plain import PlainHTTPSource, open_plain_source
    from gguf_audit.io.read_config import DEFAULT_READ_CONFIG

    source = open_plain_source(url, config=DEFAULT_READ_CONFIG)
    if not isinstance(source, PlainHTTPSource):
        return None  # a local file's first read costs nothing to wait for
    source.read_ahead(0, DEFAULT_READ_CONFIG.initial_bytes)
    return source


def _with_upstream(config: AuditConfig, args: argparse.Namespace, options: Mapping[str, Any]) -> AuditConfig:
    """``--upstream LOCATION`` compares with that place only (refused when it holds no upstream files);
    ``--upstream-auto`` looks beside the file, then where its header points. Neither: no upstream requests."""
    if args.upstream is None and not args.upstream_auto:
        return config
    from gguf_audit.io.upstream import UpstreamConfig, require_upstream

    if args.upstream is not None:
        try:
            upstream = UpstreamConfig(location=args.upstream)
        except ValueError:
            raise _UsageError(f"--upstream needs a directory or URL. Got {args.upstream!r}.") from None
        require_upstream(args.upstream, storage_options=options)
        return dataclasses.replace(config, upstream=upstream)
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
    from gguf_audit.plan import SelectionError
    from gguf_audit.report.json import dumps, file_samples_to_json
    from gguf_audit.report.text import render_file_samples
    from gguf_audit.samples import read_file_samples

    options = _parse_storage_options(args.storage_options)
    blocks = _parse_blocks(args.blocks)
    try:
        url = _readable(args.url)
        samples = read_file_samples(
            url, tensors=args.tensor, blocks=blocks, storage_options=options, config=_sample_config(args)
        )
    except SelectionError as exc:
        raise _UsageError(str(exc)) from exc
    except SourceError as exc:  # the store, not the file: a gate must tell the two apart
        raise UsageError(f"{args.url}: {exc}") from None
    except FormatError as exc:
        say_error(f"{args.url}: {exc}")
        return ExitStatus.PROBLEMS
    samples = dataclasses.replace(samples, url=redact_url(samples.url))
    if args.json:
        sys.stdout.write(dumps(file_samples_to_json(samples)) + "\n")
    else:
        print(render_file_samples(samples))
    return EXIT_PROBLEMS if any(f.severity is Severity.ERROR for f in samples.read.findings) else EXIT_OK


def _cmd_compare(args: argparse.Namespace) -> int:
    from gguf_audit.compare import CompareUsageError, compare_files
    from gguf_audit.format.safetensors import ReferenceFormatError
    from gguf_audit.report.json import comparison_to_json, dumps
    from gguf_audit.report.text import render_comparison

    options = _parse_storage_options(args.storage_options)
    try:
        result = compare_files(_readable(args.quant), _readable(args.reference), storage_options=options)
    except CompareUsageError as exc:
        raise _UsageError(str(exc)) from None
    except SourceError as exc:
        raise UsageError(str(exc)) from None
    except (FormatError, ReferenceFormatError) as exc:
        say_error(str(exc))
        return ExitStatus.PROBLEMS
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


_CODES_PAGE_HEAD: Final = """# Problem codes

Every finding gguf-audit reports has one of these codes (`area.problem`), a default severity, and what
llama.cpp build {build} (the oracle in `../shared/llama.cpp`) does with a file that has it: `loads`, `refuses`
(the loader returns an error), `aborts` (a failed `GGML_ASSERT` kills the process that loads the file) or
`unknown` (the finding means gguf-audit could not judge the file). A file's verdict is the worst of its findings.

This page is generated from the registry (`gguf_audit/codes/`): `gguf-audit codes --markdown > docs/codes.md`
after adding or changing a code; `tests/test_cli.py` fails while it is out of step.
"""


def codes_markdown() -> str:
    """``docs/codes.md``: every code in a table, generated from the registry."""
    lines = [_CODES_PAGE_HEAD.format(build=LLAMA_CPP_BUILD), "| code | severity | llama.cpp | what it means |"]
    lines.append("|---|---|---|---|")
    for c in sorted(CODES.values(), key=lambda c: c.code):
        lines.append(f"| `{c.code}` | {c.severity} | {c.llama_cpp or 'unknown'} | {c.doc} |")
    return "\n".join(lines)


def _parser(
    plugged_in: Callable[[str], bool] | None = None, *, given: str | None = None, summaries: bool = False
) -> argparse.ArgumentParser:
    """The whole command line. ``plugged_in(name)`` says which plugged-in commands to import (all by default),
    the others get a placeholder taking any arguments (``summaries``: showing their one-line helps), so
    ``inspect`` or ``codes`` never import the pipelines (pyarrow, deltalake, dask). When ``given``, the command
    the line names, is built in, the plugged-in commands are not even listed (no entry points are read)."""
    parser = argparse.ArgumentParser(
        prog="gguf-audit",
        description="Audit GGUF model files where they are stored, reading only headers and a few blocks.",
    )
    parser.add_argument("--version", action="version", version=f"gguf-audit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_inspect(sub)
    _add_file_commands(sub)
    _add_completion(sub)
    if given not in sub.choices:
        _add_plugged_in_commands(sub, plugged_in or (lambda name: True), with_summaries=summaries)
    add_verbosity_flags(parser)  # -q and -v on every command, built in and plugged in
    return parser


def _add_inspect(sub: Any) -> None:
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
    inspect.add_argument(
        "--deadline", type=float, metavar="SECONDS", help="wall clock the whole audit may take (a scan's 900)"
    )
    inspect.set_defaults(func=_cmd_inspect)


def _add_file_commands(sub: Any) -> None:
    """``codes``, ``sample`` and ``compare``: the catalogue, and one file's blocks decoded or compared."""
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


def _add_completion(sub: Any) -> None:
    completion = sub.add_parser("completion", help="print a shell completion script", epilog=EXIT_STATUSES)
    completion.add_argument("shell", choices=SHELLS, help="eval it, or save it where the shell loads completions")
    completion.set_defaults(func=lambda args: print(completion_script(args.shell, _parser()), end="") or EXIT_OK)


def _add_plugged_in_commands(sub: Any, wanted: Callable[[str], bool], *, with_summaries: bool = False) -> None:
    """The subcommands other packages plug in through the :data:`COMMANDS_GROUP` entry points.

    Each entry point names a function that takes the subparsers and adds its
    command (``scan`` and ``demo`` come from ``gguf_audit.pipelines`` this way,
    so the library never imports the pipelines). One that cannot be imported is
    left out; the other commands still work.
    """
    from importlib.metadata import entry_points

    summaries = _summaries() if with_summaries else {}
    for plugin in sorted(entry_points(group=COMMANDS_GROUP), key=lambda ep: ep.name):
        if plugin.name in sub.choices:
            continue  # the entry points of two installs of the same package
        if not wanted(plugin.name):
            shown = summaries.get(plugin.name, f"see gguf-audit {plugin.name} --help")
            placeholder = sub.add_parser(plugin.name, help=shown, add_help=False)
            placeholder.add_argument("rest", nargs=argparse.REMAINDER)
            continue
        try:
            add_parser = plugin.load()
        except ImportError as exc:
            _add_missing_command(sub, plugin.name, exc)
            continue
        add_parser(sub)


def _asks_help(argv: Sequence[str]) -> bool:
    """Whether a command line asks for the top-level help (the only place the summaries are shown)."""
    return _command_of(argv) is None and any(a in ("-h", "--help") for a in argv)


def _summaries() -> dict[str, str]:
    """The plugged-in commands' one-line helps, from the :data:`SUMMARIES_GROUP` entry points (each a mapping of
    command names to lines, in a module that imports nothing heavy): the top-level help without their modules."""
    from importlib.metadata import entry_points

    found: dict[str, str] = {}
    for entry in entry_points(group=SUMMARIES_GROUP):
        try:
            loaded = entry.load()
        except ImportError:
            continue
        if isinstance(loaded, Mapping):
            found.update({str(k): str(v) for k, v in loaded.items()})
    return found


def _extra_for(exc: ImportError) -> str:
    """The pip command that brings the module an import failed on."""
    from gguf_audit.io.protocols import EXTRAS

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


"""Commands whose process ends without the interpreter's teardown (see :func:`run`)."""


def run() -> NoReturn:
    """The ``gguf-audit`` script and ``python -m gguf_audit``: :func:`main`, then exit with its status.

    The process ends without the interpreter's teardown, once its work is done: the
    threads it started are joined (``threading._shutdown``, as the interpreter's exit
    does), standard output and error flushed and the ``atexit`` handlers run (a render
    child is stopped, logging flushed, fsspec's and distributed's cleanups). What is
    skipped is clearing every module (15 to 20 ms of a 0.3 s ``inspect``) and the
    native libraries' static destructors: under load, one of DuckDB's, pyarrow's or
    deltalake's thread objects destroyed there killed a committed night's ``scan``,
    ``report`` or ``diff`` with "terminate called without an active exception" and
    status 134, breaking a nightly job's ``&&`` chain.
    """
    status = main()
    with contextlib.suppress(Exception):
        threading._shutdown()  # type: ignore[attr-defined]  # non-daemon threads joined, as at exit
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # main already reported a closed pipe
            stream.flush()
    atexit._run_exitfuncs()
    os._exit(status)


def _command_of(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names (its first word that is not an option), if any."""
    return next((a for a in argv if not a.startswith("-")), None)


def _plugged_in_for(argv: Sequence[str]) -> Callable[[str], bool]:
    """Which plugged-in commands a command line needs imported: the one it names; none for the top-level help
    (it shows their summaries)."""
    command = _command_of(argv)
    return lambda name: name == command


def _run(argv: Sequence[str] | None) -> int:
    global _argv_secrets
    argv = sys.argv[1:] if argv is None else list(argv)
    _argv_secrets = secrets_in(argv)
    parser = _parser(_plugged_in_for(argv), given=_command_of(argv), summaries=_asks_help(argv))
    try:
        args = parse_command_line(parser, argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code not in (0, None) else EXIT_OK
    install_log_redaction()  # the loggers imported so far; run_scan adds its own
    try:
        with verbosity(args):
            return int(args.func(args))
    except UsageError as exc:
        say_error(str(exc))
        return ExitStatus.USAGE
    except BrokenPipeError:
        raise  # main's to end quietly
    except (GGUFAuditError, OSError) as exc:
        say_error(f"{args.command} failed: {exc}")
        return ExitStatus.USAGE
    except Exception as exc:
        if os.environ.get(TRACEBACK_ENV) == "1":
            raise
        say_error(f"{args.command} failed: {describe_exception(exc)} (set {TRACEBACK_ENV}=1 for the traceback)")
        return ExitStatus.USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
