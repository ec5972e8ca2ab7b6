"""A tensor type id with its high bit set, with sampling on: a finding, never an internal error."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from gguf_audit.cli import main
from gguf_audit.testing.builder import build_gguf, tiny_llama_like


@pytest.mark.parametrize("type_word", [0x80000002, 0x80000000, 0xFFFFFFFF, 0xC0000001])
def test_a_high_bit_type_id_keeps_the_other_tensors_samples(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], type_word: int
) -> None:
    kvs, tensors = tiny_llama_like()
    last = tensors[-1]
    # The last tensor info, so every other one is read; its data stays the size of an F32 row.
    odd = replace(last, ggml_type=type_word - (1 << 32), data=bytes(4 * last.dims[0]))
    path = tmp_path / "m.gguf"
    path.write_bytes(build_gguf(kvs, [*tensors[:-1], odd]))
    assert main(["inspect", str(path), "--samples", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    codes = {p["code"] for p in out["problems"]}
    assert not {c for c in codes if c.startswith("internal.")}, codes
    assert "tensor.unknown_type" in codes
    sampled = {s["tensor"] for s in out["samples"]}
    assert sampled == {t.name for t in tensors[:-1]}
    assert out["fingerprint"] is not None


def test_a_negative_dim_keeps_the_other_tensors_samples(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    kvs, tensors = tiny_llama_like()
    last = tensors[-1]
    odd = replace(last, dims=(-(1 << 63) + 256,), data=bytes(4 * 256))
    path = tmp_path / "m.gguf"
    path.write_bytes(build_gguf(kvs, [*tensors[:-1], odd]))
    main(["inspect", str(path), "--samples", "--json"])
    out = json.loads(capsys.readouterr().out)
    codes = {p["code"] for p in out["problems"]}
    assert not {c for c in codes if c.startswith("internal.")}, codes
    assert "tensor.bad_dims" in codes
    assert {s["tensor"] for s in out["samples"]} == {t.name for t in tensors[:-1]}
