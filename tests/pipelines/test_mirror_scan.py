"""A mirror on S3 (moto, its endpoint from ``AWS_ENDPOINT_URL``) of a LocalHub organisation, over two nights.

The real huggingface_hub client lists the source; s3fs lists and HEADs the
mirror. One copy is missing, one extra, one truncated, one at a stale
revision; the two that match are decided one by the checksums (an object
uploaded with its SHA-256: faithful) and one by the fingerprints (an object
with only its default CRC32: a sampled match), and cost nothing on the
second night.
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from corpus import corpus_dir
from pipeline_helpers import read_dataset

from gguf_audit.cli import main
from gguf_audit.pipelines.config import ScanConfig, parse_config
from gguf_audit.pipelines.scan.mirror import MirrorError, check_mirror_config, s3_checksum
from gguf_audit.pipelines.scan.run import run_scan
from gguf_audit.testing.hub import LocalHub
from gguf_audit.testing.s3 import MotoS3Server


def _model(name: str) -> bytes:
    return (corpus_dir() / "models" / name).read_bytes()


@pytest.fixture
def endpoint_env(moto: MotoS3Server, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto.endpoint_url)
    monkeypatch.setenv("AWS_REGION", moto.region)
    return moto.endpoint_url


@pytest.fixture
def hub() -> Iterator[LocalHub]:
    with LocalHub() as hub:
        hub.add_org("org")
        hub.create_repo("org/llama")
        hub.add_files(
            "org/llama",
            {
                "llama-Q4_0.gguf": _model("tiny-llama-Q4_0.gguf"),
                "llama-Q8_0.gguf": _model("tiny-llama-Q8_0.gguf"),
                "llama-Q4_K_M.gguf": _model("tiny-llama-Q4_K_M.gguf"),
                "llama-IQ4_NL.gguf": _model("tiny-llama-IQ4_NL.gguf"),
                "README.md": b"# llama\n",
            },
        )
        hub.create_repo("org/moving")
        hub.add_files("org/moving", {"m.gguf": _model("tiny-llama-Q4_0.gguf")})
        yield hub


def _put(moto: MotoS3Server, bucket: str, key: str, data: bytes, revision: str | None, sha256: bool) -> None:
    extra: dict[str, Any] = {"ChecksumAlgorithm": "SHA256"} if sha256 else {}
    metadata = {"hf-revision": revision} if revision else {}
    moto.client().put_object(Bucket=bucket, Key=key, Body=data, Metadata=metadata, **extra)


def _rows(out: Path, run_id: str) -> dict[str, dict[str, Any]]:
    return {r["path"]: r for r in read_dataset(out, "mirror").to_pylist() if r["run_id"] == run_id}


@pytest.mark.slow
@pytest.mark.cluster
def test_a_mirror_of_a_hub_organisation(
    client: Any,
    hub: LocalHub,
    moto: MotoS3Server,
    endpoint_env: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bucket = f"mirror-{uuid.uuid4().hex[:10]}"
    moto.make_bucket(bucket)
    llama, moving_before = hub.head("org/llama"), hub.head("org/moving")
    _put(moto, bucket, "models/llama/llama-Q4_0.gguf", _model("tiny-llama-Q4_0.gguf"), llama, sha256=True)
    _put(moto, bucket, "models/llama/llama-Q8_0.gguf", _model("tiny-llama-Q8_0.gguf"), None, sha256=False)
    cut = _model("tiny-llama-Q4_K_M.gguf")
    _put(moto, bucket, "models/llama/llama-Q4_K_M.gguf", cut[: len(cut) // 2], llama, sha256=True)
    _put(moto, bucket, "models/llama/old-Q2_K.gguf", _model("tiny-llama-Q4_0.gguf"), None, sha256=True)
    _put(moto, bucket, "models/moving/m.gguf", _model("tiny-llama-Q4_0.gguf"), moving_before, sha256=True)
    moving_now = hub.add_files("org/moving", {"m.gguf": _model("tiny-llama-Q8_0.gguf")})  # the source moves on

    out = tmp_path / "out"
    config = ScanConfig().replace(
        roots=(f"s3://{bucket}/models",),
        out=str(out),
        storage_options={"hf": {"endpoint": hub.endpoint, "token": False}},
        source="hf://org",
        retries=1,
        backoff_s=0.01,
    )
    first = run_scan(config, client=client)
    rows = _rows(out, first.run_id)
    assert {p: (r["status"], r["evidence"], r["code"]) for p, r in rows.items()} == {
        "llama/llama-Q4_0.gguf": ("faithful", "sha256", None),
        "llama/llama-Q8_0.gguf": ("sampled_match", "fingerprint", None),
        "llama/llama-Q4_K_M.gguf": ("size_differs", "size", "mirror.size_differs"),
        "llama/llama-IQ4_NL.gguf": ("missing", "listing", "mirror.missing"),
        "llama/old-Q2_K.gguf": ("extra", "listing", "mirror.extra"),
        "moving/m.gguf": ("stale", "size", "mirror.stale"),
    }
    assert first.mirror == {
        "faithful": 1,
        "sampled_match": 1,
        "size_differs": 1,
        "missing": 1,
        "extra": 1,
        "stale": 1,
    }
    stale = rows["moving/m.gguf"]
    assert stale["mirror_revision"] == moving_before and stale["source_revision"] == moving_now
    assert moving_before[:12] in stale["message"] and moving_now[:12] in stale["message"]
    assert str(len(cut) // 2) in rows["llama/llama-Q4_K_M.gguf"]["message"]
    assert {r["source_revision"] for p, r in rows.items() if p.startswith("llama/") and r["source_url"]} == {llama}
    q4 = rows["llama/llama-Q4_0.gguf"]
    assert q4["mirror_sha256"] == q4["source_sha256"] == hub.file("org/llama", "llama-Q4_0.gguf").sha256
    q8 = rows["llama/llama-Q8_0.gguf"]
    assert q8["mirror_sha256"] is None and q8["source_sha256"] is not None
    assert q8["mirror_weights_fingerprint"] == q8["source_weights_fingerprint"] is not None
    # Only the fingerprint-decided pair read the source (header and samples); the checksum-decided one a HEAD only.
    assert q8["requests"] > 1 and q8["bytes_read"] > 0
    assert (q4["requests"], q4["bytes_read"]) == (1, 0)
    assert all(r["judged_run_id"] == first.run_id and not r["reused"] for r in rows.values())
    run = read_dataset(out, "runs").to_pylist()[0]
    assert run["mirror_rows"] == 6 and run["mirror_version"] == 0

    # The second night: nothing changed on either side, so no pair is asked again on either side.
    moto.reset_stats()
    hub.reset_stats()
    second = run_scan(config.replace(incremental=True), client=client)
    again = _rows(out, second.run_id)
    assert {p: r["status"] for p, r in again.items()} == {p: r["status"] for p, r in rows.items()}
    assert all(r["reused"] and r["requests"] == 0 and r["judged_run_id"] == first.run_id for r in again.values())
    assert hub.resolve_requests == 0
    # The source's listing: the organisation's model page, no tree (both repositories are at known commits).
    assert [r.path.split("?")[0] for r in hub.requests] == ["/api/models"]
    assert [r.method for r in moto.requests] == ["GET"] and "list-type=2" in moto.requests[0].path

    # A third night: the source replaces a faithful file and the mirror does not follow. Only that pair is
    # asked again (its copy's HEAD); the unchanged ones stay carried though the repository's revision moved.
    replaced = hub.add_files("org/llama", {"llama-Q4_0.gguf": _model("tiny-llama-Q6_K.gguf")})
    moto.reset_stats()
    hub.reset_stats()
    third = run_scan(config.replace(incremental=True), client=client)
    late = _rows(out, third.run_id)
    assert (late["llama/llama-Q4_0.gguf"]["status"], late["llama/llama-Q4_0.gguf"]["source_revision"]) == (
        "stale",
        replaced,
    )
    assert [p for p, r in late.items() if not r["reused"]] == ["llama/llama-Q4_0.gguf"]
    assert late["llama/llama-Q8_0.gguf"]["source_revision"] == replaced  # carried, at the source's new commit
    assert [r.method for r in moto.requests] == ["GET", "HEAD"]
    assert hub.resolve_requests == 0
    # One tree listed again, the moved repository's; the other stays known at its commit.
    trees = [r.path for r in hub.requests if "/tree/" in r.path]
    assert len(trees) == 1 and "/api/models/org/llama/tree/" in trees[0]

    # diff alerts on the copy that stopped being faithful; the HTML report has the mirror's section.
    assert main(["diff", str(out)]) == 1
    said = capsys.readouterr().out
    assert "ALERT llama/llama-Q4_0.gguf: faithful -> stale" in said
    assert "stopped being faithful to their source" in said
    page = tmp_path / "night.html"
    assert main(["report", str(out), "--html", str(page)]) == 0
    html = page.read_text()
    assert 'id="s-mirror"' in html and "mirror.stale" in html and "mirror.missing" in html


def test_s3_checksums_compared_only_when_full_object() -> None:
    digest = "RPg1RJSlugO6F5Ko0+nFNMR6kYGYD956P0SwbvKufH8="
    whole = hashlib.sha256(b"x" * 1000).hexdigest()
    assert s3_checksum({"ChecksumSHA256": digest, "ETag": '"398533d48111e9f664b1f64cb10c4b63"'}) == (whole, None)
    sha, why = s3_checksum({"ChecksumSHA256": digest, "ETag": '"48c69e17514b3ceece1cf660cc1817e6-3"'})
    assert sha is None and why is not None and "composite" in why
    sha, why = s3_checksum({"ChecksumSHA256": digest + "-3", "ChecksumType": "COMPOSITE"})
    assert sha is None and why is not None and "composite" in why
    sha, why = s3_checksum({"ChecksumCRC32": "O0HJ5g==", "ETag": '"398533d48111e9f664b1f64cb10c4b63"'})
    assert sha is None and why is not None and "CRC32" in why and "MD5" in why
    sha, _ = s3_checksum({"ChecksumSHA256": digest, "ChecksumType": "FULL_OBJECT", "ETag": '"x-2"'})
    assert sha is not None and len(sha) == 64


def test_mirror_config() -> None:
    config = parse_config(
        {"scan": {"roots": ["s3://b/m"]}, "mirror": {"source": "hf://org", "mirror_prefix": "hf/", "source_prefix": ""}}
    )
    assert (config.mirror.source, config.mirror.mirror_prefix, config.mirror.source_prefix) == ("hf://org", "hf/", "")
    check_mirror_config(config)
    with pytest.raises(MirrorError, match="exactly one root"):
        check_mirror_config(config.replace(roots=("s3://b/m", "s3://b/n")))


@pytest.mark.slow
@pytest.mark.cluster
def test_a_source_that_cannot_be_listed_leaves_every_path_undecided(
    client: Any,
    hub: LocalHub,
    moto: MotoS3Server,
    endpoint_env: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    bucket = f"mirror-{uuid.uuid4().hex[:10]}"
    moto.make_bucket(bucket)
    _put(moto, bucket, "models/llama/llama-Q4_0.gguf", _model("tiny-llama-Q4_0.gguf"), None, sha256=True)
    out = tmp_path / "out"
    root = f"s3://{bucket}/models"
    options = json.dumps({"hf": {"endpoint": hub.endpoint, "token": False}})
    common = ["--out", str(out), "--scheduler", client.scheduler.address, "--storage-options", options]
    # The source names a repository that does not exist: its listing fails, and no copy is called extra.
    assert main(["scan", root, *common, "--source", "hf://org/gone", "--no-samples", "--no-progress"]) == 0
    assert "mirror against its source: 1 undecided" in capsys.readouterr().out
    [row] = read_dataset(out, "mirror").to_pylist()
    assert (row["path"], row["status"], row["code"]) == ("llama/llama-Q4_0.gguf", "undecided", "mirror.undecided")
    assert "the source side failed: io." in row["message"] and "org/gone" in row["message"]
    # A source that lists nothing (an empty folder) or names one file is no source: undecided, never extra.
    (tmp_path / "empty").mkdir()
    for source in (str(tmp_path / "empty"), f"{hub.endpoint}/org/llama/resolve/main/llama-Q4_0.gguf"):
        assert main(["scan", root, *common, "--source", source, "--no-samples", "--no-progress"]) == 0
        assert "mirror against its source: 1 undecided" in capsys.readouterr().out, source
    # Two roots and a source: a usage error, one line, before anything is listed.
    assert main(["scan", root, str(tmp_path), *common, "--source", "hf://org", "--no-progress"]) == 2
    err = capsys.readouterr().err.strip()
    assert "needs exactly one root" in err and "\n" not in err
