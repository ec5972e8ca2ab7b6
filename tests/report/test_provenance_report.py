"""inspect's text and JSON say what a file claims of its making: llama-quantize's importance-matrix keys, as read
from the corpus, and a hostile ``general.quantized_by`` shown escaped and cut."""

from __future__ import annotations

import json

import fsspec
import pytest
from corpus import corpus_dir

from gguf_audit.audit import AuditConfig, audit_file
from gguf_audit.report.json import audit_to_json, dumps
from gguf_audit.report.text import render_text
from gguf_audit.testing.builder import build_gguf, kv_str, tiny_llama_like


def test_the_imatrix_claim_of_a_real_llama_quantize_file() -> None:
    path = corpus_dir() / "models" / "tiny-llama-IQ2_XXS.gguf"
    if not path.exists():
        pytest.skip(f"the corpus is not here: {path}")
    audit = audit_file(str(path), config=AuditConfig())
    assert (
        "  made: importance matrix: file imatrix.dat, dataset calib.txt, 14 entries, 40 chunks"
        in render_text(audit).splitlines()
    )
    made = json.loads(dumps(audit_to_json(audit)))["provenance"]
    assert made["made_with_imatrix"] is True and made["imatrix_chunks_count"] == 40
    assert made["quantize_keys"][0] == "quantize.imatrix.file=imatrix.dat" and made["quantized_by"] is None


def test_a_file_without_claims_has_no_made_line() -> None:
    path = corpus_dir() / "models" / "tiny-llama-Q8_0.gguf"
    if not path.exists():
        pytest.skip(f"the corpus is not here: {path}")
    audit = audit_file(str(path), config=AuditConfig())
    assert "made:" not in render_text(audit)
    assert audit_to_json(audit)["provenance"]["made_with_imatrix"] is False


def test_a_hostile_quantized_by_is_text() -> None:
    kvs, tensors = tiny_llama_like()
    kvs.append(kv_str("general.quantized_by", "evil\x1b[2J\u202e" + "x" * 3000))
    fs = fsspec.filesystem("memory")
    fs.pipe_file("/p/hostile.gguf", build_gguf(kvs, tensors))
    audit = audit_file("memory:///p/hostile.gguf", config=AuditConfig())
    [line] = [x for x in render_text(audit).splitlines() if "made:" in x]
    assert "\x1b" not in line and "\u202e" not in line and "\\x1b[2J" in line and len(line) < 500
