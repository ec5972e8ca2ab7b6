"""The pure mirror judgement: which evidence decides, and when a differing copy is stale."""

from __future__ import annotations

from typing import Any

import pytest

from gguf_audit.checks.mirror import Evidence, MirrorSide, MirrorStatus, judge_pair, map_path
from gguf_audit.codes import CODES

A, B = "a" * 64, "b" * 64
OLD, NEW = "1" * 40, "2" * 40


def _mirror(**kw: Any) -> MirrorSide:
    return MirrorSide(**{"url": "s3://m/r/f.gguf", "size": 100, **kw})


def _source(**kw: Any) -> MirrorSide:
    return MirrorSide(**{"url": "hf://o/r/f.gguf", "size": 100, "revision": NEW, **kw})


@pytest.mark.parametrize(
    ("mirror", "source", "status", "evidence"),
    [
        (_mirror(sha256=A), _source(sha256=A), MirrorStatus.FAITHFUL, Evidence.SHA256),
        # The file did not change though the repository moved: faithful, not stale.
        (_mirror(sha256=A, revision=OLD), _source(sha256=A), MirrorStatus.FAITHFUL, Evidence.SHA256),
        (_mirror(sha256=A), _source(sha256=B), MirrorStatus.CONTENT_DIFFERS, Evidence.SHA256),
        (_mirror(sha256=A, revision=NEW), _source(sha256=B), MirrorStatus.CONTENT_DIFFERS, Evidence.SHA256),
        (_mirror(sha256=A, revision=OLD), _source(sha256=B), MirrorStatus.STALE, Evidence.SHA256),
        (_mirror(size=50), _source(sha256=B), MirrorStatus.SIZE_DIFFERS, Evidence.SIZE),
        (_mirror(size=50, revision=OLD), _source(), MirrorStatus.STALE, Evidence.SIZE),
        (
            _mirror(weights_fingerprint="w", metadata_fingerprint="m"),
            _source(sha256=A, weights_fingerprint="w", metadata_fingerprint="m"),
            MirrorStatus.SAMPLED_MATCH,
            Evidence.FINGERPRINT,
        ),
        (
            _mirror(weights_fingerprint="w", metadata_fingerprint="m2"),
            _source(sha256=A, weights_fingerprint="w", metadata_fingerprint="m"),
            MirrorStatus.CONTENT_DIFFERS,
            Evidence.FINGERPRINT,
        ),
        (_mirror(no_sha256="it keeps CRC32"), _source(sha256=A), MirrorStatus.UNDECIDED, Evidence.NONE),
        (_mirror(sha256=A), _source(error="HTTP 500"), MirrorStatus.UNDECIDED, Evidence.NONE),
        (None, _source(), MirrorStatus.MISSING, Evidence.LISTING),
        (_mirror(), None, MirrorStatus.EXTRA, Evidence.LISTING),
    ],
)
def test_judge_pair(
    mirror: MirrorSide | None, source: MirrorSide | None, status: MirrorStatus, evidence: Evidence
) -> None:
    verdict = judge_pair("r/f.gguf", mirror, source)
    assert (verdict.status, verdict.evidence) == (status, evidence)
    if status in (MirrorStatus.FAITHFUL, MirrorStatus.SAMPLED_MATCH):
        assert verdict.code is None and verdict.severity is None
    else:
        assert verdict.code == f"mirror.{status.value}" and verdict.code in CODES
        assert CODES[verdict.code].llama_cpp is None
    assert "\n" not in verdict.message and "r/f.gguf" in verdict.message


def test_messages_name_the_values() -> None:
    stale = judge_pair("r/f.gguf", _mirror(size=50, revision=OLD), _source())
    assert OLD[:12] in stale.message and NEW[:12] in stale.message and "50" in stale.message
    undecided = judge_pair("r/f.gguf", _mirror(no_sha256="it keeps CRC32"), _source())
    assert "CRC32" in undecided.message and "not an LFS file" in undecided.message
    with pytest.raises(ValueError, match="at least one side"):
        judge_pair("x", None, None)


def test_only_a_whole_file_hash_is_faithful() -> None:
    # Equal fingerprints prove the sampled blocks: a sampled match, with the share of the data section they cover.
    fingerprints = {"weights_fingerprint": "w", "metadata_fingerprint": "m"}
    sampled = judge_pair(
        "r/f.gguf", _mirror(**fingerprints), _source(**fingerprints, sampled_bytes=250, data_bytes=10_000)
    )
    assert (sampled.status, sampled.code) == (MirrorStatus.SAMPLED_MATCH, None)
    assert "cover 250 of the data section's 10000 bytes (2.5%)" in sampled.message
    assert "--verify full" in sampled.message
    # A hash computed from the whole file decides as the checksums do, and the message says where each came from.
    hashed = judge_pair(
        "r/f.gguf",
        _mirror(sha256=B, sha256_from="hashed: 100 bytes read", **fingerprints),
        _source(sha256=A, sha256_from="the Hub's LFS sha256", **fingerprints),
    )
    assert (hashed.status, hashed.evidence) == (MirrorStatus.CONTENT_DIFFERS, Evidence.SHA256)
    assert "hashed: 100 bytes read" in hashed.message and "the Hub's LFS sha256" in hashed.message


def test_map_path() -> None:
    assert map_path("hf/org/r/f.gguf", "hf/org/", "") == "r/f.gguf"
    assert map_path("r/f.gguf", "", "models/") == "models/r/f.gguf"
    assert map_path("other/f.gguf", "hf/", "") is None
