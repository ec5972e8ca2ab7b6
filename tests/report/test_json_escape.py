"""``--json`` output never carries a raw character the text report escapes, yet reads back as the same string."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gguf_audit.cli import main
from gguf_audit.report.format import escape
from gguf_audit.report.json import dumps
from gguf_audit.testing.builder import build_gguf, kv_str, tiny_llama_like

HOSTILE = "a\x9b31mb\u202ec\u2028d\u2029e\U000e0041f\x1b[2Jg\u200bh\x85i"
RAW = ("\x9b", "\u202e", "\u2028", "\u2029", "\U000e0041", "\x1b", "\u200b", "\x85")


def test_dumps_escapes_and_round_trips() -> None:
    text = dumps({"k": HOSTILE, HOSTILE: [HOSTILE], "plain": "é ü 中 🙂"})
    assert not any(ch in text for ch in RAW)
    assert "\\u009b" in text and "\\udb40\\udc41" in text  # the 8-bit CSI; a tag character as a surrogate pair
    assert "é ü 中 🙂" in text  # readable Unicode stays readable
    assert json.loads(text) == {"k": HOSTILE, HOSTILE: [HOSTILE], "plain": "é ü 中 🙂"}


def test_text_escape_covers_the_same_characters() -> None:
    shown = escape(HOSTILE)
    assert not any(ch in shown for ch in RAW)
    assert "\\x9b" in shown and "\\u2028" in shown and "\\U000e0041" in shown


@pytest.mark.parametrize("as_json", [True, False])
def test_inspect_output_is_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str], as_json: bool) -> None:
    kvs, tensors = tiny_llama_like()
    kvs = [kv_str("general.name", HOSTILE) if kv.key == "general.name" else kv for kv in kvs]
    path = tmp_path / "hostile.gguf"
    path.write_bytes(build_gguf([*kvs, kv_str(f"x.{HOSTILE}", HOSTILE)], tensors))
    main(["inspect", str(path), *(["--json"] if as_json else [])])
    out = capsys.readouterr().out
    assert not any(ch in out for ch in RAW)
    if as_json:
        strings: list[str] = []

        def walk(value: object) -> None:
            if isinstance(value, str):
                strings.append(value)
            elif isinstance(value, dict):
                for k, v in value.items():
                    walk(k)
                    walk(v)
            elif isinstance(value, list):
                for v in value:
                    walk(v)

        walk(json.loads(out))
        assert HOSTILE in strings  # the value itself reads back intact
