"""Secrets never leave a scan: presigned and ``user:password@`` URLs, two nights, every table, file and log."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from corpus import corpus_dir
from pipeline_helpers import read_dataset

from gguf_audit.cli import main
from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.listing.discover import read_manifest
from gguf_audit.pipelines.scan.run import run_scan
from gguf_audit.tables.schema import TABLE_NAMES
from gguf_audit.testing.http import RangeHTTPServer


def _s3_query(night: int) -> str:
    return (
        "X-Amz-Algorithm=AWS4-HMAC-SHA256"
        f"&X-Amz-Credential=AKIANIGHT{night}KEY%2F2026120{night}%2Fus-east-1%2Fs3%2Faws4_request"
        f"&X-Amz-Date=2026120{night}T010203Z&X-Amz-Expires=3600&X-Amz-SignedHeaders=host"
        f"&X-Amz-Security-Token=SESSION{night}TOKENzz&X-Amz-Signature=deadbeef{night}c0ffee{night}"
    )


def _sas_query(night: int) -> str:
    return f"sv=2022-11-02&se=2026-12-0{night}T09%3A00Z&sr=b&sp=r&sig=AzureSig{night}%2Bq%3D"


def _secrets(night: int) -> list[str]:
    return [
        f"AKIANIGHT{night}KEY",
        f"2026120{night}T010203Z",
        f"SESSION{night}TOKENzz",
        f"deadbeef{night}c0ffee{night}",
        f"AzureSig{night}",
        f"MANIFESTSIG{night}",
        "hunter2pw",
    ]


def _strings(value: Any) -> list[str]:
    """Every string inside a cell (lists, structs and maps walked)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(value, list | tuple):
        return [s for v in value for s in _strings(v)]
    return []


def _table_strings(out: Path) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for name in TABLE_NAMES:
        if not (out / name / "_delta_log").exists():
            continue
        table: pa.Table = read_dataset(out, name)
        found[name] = [s for row in table.to_pylist() for s in _strings(row)]
    return found


def _night(
    srv: RangeHTTPServer,
    night: int,
    out: Path,
    tmp: Path,
    scheduler: str,
    sizes: dict[str, int],
    capsys: pytest.CaptureFixture[str],
) -> tuple[str, str]:
    """One night: the manifest (itself presigned) lists two presigned files; a user:password@ root names a third."""
    rows = ["url,size,etag"]
    rows.append(f"{srv.url_for('m/a.gguf')}?{_s3_query(night)},{sizes['m/a.gguf']},etag-a")
    rows.append(f"{srv.url_for('m/b.gguf')}?{_sas_query(night)},{sizes['m/b.gguf']},etag-b")
    srv.put("lists/manifest.csv", ("\n".join(rows) + "\n").encode())
    manifest = f"{srv.url_for('lists/manifest.csv')}?sig=MANIFESTSIG{night}&se=2026-12-0{night}&sv=1"
    root = srv.url_for("root.gguf").replace("http://", "http://scanner:hunter2pw@")
    argv = [root, "--manifest", manifest, "--out", str(out), "--scheduler", scheduler, "--no-progress"]
    argv += ["--incremental", "--sarif", str(tmp / f"n{night}.sarif"), "--jsonl", str(tmp / f"n{night}.jsonl")]
    assert main(["scan", *argv]) == 0
    captured = capsys.readouterr()
    return captured.out, captured.err


