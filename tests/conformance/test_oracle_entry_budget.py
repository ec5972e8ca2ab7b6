"""Headers of 10^5 tiny key-value records, past the parser's read budget: llama.cpp b11312 refuses those with an
empty or repeated key, as gguf-audit does; it loads 10^5 distinct ones, which gguf-audit leaves unjudged
(never loadable) rather than reading them all."""

from __future__ import annotations

from pathlib import Path

import pytest

from gguf_audit.testing.builder import build_gguf, kv_u8, tiny_llama_like
from gguf_audit.testing.conformance import compare
from gguf_audit.testing.oracle import Oracle

pytestmark = [pytest.mark.conformance]

N = 100_000


def test_tiny_records_past_the_budget(oracle: Oracle, tmp_path: Path) -> None:
    kvs, tensors = tiny_llama_like()
    cases = {
        "empty": [kv_u8("", 0)] * N,
        "repeated": [kv_u8("k.same", 1)] * N,
        "distinct": [kv_u8(f"k{i:x}", 1) for i in range(N)],
    }
    paths = []
    for name, extra in cases.items():
        path = tmp_path / f"{name}.gguf"
        path.write_bytes(build_gguf([*kvs, *extra], tensors))
        paths.append(path)
    outcomes = {Path(o.path).stem: o for o in compare(oracle, paths)}
    assert outcomes["empty"].agrees and outcomes["empty"].codes[0] == "header.empty_key"
    assert outcomes["repeated"].agrees and outcomes["repeated"].codes[0] == "header.duplicate_key"
    distinct = outcomes["distinct"]
    assert distinct.theirs == "loaded"
    assert distinct.loadable is None and distinct.codes == ("header.too_many_entries",)
