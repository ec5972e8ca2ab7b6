"""A compare row says how many of its planned blocks it measured: a read that failed is never silent."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from corpus import corpus_dir

from gguf_audit.cli import main
from gguf_audit.compare import compare_files
from gguf_audit.tables.lineage import compare_rows
from gguf_audit.tables.schema import stored_schema

MODELS = corpus_dir() / "models"
QUANT = MODELS / "tiny-llama-Q8_0.gguf"


@pytest.fixture(scope="module")
def cut_reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # The F32 reference without its last ~230 KB: the blocks of its last tensor's tail cannot be read.
    data = (MODELS / "tiny-llama-F32.gguf").read_bytes()
    path = tmp_path_factory.mktemp("cut") / "reference-cut.gguf"
    path.write_bytes(data[:10_300_000])
    return path


def test_compare_text_and_json_show_blocks_measured_of_planned(
    cut_reference: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["compare", str(QUANT), str(MODELS / "tiny-llama-F32.gguf")]) == 0
    whole = capsys.readouterr().out
    assert " blocks " in whole and "planned blocks" not in whole  # every planned block measured: no "of"
    assert main(["compare", str(QUANT), str(MODELS / "tiny-llama-F32.gguf"), "--json"]) == 0
    assert all(t["n_blocks"] == t["n_planned_blocks"] for t in json.loads(capsys.readouterr().out)["tensors"])
    assert main(["compare", str(QUANT), str(cut_reference), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    short = [t for t in out["tensors"] if t["n_blocks"] < t["n_planned_blocks"]]
    assert short, "the cut reference must leave some planned block unmeasured"
    assert all(t["n_planned_blocks"] >= t["n_blocks"] > 0 for t in out["tensors"])
    summary = out["summary"]
    assert summary["n_blocks"] < summary["n_planned_blocks"]
    assert main(["compare", str(QUANT), str(cut_reference)]) == 0
    text = capsys.readouterr().out
    name = short[0]["name"]
    row = next(line for line in text.splitlines() if line.strip().startswith(name))
    assert f"{short[0]['n_blocks']}/{short[0]['n_planned_blocks']}" in row
    assert f"over {summary['n_blocks']} of {summary['n_planned_blocks']} planned blocks" in text


def test_the_compare_table_ends_with_the_planned_count(cut_reference: Path) -> None:
    schema = stored_schema("compare")
    assert schema.names[-1] == "n_planned_blocks"  # added at the end: earlier nights read it as null
    rows = compare_rows(compare_files(str(QUANT), str(cut_reference)), model_id="m", family=None, run_id="r")
    assert [name for name in schema.names if name not in rows[0]] == []
    assert any(r["n_blocks"] < r["n_planned_blocks"] for r in rows)
