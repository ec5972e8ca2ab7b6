"""``gguf-audit diff`` over three real nights with known changes (report_nights.py), and its exit codes."""

from __future__ import annotations

import json
from typing import Any

import pytest
from report_nights import DOWNLOAD, MIRROR, PAYLOAD_FILE, SHARD_1, SHARD_2, Nights

from gguf_audit.cli import main
from gguf_audit.pipelines.nights.diff import match_problems
from gguf_audit.pipelines.nights.nightview import night_problems
from gguf_audit.pipelines.store.output import Output
from gguf_audit.report.nightly import Problem


def _diff(capsys: pytest.CaptureFixture[str], nights: Nights, *args: str) -> tuple[int, dict[str, Any]]:
    status = main(["diff", str(nights.out), "--json", *args])
    captured = capsys.readouterr()
    return status, json.loads(captured.out) if captured.out else {}


def _codes_at(problems: list[dict[str, Any]]) -> set[tuple[str | None, str]]:
    return {(p["url"], p["code"]) for p in problems}


def test_a_night_that_breaks_things_fails_the_diff(report_nights: Nights, capsys: pytest.CaptureFixture[str]) -> None:
    one, two, _ = report_nights.runs
    status, diff = _diff(capsys, report_nights, "--from", one, "--to", two)
    assert status == 1
    assert (diff["from"], diff["to"]) == (one, two)
    new = _codes_at(diff["new_problems"])
    assert (report_nights.url(DOWNLOAD), "data.truncated") in new
    assert any(code == "shard.missing" and url is None for url, code in new)
    assert diff["resolved_problems"] == []
    assert diff["new_files"] == [report_nights.url(PAYLOAD_FILE)]
    assert diff["removed_files"] == [report_nights.url(SHARD_2)]
    [changed] = diff["changed_files"]
    assert changed["url"] == report_nights.url(DOWNLOAD)
    assert (changed["status_before"], changed["status_after"]) == ("ok", "error")
    assert (changed["loadable_before"], changed["loadable_after"]) == (True, False)
    flips = {f["model_id"]: f for f in diff["model_flips"]}
    shard_set = report_nights.url(SHARD_1).removesuffix("-00001-of-00002.gguf")
    assert (flips[shard_set]["complete_before"], flips[shard_set]["complete_after"]) == (True, False)
    assert flips[report_nights.url(DOWNLOAD).removesuffix(".gguf")]["loadable_after"] is False
    assert diff["new_at_fail_on"] >= 2


def test_a_night_that_repairs_things_passes(report_nights: Nights, capsys: pytest.CaptureFixture[str]) -> None:
    """The default compares the last two nights; resolving problems and adding a clean file exits 0."""
    _, two, three = report_nights.runs
    status, diff = _diff(capsys, report_nights)
    assert status == 0
    assert (diff["from"], diff["to"]) == (two, three)
    resolved = _codes_at(diff["resolved_problems"])
    assert (report_nights.url(DOWNLOAD), "data.truncated") in resolved
    assert any(code == "shard.missing" for _, code in resolved)
    assert all(severity != "error" for severity in (p["severity"] for p in diff["new_problems"]))
    assert diff["new_files"] == sorted([report_nights.url(MIRROR), report_nights.url(SHARD_2)])
    assert diff["removed_files"] == [report_nights.url(PAYLOAD_FILE)]
    assert {f["model_id"] for f in diff["model_flips"] if f["complete_after"] and not f["complete_before"]}
    assert not [p for p in diff["new_problems"] if p["url"] == report_nights.url(PAYLOAD_FILE)]


def test_fail_on_and_the_text_form(report_nights: Nights, capsys: pytest.CaptureFixture[str]) -> None:
    one, two, three = report_nights.runs
    # From the first night to the last: the download and the shard set are as they were; nothing new is an error.
    status, diff = _diff(capsys, report_nights, "--from", one, "--to", three)
    assert status == 0 and diff["changed_files"] == []
    assert diff["new_files"] == [report_nights.url(MIRROR)]
    # Backwards, the repair is a break: the same command alerts.
    assert main(["diff", str(report_nights.out), "--from", three, "--to", two]) == 1
    printed = capsys.readouterr().out
    assert f"night {three} -> {two}" in printed and "new problems (" in printed
    assert "data.truncated" in printed and "new problems at or above error" in printed


def test_the_first_night_is_compared_with_no_night(report_nights: Nights, capsys: pytest.CaptureFixture[str]) -> None:
    """The night before the first is none: its every problem and file is new, so a nightly diff alerts once."""
    one = report_nights.runs[0]
    status, first = _diff(capsys, report_nights, "--to", one, "--fail-on", "info")
    out = Output(str(report_nights.out), {})
    problems = night_problems(out, one)
    files = out.read("files", [one], columns=["url"]).column("url").to_pylist()
    assert (first["from"], first["to"]) == ("(none)", one)
    assert len(first["new_problems"]) == problems.num_rows > 0
    assert first["resolved_problems"] == first["changed_problems"] == first["removed_files"] == []
    assert first["new_files"] == sorted(files) and len(files) > 0
    assert status == 1 and first["new_at_fail_on"] == problems.num_rows
    errors = problems.column("severity").to_pylist().count("error")
    assert main(["diff", str(report_nights.out), "--to", one]) == (1 if errors else 0)
    printed = capsys.readouterr().out
    assert f"night (none) -> {one}" in printed
    assert f"{errors} new problem{'' if errors == 1 else 's'} at or above error" in printed


def test_usage_errors_exit_2(report_nights: Nights, capsys: pytest.CaptureFixture[str], tmp_path: Any) -> None:
    assert main(["diff", str(report_nights.out), "--from", "nope"]) == 2
    assert "no committed night 'nope'" in capsys.readouterr().err
    assert main(["diff", str(report_nights.out), "--fail-on", "fatal"]) == 2
    assert main(["diff", str(tmp_path / "empty")]) == 2


def _p(code: str, message: str, severity: str = "error", tensor: str | None = None) -> Problem:
    return Problem("file", "file:///m.gguf", "file:///m", code, severity, message, tensor, None)


def test_problems_pair_up_by_place_code_and_tensor() -> None:
    before = [_p("data.truncated", "ends at 10"), _p("tensor.missing", "x", tensor="a"), _p("meta.wrong_type", "k")]
    after = [
        _p("data.truncated", "ends at 12"),
        _p("tensor.missing", "x", tensor="b"),
        _p("meta.wrong_type", "k"),
        _p("meta.wrong_type", "k2", severity="warning"),
    ]
    new, resolved, changed = match_problems(before, after)
    assert [(c.before.message, c.after.message) for c in changed] == [("ends at 10", "ends at 12")]
    assert {(p.code, p.tensor, p.message) for p in new} == {
        ("tensor.missing", "b", "x"),
        ("meta.wrong_type", None, "k2"),
    }
    assert [(p.code, p.tensor) for p in resolved] == [("tensor.missing", "a")]
