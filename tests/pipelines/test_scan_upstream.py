"""A scan with ``[checks] upstream``: each model against the upstream JSON beside it, on a real dask cluster."""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from corpus import corpus_dir
from pipeline_helpers import read_dataset

from gguf_audit.io.upstream import UpstreamConfig
from gguf_audit.pipelines.commands.scan import _add_arguments, _config_from_args
from gguf_audit.pipelines.config import ConfigError, ScanConfig, parse_config
from gguf_audit.pipelines.scan.run import run_scan
from gguf_audit.testing.builder import build_gguf, kv_str, tiny_llama_like

TEMPLATE = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}</s>{% endfor %}"

# The builder's tiny llama (repo/) and the corpus's split tiny llama (split/), as their upstreams say.
TINY_CONFIG = {"hidden_size": 256, "num_attention_heads": 2, "num_key_value_heads": 1, "num_hidden_layers": 2}
SPLIT_CONFIG = {"hidden_size": 256, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2}


def _json(path: Path, value: dict[str, Any]) -> None:
    path.write_text(json.dumps(value))


def _rel(url: str, root: Path) -> str:
    return url.split(f"{root}/", 1)[1]


def _collection(root: Path) -> None:
    kvs, tensors = tiny_llama_like()
    model = build_gguf([*kvs, kv_str("tokenizer.chat_template", TEMPLATE)], tensors)
    repo = root / "repo"
    repo.mkdir(parents=True)
    for name in ("m-Q4_K_M.gguf", "m-Q8_0.gguf"):
        (repo / name).write_bytes(model)
    # The upstream ends turns with another token and stops on id 3: a template warning and an EOS error.
    _json(repo / "config.json", {**TINY_CONFIG, "eos_token_id": 3, "max_position_embeddings": 256})
    upstream_template = TEMPLATE.replace("</s>", "<|end|>")
    _json(repo / "tokenizer_config.json", {"chat_template": upstream_template, "eos_token": "<0x0A>"})
    split = root / "split"
    split.mkdir()
    for shard in sorted((corpus_dir() / "split").glob("*.gguf")):
        shutil.copy(shard, split / shard.name)
    _json(split / "config.json", {**SPLIT_CONFIG, "max_position_embeddings": 2048, "eos_token_id": 2})
    lone = root / "lone"
    lone.mkdir()
    (lone / "x.gguf").write_bytes(build_gguf(kvs, tensors))


def test_scan_records_upstream_url_and_upstream_problems(client: Any, tmp_path: Path) -> None:
    root, out = tmp_path / "models", tmp_path / "out"
    _collection(root)
    config = ScanConfig(roots=(str(root),), out=str(out), upstream=True, samples=False, templates=False)
    result = run_scan(config, client=client)
    files = read_dataset(out, "files").filter(pc.equal(pc.field("run_id"), result.run_id)).to_pylist()
    by_name = {_rel(r["url"], root): r for r in files}
    where = {k: by_name[k]["url"].rsplit("/", 1)[0] for k in by_name}  # the listing's URL of each directory
    assert len(by_name) == 7
    assert where["repo/m-Q4_K_M.gguf"].endswith(str(root / "repo"))
    assert by_name["repo/m-Q4_K_M.gguf"]["upstream_url"] == where["repo/m-Q4_K_M.gguf"]
    assert by_name["repo/m-Q8_0.gguf"]["upstream_url"] == where["repo/m-Q4_K_M.gguf"]
    assert by_name["lone/x.gguf"]["upstream_url"] is None
    # Only the first shard carries the metadata compared.
    shards = sorted(k for k in by_name if k.startswith("split/"))
    assert [by_name[k]["upstream_url"] for k in shards] == [where[shards[0]], None, None, None]
    problems = read_dataset(out, "problems").filter(pc.equal(pc.field("run_id"), result.run_id)).to_pylist()
    upstream = sorted(
        (_rel(p["url"], root), p["code"], p["severity"]) for p in problems if p["code"].startswith("upstream.")
    )
    expected = []
    for name in ("repo/m-Q4_K_M.gguf", "repo/m-Q8_0.gguf"):
        expected += [
            (name, "upstream.eos_not_stop", "error"),
            (name, "upstream.stop_not_eog", "warning"),
            (name, "upstream.template_differs", "warning"),
        ]
    assert upstream == sorted(expected)
    assert by_name["repo/m-Q4_K_M.gguf"]["status"] == "error" and by_name["lone/x.gguf"]["status"] == "ok"


def test_upstream_settings_from_the_config_and_the_flags(tmp_path: Path) -> None:
    config = parse_config({"checks": {"upstream": True, "upstream_location": "s3://b/up"}})
    assert config.audit_config.upstream == UpstreamConfig(location="s3://b/up")
    assert ScanConfig().audit_config.upstream is None and "upstream" in ScanConfig().checks()
    with pytest.raises(ConfigError):
        parse_config({"checks": {"upstream": "yes"}})
    parser = argparse.ArgumentParser()
    _add_arguments(parser)
    flagged = _config_from_args(parser.parse_args(["root", "--upstream", str(tmp_path)]))
    assert flagged.upstream and flagged.audit_config.upstream == UpstreamConfig(location=str(tmp_path))
    auto = _config_from_args(parser.parse_args(["root", "--upstream-auto"]))
    assert auto.audit_config.upstream == UpstreamConfig()
    assert _config_from_args(parser.parse_args(["root"])).audit_config.upstream is None
