"""``sql``: no format writes a file name's control or bidi characters raw to standard output."""

from __future__ import annotations

import csv
import io
import json
import re

import pytest
from pipeline_helpers import file_row
from synthetic_nights import commit_night, model_row

from gguf_audit.cli import main
from gguf_audit.pipelines.store.output import Output

# ESC sequences (CSI colour, OSC title ended by BEL and by ST), CR, a C1 CSI, a right-to-left override,
# a zero-width space, a line separator: each as a file name would hold it.
NAMES = (
    "a\x1b[31mred.gguf",
    "b\x1b]0;owned\x07.gguf",
    "c\x1b]8;;http://x\x1b\\link.gguf",
    "d\rcovered.gguf",
    "e\x9b2Jclear.gguf",
    "f\u202egguf.exe",
    "g\u200bzero.gguf",
    "h\u2028line.gguf",
)
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2066-\u2069]")


@pytest.fixture(scope="module")
def odd_names(tmp_path_factory: pytest.TempPathFactory) -> str:
    out = Output(str(tmp_path_factory.mktemp("odd-names") / "out"))
    out.preflight()
    run = "20260101T000000000Z-00000001"
    commit_night(
        out,
        run,
        {"files": [file_row(n, run) for n in NAMES], "models": [model_row(n, run, model_id=n) for n in NAMES]},
    )
    return out.url


@pytest.mark.parametrize("fmt", ["csv", "table", "jsonl"])
def test_no_format_writes_control_or_bidi_characters(
    odd_names: str, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    assert main(["sql", odd_names, "SELECT url, 1 AS one, NULL AS n FROM files ORDER BY url", "--format", fmt]) == 0
    out = capsys.readouterr().out
    assert RAW.findall(out) == []
    assert ("\\u001b[31mred" if fmt == "jsonl" else "\\x1b[31mred") in out and "\\u202e" in out


def test_csv_cells_are_the_escaped_names(odd_names: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["sql", odd_names, "SELECT url, 1 AS one, NULL AS n FROM files ORDER BY url", "--format", "csv"]) == 0
    rows = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["url"] for r in rows][:2] == ["a\\x1b[31mred.gguf", "b\\x1b]0;owned\\x07.gguf"]
    assert {r["one"] for r in rows} == {"1"} and {r["n"] for r in rows} == {""}
    assert main(["sql", odd_names, "SELECT url FROM files ORDER BY url", "--format", "jsonl"]) == 0
    # JSON Lines keeps the names exact: its escapes decode to the same characters.
    assert [json.loads(line)["url"] for line in capsys.readouterr().out.splitlines()] == sorted(NAMES)


def test_the_query_may_follow_the_options(odd_names: str, capsys: pytest.CaptureFixture[str]) -> None:
    run = "20260101T000000000Z-00000001"
    assert main(["sql", odd_names, "--run", run, "--format", "csv", "SELECT count(*) AS n FROM files"]) == 0
    assert capsys.readouterr().out == f"n\n{len(NAMES)}\n"
    assert main(["sql", odd_names, "--run", run, "SELECT 1 AS one", "SELECT 2"]) == 2
    assert "unrecognized arguments: SELECT 1 AS one SELECT 2" in capsys.readouterr().err
