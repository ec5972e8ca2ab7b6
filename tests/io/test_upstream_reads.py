"""Finding and reading a file's upstream: beside it, through general.base_model / general.source links
(a local path, a local HTTP server, a Hub-style resolve URL), or a fixed place; cached and counted."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gguf_audit.audit import AuditConfig, AuditResources, FileAudit, audit_file
from gguf_audit.cli import main
from gguf_audit.io.upstream import UpstreamCache, UpstreamConfig
from gguf_audit.testing.builder import KV, build_gguf, kv_str, kv_u32, tiny_llama_like
from gguf_audit.testing.http import RangeHTTPServer

# What the builder's tiny llama was converted from.
CONFIG: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 256,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "num_hidden_layers": 2,
    "max_position_embeddings": 256,
    "rope_theta": 10000.0,
    "vocab_size": 32,
    "bos_token_id": 1,
    "eos_token_id": 2,
}
TOKENIZER_CONFIG: dict[str, Any] = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
UPSTREAM = AuditConfig(templates=False, upstream=UpstreamConfig())
HEADER_ONLY = AuditConfig(templates=False)


def _model(*extra: KV) -> bytes:
    kvs, tensors = tiny_llama_like()
    return build_gguf([*kvs, *extra], tensors)


def _files(**changes: Any) -> dict[str, bytes]:
    """config.json and tokenizer_config.json, with config.json ``changes``."""
    return {
        "config.json": json.dumps({**CONFIG, **changes}).encode(),
        "tokenizer_config.json": json.dumps(TOKENIZER_CONFIG).encode(),
    }


def _write(directory: Path, files: dict[str, bytes]) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (directory / name).write_bytes(data)


def _codes(audit: FileAudit) -> list[str]:
    return [f.code for f in audit.findings if f.code.startswith("upstream.")]


@pytest.fixture
def server() -> Iterator[RangeHTTPServer]:
    with RangeHTTPServer() as srv:
        yield srv


def test_matching_upstream_beside_the_file_gives_no_finding_and_is_recorded(tmp_path: Path) -> None:
    _write(tmp_path, {"m.gguf": _model(), **_files()})
    path = str(tmp_path / "m.gguf")
    audit = audit_file(path, config=UPSTREAM)
    plain = audit_file(path, config=HEADER_ONLY)
    assert _codes(audit) == [] and audit.upstream_url == str(tmp_path)
    # config.json, tokenizer_config.json, then generation_config.json, chat_template.jinja, tokenizer.json
    assert audit.io.requests == plain.io.requests + 5
    assert plain.upstream_url is None


def test_eos_differing_from_the_upstream_beside_the_file(tmp_path: Path) -> None:
    _write(tmp_path, {"m.gguf": _model(), **_files(eos_token_id=3)})
    _write(tmp_path, {"generation_config.json": json.dumps({"eos_token_id": [3, 4]}).encode()})
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"eos_token": "<0x0A>"}))
    audit = audit_file(str(tmp_path / "m.gguf"), config=UPSTREAM)
    assert "upstream.eos_not_stop" in _codes(audit) and audit.status == "error"


def test_malformed_and_oversized_upstream_files_are_findings_not_crashes(tmp_path: Path) -> None:
    _write(tmp_path, {"m.gguf": _model(), "config.json": b'{"hidden_size": 256,', "tokenizer.json": b"{}" * 64})
    _write(tmp_path, {"generation_config.json": b"[1, 2]", "tokenizer_config.json": b"\xff\xfe{}"})
    config = AuditConfig(templates=False, upstream=UpstreamConfig(max_tokenizer_bytes=16))
    audit = audit_file(str(tmp_path / "m.gguf"), config=config)
    assert audit.header is not None and audit.upstream_url == str(tmp_path)
    messages = sorted(f.message for f in audit.findings if f.code == "upstream.unreadable")
    assert len(messages) == 4
    assert any("config.json: not valid JSON" in m for m in messages)
    assert any("generation_config.json: not a JSON object (a list)" in m for m in messages)
    assert any("tokenizer.json: larger than the 16-byte read limit" in m for m in messages)
    assert any("tokenizer_config.json: not UTF-8" in m for m in messages)


def test_no_upstream_anywhere_costs_two_requests_and_records_nothing(tmp_path: Path) -> None:
    _write(tmp_path, {"m.gguf": _model()})
    audit = audit_file(str(tmp_path / "m.gguf"), config=UPSTREAM)
    plain = audit_file(str(tmp_path / "m.gguf"), config=HEADER_ONLY)
    assert audit.upstream_url is None and _codes(audit) == []
    assert audit.io.requests == plain.io.requests + 2


def test_base_model_repo_url_on_a_local_http_server(tmp_path: Path, server: RangeHTTPServer) -> None:
    for name, data in _files(rope_theta=500000.0).items():
        server.put(f"org/base/{name}", data)
    url = server.url_for("org/base")
    linked = _model(kv_u32("general.base_model.count", 1), kv_str("general.base_model.0.repo_url", url))
    _write(tmp_path, {"m.gguf": linked})
    audit = audit_file(str(tmp_path / "m.gguf"), config=UPSTREAM)
    assert audit.upstream_url == url.rstrip("/")
    assert _codes(audit) == ["upstream.rope_freq_base"]
    fetched = sorted(r.path for r in server.requests if r.method == "GET")
    assert "/org/base/config.json" in fetched and "/org/base/generation_config.json" in fetched


def test_source_repository_resolves_through_the_hub_endpoint(
    tmp_path: Path, server: RangeHTTPServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_ENDPOINT", server.base_url)
    for name, data in _files(num_hidden_layers=32).items():
        server.put(f"org/base/resolve/main/{name}", data)
    _write(tmp_path, {"m.gguf": _model(kv_str("general.source.huggingface.repository", "org/base"))})
    audit = audit_file(str(tmp_path / "m.gguf"), config=UPSTREAM)
    assert audit.upstream_url == f"{server.base_url}/org/base/resolve/main"
    assert _codes(audit) == ["upstream.hparam_mismatch"]
    # A Hub page URL of the same repository goes to the same place.
    _write(tmp_path / "b", {"m.gguf": _model(kv_str("general.source.url", f"{server.base_url}/org/base/tree/main"))})
    assert audit_file(str(tmp_path / "b" / "m.gguf"), config=UPSTREAM).upstream_url == audit.upstream_url


def test_linked_local_path_and_an_unreachable_link(tmp_path: Path) -> None:
    _write(tmp_path / "base", _files(max_position_embeddings=4096))
    dead = kv_str("general.base_model.0.repo_url", "http://127.0.0.1:9/nowhere")
    local = kv_str("general.base_model.1.repo_url", str(tmp_path / "base"))
    _write(tmp_path / "q", {"m.gguf": _model(kv_u32("general.base_model.count", 2), dead, local)})
    audit = audit_file(str(tmp_path / "q" / "m.gguf"), config=UPSTREAM)
    assert audit.upstream_url == str(tmp_path / "base")
    assert _codes(audit) == ["upstream.context_length"]
    unreachable = _model(kv_u32("general.base_model.count", 1), dead)
    _write(tmp_path / "r", {"m.gguf": unreachable})
    audit = audit_file(str(tmp_path / "r" / "m.gguf"), config=UPSTREAM)
    assert audit.upstream_url is None and _codes(audit) == [] and audit.status == "ok"


def test_a_fixed_location_is_the_only_place_looked(tmp_path: Path) -> None:
    _write(tmp_path / "fixed", _files(num_attention_heads=8))
    _write(tmp_path / "m", {"m.gguf": _model(), **_files()})
    config = AuditConfig(templates=False, upstream=UpstreamConfig(location=str(tmp_path / "fixed")))
    audit = audit_file(str(tmp_path / "m" / "m.gguf"), config=config)
    assert audit.upstream_url == str(tmp_path / "fixed") and _codes(audit) == ["upstream.hparam_mismatch"]


def test_a_shared_cache_reads_a_directory_upstream_once(server: RangeHTTPServer) -> None:
    for name, data in {"a.gguf": _model(), "b.gguf": _model(), **_files()}.items():
        server.put(f"repo/{name}", data)
    cache = UpstreamCache()
    first = audit_file(server.url_for("repo/a.gguf"), config=UPSTREAM, resources=AuditResources(upstream_cache=cache))
    second = audit_file(server.url_for("repo/b.gguf"), config=UPSTREAM, resources=AuditResources(upstream_cache=cache))
    gets = [r.path for r in server.requests if r.method == "GET"]
    assert gets.count("/repo/config.json") == 1 and gets.count("/repo/tokenizer_config.json") == 1
    assert first.upstream_url == second.upstream_url == server.url_for("repo").rstrip("/")
    assert first.io.requests == second.io.requests + 5


def test_inspect_upstream_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _write(tmp_path / "up", _files(rope_theta=1e6))
    _write(tmp_path, {"m.gguf": _model()})
    status = main(["inspect", str(tmp_path / "m.gguf"), "--upstream", str(tmp_path / "up"), "--json"])
    out = json.loads(capsys.readouterr().out)
    assert status == 1 and out["upstream_url"] == str(tmp_path / "up")
    assert [p["code"] for p in out["problems"] if p["code"].startswith("upstream.")] == ["upstream.rope_freq_base"]
    assert main(["inspect", str(tmp_path / "m.gguf"), "--upstream-auto"]) == 0
    assert "upstream:" not in capsys.readouterr().out  # nothing beside the file


def test_inspect_reads_no_upstream_unless_asked(server: RangeHTTPServer) -> None:
    for name, data in {"m.gguf": _model(), **_files()}.items():
        server.put(f"repo/{name}", data)
    assert main(["inspect", server.url_for("repo/m.gguf")]) == 0
    assert not [r for r in server.requests if r.path.endswith(".json")]


def test_base_model_repo_url_on_the_local_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gguf_audit.testing.hub import LocalHub

    with LocalHub() as hub:
        monkeypatch.setenv("HF_ENDPOINT", hub.endpoint)
        hub.add_org("meta")
        hub.create_repo("meta/base")
        hub.add_files("meta/base", {**_files(eos_token_id=[2, 9]), "generation_config.json": b'{"eos_token_id": 2}'})
        page = f"{hub.endpoint}/meta/base"  # as convert_hf_to_gguf.py writes general.base_model.0.repo_url
        linked = _model(kv_u32("general.base_model.count", 1), kv_str("general.base_model.0.repo_url", page))
        _write(tmp_path, {"m.gguf": linked})
        audit = audit_file(str(tmp_path / "m.gguf"), config=UPSTREAM)
        assert audit.upstream_url == f"{page}/resolve/main"
        # config.json stops on 9 too (a byte token here), which the GGUF does not end on.
        assert _codes(audit) == ["upstream.stop_not_eog"]
        assert hub.resolve_requests >= 2
