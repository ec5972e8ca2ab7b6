"""Nights that record llama.cpp's verdict: `diff` alerts on a file or model going to aborts; the report shows it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from pipeline_helpers import file_row
from synthetic_nights import commit_night, model_row

from gguf_audit.cli import main
from gguf_audit.codes import LLAMA_CPP_BUILD
from gguf_audit.pipelines.store.output import Output


@pytest.fixture(scope="module")
def aborting_night(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str]:
    """Night 1: ``x`` loads, ``y`` is refused (its row written before the column: null, from its codes).
    Night 2 reads ``x`` again and finds it aborts llama.cpp, with no problem row an error alert would catch."""
    root = tmp_path_factory.mktemp("aborts") / "out"
    out = Output(str(root))
    out.preflight()
    one, two = "20260301T000000000Z-00000001", "20260302T000000000Z-00000002"
    y = file_row("y", one, model_id="m-y", loadable=False, codes=["header.bad_magic"], status="unreadable")
    commit_night(
        out,
        one,
        {
            "files": [file_row("x", one, model_id="m-x", loadable=True, codes=[], llama_cpp="loads"), y],
            "models": [model_row("x", one, loadable=True, llama_cpp="loads"), model_row("y", one, loadable=False)],
        },
    )
    x = file_row("x", two, model_id="m-x", loadable=False, codes=["test.aborts"], llama_cpp="aborts")
    commit_night(
        out,
        two,
        {
            "files": [x, {**y, "reused": True}],
            "models": [model_row("x", two, loadable=False, llama_cpp="aborts"), model_row("y", one, loadable=False)],
        },
        llama_cpp_build=LLAMA_CPP_BUILD,
    )
    return root, one, two


def test_diff_alerts_on_a_file_going_to_aborts(
    aborting_night: tuple[Path, str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    out, one, two = aborting_night
    assert main(["diff", str(out), "--json"]) == 1  # no new error problem: the abort alone fails it
    diff = json.loads(capsys.readouterr().out)
    assert diff["new_at_fail_on"] == 0 and diff["llama_cpp_build"] == LLAMA_CPP_BUILD
    assert diff["new_aborts"] == [
        {"scope": "file", "where": "x", "llama_cpp_before": "loads"},
        {"scope": "model", "where": "m-x", "llama_cpp_before": "loads"},
    ]
    [changed] = diff["changed_files"]
    assert (changed["llama_cpp_before"], changed["llama_cpp_after"]) == ("loads", "aborts")
    [flip] = diff["model_flips"]
    assert (flip["model_id"], flip["llama_cpp_after"]) == ("m-x", "aborts")
    assert main(["diff", str(out)]) == 1
    text = capsys.readouterr().out
    assert f"now aborting llama.cpp {LLAMA_CPP_BUILD} (2):" in text and "file x: loads -> aborts" in text
    assert "NOT loadable (aborts)" in text and "2 files or models now abort llama.cpp" in text
    # Backwards nothing goes to aborts: y stays refused (its verdict from its codes), and x's problems are none.
    assert main(["diff", str(out), "--from", two, "--to", one, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["new_aborts"] == []


def test_the_report_shows_aborts(aborting_night: tuple[Path, str, str], tmp_path: Path) -> None:
    out, _, _ = aborting_night
    page = tmp_path / "night.html"
    assert main(["report", str(out), "--html", str(page)]) == 0
    html = page.read_text()
    assert "Now aborting llama.cpp (2)" in html
    assert '<span class="error">(ABORTS)</span>' in html and "1 aborts llama.cpp b11312" in html
    assert '<span class="error">(refuses)</span>' in html  # y: a row from before the column, judged by its codes
