"""``scan --sarif FILE --jsonl FILE``: the night as SARIF 2.1.0 (one run) and JSON Lines (one file a line)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from report_nights import DOWNLOAD, Nights
from sarif_schema import validate_sarif

from gguf_audit.cli import main
from gguf_audit.pipelines.nights.export import night_sarif
from gguf_audit.pipelines.store.output import Output


def test_scan_writes_sarif_and_json_lines(
    client: Any, report_nights: Nights, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sarif, jsonl, out = tmp_path / "night.sarif", tmp_path / "night.jsonl", tmp_path / "out"
    argv = [str(report_nights.collection), "--out", str(out), "--no-samples", "--no-progress"]
    argv += ["--scheduler", str(client.scheduler.address), "--sarif", str(sarif), "--jsonl", str(jsonl)]
    assert main(["scan", *argv]) == 0
    printed = capsys.readouterr().out
    assert f"SARIF written to {sarif}" in printed and f"JSON Lines written to {jsonl}" in printed
    log = json.loads(sarif.read_text())
    validate_sarif(log)
    [run] = log["runs"]
    files = sorted(p for p in report_nights.collection.rglob("*.gguf"))
    assert run["properties"]["files"] == len(files) == len(run["artifacts"])
    lines = jsonl.read_text().splitlines()
    records = [json.loads(line) for line in lines]
    assert sorted(r["url"] for r in records) == sorted("file://" + str(p) for p in files)
    assert all(r["run_id"] == run["properties"]["runId"] for r in records)
    assert run["properties"]["llamaCppBuild"] == "b11312" and all(r["llama_cpp_build"] == "b11312" for r in records)
    verdicts = {(r["loadable"], r["llama_cpp"]) for r in records}
    assert verdicts <= {(True, "loads"), (False, "refuses"), (False, "aborts")}


def test_a_night_with_problems_as_sarif(report_nights: Nights) -> None:
    log = night_sarif(Output(str(report_nights.out)), report_nights.runs[1])
    validate_sarif(log)
    results = log["runs"][0]["results"]
    truncated = next(r for r in results if r["ruleId"] == "data.truncated")
    location = truncated["locations"][0]["physicalLocation"]
    assert location["artifactLocation"]["uri"] == report_nights.url(DOWNLOAD)
    assert location["region"]["byteOffset"] > 0
    missing = next(r for r in results if r["ruleId"] == "shard.missing")
    assert missing["level"] == "error" and missing["properties"]["model"].endswith("sharded/complete")
    assert missing["properties"]["llamaCpp"] == "refuses"
    assert missing["locations"][0]["logicalLocations"][0]["kind"] == "module"
    # A payload in a file name is percent-encoded in the URI, never raw markup.
    uris = [a["location"]["uri"] for a in log["runs"][0]["artifacts"]]
    assert any("%3Cimg" in u for u in uris) and not any("<" in u for u in uris)


def test_export_writes_any_committed_night(
    report_nights: Nights, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``gguf-audit export`` writes the same SARIF and JSON Lines for a night committed earlier."""
    first, last = report_nights.runs[0], report_nights.runs[-1]
    sarif, jsonl = tmp_path / "a" / "first.sarif", tmp_path / "first.jsonl"
    argv = ["export", str(report_nights.out), "--run", first, "--sarif", str(sarif), "--jsonl", str(jsonl)]
    assert main(argv) == 0
    assert f"night {first}: SARIF written to" in capsys.readouterr().out
    log = json.loads(sarif.read_text())
    validate_sarif(log)
    assert log["runs"][0]["properties"]["runId"] == first
    assert log == json.loads(json.dumps(night_sarif(Output(str(report_nights.out)), first)))
    assert {json.loads(line)["run_id"] for line in jsonl.read_text().splitlines()} <= set(report_nights.runs)
    assert main(["export", str(report_nights.out), "--jsonl", str(jsonl)]) == 0  # the latest night by default
    assert f"night {last}:" in capsys.readouterr().out


def test_export_and_scan_check_their_files_before_working(
    report_nights: Nights, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A directory or an unwritable place for --sarif/--jsonl: exit 2, one line, before any reading or scanning."""
    (tmp_path / "a-file").write_text("x")
    for bad in (tmp_path, tmp_path / "a-file" / "night.sarif"):
        assert main(["export", str(report_nights.out), "--sarif", str(bad)]) == 2
        assert len(capsys.readouterr().err.strip().splitlines()) == 1
        out = tmp_path / "never"
        argv = ["scan", str(report_nights.collection), "--out", str(out), "--no-progress", "--sarif", str(bad)]
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert len(err.strip().splitlines()) == 1 and ("cannot write" in err or "is a directory" in err), err
        assert not out.exists()  # refused before the listing, the cluster or a commit
    assert main(["export", str(report_nights.out)]) == 2
