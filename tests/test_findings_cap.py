"""Repeated findings are capped per code and file, with one row saying how many more; outputs stay bounded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gguf_audit.cli import main
from gguf_audit.findings import FINDINGS_PER_CODE, Code, Finding, LeftOut, Severity, cap_findings, finding
from gguf_audit.testing.builder import build_gguf, kv_u8, tiny_llama_like

EMPTY_KEYS = FINDINGS_PER_CODE + 2_000
"""Within the parser's key-value read budget (Limits.max_kv_read): past it, reading stops at the first empty key."""


@pytest.fixture(scope="module")
def empty_keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    kvs, tensors = tiny_llama_like()
    path = tmp_path_factory.mktemp("cap") / "empty-keys.gguf"
    path.write_bytes(build_gguf([*kvs, *[kv_u8("", 0)] * EMPTY_KEYS], tensors))
    return path


def test_json_keeps_the_first_findings_of_a_code_and_says_how_many_more(
    empty_keys: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["inspect", str(empty_keys), "--json"]) == 1
    raw = capsys.readouterr().out
    rows = [p for p in json.loads(raw)["problems"] if p["code"] == "header.empty_key"]
    assert len(rows) == FINDINGS_PER_CODE + 1
    assert rows[-1]["severity"] == "error"
    assert rows[-1]["message"].startswith(f"{EMPTY_KEYS - FINDINGS_PER_CODE:,} more header.empty_key findings")
    assert len(raw) < 400_000


@pytest.mark.parametrize("fmt", ["text", "jsonl", "sarif"])
def test_every_inspect_format_stays_bounded(empty_keys: Path, capsys: pytest.CaptureFixture[str], fmt: str) -> None:
    assert main(["inspect", str(empty_keys), "--format", fmt]) == 1
    out = capsys.readouterr().out
    assert "2,000 more header.empty_key findings left out" in out
    # About a kilobyte a result in SARIF: 5,000 findings uncapped were 4.5 MB.
    assert len(out) < 1_500 * FINDINGS_PER_CODE


def test_capping_twice_adds_up_what_was_left_out() -> None:
    def empty(n: int) -> list[Finding]:
        return [finding(Code.HEADER_EMPTY_KEY, f"empty key {i}") for i in range(n)]

    first = cap_findings(empty(5), limit=3)
    assert [type(f) for f in first] == [type(first[0])] * 3 + [LeftOut]
    again = cap_findings([*first, *empty(4), finding(Code.HEADER_EMPTY_KEY, "x", severity=Severity.INFO)], limit=3)
    [left] = [f for f in again if isinstance(f, LeftOut)]
    assert len(again) == 4 and left.left_out == 2 + 4 + 1 and left.severity is Severity.ERROR
    assert left.message.startswith("7 more header.empty_key findings left out: the first 3")
