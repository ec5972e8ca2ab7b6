"""``scan --sarif FILE --jsonl FILE``: the night as SARIF 2.1.0 (one run) and JSON Lines (one file a line)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from report_nights import DOWNLOAD, Nights
from sarif_schema import validate_sarif

from gguf_audit.cli import main
from gguf_audit.pipelines.export import night_sarif
from gguf_audit.pipelines.output import Output


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
