"""Shard-file names: parsing ``-NNNNN-of-MMMMM.gguf``, model ids and grouping files by model (pure)."""

from __future__ import annotations

import pytest

from gguf_audit.format.shard_names import ShardName, group_models, model_id_for, parse_shard_name


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("s3://b/m/llama-Q4_K_M-00002-of-00005.gguf", ShardName("s3://b/m/llama-Q4_K_M", 2, 5)),
        ("/data/x-00001-of-00001.gguf", ShardName("/data/x", 1, 1)),
        ("https://h/a/m-00003-of-00004.gguf?X-Amz-Signature=abc", ShardName("https://h/a/m", 3, 4)),
        ("hf://org/repo/q8/m-00010-of-00012.gguf", ShardName("hf://org/repo/q8/m", 10, 12)),
        ("s3://b/m.gguf", None),
        ("s3://b/m-0001-of-0002.gguf", None),  # four digits: not llama.cpp's split naming
        ("s3://b/m-00001-of-00002.bin", None),
        ("s3://b/-00001-of-00002.gguf", None),
        ("s3://b/dir/-00001-of-00002.gguf", None),
    ],
)
def test_parse_shard_name(url: str, expected: ShardName | None) -> None:
    assert parse_shard_name(url) == expected
    if expected is not None:
        model_id, index, count = parse_shard_name(url)  # type: ignore[misc]
        assert (model_id, index, count) == tuple(expected)


def test_model_ids() -> None:
    assert model_id_for("s3://b/m/a.gguf") == "s3://b/m/a"
    assert model_id_for("s3://b/m/a-00001-of-00002.gguf") == "s3://b/m/a"
    assert model_id_for("https://h/a.gguf?sig=1") == "https://h/a"
    assert model_id_for("file:///x/readme") == "file:///x/readme"


def test_group_models_keeps_folders_and_kinds_apart() -> None:
    urls = [
        "s3://b/x/m-00002-of-00002.gguf",
        "s3://b/x/m-00001-of-00002.gguf",
        "s3://b/y/m-00001-of-00002.gguf",
        "s3://b/x/m.gguf",  # a single file whose id equals the shard set's
        "s3://b/x/n.gguf",
        "s3://b/x/n.gguf",  # listed twice
    ]
    assert group_models(urls) == {
        "s3://b/x/m": ["s3://b/x/m-00001-of-00002.gguf", "s3://b/x/m-00002-of-00002.gguf"],
        "s3://b/y/m": ["s3://b/y/m-00001-of-00002.gguf"],
        "s3://b/x/m.gguf": ["s3://b/x/m.gguf"],
        "s3://b/x/n": ["s3://b/x/n.gguf"],
    }
