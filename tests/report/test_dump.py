"""``inspect``'s text as gguf-dump users expect it: file type names, parameters, float32 precision, shard hints."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gguf_audit.cli import main
from gguf_audit.report.dump import file_type_label, float32_repr, parameter_label, shard_hint
from gguf_audit.testing.builder import build_gguf, kv_f32, kv_u16, tiny_llama_like


@pytest.mark.parametrize(
    ("value", "shown"),
    [(1e-5, "1e-05"), (1e-6, "1e-06"), (10000.0, "10000.0"), (0.1, "0.1"), (500000.0, "500000.0"), (3.5, "3.5")],
)
def test_float32_shown_at_its_own_precision(value: float, shown: str) -> None:
    widened = float(np.float32(value))  # what the four bytes read back as, in float64
    assert float32_repr(widened) == shown
    assert np.float32(float(float32_repr(widened))) == np.float32(value)  # it round-trips


def test_labels() -> None:
    assert file_type_label(15) == "MOSTLY_Q4_K_M" and file_type_label(0) == "ALL_F32"
    assert file_type_label(9999) is None
    assert parameter_label(8_030_261_248) == "8.03 B (8030261248)"
    assert parameter_label(124_439_808) == "124.4 M (124439808)"
    assert parameter_label(512) == "512"


def test_inspect_text_reads_like_gguf_dump(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kvs, tensors = tiny_llama_like()
    kvs = [kv_f32(kv.key, 1e-6) if kv.key.endswith("rms_epsilon") else kv for kv in kvs]
    path = tmp_path / "tiny-Q4_K_M.gguf"
    path.write_bytes(build_gguf(kvs, tensors))
    main(["inspect", str(path)])
    text = capsys.readouterr().out
    n_params = sum(int(np.prod(t.dims)) for t in tensors)
    assert f"parameters {parameter_label(n_params)}" in text
    assert "file type 15 (MOSTLY_Q4_K_M)" in text
    epsilon = next(line for line in text.splitlines() if "rms_epsilon" in line)
    assert epsilon.rstrip().endswith(" 1e-06") and "9.99" not in epsilon
    assert "10000.0" in next(line for line in text.splitlines() if "freq_base" in line)
    assert "hint:" not in text


def test_a_shard_gets_a_hint_to_scan_its_set(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kvs, tensors = tiny_llama_like()
    path = tmp_path / "big-Q4_K_M-00002-of-00005.gguf"
    path.write_bytes(build_gguf([*kvs, kv_u16("split.no", 1), kv_u16("split.count", 5)], tensors))
    main(["inspect", str(path)])
    text = capsys.readouterr().out
    hint = next(line for line in text.splitlines() if "hint:" in line)
    assert "shard 2 of 5" in hint
    assert f"gguf-audit scan {tmp_path} --include 'big-Q4_K_M-*-of-00005.gguf'" in hint
    assert shard_hint("s3://b/m/x.gguf", None) is None
