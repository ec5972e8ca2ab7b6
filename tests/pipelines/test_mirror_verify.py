"""Mirror verdicts as strong as their evidence (issue 38): a sampled match is not ``faithful``.

A copy with 100 kB of its data section altered at the same size, away from
every sampled block, matches on its samples; only a whole-file hash
(``--verify full``) tells it differs. A hash is kept in the row and taken
again for a file its listing shows unchanged, so a second such night reads
nothing.
"""

from __future__ import annotations

import logging
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from corpus import corpus_dir
from pipeline_helpers import read_dataset

from gguf_audit.audit import AuditTarget, audit_file
from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.scan.run import run_scan
from gguf_audit.testing.hub import LocalHub
from gguf_audit.testing.s3 import MotoS3Server

ALTERED_BYTES = 100_000


def _model(name: str) -> bytes:
    return (corpus_dir() / "models" / name).read_bytes()


def _altered_away_from_samples(path: Path, config: ScanConfig) -> bytes:
    """The file's bytes with ``ALTERED_BYTES`` of its data section flipped where no sampled block lies."""
    result = audit_file(AuditTarget(str(path)), config=config.audit_config)
    assert result.header is not None and result.samples
    data = bytearray(path.read_bytes())
    taken = sorted((r.offset, r.offset + r.n_bytes) for r in result.samples)
    start = result.header.data_offset
    for begin, end in [*taken, (len(data), len(data))]:
        if begin - start >= ALTERED_BYTES:
            data[start : start + ALTERED_BYTES] = bytes(b ^ 0xFF for b in data[start : start + ALTERED_BYTES])
            return bytes(data)
        start = max(start, end)
    raise AssertionError(f"no gap of {ALTERED_BYTES} bytes between the samples of {path}")


def _rows(out: Path, run_id: str) -> dict[str, dict[str, Any]]:
    return {r["path"]: r for r in read_dataset(out, "mirror").to_pylist() if r["run_id"] == run_id}


