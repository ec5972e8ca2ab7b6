"""Lineage in scans: families, lineage.no_full_precision, the compare table and provenance, on a real cluster.

The collection is the corpus' tiny llama: its F32 file with quantized
siblings (one of them with its blocks scrambled), a family of quantized files
without any full-precision file, and one whose directory holds a safetensors
file. Read back through deltalake, DuckDB's delta extension and polars.
"""

from __future__ import annotations

import argparse
import re
import shutil
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl
import pytest
from corpus import corpus_dir
from pipeline_helpers import read_dataset

from gguf_audit.io.header import read_header
from gguf_audit.io.source import open_source
from gguf_audit.pipelines.commands.scan import _add_arguments, _config_from_args
from gguf_audit.pipelines.config import ConfigError, ScanConfig, load_config
from gguf_audit.pipelines.nights.picture import picture_table
from gguf_audit.pipelines.scan.families import LackingFamily
from gguf_audit.pipelines.scan.lineage import _with_safetensors, safetensors_dirs
from gguf_audit.pipelines.scan.run import run_scan
from gguf_audit.pipelines.store.duck import connect
from gguf_audit.pipelines.store.output import Output
from gguf_audit.pipelines.store.retention import vacuum_nights

MODELS = corpus_dir() / "models"
Q4_0 = 2
NAME = b"tiny-llama-random"


def _scramble_q4_0(src: Path, dst: Path) -> None:
    """The Q4_0 file with each Q4_0 tensor's blocks in reverse order (a wrong layout, same sizes)."""
    data = bytearray(src.read_bytes())
    for t in read_header(open_source(str(src))).header.tensors:
        if t.type_id != Q4_0:
            continue
        blocks = np.frombuffer(data, np.uint8, t.n_bytes, t.data_offset).reshape(-1, 18)
        data[t.data_offset : t.data_offset + t.n_bytes] = blocks[::-1].tobytes()
    dst.write_bytes(bytes(data))


def _renamed(src: Path, dst: Path, name: bytes) -> None:
    """A copy whose general.name is ``name`` (same length: the header keeps its layout)."""
    data = src.read_bytes()
    assert len(name) == len(NAME) and data.count(NAME) == 1
    dst.write_bytes(data.replace(NAME, name))


@pytest.fixture
def lineage_collection(tmp_path: Path) -> Path:
    root = tmp_path / "collection"
    family = root / "family"
    family.mkdir(parents=True)
    for quant in ("F32", "Q8_0", "IQ2_XXS"):
        shutil.copy(MODELS / f"tiny-llama-{quant}.gguf", family)
    _scramble_q4_0(MODELS / "tiny-llama-Q4_0.gguf", family / "tiny-llama-Q4_0.gguf")
    orphans = root / "orphans"
    orphans.mkdir()
    _renamed(MODELS / "tiny-llama-Q8_0.gguf", orphans / "orphan-Q8_0.gguf", b"tiny-llama-orphan")
    _renamed(MODELS / "tiny-llama-Q4_K_M.gguf", orphans / "orphan-Q4_K_M.gguf", b"tiny-llama-orphan")
    upstream = root / "upstream"
    upstream.mkdir()
    _renamed(MODELS / "tiny-llama-Q4_0.gguf", upstream / "up-Q4_0.gguf", b"tiny-llama-upstrm")
    (upstream / "model.safetensors").write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00{}      ")
    return root


