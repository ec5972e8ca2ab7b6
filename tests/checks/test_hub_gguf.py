"""The Hub's gguf card against a header: each disagreeing field named, split shards' counts left alone."""

from __future__ import annotations

from corpus import corpus_dir

from gguf_audit.audit import AuditConfig, AuditTarget, audit_file
from gguf_audit.checks.hub_gguf import HubGGUF, check_hub_gguf, parse_hub_gguf
from gguf_audit.format.model import Header
from gguf_audit.format.parser import parse_header
from gguf_audit.testing.hub_gguf import gguf_card


def _header(rel: str) -> Header:
    data = (corpus_dir() / rel).read_bytes()
    header = parse_header(data, len(data))
    assert isinstance(header, Header)
    return header


def test_the_card_read_from_a_file_agrees_with_it_and_a_changed_one_does_not() -> None:
    rel = "models/tiny-llama-Q8_0.gguf"
    card = gguf_card({"m.gguf": (corpus_dir() / rel).read_bytes()})
    assert card is not None and {"total", "architecture", "context_length"} <= set(card)
    header = _header(rel)
    hub = parse_hub_gguf(card)
    assert hub is not None and list(check_hub_gguf(header, hub, "hf://o/r/m.gguf")) == []
    wrong = parse_hub_gguf({**card, "architecture": "qwen2", "chat_template": "{{ other }}"})
    assert wrong is not None
    messages = [f.message for f in check_hub_gguf(header, wrong, "hf://o/r/m.gguf")]
    assert messages[0] == "hf://o/r/m.gguf: the Hub's gguf card says architecture 'qwen2', the file's header 'llama'"
    assert len(messages) == (2 if "chat_template" in card else 1)
    assert parse_hub_gguf(None) is None and parse_hub_gguf("x") is None


def test_a_shard_holds_part_of_the_parameters() -> None:
    header = _header("split/tiny-llama-Q4_K_M-00002-of-00004.gguf")
    hub = parse_hub_gguf({"total": 10**9})
    assert hub is not None and list(check_hub_gguf(header, hub, "u")) == []


def test_the_card_travels_with_the_target() -> None:
    """A listing fact is part of what the file is: audit_file compares it, after the file's own checks."""
    path = corpus_dir() / "models/tiny-llama-Q8_0.gguf"
    config = AuditConfig(templates=False)
    plain = audit_file(path, config=config)
    wrong = audit_file(
        AuditTarget(str(path), display_url="hf://o/r/m.gguf", hub_gguf=HubGGUF(architecture="qwen2")), config=config
    )
    assert [f.code for f in wrong.findings] == [*(f.code for f in plain.findings), "hub.gguf_mismatch"]
    assert wrong.findings[-1].message.startswith("hf://o/r/m.gguf: the Hub's gguf card says architecture 'qwen2'")
