"""A 16 MiB tensor name in a scanned collection: kilobytes of JSONL, SARIF, HTML and table cells, not gigabytes."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from pipeline_helpers import read_dataset

from gguf_audit.bounded import NAME_LIMIT
from gguf_audit.cli import main
from gguf_audit.testing.builder import Tensor, build_gguf, tiny_llama_like

_LONG = 16 << 20


def _with_first_name(path: Path, name: str) -> None:
    kvs, tensors = tiny_llama_like()
    first = tensors[0]
    tensors[0] = Tensor(name=name, dims=first.dims, ggml_type=first.ggml_type)
    path.write_bytes(build_gguf(kvs, tensors))


@pytest.mark.slow
def test_a_16_mib_name_gives_small_scan_outputs(
    client: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "in"
    root.mkdir()
    _with_first_name(root / "long.gguf", "blk." + "A" * _LONG)
    _with_first_name(root / "plain.gguf", "blk.0.attn_q.weight")
    out, jsonl, sarif, html = tmp_path / "out", tmp_path / "n.jsonl", tmp_path / "n.sarif", tmp_path / "n.html"
    argv = ["scan", str(root), "--out", str(out), "--scheduler", str(client.scheduler.address), "--no-progress"]
    assert main([*argv, "--jsonl", str(jsonl), "--sarif", str(sarif), "--fail-on", "error"]) == 1
    assert main(["report", str(out), "--html", str(html)]) == 0
    capsys.readouterr()
    # The whole of each output is smaller than the name alone by three orders of magnitude.
    for path in (jsonl, sarif, html):
        assert path.stat().st_size < 400_000, (path.name, path.stat().st_size)
    assert f"{_LONG + 4} bytes" in jsonl.read_text()  # the full length, stated
    json.loads(sarif.read_text())
    longest = 0
    for table, column in (("tensors", "name"), ("problems", "tensor"), ("problems", "message"), ("samples", "tensor")):
        values = read_dataset(out, table).column(column)
        longest = max(longest, pc.max(pc.utf8_length(values)).as_py() or 0)
    assert 0 < longest < 4 * NAME_LIMIT + 1300