def _documented(out: Path) -> dict[str, list[tuple[Any, ...]]]:
    """docs/tables.md's DuckDB views and queries on ``out``: each query's rows, by the statement's text."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "tables.md").read_text()
    [sql] = re.findall(r"```sql\n(-- the latest night.*?)```", docs, re.S)
    statements = [s.strip() for s in sql.replace("audit-out", str(out)).split(";") if s.strip()]
    con = connect()
    try:
        results = {s: [tuple(r.values()) for r in con.execute(s).fetch_arrow_table().to_pylist()] for s in statements}
    finally:
        con.close()

    class ByMarker(dict[str, list[tuple[Any, ...]]]):
        def __missing__(self, marker: str) -> list[tuple[Any, ...]]:
            [hit] = [rows for s, rows in results.items() if marker in s]
            return hit

    return ByMarker()


def _url(root: Path, rel: str) -> str:
    return f"file://{root / rel}"


def test_families_compare_rows_and_provenance(client: Any, lineage_collection: Path, tmp_path: Path) -> None:
    root = lineage_collection
    out = tmp_path / "audit-out"
    config = ScanConfig().replace(roots=(str(root),), out=str(out), compare_tensors=4)
    first = run_scan(config, client=client)

    files = {r["url"]: r for r in read_dataset(out, "files").to_pylist()}
    f32, q4_0, q8_0 = (_url(root, f"family/tiny-llama-{q}.gguf") for q in ("F32", "Q4_0", "Q8_0"))
    iq2 = _url(root, "family/tiny-llama-IQ2_XXS.gguf")
    assert set(files) >= {f32, q4_0, q8_0, iq2}
    assert files[f32]["full_precision"] is True and files[q8_0]["full_precision"] is False
    # Provenance of the imatrix quantization, and none invented for the others.
    p = files[iq2]
    assert (p["imatrix_file"], p["imatrix_dataset"], p["imatrix_entries_count"], p["imatrix_chunks_count"]) == (
        "imatrix.dat",
        "calib.txt",
        14,
        40,
    )
    assert p["quantization_version"] == 2 and files[q8_0]["imatrix_file"] is None
    assert len({files[u]["tensor_set_digest"] for u in (f32, q4_0, q8_0, iq2)}) == 1

    models = {r["urls"][0]: r for r in read_dataset(out, "models").to_pylist()}
    assert len({models[u]["family_key"] for u in (f32, q4_0, q8_0, iq2)}) == 1
    assert {models[u]["reference_url"] for u in (q4_0, q8_0, iq2)} == {f32} and models[f32]["reference_url"] is None

    # The compare rows: each quantized sibling against the F32 file, at most compare_tensors tensors.
    compare = read_dataset(out, "compare").to_pylist()
    by_url: dict[str, list[dict[str, Any]]] = {}
    for row in compare:
        by_url.setdefault(row["url"], []).append(row)
    assert set(by_url) == {q4_0, q8_0, iq2}
    assert all(0 < len(rows) <= 4 for rows in by_url.values())
    assert all(r["reference_url"] == f32 and r["n_values"] > 0 for r in compare)
    assert all(r["verdict"] == "ok" for u in (q8_0, iq2) for r in by_url[u])
    assert all(r["max_error_steps"] < 0.6 for r in by_url[q8_0])  # rounding to the nearest of a uniform grid
    scrambled = [r for r in by_url[q4_0] if r["type"] == "Q4_0"]
    assert scrambled and all(r["verdict"] == "layout_suspect" for r in scrambled)
    assert all(r["over_step_fraction"] > 0.2 and r["relative_rmse"] > 0.5 for r in scrambled)

    problems = read_dataset(out, "problems").to_pylist()
    suspect = [p for p in problems if p["code"] == "compare.layout_suspect"]
    assert {p["url"] for p in suspect} == {q4_0} and len(suspect) == len(scrambled)
    assert all(p["scope"] == "model" and p["severity"] == "error" for p in suspect)
    assert models[q4_0]["status"] == "error" and "compare.layout_suspect" in models[q4_0]["codes"]
    lineage = [p for p in problems if p["code"] == "lineage.no_full_precision"]
    # One row for the orphans' family (its first model); the upstream family has its safetensors file.
    assert [p["model_id"] for p in lineage] == [_url(root, "orphans/orphan-Q4_K_M")]
    assert lineage[0]["severity"] == "info" and "2 quantized model(s)" in lineage[0]["message"]
    assert first.problem_codes["compare.layout_suspect"] == len(scrambled)

    [run] = read_dataset(out, "runs").to_pylist()
    assert run["compare_rows"] == len(compare) and run["compare_version"] == 0

    # DuckDB (the delta extension) and polars read the compare table.
    con = connect()
    try:
        duck = con.execute(
            f"SELECT url, count(*) FROM delta_scan('{out}/compare') WHERE verdict = 'layout_suspect' GROUP BY url"
        ).fetchall()
    finally:
        con.close()
    assert duck == [(q4_0, len(scrambled))]
    frame = pl.read_delta(str(out / "compare"))
    assert frame.height == len(compare) and frame.filter(pl.col("verdict") == "ok").height == len(compare) - len(
        scrambled
    )

    # The queries docs/tables.md gives for lineage, on this night.
    docs = _documented(out)
    [(family, n_models, types, arch, name)] = docs["HAVING NOT bool_or(full_precision)"]
    assert (n_models, types, arch, name) == (2, ["Q4_K_M", "Q8_0"], "llama", "tiny-llama-orphan")
    assert family == models[_url(root, "orphans/orphan-Q8_0.gguf")]["family_key"]
    assert docs["code = 'lineage.no_full_precision'"] == [(_url(root, "orphans/orphan-Q4_K_M"), lineage[0]["message"])]
    suspects = docs["verdict = 'layout_suspect'"]
    assert {r[0] for r in suspects} == {q4_0} and len(suspects) == len(scrambled)
    assert [r[0] for r in docs["WHERE imatrix_file IS NOT NULL"]] == [iq2]
    claims = {r[0]: r[2:] for r in docs["AS proven_against"] if r[0].startswith(_url(root, "family/"))}
    reference = _url(root, "family/tiny-llama-F32.gguf")
    assert claims[iq2] == (True, "calib.txt", 40, reference, "unprovable")
    assert claims[_url(root, "family/tiny-llama-Q8_0.gguf")] == (False, None, None, reference, "derived")
    assert claims[reference] == (False, None, None, None, None)

    # An incremental night with nothing changed compares nothing again and keeps the same picture.
    again = run_scan(config.replace(incremental=True), client=client)
    assert again.n_read == 0 and again.rows_written.get("compare", 0) == 0
    assert again.problem_codes["compare.layout_suspect"] == len(scrambled)
    picture = picture_table(Output(str(out)), "compare", again.run_id)
    assert picture.num_rows == len(compare)
    night_problems = picture_table(Output(str(out)), "problems", again.run_id).to_pylist()
    assert sum(p["code"] == "lineage.no_full_precision" for p in night_problems) == 1

    # The F32 file goes: its family's quantized models are judged again, now without a source.
    (root / "family" / "tiny-llama-F32.gguf").unlink()
    third = run_scan(config.replace(incremental=True), client=client)
    assert third.rows_written.get("compare", 0) == 0
    assert third.problem_codes.get("compare.layout_suspect", 0) == 0
    night_problems = picture_table(Output(str(out)), "problems", third.run_id).to_pylist()
    lineage_ids = sorted(p["model_id"] for p in night_problems if p["code"] == "lineage.no_full_precision")
    assert lineage_ids == [_url(root, "family/tiny-llama-IQ2_XXS"), _url(root, "orphans/orphan-Q4_K_M")]
    assert picture_table(Output(str(out)), "compare", third.run_id).num_rows == 0

    # Retention keeps the compare rows a kept night points at (through its models): none are left.
    vacuum_nights(Output(str(out)), keep_nights=1, min_age_hours=0)
    assert read_dataset(out, "compare").num_rows == 0
    kept = [p for p in read_dataset(out, "problems").to_pylist() if p["code"] == "lineage.no_full_precision"]
    assert sorted(p["model_id"] for p in kept) == lineage_ids  # the orphans' is the first night's, still in use


def test_compare_can_be_turned_off(client: Any, lineage_collection: Path, tmp_path: Path) -> None:
    out = tmp_path / "audit-out"
    result = run_scan(
        ScanConfig().replace(roots=(str(lineage_collection / "family"),), out=str(out), compare=False, samples=False),
        client=client,
    )
    assert read_dataset(out, "compare").num_rows == 0 and "compare.layout_suspect" not in result.problem_codes
    models = read_dataset(out, "models").to_pylist()
    assert {m["full_precision"] for m in models} == {True, False}  # the families are still judged


def _judged(codes: Mapping[str, int]) -> dict[str, int]:
    """The codes of the judgements across files (the corpus files' own are tokenizer.double_bos, info)."""
    return {c: n for c, n in codes.items() if c.startswith(("lineage.", "compare.", "shard."))}


def test_a_shard_set_is_one_member_and_is_judged_again_when_its_family_gains_a_source(
    client: Any, tmp_path: Path
) -> None:
    root = tmp_path / "collection"
    root.mkdir()
    shards = sorted((corpus_dir() / "split").glob("*.gguf"))
    for shard in shards:
        shutil.copy(shard, root)
    out = tmp_path / "audit-out"
    config = ScanConfig().replace(roots=(str(root),), out=str(out), compare_tensors=2, incremental=True)
    first = run_scan(config, client=client)
    split_id = _url(root, "tiny-llama-Q4_K_M")
    assert _judged(first.problem_codes) == {"lineage.no_full_precision": 1}
    [lineage] = [p for p in read_dataset(out, "problems").to_pylist() if p["code"] == "lineage.no_full_precision"]
    assert lineage["model_id"] == split_id and "1 quantized model(s) (Q4_K_M)" in lineage["message"]

    # The F32 file arrives: the shard set, none of its shards read, is judged again from its stored facts
    # (still complete, no shard problem) and each shard is compared with the F32 file.
    shutil.copy(MODELS / "tiny-llama-F32.gguf", root)
    second = run_scan(config, client=client)
    assert (second.n_read, second.n_reused) == (1, 4)
    assert _judged(second.problem_codes) == {}
    [model] = [m for m in Output(str(out)).read("models", [second.run_id]).to_pylist() if m["model_id"] == split_id]
    assert (model["source_run_id"], model["complete"], model["loadable"], model["status"]) == (
        second.run_id,
        True,
        True,
        "ok",
    )
    assert model["reference_url"] == _url(root, "tiny-llama-F32.gguf") and model["family_source"] == "gguf"
    compare = picture_table(Output(str(out)), "compare", second.run_id).to_pylist()
    assert {r["url"] for r in compare} == {_url(root, s.name) for s in shards}
    assert all(r["verdict"] == "ok" and r["model_id"] == split_id for r in compare)
    assert all(len([r for r in compare if r["url"] == u]) <= 2 for u in {r["url"] for r in compare})


def test_the_compare_settings_from_config_and_flags(tmp_path: Path) -> None:
    parser = argparse.ArgumentParser()
    _add_arguments(parser)
    path = tmp_path / "c.toml"
    path.write_text("[checks]\ncompare = false\ncompare_tensors = 3\n")
    config = _config_from_args(parser.parse_args(["--config", str(path), "/data"]))
    assert (config.checks.compare, config.checks.compare_tensors) == (False, 3)
    assert config.verdict_settings()["compare"] is False  # a night compared otherwise is not built on
    assert _config_from_args(parser.parse_args(["--config", str(path), "/data", "--compare"])).checks.compare is True
    assert _config_from_args(parser.parse_args(["/data", "--no-compare"])).checks.compare is False
    assert ScanConfig().checks.compare is True and ScanConfig().checks.compare_tensors == 8
    path.write_text("[checks]\ncompare_tensors = 0\n")
    with pytest.raises(ConfigError, match="compare_tensors"):
        load_config(path)


def test_safetensors_directories_are_listed_only_for_families_judged_this_night(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "model.safetensors").write_bytes(b"{}")
    (tmp_path / "b").mkdir()
    judged = LackingFamily(frozenset({f"{tmp_path}/a"}), carried=False, stored_safetensors=False)
    # b holds no safetensors file, but its family is carried with the stored answer: not listed again.
    carried = LackingFamily(frozenset({f"{tmp_path}/b"}), carried=True, stored_safetensors=True)
    assert _with_safetensors([judged, carried], {}) == {f"{tmp_path}/a", f"{tmp_path}/b"}
    assert _with_safetensors([replace(carried, stored_safetensors=False)], {}) == set()
    assert safetensors_dirs([f"{tmp_path}/b", "http://127.0.0.1:9/x", f"{tmp_path}/missing"], {}) == set()


def test_a_night_that_reads_nothing_compares_against_the_next_reference(client: Any, tmp_path: Path) -> None:
    root = tmp_path / "collection"
    root.mkdir()
    for quant in ("F32", "F16", "Q8_0"):
        shutil.copy(MODELS / f"tiny-llama-{quant}.gguf", root)
    out = tmp_path / "audit-out"
    config = ScanConfig().replace(roots=(str(root),), out=str(out), compare_tensors=2, incremental=True)
    first = run_scan(config, client=client)
    output = Output(str(out))
    assert {r["reference_url"] for r in picture_table(output, "compare", first.run_id).to_pylist()} == {
        _url(root, "tiny-llama-F32.gguf")
    }
    (root / "tiny-llama-F32.gguf").unlink()  # the F16 file becomes the reference; nothing is read
    second = run_scan(config, client=client)
    assert (second.n_read, second.rows_written.get("compare", 0) > 0) == (0, True)
    rows = picture_table(output, "compare", second.run_id).to_pylist()
    assert {(r["url"], r["reference_url"], r["source_run_id"]) for r in rows} == {
        (_url(root, "tiny-llama-Q8_0.gguf"), _url(root, "tiny-llama-F16.gguf"), second.run_id)
    }
    assert all(r["verdict"] == "ok" and r["reference_type"] == "F16" for r in rows)
