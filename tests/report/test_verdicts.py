"""The three llama.cpp verdicts (loads, refuses, aborts) as inspect, codes and the models table show them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sarif_schema import validate_sarif

from gguf_audit.audit import AuditConfig, audit_file
from gguf_audit.checks.shards import ShardSetVerdict
from gguf_audit.cli import codes_markdown, main
from gguf_audit.codes import CODES, LLAMA_CPP_BUILD, Code, LlamaCpp
from gguf_audit.findings import finding, llama_cpp_of_codes
from gguf_audit.report.json import audit_to_json
from gguf_audit.report.sarif import results_of_findings, sarif_log, sarif_run
from gguf_audit.report.text import render_text
from gguf_audit.tables.models import summarise_model
from gguf_audit.testing.builder import build_gguf, tiny_llama_like


@pytest.fixture
def aborting_code() -> Code:
    """A registered code whose verdict is ``aborts`` (a shape ggml_new_tensor asserts on)."""
    assert CODES[Code.TENSOR_SHAPE_ABORTS].llama_cpp is LlamaCpp.ABORTS
    return Code.TENSOR_SHAPE_ABORTS


@pytest.fixture
def model(tmp_path: Path) -> Path:
    kvs, tensors = tiny_llama_like()
    path = tmp_path / "tiny.gguf"
    path.write_bytes(build_gguf(kvs, tensors))
    return path


def test_inspect_names_the_verdict_and_the_build(
    model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", str(model)]) == 0
    assert f"loadable by llama.cpp: yes; llama.cpp {LLAMA_CPP_BUILD}: loads" in capsys.readouterr().out
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUX" + model.read_bytes()[4:])
    assert main(["inspect", str(bad), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert (out["loadable"], out["llama_cpp"], out["llama_cpp_build"]) == (False, "refuses", LLAMA_CPP_BUILD)
    assert main(["inspect", str(bad), "--format", "sarif"]) == 1
    log = json.loads(capsys.readouterr().out)
    validate_sarif(log)
    [run] = log["runs"]
    assert run["tool"]["driver"]["properties"] == {"llamaCppBuild": LLAMA_CPP_BUILD}
    [result] = [r for r in run["results"] if r["ruleId"] == "header.bad_magic"]
    assert result["properties"] == {"llamaCpp": "refuses", "llamaCppBuild": LLAMA_CPP_BUILD}


def test_a_file_that_aborts_says_so_everywhere(model: Path, aborting_code: Code) -> None:
    audit = audit_file(str(model), config=AuditConfig())
    assert (audit.loadable, audit.llama_cpp) == (True, LlamaCpp.LOADS)
    audit.findings.append(finding(aborting_code, "a value llama.cpp asserts on"))
    assert (audit.loadable, audit.llama_cpp) == (False, LlamaCpp.ABORTS)
    assert f"loadable by llama.cpp: NO; llama.cpp {LLAMA_CPP_BUILD}: aborts" in render_text(audit)
    out = audit_to_json(audit)
    assert (out["loadable"], out["llama_cpp"]) == (False, "aborts")
    log = sarif_log([sarif_run(results_of_findings(audit.url, audit.findings))])
    validate_sarif(log)
    [run] = log["runs"]
    [result] = [r for r in run["results"] if r["ruleId"] == aborting_code]
    assert result["properties"]["llamaCpp"] == "aborts"
    rule = run["tool"]["driver"]["rules"][result["ruleIndex"]]
    assert rule["properties"]["llamaCpp"] == "aborts" and rule["properties"]["llamaCppRefuses"] is True


def test_codes_show_each_verdict_generated(aborting_code: Code, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["codes", "--json"]) == 0
    rows = {r["code"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows[aborting_code]["llama_cpp"] == "aborts"
    for code, info in CODES.items():
        expected = "unknown" if info.llama_cpp is None else str(info.llama_cpp)
        assert (rows[code]["llama_cpp"], rows[code]["llama_cpp_build"]) == (expected, LLAMA_CPP_BUILD)
        assert rows[code]["refused"] is info.refused
    assert rows["header.bad_magic"]["llama_cpp"] == "refuses" and rows["io.size_unknown"]["llama_cpp"] == "loads"
    assert main(["codes"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert f"llama.cpp {LLAMA_CPP_BUILD}" in text[0]
    assert any(line.startswith(aborting_code) and " aborts " in line for line in text)
    assert f"| `{aborting_code}` | error | aborts |" in codes_markdown()
    assert any(" unknown " in line for line in text)  # a code the audit cannot judge


def test_a_models_verdict_is_the_worst_of_its_files(aborting_code: Code) -> None:
    def file(url: str, codes: list[str], loadable: bool | None) -> dict[str, object]:
        return {"url": url, "status": "ok", "loadable": loadable, "size": 1, "n_tensors": 1, "codes": codes}

    loads = file("a", [], True)
    refuses = file("b", ["header.bad_magic"], False)
    aborts = file("c", [aborting_code], False)
    unknown = file("d", [], None)
    assert summarise_model("m", [loads], None).row["llama_cpp"] == "loads"
    assert summarise_model("m", [unknown], None).row["llama_cpp"] is None
    assert summarise_model("m", [loads, refuses, unknown], None).row["llama_cpp"] == "refuses"
    assert summarise_model("m", [loads, aborts, refuses], None).row["llama_cpp"] == "aborts"
    # a shard set missing a shard is refused, whatever its present shards say
    incomplete = ShardSetVerdict("m", 2, (1,), (2,), (), False)
    row = summarise_model("m", [loads], incomplete).row
    assert (row["loadable"], row["llama_cpp"]) == (False, "refuses")
    # a row carried from before the column: its verdict from its codes and loadable
    assert llama_cpp_of_codes([aborting_code, "header.bad_magic"], False) is LlamaCpp.ABORTS
    assert llama_cpp_of_codes(["no.longer_registered"], False) is LlamaCpp.REFUSES
    assert llama_cpp_of_codes(["no.longer_registered"], True) is None
