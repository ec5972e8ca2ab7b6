"""End to end: a collection on moto S3 and on an HTTP range server, scanned on a real dask cluster."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import duckdb
import polars as pl
import pyarrow.compute as pc
import pytest
from pipeline_helpers import SAMPLE_COUNT, delta_options, read_dataset, s3_options

from gguf_audit.pipelines.commands.sql import summary_lines
from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.nights.picture import picture_table
from gguf_audit.pipelines.scan.collect import ScanResult
from gguf_audit.pipelines.scan.run import run_scan
from gguf_audit.pipelines.store import delta as delta_module
from gguf_audit.pipelines.store.duck import connect
from gguf_audit.pipelines.store.output import Output
from gguf_audit.testing.http import RangeHTTPServer
from gguf_audit.testing.s3 import MotoS3Server


def _object_reads(server: MotoS3Server, bucket: str) -> list[str]:
    """Keys the scan fetched bytes of (GETs of objects, not listings)."""
    reads = []
    for r in server.requests:
        path, _, query = r.path.partition("?")
        if r.method == "GET" and path.startswith(f"/{bucket}/") and "list-type" not in query:
            reads.append(path.removeprefix(f"/{bucket}/"))
    return reads


def _duck(sql: str) -> list[tuple[Any, ...]]:
    con = connect()
    try:
        return con.sql(sql).fetchall()
    finally:
        con.close()


def _s3_config(moto: MotoS3Server, bucket: str, out: Path, **kw: Any) -> ScanConfig:
    return ScanConfig().replace(
        roots=(f"s3://{bucket}/models",),
        out=str(out),
        storage_options={"s3": s3_options(moto)},
        retries=1,
        backoff_s=0.01,
        **kw,
    )


def _files_by_name(out: Path, run_id: str) -> dict[str, dict[str, Any]]:
    files = read_dataset(out, "files")
    rows = files.filter(pc.equal(files.column("run_id"), run_id)).to_pylist()
    return {r["url"].split("/models/", 1)[1]: r for r in rows}


def test_s3_collection(client: Any, moto: MotoS3Server, bucket: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_scan(_s3_config(moto, bucket, out), client=client)

    assert isinstance(result, ScanResult)
    assert result.n_files == SAMPLE_COUNT == result.rows_checked
    assert result.statuses == {"ok": 7, "error": 2, "unreadable": 1}
    # What listing the bucket cost is recorded with the night: requests sent, counted as they went out.
    [night] = read_dataset(out, "runs").to_pylist()
    assert night["listing_requests"] == result.listing_requests and result.listing_requests is not None
    assert 1 <= result.listing_requests <= 3  # one flat listing of the bucket's keys (no delimiter)
    files = _files_by_name(out, result.run_id)
    assert len(files) == SAMPLE_COUNT
    assert all(r["url"].startswith(f"s3://{bucket}/models/") for r in files.values())
    assert files["tiny-llama-Q4_K_M.gguf"]["status"] == "ok"
    assert files["tiny-llama-Q4_K_M.gguf"]["architecture"] == "llama"
    assert files["tiny-llama-Q4_K_M.gguf"]["file_type_name"] == "Q4_K_M"
    assert files["tiny-llama-Q4_K_M.gguf"]["codes"] == []
    assert files["tiny-llama-Q4_K_M.gguf"]["etag"]  # the listing's ETag is kept
    assert files["tiny-llama-Q4_K_M.gguf"]["mtime"] is not None
    assert files["tiny-llama-Q4_K_M.gguf"]["model_id"] == f"s3://{bucket}/models/tiny-llama-Q4_K_M"
    assert files["downloads/tiny-llama-Q4_K_M.gguf"]["codes"] == ["data.truncated"]
    assert files["downloads/tiny-llama-Q4_K_M.gguf"]["loadable"] is False
    assert files["corrupt/tiny-llama-Q4_K_M.gguf"]["status"] == "unreadable"
    shard = files["sharded/llama-split-00003-of-00003.gguf"]
    assert (shard["model_id"], shard["shard_index"], shard["shard_count"]) == (
        f"s3://{bucket}/models/sharded/llama-split",
        3,
        3,
    )
    assert shard["split_no"] == 2
    assert all(r["bytes_read"] > 0 and r["source_run_id"] == result.run_id for r in files.values())

    models = {m["model_id"].rsplit("/models/", 1)[1]: m for m in read_dataset(out, "models").to_pylist()}
    assert models["sharded/llama-split"]["complete"] is False
    assert models["sharded/llama-split"]["shards_missing"] == [2]
    assert models["sharded/llama-split"]["loadable"] is False
    assert models["sharded/misnumbered"]["complete"] is True
    assert models["sharded/misnumbered"]["loadable"] is False
    assert models["sharded/complete"]["loadable"] is True
    assert models["sharded/complete"]["n_tensors"] == 21
    # The same name in another folder is another model.
    assert models["mirror/tiny-llama-Q4_K_M"]["urls"] == [f"s3://{bucket}/models/mirror/tiny-llama-Q4_K_M.gguf"]
    assert models["tiny-llama-Q4_K_M"]["loadable"] is True
    assert [m.model_id.rsplit("/models/", 1)[1] for m in result.incomplete_models] == ["sharded/llama-split"]

    problems = read_dataset(out, "problems").to_pylist()
    model_codes = {(p["model_id"].rsplit("/models/", 1)[1], p["code"]) for p in problems if p["scope"] == "model"}
    assert model_codes == {
        ("sharded/llama-split", "shard.missing"),
        ("sharded/misnumbered", "shard.bad_index"),
        # every file is quantized: the Q4_K_M family (filed under its first model) and the incomplete
        # set (it lacks a shard's tensors, so it is a family of its own) have no full-precision source
        ("downloads/tiny-llama-Q4_K_M", "lineage.no_full_precision"),
        ("sharded/llama-split", "lineage.no_full_precision"),
    }
    missing = next(p for p in problems if p["code"] == "shard.missing")
    assert missing["url"] is None and "00002" in missing["message"]
    file_codes = {(p["url"].rsplit("/models/", 1)[1], p["code"]) for p in problems if p["scope"] == "file"}
    assert ("downloads/tiny-llama-Q4_K_M.gguf", "data.truncated") in file_codes
    assert ("corrupt/tiny-llama-Q4_K_M.gguf", "header.string_too_long") in file_codes
    # The misnumbered shard claims to be a first shard, and lacks what a first shard needs.
    assert ("sharded/misnumbered-00002-of-00002.gguf", "meta.missing_key") in file_codes

    # DuckDB reads every table with delta_scan and sees the same rows.
    base = str(out)
    [(n, distinct)] = _duck(
        f"SELECT count(*), count(DISTINCT url) FROM delta_scan('{base}/files') WHERE run_id = '{result.run_id}'"
    )
    assert n == distinct == SAMPLE_COUNT
    rows = _duck(
        f"SELECT code, count(*) FROM delta_scan('{base}/problems') "
        "WHERE code IN ('data.truncated', 'header.string_too_long') OR code LIKE 'shard.%' GROUP BY code ORDER BY code"
    )
    # misnumbered-00002 holds split.no 0: given alone, llama.cpp cannot build its set's names from it.
    assert rows == [
        ("data.truncated", 1),
        ("header.string_too_long", 1),
        ("shard.bad_index", 1),
        ("shard.invalid_file_name", 1),
        ("shard.missing", 1),
    ]
    [(arch_rows,)] = _duck(
        f"SELECT count(*) FROM delta_scan('{base}/metadata') "
        "WHERE key = 'general.architecture' AND value_text = 'llama'"
    )
    assert arch_rows == 6  # the readable files and first shards: later shards hold only split.* keys
    [(n_tensors,)] = _duck(f"SELECT count(*) FROM delta_scan('{base}/tensors')")
    assert n_tensors == sum(r["n_tensors"] or 0 for r in files.values())
    [(run_files, status, versions, listing)] = _duck(
        f"SELECT n_files, status, table_versions, listing_requests FROM delta_scan('{base}/runs')"
    )
    assert (run_files, status, listing) == (SAMPLE_COUNT, "committed", result.listing_requests)
    assert versions == {t: 0 for t in ("files", "models", "tensors", "metadata", "problems", "samples")}
    [(samples,)] = _duck(f"SELECT count(*) FROM delta_scan('{base}/samples')")
    assert samples > 0  # scans sample by default
    assert result.rows_written["samples"] == samples and result.rows_written["tensors"] == n_tensors
    assert Output(str(out)).pending() == []


def test_tables_on_s3(client: Any, moto: MotoS3Server, bucket: str, local_collection: Path) -> None:
    """--out on S3: workers write the data files there, deltalake commits with conditional puts."""
    out = f"s3://{bucket}/audit"
    config = ScanConfig().replace(roots=(str(local_collection),), out=out, out_storage_options=s3_options(moto))
    first = run_scan(config, client=client)
    second = run_scan(config.replace(incremental=True), client=client)
    assert (second.base_run_id, second.n_reused) == (first.run_id, SAMPLE_COUNT)
    assert first.listing_requests == second.listing_requests == 0  # a local collection lists for free
    options = delta_options(moto)
    files = read_dataset(out, "files", options)
    assert files.num_rows == 2 * SAMPLE_COUNT
    assert set(files.column("source_run_id").to_pylist()) == {first.run_id}
    # polars reads the same tables, at the latest version or at the one a night recorded.
    runs = pl.read_delta(f"{out}/runs", storage_options=options).sort("finished_at")
    assert runs["run_id"].to_list() == [first.run_id, second.run_id]
    first_files = runs.row(0, named=True)["table_versions"]["files"]
    assert pl.read_delta(f"{out}/files", version=first_files, storage_options=options).height == SAMPLE_COUNT
    keys = {o["Key"] for o in moto.client().list_objects_v2(Bucket=bucket, Prefix="audit/")["Contents"]}
    assert f"audit/runs/_delta_log/{0:020d}.json" in keys and f"audit/files/_delta_log/{1:020d}.json" in keys
    assert not any(k.startswith("audit/_pending/") for k in keys)
    # The summary's DuckDB lines for S3 work as printed: the extensions from their wheels, the secret
    # (credentials from the environment, the endpoint spelt out), the night's views, then the query.
    _, statements = summary_lines(out, second.run_id, s3_options(moto))
    [secret] = [line for line in statements if line.startswith("CREATE SECRET")]
    assert f"ENDPOINT '{moto.endpoint_url.split('://', 1)[1]}'" in secret
    assert not [line for line in statements if line.startswith("INSTALL")]
    con = duckdb.connect()
    try:
        for statement in statements[:-1]:
            con.execute(statement)
        by_status = [(status, n, problems) for status, _, n, problems in con.execute(statements[-1]).fetchall()]
    finally:
        con.close()
    assert sum(n for _, n, _ in by_status) == SAMPLE_COUNT


def test_incremental_reads_only_changes(
    client: Any,
    moto: MotoS3Server,
    bucket: str,
    tmp_path: Path,
    sample: dict[str, bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = tmp_path / "out"
    first = run_scan(_s3_config(moto, bucket, out), client=client)
    assert first.n_read == SAMPLE_COUNT
    # The driver streams the base night's rows: in batches of three, every figure below must still hold.
    monkeypatch.setattr(delta_module, "BATCH_ROWS", 3)

    moto.reset_stats()
    second = run_scan(_s3_config(moto, bucket, out, incremental=True), client=client)
    assert _object_reads(moto, bucket) == []  # listings only: no file was read
    assert (second.base_run_id, second.n_read, second.n_reused, second.bytes_read) == (
        first.run_id,
        0,
        SAMPLE_COUNT,
        0,
    )
    files = _files_by_name(out, second.run_id)
    assert len(files) == SAMPLE_COUNT
    assert all(r["reused"] and r["bytes_read"] == 0 and r["source_run_id"] == first.run_id for r in files.values())
    # A quiet night writes a files row per file and a models row per model, nothing else.
    assert second.rows_written == {"files": SAMPLE_COUNT, "models": 7}
    output = Output(str(out))
    for table in ("problems", "tensors", "metadata", "samples"):
        assert output.read(table, [second.run_id]).num_rows == 0, table
    # ...and its picture is the first night's.
    for table in ("problems", "tensors", "metadata", "samples"):
        then, now = picture_table(output, table, first.run_id), picture_table(output, table, second.run_id)
        assert now.num_rows == then.num_rows > 0, table
        assert set(now.column("run_id").to_pylist()) == {second.run_id}
        assert now.drop_columns(["run_id"]).sort_by("url").equals(then.drop_columns(["run_id"]).sort_by("url")), table
    assert second.problem_codes == first.problem_codes
    assert second.incomplete_models and second.statuses == first.statuses

    # One object changes: the truncated download is completed. Only it is read again.
    moto.put(bucket, "models/downloads/tiny-llama-Q4_K_M.gguf", sample["tiny-llama-Q4_K_M.gguf"])
    moto.reset_stats()
    third = run_scan(_s3_config(moto, bucket, out, incremental=True), client=client)
    # Its header, then its sampled blocks: every read is of that one object.
    assert set(_object_reads(moto, bucket)) == {"models/downloads/tiny-llama-Q4_K_M.gguf"}
    assert (third.base_run_id, third.n_read, third.n_reused) == (second.run_id, 1, SAMPLE_COUNT - 1)
    files = _files_by_name(out, third.run_id)
    assert files["downloads/tiny-llama-Q4_K_M.gguf"]["status"] == "ok"
    assert files["downloads/tiny-llama-Q4_K_M.gguf"]["source_run_id"] == third.run_id
    assert files["corrupt/tiny-llama-Q4_K_M.gguf"]["source_run_id"] == first.run_id
    assert third.statuses == {"ok": 8, "error": 1, "unreadable": 1}
    # A churn night writes detail rows for the changed file only.
    changed = files["downloads/tiny-llama-Q4_K_M.gguf"]
    assert third.rows_written["tensors"] == changed["n_tensors"]
    assert third.rows_written["metadata"] == changed["n_kv"]
    assert third.rows_written["files"] == SAMPLE_COUNT
    assert set(Output(str(out)).read("tensors", [third.run_id], columns=["url"]).column("url").to_pylist()) == {
        changed["url"]
    }
    assert third.n_models_judged == 1  # the other six models keep their rows
    # The shard sets are judged again from stored facts, without reading a shard.
    models = read_dataset(out, "models")
    models = models.filter(pc.equal(models.column("run_id"), third.run_id)).to_pylist()
    by_id = {m["model_id"].rsplit("/models/", 1)[1]: m for m in models}
    assert by_id["sharded/llama-split"]["shards_missing"] == [2]
    assert "shard.bad_index" in by_id["sharded/misnumbered"]["codes"]
    assert by_id["sharded/complete"]["loadable"] is True

    runs = read_dataset(out, "runs").to_pylist()
    assert sorted(r["run_id"] for r in runs) == sorted([first.run_id, second.run_id, third.run_id])
    assert Output(str(out)).last_committed_run() == third.run_id


def test_http_manifest(client: Any, tmp_path: Path, sample: dict[str, bytes]) -> None:
    with RangeHTTPServer(files={f"m/{k}": v for k, v in sample.items()}) as srv:
        manifest = tmp_path / "manifest.txt"
        lines = ["# the mirror's models", *(srv.url_for(f"m/{k}") for k in sample), "", srv.url_for("m/gone.gguf")]
        manifest.write_text("\n".join(lines))
        out = tmp_path / "out"
        result = run_scan(
            ScanConfig().replace(manifests=(str(manifest),), out=str(out), retries=0, threads=8, samples=False),
            client=client,
        )
        assert result.n_files == SAMPLE_COUNT + 1
        gets = [r for r in srv.requests if r.method == "GET"]
    files = {r["url"].rsplit("/m/", 1)[1]: r for r in read_dataset(out, "files").to_pylist()}
    # One ranged GET per file: the size comes from Content-Range, nothing is read twice; a file judged on its
    # size (truncated, trailing bytes) asks for its last byte once more, so one lying answer cannot judge it.
    on_size = sum(1 for r in files.values() if {"data.truncated", "data.trailing_bytes"} & set(r["codes"]))
    assert on_size >= 1
    assert len(gets) == SAMPLE_COUNT + 1 + on_size and all(r.range is not None for r in gets)
    assert files["gone.gguf"]["codes"] == ["io.not_found"]
    assert files["gone.gguf"]["status"] == "unreadable"
    assert files["tiny-llama-Q4_K_M.gguf"]["size"] == len(sample["tiny-llama-Q4_K_M.gguf"])
    assert "data.truncated" in files["downloads/tiny-llama-Q4_K_M.gguf"]["codes"]
    models = {m["model_id"].rsplit("/m/", 1)[1]: m for m in read_dataset(out, "models").to_pylist()}
    assert models["sharded/llama-split"]["shards_missing"] == [2]


def test_urls_that_differ_only_by_query_each_get_their_rows(
    client: Any, tmp_path: Path, sample: dict[str, bytes]
) -> None:
    """Two manifest entries naming one object with different query strings (versions, presigned URLs) are two
    files: each is audited and has its row, under the one model their path names (the driver once failed the
    night with a KeyError on the second)."""
    data = sample["tiny-llama-Q4_K_M.gguf"]
    with RangeHTTPServer(files={"m/model.gguf": data}) as srv:
        manifest = tmp_path / "manifest.txt"
        urls = [srv.url_for("m/model.gguf") + query for query in ("?v=1", "?v=2")]
        manifest.write_text("\n".join(urls) + "\n")
        out = tmp_path / "out"
        result = run_scan(ScanConfig().replace(manifests=(str(manifest),), out=str(out), samples=False), client=client)
    assert (result.n_files, result.n_read) == (2, 2)
    files = read_dataset(out, "files").to_pylist()
    assert sorted(f["url"] for f in files) == urls
    assert all(f["size"] == len(data) for f in files)
    models = read_dataset(out, "models").to_pylist()
    assert [(m["model_id"], m["n_files"], sorted(m["urls"])) for m in models] == [
        (srv.url_for("m/model.gguf"), 2, urls)
    ]


def test_http_manifest_csv_incremental(client: Any, tmp_path: Path, sample: dict[str, bytes]) -> None:
    """A CSV manifest with sizes and ETags lets an incremental run skip unchanged HTTP files."""
    names = ["tiny-llama-Q4_K_M.gguf", "mirror/tiny-llama-Q4_K_M.gguf"]
    with RangeHTTPServer(files={n: sample[n] for n in names}) as srv:
        manifest = tmp_path / "manifest.csv"
        rows = ["url,size,etag", *(f"{srv.url_for(n)},{len(sample[n])},v1-{n}" for n in names)]
        manifest.write_text("\n".join(rows) + "\n")
        config = ScanConfig().replace(manifests=(str(manifest),), out=str(tmp_path / "out"), incremental=True)
        first = run_scan(config, client=client)
        srv.reset_stats()
        second = run_scan(config, client=client)
        assert srv.requests == []
        assert (first.n_read, second.n_read, second.n_reused) == (2, 0, 2)


@pytest.mark.parametrize("batch_size", [1, 3])
def test_batches_of_any_size_give_one_row_per_file(
    client: Any, local_collection: Path, tmp_path: Path, batch_size: int
) -> None:
    out = tmp_path / "out"
    result = run_scan(
        ScanConfig().replace(roots=(str(local_collection),), out=str(out), batch_size=batch_size, threads=2),
        client=client,
    )
    files = read_dataset(out, "files")
    assert files.num_rows == len(set(files.column("url").to_pylist())) == SAMPLE_COUNT == result.rows_checked
    assert all(u.startswith("file://") for u in files.column("url").to_pylist())


def test_samples_and_checks_changes(client: Any, local_collection: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    plain = run_scan(ScanConfig().replace(roots=(str(local_collection),), out=str(out), samples=False), client=client)
    assert read_dataset(out, "samples").num_rows == 0

    # Turning sampling on changes the checks: an incremental run cannot reuse the header-only rows.
    config = ScanConfig().replace(roots=(str(local_collection),), out=str(out), incremental=True, samples=True)
    sampled = run_scan(config, client=client)
    assert (sampled.base_run_id, sampled.n_read) == (None, SAMPLE_COUNT)
    assert sampled.reuse_note is not None and plain.run_id in sampled.reuse_note
    samples = read_dataset(out, "samples")
    assert samples.num_rows > 0 and set(samples.column("run_id").to_pylist()) == {sampled.run_id}
    by_tensor = {(r["url"].rsplit("/", 1)[1], r["tensor"]) for r in samples.to_pylist()}
    assert ("tiny-llama-Q4_K_M.gguf", "token_embd.weight") in by_tensor
    files = {
        r["url"].rsplit("/collection/", 1)[1]: r
        for r in read_dataset(out, "files").to_pylist()
        if r["run_id"] == sampled.run_id
    }
    assert files["tiny-llama-Q4_K_M.gguf"]["fingerprint"]
    assert files["tiny-llama-Q4_K_M.gguf"]["fingerprint"] == files["mirror/tiny-llama-Q4_K_M.gguf"]["fingerprint"]

    # The same checks again: everything is reused, samples included (pointed at, not copied).
    again = run_scan(config, client=client)
    assert (again.base_run_id, again.n_read, again.n_reused) == (sampled.run_id, 0, SAMPLE_COUNT)
    samples = read_dataset(out, "samples")
    assert set(samples.column("run_id").to_pylist()) == {sampled.run_id}
    output = Output(str(out))
    assert picture_table(output, "samples", again.run_id).num_rows == samples.num_rows > 0


def test_a_shard_set_with_one_changed_shard_is_judged_from_stored_facts(
    client: Any, local_collection: Path, tmp_path: Path, sample: dict[str, bytes]
) -> None:
    """One shard read again, its sibling not: the set is judged with the sibling's stored split keys and tensors."""
    out = tmp_path / "out"
    first = run_scan(ScanConfig().replace(roots=(str(local_collection),), out=str(out)), client=client)
    good = "sharded/misnumbered-00001-of-00002.gguf"
    time.sleep(0.01)
    (local_collection / good).write_bytes(sample[good])  # the same bytes, a new mtime: read again
    second = run_scan(
        ScanConfig().replace(roots=(str(local_collection),), out=str(out), incremental=True), client=client
    )
    assert (second.n_read, second.n_models_judged) == (1, 1)
    output = Output(str(out))
    models = {m["model_id"].rsplit("/", 1)[1]: m for m in output.read("models", [second.run_id]).to_pylist()}
    judged = models["misnumbered"]
    # The bad index is the unchanged shard's: it comes from the rows the first night stored.
    assert (judged["source_run_id"], judged["loadable"], "shard.bad_index" in judged["codes"]) == (
        second.run_id,
        False,
        True,
    )
    assert models["complete"]["source_run_id"] == first.run_id
    problems = picture_table(output, "problems", second.run_id).to_pylist()
    by_model = {
        (p["model_id"].rsplit("/", 1)[1], p["code"], p["source_run_id"]) for p in problems if p["scope"] == "model"
    }
    assert by_model == {
        ("misnumbered", "shard.bad_index", second.run_id),
        ("llama-split", "shard.missing", first.run_id),
        # the lineage of the families not touched stays the first night's (downloads/ anchors Q4_K_M's)
        ("llama-split", "lineage.no_full_precision", first.run_id),
        ("tiny-llama-Q4_K_M", "lineage.no_full_precision", first.run_id),
    }
    assert second.problem_codes == first.problem_codes


