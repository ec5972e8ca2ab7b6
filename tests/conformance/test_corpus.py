"""Every corpus file and every builder layout, judged by gguf-audit and by llama.cpp: the same verdict."""

from __future__ import annotations

from pathlib import Path

import pytest
from corpus import gguf_files

from gguf_audit.testing.builder import build_gguf, tiny_llama_like
from gguf_audit.testing.conformance import compare, stage_for
from gguf_audit.testing.layouts import LLAMA_7B_LIKE, LLAMA_70B_LIKE, SyntheticGGUF, llama_table
from gguf_audit.testing.oracle import Oracle, Stage

pytestmark = pytest.mark.conformance


def test_every_corpus_file_gets_llama_cpps_verdict(oracle: Oracle) -> None:
    by_stage: dict[Stage, list[Path]] = {}
    for path in gguf_files():
        by_stage.setdefault(stage_for(path), []).append(path)
    assert set(by_stage) == {Stage.MODEL, Stage.VOCAB, Stage.GGUF}
    outcomes = [o for stage, paths in by_stage.items() for o in compare(oracle, paths, stage=stage)]
    assert len(outcomes) == len(gguf_files())
    assert [(o.path, o.klass) for o in outcomes if not o.agrees] == []
    # The corpus holds both answers: files that load, and the big-endian one llama.cpp refuses here.
    assert {o.theirs for o in outcomes} == {"loaded", "refused"}


def test_builder_layouts_get_llama_cpps_verdict(oracle: Oracle, tmp_path: Path) -> None:
    kvs, tensors = tiny_llama_like()
    tiny = tmp_path / "tiny-llama-like.gguf"
    tiny.write_bytes(build_gguf(kvs, tensors))
    sparse = []
    for label, dims in (("7b", LLAMA_7B_LIKE), ("70b", LLAMA_70B_LIKE)):
        path = tmp_path / f"llama-{label}-like.gguf"
        SyntheticGGUF(llama_table(*dims)).write_sparse(path)
        sparse.append(path)
    outcomes = compare(oracle, [tiny], stage=Stage.MODEL) + compare(oracle, sparse, stage=Stage.NO_ALLOC)
    assert [(o.path, o.klass) for o in outcomes if not o.agrees] == []
