"""Files whose tensor infos gguf-audit stops reading where gguf.cpp does: llama.cpp b11312 agrees with each verdict."""

from __future__ import annotations

from pathlib import Path

import pytest

from gguf_audit.testing.builder import Tensor, build_gguf, kv_u32, tiny_llama_like
from gguf_audit.testing.conformance import compare
from gguf_audit.testing.oracle import Oracle

pytestmark = [pytest.mark.conformance]

F32, Q4_0 = 0, 2


def _files(folder: Path) -> list[Path]:
    kvs, tensors = tiny_llama_like()
    a, dup = Tensor("a.weight", (32,), F32), Tensor("a.weight", (32,), F32)
    cases = {
        "forged-count": build_gguf(kvs, tensors, n_tensors=len(tensors) + 5000, trailing=bytes(24 * 6000)),
        "duplicate-then-more": build_gguf(kvs, [*tensors, tensors[0], Tensor("b.weight", (32,), 99)]),
        "unknown-type-then-duplicate": build_gguf(kvs, [a, Tensor("b.weight", (32,), 99), dup]),
        "negative-dim-then-duplicate": build_gguf(kvs, [a, Tensor("b.weight", (-32,), F32, data=b""), dup]),
        "partial-block-then-duplicate": build_gguf(kvs, [a, Tensor("b.weight", (31,), Q4_0, data=bytes(18)), dup]),
        "nul-equal-names": build_gguf(kvs, [*tensors, Tensor(tensors[0].name.encode() + b"\0x", (32,), F32)]),
        "long-invalid-key": build_gguf([*kvs, kv_u32(b"k\xff" + bytes(range(256)) * 8192, 1)], tensors),
    }
    paths = []
    for name, data in cases.items():
        path = folder / f"{name}.gguf"
        path.write_bytes(data)
        paths.append(path)
    return paths


def test_files_whose_infos_stop_early_get_llama_cpps_verdict(oracle: Oracle, tmp_path: Path) -> None:
    outcomes = compare(oracle, _files(tmp_path))
    assert [(Path(o.path).stem, o.theirs) for o in outcomes if not o.agrees] == []
    # Every file but the one with a long key is refused; that one loads (keys may be 1 GiB long).
    assert {Path(o.path).stem: o.theirs for o in outcomes}["long-invalid-key"] == "loaded"
    assert sum(o.theirs == "refused" for o in outcomes) == len(outcomes) - 1
