"""The ``gguf-audit`` command. ``main(argv)`` returns the exit status, so tests call it in-process.

Exit status: 0 when no problem is an error, 1 when one is, 2 for usage errors
(and, for a run, when the run itself failed).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import Any, Final

from gguf_audit import __version__
from gguf_audit.audit import DEFAULT_AUDIT_CONFIG, AuditConfig, audit_file
from gguf_audit.compare import compare_files
from gguf_audit.errors import FormatError, SourceError
from gguf_audit.findings import CODES, Severity
from gguf_audit.format.safetensors import ReferenceFormatError
from gguf_audit.plan import SampleConfig, SelectionError
from gguf_audit.report.json import audit_to_json, comparison_to_json, file_samples_to_json
from gguf_audit.report.text import render_comparison, render_file_samples, render_text
from gguf_audit.samples import read_file_samples

__all__ = ["main"]

EXIT_OK, EXIT_PROBLEMS, EXIT_USAGE = 0, 1, 2

COMMANDS_GROUP: Final = "gguf_audit.commands"
"""The entry-point group of plugged-in subcommands: ``name = "module:add_parser"``."""


class _UsageError(Exception):
    pass


def _parse_storage_options(text: str | None) -> dict[str, Any]:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _UsageError(f"--storage-options is not valid JSON: {exc.msg}. Got {text!r}.") from exc
    if not isinstance(value, dict):
        raise _UsageError(f"--storage-options must be a JSON object. Got {text!r}.")
    if isinstance(value.get("token"), str):
        raise _UsageError(
            "--storage-options may not carry a token: set HF_TOKEN (or log in with huggingface_hub) "
            "or the store's usual environment variables instead"
        )
    return value


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
    audit = audit_file(args.url, storage_options=options, config=config)
    if args.json:
        out = audit_to_json(audit, full_arrays=args.full_arrays, samples=args.samples)
        json.dump(out, sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        print(render_text(audit, samples=args.samples))
    return EXIT_PROBLEMS if audit.errors else EXIT_OK


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
        samples = read_file_samples(
            args.url, tensors=args.tensor, blocks=blocks, storage_options=options, config=_sample_config(args)
        )
    except SelectionError as exc:
        raise _UsageError(str(exc)) from exc
    except (FormatError, SourceError) as exc:
        print(f"gguf-audit: {args.url}: {exc}", file=sys.stderr)
        return EXIT_PROBLEMS
    if args.json:
        json.dump(file_samples_to_json(samples), sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        print(render_file_samples(samples))
    return EXIT_PROBLEMS if any(f.severity is Severity.ERROR for f in samples.read.findings) else EXIT_OK


def _cmd_compare(args: argparse.Namespace) -> int:
    options = _parse_storage_options(args.storage_options)
    try:
        result = compare_files(args.quant, args.reference, storage_options=options)
    except (FormatError, SourceError, ReferenceFormatError) as exc:
        print(f"gguf-audit: {exc}", file=sys.stderr)
        return EXIT_PROBLEMS
    if args.json:
        json.dump(comparison_to_json(result), sys.stdout, ensure_ascii=False)
        sys.stdout.write("\n")
    else:
        print(render_comparison(result))
    return EXIT_PROBLEMS if any(f.severity is Severity.ERROR for f in result.findings) else EXIT_OK


def _cmd_codes(args: argparse.Namespace) -> int:
    rows = sorted(CODES.values(), key=lambda c: c.code)
    if args.markdown:
        print(codes_markdown())
        return EXIT_OK
    if args.json:
        json.dump(
            [{"code": c.code, "severity": str(c.severity), "refused": c.refused, "doc": c.doc} for c in rows],
            sys.stdout,
            indent=2,
        )
        sys.stdout.write("\n")
        return EXIT_OK
    width = max(len(c.code) for c in rows)
    print(f"{'code':{width}}  {'severity':8} {'llama.cpp':10} explanation")
    for c in rows:
        refused = {True: "refuses", False: "loads", None: "unknown"}[c.refused]
        print(f"{c.code:{width}}  {c.severity:8} {refused:10} {c.doc}")
    return EXIT_OK


def codes_markdown() -> str:
    """The README's table of codes, generated from the registry."""
    lines = ["| code | severity | llama.cpp | what it means |", "|---|---|---|---|"]
    for c in sorted(CODES.values(), key=lambda c: c.code):
        refused = {True: "refuses", False: "loads", None: "unknown"}[c.refused]
        lines.append(f"| `{c.code}` | {c.severity} | {refused} | {c.doc} |")
    return "\n".join(lines)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="gguf-audit",
        description="Audit GGUF model files where they are stored, reading only headers and a few blocks.",
    )
    parser.add_argument("--version", action="version", version=f"gguf-audit {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    inspect = sub.add_parser("inspect", help="read one file's header and report every problem")
    inspect.add_argument("url", help="any fsspec URL or local path (s3://, hf://, https://, gs://, file)")
    inspect.add_argument("--json", action="store_true", help="print one JSON object")
    inspect.add_argument("--full-arrays", action="store_true", help="include array values in --json")
    inspect.add_argument("--storage-options", metavar="JSON", help="fsspec storage options as a JSON object")
    inspect.add_argument("--samples", action="store_true", help="also read sampled tensor blocks and check their data")
    inspect.add_argument(
        "--sample-requests", type=int, metavar="N", help="range requests for samples at most, with --samples (32)"
    )
    inspect.set_defaults(func=_cmd_inspect)

    codes = sub.add_parser("codes", help="print the catalogue of problem codes")
    codes.add_argument("--json", action="store_true")
    codes.add_argument("--markdown", action="store_true", help="the README's table")
    codes.set_defaults(func=_cmd_codes)

    sample = sub.add_parser("sample", help="decode chosen tensor blocks of one file, with statistics")
    sample.add_argument("url", help="any fsspec URL or local path")
    sample.add_argument("--tensor", action="append", metavar="NAME", help="a tensor to sample (repeatable)")
    sample.add_argument("--blocks", metavar="LIST", help="block indices, such as 0,5,-1 (default: the sampling plan)")
    sample.add_argument("--json", action="store_true", help="print one JSON object with every value")
    sample.add_argument(
        "--sample-requests", type=int, metavar="N", help="range requests at most for the sampling plan (default 32)"
    )
    sample.add_argument("--storage-options", metavar="JSON", help="fsspec storage options as a JSON object")
    sample.set_defaults(func=_cmd_sample)

    compare = sub.add_parser("compare", help="measure a quantized file's error against its reference at sampled blocks")
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
        except ImportError:
            continue
        add_parser(sub)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return EXIT_USAGE if exc.code not in (0, None) else EXIT_OK
    try:
        return int(args.func(args))
    except _UsageError as exc:
        print(f"gguf-audit: {exc}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
