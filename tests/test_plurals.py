"""Summary lines count in the right number: ``1 key, 1 tensor``, ``1 request``, ``2 tensors``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gguf_audit.cli import main
from gguf_audit.report.format import counted
from gguf_audit.testing.builder import Tensor, build_gguf, kv_str


def test_counted() -> None:
    assert [counted(n, "file") for n in (0, 1, 2)] == ["0 files", "1 file", "2 files"]
    assert counted(1, "listed entry", "listed entries") == "1 listed entry"
    assert counted(3, "listed entry", "listed entries") == "3 listed entries"


def test_inspect_of_a_one_key_one_tensor_file_says_so(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "one.gguf"
    path.write_bytes(build_gguf([kv_str("general.name", "one")], [Tensor("t", [32], 0)]))
    main(["inspect", str(path)])
    text = capsys.readouterr().out
    assert "1 key, 1 tensor" in text, text
    assert re.search(r"^io: (1 request|[02-9]\d* requests), ", text, re.M), text
    two = tmp_path / "two.gguf"
    two.write_bytes(build_gguf([kv_str("general.name", "a"), kv_str("general.type", "model")], [Tensor("t", [32], 0)]))
    main(["inspect", str(two)])
    assert "2 keys, 1 tensor" in capsys.readouterr().out
