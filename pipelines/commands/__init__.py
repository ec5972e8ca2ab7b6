"""One module per ``gguf-audit`` subcommand (argparse and the command's own output); nothing imports them.

The ``gguf_audit.commands`` entry points in ``pyproject.toml`` are the inventory:
``gguf_audit.cli`` imports a command's module only when it is the command given.
"""

from __future__ import annotations

from typing import Final

SUMMARIES: Final[dict[str, str]] = {
    "config": "list or print the run configs that ship with gguf-audit",
    "demo": "build a small sample collection and scan it on a local dask cluster",
    "diff": "what changed between two nights (default: the last two); exit 1 on a new problem",
    "export": "write a committed night as SARIF 2.1.0 and/or JSON Lines",
    "report": "write one night of the audit tables as a self-contained HTML page",
    "scan": "audit a whole collection on dask and write Parquet audit tables",
    "snapshot": "write one night of the audit tables as plain Parquet files",
    "sql": "query one night's tables with DuckDB, through views of that night (files, problems, ...)",
    "tables": "list the committed nights and table versions; --vacuum keeps the last N nights",
}
"""Each command's one-line help: its parser's ``help`` and the top-level ``gguf-audit --help``, which reads it
through the ``gguf_audit.command_summaries`` entry point without importing any command module."""