def test_the_documented_queries_run(
    client: Any, local_collection: Path, tmp_path: Path, sample: dict[str, bytes]
) -> None:
    """Every DuckDB query and the polars example in docs/tables.md run on two real nights."""
    out = tmp_path / "audit-out"
    run_scan(ScanConfig().replace(roots=(str(local_collection),), out=str(out)), client=client)
    # The truncated download is completed: the second night reads it again and reuses the rest.
    (local_collection / "downloads" / "tiny-llama-Q4_K_M.gguf").write_bytes(sample["tiny-llama-Q4_K_M.gguf"])
    run_scan(ScanConfig().replace(roots=(str(local_collection),), out=str(out), incremental=True), client=client)
    docs = (Path(__file__).resolve().parents[2] / "docs" / "tables.md").read_text()
    [sql] = re.findall(r"```sql\n(-- the latest night.*?)```", docs, re.S)
    statements = [s.strip() for s in sql.replace("audit-out", str(out)).split(";") if s.strip()]
    assert len(statements) >= 15
    con = connect()
    try:
        # Through Arrow: DuckDB's own Python conversion of timestamps with a zone needs pytz.
        tables = [con.execute(s).fetch_arrow_table() for s in statements]
    finally:
        con.close()
    results = [[tuple(row.values()) for row in t.to_pylist()] for t in tables]

    def result_of(marker: str) -> list[tuple[Any, ...]]:
        return results[next(i for i, s in enumerate(statements) if marker in s)]

    # files by status in the latest night: a complete picture, reused files included
    assert [(status, n) for status, n, _, _ in sorted(result_of("GROUP BY status"))] == [
        ("error", 1),
        ("ok", 8),
        ("unreadable", 1),
    ]
    assert [(m.rsplit("/", 1)[1], n, missing) for m, n, missing in result_of("NOT complete")] == [
        ("llama-split", 3, [2])
    ]
    # The night's problems: those of reused files (written by the first night) and of the models.
    codes = {code for code, _, _ in result_of("FROM problems GROUP BY ALL")}
    assert {"header.string_too_long", "shard.missing", "shard.bad_index"} <= codes
    assert "data.truncated" not in codes
    assert result_of("FROM metadata WHERE key = 'tokenizer.ggml.tokens'")
    [(url, change, was, now)] = result_of("FULL JOIN")
    assert (url.endswith("/downloads/tiny-llama-Q4_K_M.gguf"), change, was, now) == (True, "read again", "error", "ok")

    # The polars example computes the same picture.
    [code] = [c for c in re.findall(r"```python\n(.*?)```", docs, re.S) if "import polars" in c]
    scope: dict[str, Any] = {}
    exec(code.replace('"audit-out"', repr(str(out))), scope)  # the docs' own example
    assert dict(scope["by_status"].iter_rows()) == {"error": 1, "ok": 8, "unreadable": 1}
    top = dict(scope["top_codes"].iter_rows())
    assert top["shard.missing"] == 1 and "data.truncated" not in top

    # And so does the pandas one (through deltalake).
    [code] = [c for c in re.findall(r"```python\n(.*?)```", docs, re.S) if "to_pandas" in c]
    scope = {}
    exec(code.replace('"audit-out"', repr(str(out))), scope)  # the docs' own example
    assert scope["files"].status.value_counts().to_dict() == {"ok": 8, "error": 1, "unreadable": 1}
    read_again = scope["read_by"].run_id.unique().tolist()
    assert len(read_again) == 2  # the night's own reads and the first night's reused rows
    assert len(scope["tensors"]) > 0 and set(scope["tensors"].run_id) <= set(read_again)