@pytest.mark.slow
@pytest.mark.cluster
def test_a_local_mirror_altered_away_from_its_samples(
    client: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source, mirror = tmp_path / "source", tmp_path / "mirror"
    source.mkdir()
    mirror.mkdir()
    for name in ("tiny-llama-Q4_0.gguf", "tiny-llama-Q8_0.gguf", "tiny-llama-IQ4_NL.gguf"):
        shutil.copyfile(corpus_dir() / "models" / name, source / name)
    shutil.copyfile(source / "tiny-llama-Q4_0.gguf", mirror / "tiny-llama-Q4_0.gguf")
    config = ScanConfig().replace(roots=(str(mirror),), out=str(tmp_path / "out"), source=str(source))
    altered = _altered_away_from_samples(source / "tiny-llama-Q8_0.gguf", config)
    (mirror / "tiny-llama-Q8_0.gguf").write_bytes(altered)
    sizes = {p.name: p.stat().st_size for p in source.iterdir()}

    first = run_scan(config, client=client)
    rows = _rows(tmp_path / "out", first.run_id)
    assert {p: (r["status"], r["evidence"], r["code"]) for p, r in rows.items()} == {
        "tiny-llama-Q4_0.gguf": ("sampled_match", "fingerprint", None),
        "tiny-llama-Q8_0.gguf": ("sampled_match", "fingerprint", None),
        "tiny-llama-IQ4_NL.gguf": ("missing", "listing", "mirror.missing"),
    }
    q8 = rows["tiny-llama-Q8_0.gguf"]
    assert 0 < q8["sampled_bytes"] < q8["data_bytes"] < sizes["tiny-llama-Q8_0.gguf"]
    assert (
        f"the fingerprinted blocks cover {q8['sampled_bytes']} of the data section's {q8['data_bytes']} bytes"
        in q8["message"]
    )

    # --verify full: both sides of each same-size pair read whole, the bytes said before they are read.
    caplog.set_level(logging.WARNING, logger="gguf_audit.pipelines")
    full = config.replace(verify="full", incremental=True)
    second = run_scan(full, client=client)
    rows = _rows(tmp_path / "out", second.run_id)
    assert {p: (r["status"], r["evidence"]) for p, r in rows.items() if r["source_url"] and r["mirror_url"]} == {
        "tiny-llama-Q4_0.gguf": ("faithful", "sha256"),
        "tiny-llama-Q8_0.gguf": ("content_differs", "sha256"),
    }
    assert rows["tiny-llama-Q8_0.gguf"]["code"] == "mirror.content_differs"
    planned = 2 * (sizes["tiny-llama-Q4_0.gguf"] + sizes["tiny-llama-Q8_0.gguf"])
    assert f"reads 4 whole files to hash them, {planned} bytes" in caplog.text
    assert sum(r["bytes_read"] for r in rows.values()) == planned
    assert rows["tiny-llama-Q4_0.gguf"]["mirror_sha256"] == rows["tiny-llama-Q4_0.gguf"]["source_sha256"]

    # A second night with --verify full: nothing changed, nothing is read, the verdicts stand.
    caplog.clear()
    third = run_scan(full, client=client)
    again = _rows(tmp_path / "out", third.run_id)
    assert {p: r["status"] for p, r in again.items()} == {p: r["status"] for p, r in rows.items()}
    assert all(r["reused"] and r["bytes_read"] == 0 for r in again.values())
    assert "whole files" not in caplog.text

    # The source file changes (same size): only its side is read again; the copy's stored hash stands.
    changed = bytearray((source / "tiny-llama-Q4_0.gguf").read_bytes())
    changed[-1] ^= 0xFF
    (source / "tiny-llama-Q4_0.gguf").write_bytes(bytes(changed))
    fourth = run_scan(full, client=client)
    late = _rows(tmp_path / "out", fourth.run_id)
    q4 = late["tiny-llama-Q4_0.gguf"]
    assert (q4["status"], q4["bytes_read"]) == ("content_differs", sizes["tiny-llama-Q4_0.gguf"])
    assert "hashed on an earlier night" in q4["message"]


@pytest.fixture
def hub() -> Iterator[LocalHub]:
    with LocalHub() as hub:
        hub.add_org("org")
        hub.create_repo("org/llama")
        hub.add_files(
            "org/llama",
            {"llama-Q4_0.gguf": _model("tiny-llama-Q4_0.gguf"), "llama-Q8_0.gguf": _model("tiny-llama-Q8_0.gguf")},
        )
        yield hub


@pytest.mark.slow
@pytest.mark.cluster
def test_an_s3_mirror_without_checksums(
    client: Any, hub: LocalHub, moto: MotoS3Server, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto.endpoint_url)
    monkeypatch.setenv("AWS_REGION", moto.region)
    bucket = f"mirror-{uuid.uuid4().hex[:10]}"
    moto.make_bucket(bucket)
    s3 = moto.client()
    # One copy uploaded with its SHA-256 (proven by one HEAD), one altered and uploaded with no checksum.
    s3.put_object(
        Bucket=bucket, Key="m/llama/llama-Q4_0.gguf", Body=_model("tiny-llama-Q4_0.gguf"), ChecksumAlgorithm="SHA256"
    )
    config = ScanConfig().replace(
        roots=(f"s3://{bucket}/m",),
        out=str(tmp_path / "out"),
        storage_options={"hf": {"endpoint": hub.endpoint, "token": False}},
        source="hf://org",
    )
    path = tmp_path / "q8.gguf"
    path.write_bytes(_model("tiny-llama-Q8_0.gguf"))
    altered = _altered_away_from_samples(path, config)
    s3.put_object(Bucket=bucket, Key="m/llama/llama-Q8_0.gguf", Body=altered)

    first = run_scan(config, client=client)
    rows = _rows(tmp_path / "out", first.run_id)
    assert {p: r["status"] for p, r in rows.items()} == {
        "llama/llama-Q4_0.gguf": "faithful",
        "llama/llama-Q8_0.gguf": "sampled_match",
    }

    second = run_scan(config.replace(verify="full"), client=client)
    rows = _rows(tmp_path / "out", second.run_id)
    q4, q8 = rows["llama/llama-Q4_0.gguf"], rows["llama/llama-Q8_0.gguf"]
    assert (q8["status"], q8["evidence"], q8["code"]) == ("content_differs", "sha256", "mirror.content_differs")
    # The Hub gives the source's LFS sha256: only the copy is read, whole; the proven pair stays one HEAD.
    assert q8["bytes_read"] == len(altered) and "the Hub's LFS sha256" in q8["message"]
    assert (q4["status"], q4["requests"], q4["bytes_read"]) == ("faithful", 1, 0)

    # The next --verify full night: both sides unchanged, each pair carried; S3 is asked for its listing only.
    moto.reset_stats()
    third = run_scan(config.replace(verify="full", incremental=True), client=client)
    again = _rows(tmp_path / "out", third.run_id)
    assert {p: r["status"] for p, r in again.items()} == {p: r["status"] for p, r in rows.items()}
    assert all(r["reused"] and r["requests"] == r["bytes_read"] == 0 for r in again.values())
    assert [r.method for r in moto.requests] == ["GET"] and "list-type=2" in moto.requests[0].path
