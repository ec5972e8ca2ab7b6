"""``inspect --format sarif|jsonl|json|text``: SARIF 2.1.0 validated against the schema shipped with the tests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sarif_schema import sarif_validator, validate_sarif

from gguf_audit.cli import main
from gguf_audit.codes import CODES
from gguf_audit.testing.builder import build_gguf, tiny_llama_like


@pytest.fixture
def cut(tmp_path: Path) -> Path:
    kvs, tensors = tiny_llama_like()
    data = build_gguf(kvs, tensors)
    path = tmp_path / "cut model #1 <1>.gguf"
    path.write_bytes(data[: len(data) // 2])
    return path


def test_inspect_sarif_is_valid_and_complete(cut: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(cut), "--format", "sarif"]) == 1
    log = json.loads(capsys.readouterr().out)
    validate_sarif(log)
    assert log["version"] == "2.1.0"
    [run] = log["runs"]
    rules = run["tool"]["driver"]["rules"]
    assert [r["id"] for r in rules] == sorted(CODES)
    truncated = next(r for r in rules if r["id"] == "data.truncated")
    assert truncated["defaultConfiguration"]["level"] == "error"
    assert truncated["properties"]["llamaCpp"] == "refuses" and truncated["properties"]["llamaCppRefuses"] is True
    assert truncated["shortDescription"]["text"].startswith("Tensor data extends past the end of the file")
    assert next(r for r in rules if r["id"] == "template.missing")["defaultConfiguration"]["level"] == "note"
    result = next(r for r in run["results"] if r["ruleId"] == "data.truncated")
    assert result["level"] == "error" and rules[result["ruleIndex"]]["id"] == "data.truncated"
    [location] = result["locations"]
    uri = location["physicalLocation"]["artifactLocation"]["uri"]
    # An absolute file:// URI, the '#' of the name encoded (a bare '#' would start a fragment: another file).
    assert uri == cut.resolve().as_uri() and uri.endswith("/cut%20model%20%231%20%3C1%3E.gguf")
    assert len(result["partialFingerprints"]["ggufAudit/v1"]) == 32
    assert location["physicalLocation"]["region"]["byteOffset"] > 0
    assert location["logicalLocations"][0]["kind"] == "member"
    artifact = {"location": location["physicalLocation"]["artifactLocation"], "length": cut.stat().st_size}
    assert run["artifacts"] == [artifact]


def test_fingerprints_follow_the_problem_not_its_message(cut: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The same file's same problems give the same fingerprints run after run; distinct problems distinct ones."""
    main(["inspect", str(cut), "--format", "sarif"])
    first = json.loads(capsys.readouterr().out)["runs"][0]["results"]
    main(["inspect", str(cut), "--format", "sarif"])
    again = json.loads(capsys.readouterr().out)["runs"][0]["results"]
    prints = [r["partialFingerprints"]["ggufAudit/v1"] for r in first]
    assert prints == [r["partialFingerprints"]["ggufAudit/v1"] for r in again]
    keys = {(r["ruleId"], json.dumps(r["locations"][0].get("logicalLocations"))) for r in first}
    assert len(set(prints)) == len(keys)


def test_the_schema_rejects_what_sarif_does_not_allow(cut: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["inspect", str(cut), "--format", "sarif"])
    log = json.loads(capsys.readouterr().out)
    log["runs"][0]["results"][0]["level"] = "fatal"
    with pytest.raises(AssertionError, match="fatal"):
        validate_sarif(log)
    del log["runs"][0]["tool"]
    assert not sarif_validator().is_valid(log)


def test_inspect_jsonl_json_and_text(cut: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["inspect", str(cut), "--format", "jsonl"])
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1  # one object per file, a line each
    record = json.loads(lines[0])
    assert record["url"].endswith("cut model #1 <1>.gguf") and record["loadable"] is False
    main(["inspect", str(cut), "--json"])
    assert json.loads(capsys.readouterr().out) == record  # --json is --format json
    main(["inspect", str(cut), "--format", "json"])
    assert json.loads(capsys.readouterr().out) == record
    main(["inspect", str(cut), "--format", "text"])
    assert "loadable by llama.cpp: NO" in capsys.readouterr().out
    assert main(["inspect", str(cut), "--format", "xml"]) == 2
