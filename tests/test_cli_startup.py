"""Commands start fast: ``inspect``, ``codes`` and ``--version`` import none of the pipelines' heavy libraries.

A plugged-in command's module is imported only when it is the command given
(``gguf_audit.cli._plugged_in_for``); each case runs in a fresh interpreter and
lists what it imported.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from corpus import corpus_dir

from gguf_audit.testing.http import RangeHTTPServer

pytestmark = pytest.mark.slow  # fresh interpreters timed for their imports: outside the fast loop

HEAVY = ("pyarrow", "pandas", "deltalake", "dask", "distributed", "duckdb", "gguf_audit.pipelines")
# What a one-file inspect of a local file does not run, so must not import: the comparison of a quantized file
# with its reference, the HTTP client, the sandbox's child side, jinja2 and the template inspection (the file has
# a chat template: the render child parses and inspects it), and the entry points of plugged-in commands (read by
# fsspec for its own, so only gguf-audit's group is checked).
NOT_FOR_INSPECT = (
    "gguf_audit.compare",
    "gguf_audit.format.safetensors",
    "aiohttp",
    "gguf_audit.templates.sandbox.worker",
    "jinja2",
    "gguf_audit.templates.inspect",
)
# What a header-only inspect of a plain http(s) URL or a local path does not import: the standard library reads
# it (gguf_audit/io/plain.py), gguf-py's constants are loaded without gguf-py (gguf_audit/gguf_constants.py), and
# the pipelines' libraries stay out. numpy is not in the list: the parsed header's arrays and the vocabulary
# checks are numpy's.
NOT_FOR_PLAIN_INSPECT = ("gguf", "aiohttp", "fsspec", "asyncio", "pyarrow", "pandas", "deltalake", "dask")
# What neither the catalogue of codes nor the version needs: the audit, numpy, fsspec, the gguf package.
NOT_FOR_CODES = ("gguf_audit.audit", "numpy", "fsspec", "gguf", "jinja2")
PROBE = """
import sys
from importlib import metadata
read_groups = []
_entry_points = metadata.entry_points
def entry_points(**kw):
    read_groups.append(kw.get("group"))
    return _entry_points(**kw)
metadata.entry_points = entry_points
from gguf_audit.cli import main
try:
    status = main(sys.argv[1:])
except SystemExit as exc:
    status = exc.code
heavy = [m for m in {heavy!r} if m in sys.modules]
if "entry points" in {heavy!r} and "gguf_audit.commands" in read_groups:
    heavy.append("entry points")
print("HEAVY=" + ",".join(heavy), file=sys.stderr)
"""


def _imported(*argv: str, modules: tuple[str, ...] = HEAVY) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=modules), *argv], capture_output=True, text=True, timeout=120
    )
    line = [x for x in done.stderr.splitlines() if x.startswith("HEAVY=")]
    assert line, done.stderr
    return [m for m in line[-1].removeprefix("HEAVY=").split(",") if m]


@pytest.mark.parametrize(
    "argv",
    [
        ("inspect", "MODEL", "--json"),
        ("inspect", "MODEL"),
        ("inspect", "MODEL", "--format", "sarif"),
        ("codes",),
        ("--version",),
    ],
)
def test_light_commands_import_no_pipeline_library(argv: tuple[str, ...]) -> None:
    model = str(corpus_dir() / "models" / "tiny-llama-Q4_0.gguf")
    assert _imported(*(model if a == "MODEL" else a for a in argv)) == []


def test_a_plugged_in_command_is_imported_when_given() -> None:
    assert "gguf_audit.pipelines" in _imported("tables", "--help")


@pytest.mark.parametrize("argv", [("inspect", "MODEL", "--json"), ("inspect", "MODEL"), ("inspect", "--help")])
def test_inspect_imports_only_what_it_runs(argv: tuple[str, ...]) -> None:
    model = str(corpus_dir() / "models" / "tiny-llama-Q4_0.gguf")
    assert _imported(*(model if a == "MODEL" else a for a in argv), modules=NOT_FOR_INSPECT) == []


@pytest.mark.parametrize("fmt", ["json", "sarif", "text"])
@pytest.mark.parametrize("where", ["local", "http"])
def test_inspect_of_a_plain_url_imports_no_fsspec_gguf_py_nor_pipeline_library(
    where: str, fmt: str, http: RangeHTTPServer
) -> None:
    rel = "models/tiny-llama-Q4_K_M.gguf"
    url = str(corpus_dir() / rel) if where == "local" else http.url_for(rel)
    assert _imported("inspect", url, "--format", fmt, modules=NOT_FOR_PLAIN_INSPECT) == []
    if where == "http":
        assert len(http.requests) == 1  # the header was read, by the standard library


def test_inspect_with_samples_still_reads_through_fsspec(http: RangeHTTPServer) -> None:
    url = http.url_for("models/tiny-llama-Q4_K_M.gguf")
    assert _imported("inspect", url, "--samples", modules=("fsspec", "aiohttp")) == ["fsspec", "aiohttp"]


@pytest.mark.parametrize("argv", [("codes",), ("--version",)])
def test_codes_and_version_import_no_audit(argv: tuple[str, ...]) -> None:
    assert _imported(*argv, modules=NOT_FOR_CODES) == []


def test_the_top_level_help_lists_every_command_without_importing_one() -> None:
    """``gguf-audit --help`` imported every plugged-in command (2.4 to 3.9 s): now their summaries, from a module
    that imports nothing, so it costs what ``--version`` does."""
    heavy = (*HEAVY[:-1], "gguf_audit.pipelines.commands.scan", "gguf_audit.pipelines.config", "gguf_audit.audit")
    assert _imported("--help", modules=heavy) == []
    wide = {**os.environ, "COLUMNS": "400"}  # no wrapping (argparse breaks lines at hyphens too)
    shown = subprocess.run(
        [sys.executable, "-m", "gguf_audit", "--help"], capture_output=True, text=True, timeout=60, env=wide
    )
    assert shown.returncode == 0
    words = " ".join(shown.stdout.split())  # argparse wraps the lines
    from gguf_audit.pipelines.commands import SUMMARIES

    for name, summary in SUMMARIES.items():
        assert f"{name} {summary}" in words, name


def test_each_plugged_in_parser_says_its_summary() -> None:
    """One copy of each line: the command's own parser shows the summary the top-level help shows."""
    import argparse
    from importlib.metadata import entry_points

    from gguf_audit.cli import COMMANDS_GROUP
    from gguf_audit.pipelines.commands import SUMMARIES

    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    for plugin in entry_points(group=COMMANDS_GROUP):
        plugin.load()(sub)
    helps = {action.dest: action.help for action in sub._choices_actions}
    assert helps == SUMMARIES
