"""``scan --fail-on``: each gate judged on committed nights (written row by row), and the line that says why."""

from __future__ import annotations

from dataclasses import MISSING, fields
from pathlib import Path
from typing import Any

import pytest
from pipeline_helpers import file_row
from synthetic_nights import commit_night, model_row

from gguf_audit.pipelines.config import FAIL_ON, ConfigError, ScanConfig, parse_config
from gguf_audit.pipelines.scan.collect import ScanResult
from gguf_audit.pipelines.scan.gate import judge_gate
from gguf_audit.pipelines.store.output import Output

ONE, TWO, THREE = "20260301T000000000Z-00000001", "20260302T000000000Z-00000002", "20260303T000000000Z-00000003"


def result(run_id: str, **counts: Any) -> ScanResult:
    """A committed night's result with ``counts`` (the rest zero or empty: a gate reads only these)."""
    zero = {int: 0, float: 0.0, str: "", "int": 0, "float": 0.0, "str": ""}
    values: dict[str, Any] = {}
    for f in fields(ScanResult):
        if f.default is MISSING and f.default_factory is MISSING:
            values[f.name] = zero.get(f.type, {}) if not str(f.type).startswith("tuple") else ()
    values.update(run_id=run_id, base_run_id=None, dashboard=None, reuse_note=None, **counts)
    return ScanResult(**values)


def problem(url: str, run_id: str, code: str, severity: str = "error") -> dict[str, Any]:
    return {
        "url": url, "model_id": f"m-{url}", "scope": "file", "code": code, "severity": severity,
        "message": f"{code} in {url}", "source_run_id": run_id, "run_id": run_id,
    }  # fmt: skip


@pytest.fixture(scope="module")
def three_nights(tmp_path_factory: pytest.TempPathFactory) -> Output:
    """Night 1: ``a`` has an error. Night 2: the same, carried. Night 3: ``b`` is new, with an error, and
    aborts llama.cpp (and so does its model)."""
    out = Output(str(tmp_path_factory.mktemp("gate") / "out"))
    out.preflight()
    a = file_row("a", ONE, model_id="m-a", status="error", loadable=False, codes=["data.truncated"])
    commit_night(
        out,
        ONE,
        {
            "files": [a],
            "models": [model_row("a", ONE, loadable=False)],
            "problems": [problem("a", ONE, "data.truncated")],
        },
    )
    commit_night(out, TWO, {"files": [{**a, "reused": True}], "models": [model_row("a", ONE, loadable=False)]})
    b = file_row("b", THREE, model_id="m-b", status="error", loadable=False, codes=["test.aborts"], llama_cpp="aborts")
    commit_night(
        out,
        THREE,
        {
            "files": [{**a, "reused": True}, b],
            "models": [model_row("a", ONE, loadable=False), model_row("b", THREE, loadable=False, llama_cpp="aborts")],
            "problems": [problem("b", THREE, "test.aborts")],
        },
    )
    return out


def test_none_passes_whatever_the_night_holds(three_nights: Output) -> None:
    gate = judge_gate(result(THREE, severities={"error": 2}, n_unloadable=2, n_aborts=1), "none", three_nights)
    assert not gate.fails
    assert gate.line() == (
        "the run passes --fail-on none: a committed night exits 0 (gate it with error, warning, new-error or aborts)"
    )


@pytest.mark.parametrize(
    ("fail_on", "counts", "why"),
    [
        ("error", {"severities": {"error": 1}}, "fails --fail-on error: 1 problem is an error"),
        (
            "error",
            {"severities": {"error": 3, "warning": 1}, "n_unloadable": 2},
            "fails --fail-on error: 3 problems are errors, llama.cpp b11312 would refuse 2 files",
        ),
        ("error", {"severities": {"warning": 4}}, "passes --fail-on error: no problem is an error and llama.cpp"),
        (
            "warning",
            {"severities": {"warning": 2, "info": 9}},
            "fails --fail-on warning: 2 problems are warnings",
        ),
        (
            "warning",
            {"severities": {"info": 9}},
            "passes --fail-on warning: no problem is an error or a warning and llama.cpp b11312 would refuse no file",
        ),
        ("warning", {"n_unloadable": 1}, "fails --fail-on warning: llama.cpp b11312 would refuse 1 file"),
    ],
)
def test_error_and_warning_count_tonight(three_nights: Output, fail_on: str, counts: dict[str, Any], why: str) -> None:
    gate = judge_gate(result(ONE, **counts), fail_on, three_nights)
    assert gate.fails == why.startswith("fails")
    assert gate.line().startswith(f"the run {why}"), gate.line()


def test_new_error_fails_only_on_what_the_previous_night_lacked(three_nights: Output) -> None:
    first = judge_gate(result(ONE, severities={"error": 1}), "new-error", three_nights)
    assert (first.fails, first.why) == (True, "1 error new on the first night")
    second = judge_gate(result(TWO, severities={"error": 1}), "new-error", three_nights)
    assert (second.fails, second.why) == (False, f"no new error since night {ONE} (1 error carried)")
    third = judge_gate(result(THREE, severities={"error": 2}), "new-error", three_nights)
    assert third.fails
    assert third.why == f"1 error new since night {TWO}, 2 files or models now abort llama.cpp b11312"


def test_aborts_counts_files_and_models(three_nights: Output) -> None:
    assert judge_gate(result(TWO), "aborts", three_nights).line() == (
        "the run passes --fail-on aborts: no file or model makes llama.cpp b11312 abort"
    )
    assert judge_gate(result(THREE, n_aborts=1), "aborts", three_nights).why == (
        "1 file and 1 model make llama.cpp b11312 abort"
    )
    # A model can abort with no file of it aborting (a shard set's own finding): the models table says so.
    assert judge_gate(result(THREE), "aborts", three_nights).why == "1 model makes llama.cpp b11312 abort"


def test_the_config_takes_every_gate_and_the_old_default(tmp_path: Path) -> None:
    assert ScanConfig().scan.fail_on == "none"
    for choice in FAIL_ON:
        assert parse_config({"scan": {"fail_on": choice}}).scan.fail_on == choice
    with pytest.raises(ConfigError, match=r"scan\.fail_on must be one of none, error, warning, new-error, aborts\."):
        parse_config({"scan": {"fail_on": "errors"}})
