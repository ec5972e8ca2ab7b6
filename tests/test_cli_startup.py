"""Commands start fast: ``inspect``, ``codes`` and ``--version`` import none of the pipelines' heavy libraries.

A plugged-in command's module is imported only when it is the command given
(``gguf_audit.cli._plugged_in_for``); each case runs in a fresh interpreter and
lists what it imported.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from corpus import corpus_dir

HEAVY = ("pyarrow", "pandas", "deltalake", "dask", "distributed", "duckdb", "gguf_audit.pipelines")
PROBE = """
import sys
from gguf_audit.cli import main
try:
    status = main(sys.argv[1:])
except SystemExit as exc:
    status = exc.code
heavy = [m for m in {heavy!r} if m in sys.modules]
print("HEAVY=" + ",".join(heavy), file=sys.stderr)
"""


def _imported(*argv: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE.format(heavy=HEAVY), *argv], capture_output=True, text=True, timeout=120
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
