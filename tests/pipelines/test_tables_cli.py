"""``gguf-audit snapshot`` and ``gguf-audit tables --vacuum`` on two real nights."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import duckdb
import pyarrow.parquet as pq
import pytest
from pipeline_helpers import SAMPLE_COUNT

from gguf_audit.cli import main
from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.nights.picture import picture_table
from gguf_audit.pipelines.scan.run import run_scan
from gguf_audit.pipelines.store.output import Output
from gguf_audit.tables.schema import SCHEMAS, TABLE_NAMES

CHANGED = "downloads/tiny-llama-Q4_K_M.gguf"


def _two_nights(client: Any, collection: Path, out: Path, sample: dict[str, bytes]) -> tuple[str, str]:
    first = run_scan(ScanConfig().replace(roots=(str(collection),), out=str(out)), client=client)
    (collection / CHANGED).write_bytes(sample["tiny-llama-Q4_K_M.gguf"])  # the download completes
    second = run_scan(ScanConfig().replace(roots=(str(collection),), out=str(out), incremental=True), client=client)
    assert (second.n_read, second.n_reused) == (1, SAMPLE_COUNT - 1)
    return first.run_id, second.run_id


def _snapshot(capsys: pytest.CaptureFixture[str], out: Path, to: Path, *run: str) -> dict[str, Any]:
    assert main(["snapshot", str(out), "--to", str(to), *run]) == 0
    printed = capsys.readouterr().out
    assert f"files.parquet  {SAMPLE_COUNT} rows" in printed
    return {t: pq.read_table(to / f"{t}.parquet") for t in TABLE_NAMES}


def test_snapshot_and_vacuum(
    client: Any, local_collection: Path, tmp_path: Path, sample: dict[str, bytes], capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    first, second = _two_nights(client, local_collection, out, sample)
    latest = _snapshot(capsys, out, tmp_path / "latest")
    older = _snapshot(capsys, out, tmp_path / "older", "--run", first)
    for table in TABLE_NAMES:
        assert latest[table].schema.equals(SCHEMAS[table]), table
    assert set(latest["files"].column("run_id").to_pylist()) == {second}
    assert set(latest["tensors"].column("run_id").to_pylist()) == {second}  # the night's, whoever read it
    assert set(latest["tensors"].column("source_run_id").to_pylist()) == {first, second}
    n_tensors = sum(n or 0 for n in latest["files"].column("n_tensors").to_pylist())
    assert latest["tensors"].num_rows == n_tensors == older["tensors"].num_rows
    codes = {p["url"].rsplit("/collection/", 1)[1]: p["code"] for p in older["problems"].to_pylist() if p["url"]}
    assert codes[CHANGED] == "data.truncated"
    assert CHANGED not in {p["url"].rsplit("/collection/", 1)[1] for p in latest["problems"].to_pylist() if p["url"]}
    # Plain Parquet: any reader, no Delta needed.
    [(n,)] = duckdb.sql(f"SELECT count(*) FROM read_parquet('{tmp_path / 'latest' / 'files.parquet'}')").fetchall()
    assert n == SAMPLE_COUNT
    assert main(["snapshot", str(out), "--to", str(tmp_path / "x"), "--run", "nope"]) == 2
    assert "no committed night 'nope'" in capsys.readouterr().err

    output = Output(str(out))
    before = {t: picture_table(output, t, second) for t in TABLE_NAMES}
    files_before = {p for p in out.rglob("*.parquet") if "_delta_log" not in p.parts}
    # The default minimum age keeps the files just made unreferenced, and says so (issue 19, item 8).
    assert main(["tables", str(out), "--vacuum", "--keep-nights", "1"]) == 0
    printed = capsys.readouterr().out
    assert f"kept 1 night, dropped 1: {first}" in printed and "1 committed night in" in printed
    young = re.search(
        r"removed 0 data files no kept version names; kept (\d+) more for being younger than "
        r"--min-age-hours 24 \(--min-age-hours 0 removes them when no scan is running\)",
        printed,
    )
    assert young is not None and int(young[1]) > 0, printed
    assert "files kept (younger than 24 h)" in printed
    assert main(["tables", str(out), "--vacuum", "--keep-nights", "1", "--min-age-hours", "0"]) == 0
    printed = capsys.readouterr().out
    assert "kept 1 night, dropped 0" in printed and "younger than" not in printed
    removed = re.search(r"removed (\d+) data files no kept version names\n", printed)
    assert removed is not None and int(removed[1]) >= int(young[1]), printed
    assert output.last_committed_run() == second and output.committed_runs().num_rows == 1
    # The kept night's picture is whole; the first night's rows of the changed file are gone.
    for table in TABLE_NAMES:
        assert picture_table(output, table, second).num_rows == before[table].num_rows, table
    changed_url = "file://" + str(local_collection / CHANGED)
    assert output.read("problems", [first], urls=[changed_url]).num_rows == 0
    kept_first = output.read("tensors", [first]).num_rows
    assert kept_first == before["tensors"].num_rows - output.read("tensors", [second]).num_rows > 0
    files_after = {p for p in out.rglob("*.parquet") if "_delta_log" not in p.parts}
    assert len(files_after) < len(files_before)
    assert main(["tables", str(out), "--vacuum"]) == 2