def test_transient_errors_are_retried_and_lasting_ones_get_rows(
    client: Any, tmp_path: Path, sample: dict[str, bytes]
) -> None:
    data = sample["tiny-llama-Q4_K_M.gguf"]
    with RangeHTTPServer(files={f"m/{i}.gguf": data for i in range(4)}, fail_next=3, fail_status=503) as srv:
        manifest = tmp_path / "m.txt"
        refused = "http://127.0.0.1:9/nothing-listens-here.gguf"  # connection refused, every attempt
        manifest.write_text("\n".join([*(srv.url_for(f"m/{i}.gguf") for i in range(4)), refused]) + "\n")
        out = tmp_path / "out"
        config = ScanConfig().replace(
            manifests=(str(manifest),), out=str(out), retries=3, backoff_s=0.01, threads=1, batch_size=5, samples=False
        )
        result = run_scan(config, client=client)
        assert sum(1 for r in srv.requests if r.method == "GET") == 4 + 3  # three 503s, each retried
    files = {r["url"]: r for r in read_dataset(out, "files").to_pylist()}
    assert [files[srv.url_for(f"m/{i}.gguf")]["status"] for i in range(4)] == ["ok"] * 4
    assert files[refused]["codes"] == ["io.error"] and files[refused]["requests"] == 4
    assert result.rows_checked == 5
