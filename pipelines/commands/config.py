"""``gguf-audit config``: the run configs that ship with the package.

    gguf-audit config list              their names and first comment line
    gguf-audit config show NAME         one config's TOML, to copy and edit
    gguf-audit config effective [NAME]  what a scan with it uses: every table and key, defaults filled in

``scan --config NAME`` takes the same names, so the configs work outside a
checkout. ``effective`` takes a file too, and checks it as ``scan --config`` does.
Exit status 0, or 2 for a name that is not shipped or a config that is not valid.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from gguf_audit.cli import ExitStatus
from gguf_audit.errors import UsageError
from gguf_audit.pipelines.commands import SUMMARIES
from gguf_audit.pipelines.config import ConfigError, ScanConfig, config_text, config_toml, load_config, shipped_configs

__all__ = ["add_config_parser"]


def add_config_parser(sub: Any) -> argparse.ArgumentParser:
    """Add ``config`` to ``gguf-audit``'s subparsers (a ``gguf_audit.commands`` entry point)."""
    parser: argparse.ArgumentParser = sub.add_parser(
        "config",
        help=SUMMARIES["config"],
        description="The shipped run configs; scan --config NAME takes these names.",
        epilog="exit status: 0 printed, 2 no shipped config of that name, or a config that is not valid",
    )
    actions = parser.add_subparsers(dest="config_action", required=True)
    actions.add_parser("list", help="the shipped configs' names")
    show = actions.add_parser("show", help="print one shipped config")
    show.add_argument("name", metavar="NAME", help="a name from `gguf-audit config list` (local, nightly-s3, ...)")
    effective = actions.add_parser("effective", help="a config with every key, as a scan with it runs")
    effective.add_argument(
        "name", nargs="?", metavar="NAME_OR_FILE", help="a shipped config's name or a TOML file (default: none)"
    )
    parser.set_defaults(func=_cmd_config)
    return parser


def _summary(text: str) -> str:
    """The first comment line after the title line: what the config is for."""
    comments = [line.lstrip("# ").strip() for line in text.splitlines() if line.startswith("#")]
    return comments[0] if comments else ""


def _cmd_config(args: argparse.Namespace) -> int:
    if args.config_action == "list":
        shipped = shipped_configs()
        width = max(map(len, shipped), default=0)
        for name, text in shipped.items():
            print(f"{name:{width}}  {_summary(text)}")
        return ExitStatus.OK
    try:
        if args.config_action == "effective":
            text = config_toml(load_config(args.name) if args.name else ScanConfig())
        else:
            text, _ = config_text(args.name)
    except ConfigError as exc:
        raise UsageError(f"config: {exc}") from exc
    sys.stdout.write(text)
    return ExitStatus.OK