def test_presigned_urls_never_reach_tables_files_output_or_logs(
    client: Any,
    tmp_path: Path,
    sample: dict[str, bytes],
    capsys: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    data = sample["tiny-llama-Q4_K_M.gguf"]
    files = {"m/a.gguf": data, "m/b.gguf": data, "root.gguf": data}
    sizes = {k: len(v) for k, v in files.items()}
    out, exports = tmp_path / "out", tmp_path / "exports"
    exports.mkdir()
    scheduler = str(client.scheduler.address)
    with caplog.at_level(logging.DEBUG, logger="gguf_audit"), RangeHTTPServer(files=files) as srv:
        printed = [_night(srv, 1, out, exports, scheduler, sizes, capsys)]
        first = [r.path for r in srv.requests if r.method == "GET"]
        srv.reset_stats()
        printed.append(_night(srv, 2, out, exports, scheduler, sizes, capsys))
        second = [r.path for r in srv.requests if r.method == "GET"]
        # A log line that names a presigned URL, through a gguf_audit logger the scan set up.
        logging.getLogger("gguf_audit.pipelines.scan.run").warning("probe %s", f"{srv.url_for('x')}?{_s3_query(2)}")
    # The queries reached the server: every file was read through its real, signed URL.
    # (The client may decode %2F in a query; signatures and tokens arrive as they were.)
    assert any(p.startswith("/m/a.gguf?") and "X-Amz-Signature=deadbeef1c0ffee1" in p for p in first)
    assert any(p.startswith("/m/a.gguf?") and "X-Amz-Security-Token=SESSION1TOKENzz" in p for p in first)
    assert any(p.startswith("/m/b.gguf?") and "sig=AzureSig1" in p for p in first)
    assert "/lists/manifest.csv?sig=MANIFESTSIG1&se=2026-12-01&sv=1" in first
    # The second night matched both presigned files by their redacted URL and read neither again.
    assert not any(p.startswith("/m/") for p in second)
    runs = {r["run_id"]: r for r in read_dataset(out, "runs").to_pylist()}
    night2 = max(runs.values(), key=lambda r: r["started_at"])
    assert (night2["n_files"], night2["n_reused"], night2["n_read"]) == (3, 2, 1)
    assert night2["roots"] == [srv.url_for("root.gguf").replace("http://", "http://***@")]
    assert night2["manifests"][0].endswith("/lists/manifest.csv?sig=***&se=***&sv=***")

    secrets = _secrets(1) + _secrets(2)
    for stdout, stderr in printed:
        assert "files: 3" in stdout
        for secret in secrets:
            assert secret not in stdout and secret not in stderr
    for secret in secrets:
        assert secret not in caplog.text
    assert "X-Amz-Signature=***" in caplog.text  # the probe was logged, redacted

    tables = _table_strings(out)
    assert {"runs", "files", "models", "metadata", "problems"} <= set(tables)
    urls = {s for s in tables["files"] if s.startswith("http://")}
    assert any("X-Amz-Signature=***" in u for u in urls) and any("sig=***" in u for u in urls)
    assert any(u.startswith("http://***@127.0.0.1:") for u in urls)
    for name, strings in tables.items():
        for secret in secrets:
            assert not any(secret in s for s in strings), (name, secret)
    # And the raw bytes of every file under OUT (data files and _delta_log) and of the exports.
    written = [p for p in (*out.rglob("*"), *exports.rglob("*")) if p.is_file()]
    assert any(p.suffix == ".parquet" for p in written) and any("_delta_log" in p.parts for p in written)
    for path in written:
        raw = path.read_bytes()
        for secret in secrets:
            assert secret.encode() not in raw, (path, secret)


def test_compare_reads_presigned_files_and_stores_them_redacted(client: Any, tmp_path: Path) -> None:
    """The full-precision reference and its quantized sibling, both presigned: compared through the real URLs."""
    models = corpus_dir() / "models"
    names = {"f/tiny-llama-F16.gguf": "F16", "f/tiny-llama-Q8_0.gguf": "Q8_0"}
    with RangeHTTPServer(files={n: (models / f"tiny-llama-{q}.gguf").read_bytes() for n, q in names.items()}) as srv:
        manifest = tmp_path / "manifest.txt"
        manifest.write_text("".join(f"{srv.url_for(n)}?{_s3_query(1)}\n" for n in names))
        out = tmp_path / "out"
        result = run_scan(ScanConfig(manifests=(str(manifest),), out=str(out), compare_tensors=2), client=client)
        reads = [r.path for r in srv.requests if r.method == "GET" and r.path.startswith("/f/tiny-llama-F16.gguf")]
    assert result.n_files == 2
    # The reference was read by its audit and again by the comparison, each time with its signature.
    assert len(reads) >= 2 and all("X-Amz-Signature=deadbeef1c0ffee1" in p for p in reads)
    compare = read_dataset(out, "compare").to_pylist()
    assert compare and all(r["url"].endswith("/f/tiny-llama-Q8_0.gguf?" + _shown_s3()) for r in compare)
    assert all(r["reference_url"].endswith("/f/tiny-llama-F16.gguf?" + _shown_s3()) for r in compare)
    for name, strings in _table_strings(out).items():
        for secret in _secrets(1):
            assert not any(secret in s for s in strings), (name, secret)


def _shown_s3() -> str:
    return (
        "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=***&X-Amz-Date=***&X-Amz-Expires=***"
        "&X-Amz-SignedHeaders=host&X-Amz-Security-Token=***&X-Amz-Signature=***"
    )


def test_a_manifest_that_cannot_be_read_is_named_redacted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with RangeHTTPServer(files={}) as srv:
        manifest = f"{srv.url_for('lists/gone.csv')}?{_s3_query(1)}"
        status = main(["scan", "--manifest", manifest, "--out", str(tmp_path / "out"), "--no-progress"])
        requested = [r.path for r in srv.requests]
    captured = capsys.readouterr()
    assert status == 2 and any("X-Amz-Signature=deadbeef1c0ffee1" in p for p in requested)
    assert "cannot read manifest" in captured.err and "lists/gone.csv?" in captured.err
    assert "X-Amz-Signature=***" in captured.err
    for secret in _secrets(1):
        assert secret not in captured.out and secret not in captured.err


def test_relative_entries_of_a_presigned_manifest_resolve_beside_it() -> None:
    with RangeHTTPServer(files={"lists/m.txt": b"a.gguf\nsub/b.gguf\n"}) as srv:
        manifest = f"{srv.url_for('lists/m.txt')}?X-Amz-Credential=AK/2026/x&X-Amz-Signature=s1"
        listed = read_manifest(manifest)
    assert [f.url for f in listed] == [srv.url_for("lists/a.gguf"), srv.url_for("lists/sub/b.gguf")]
    assert [f.read_url for f in listed] == [None, None]
