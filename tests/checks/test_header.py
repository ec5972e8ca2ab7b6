"""The header-check composer: check_header's order and flags, and check_semantics on whole files:
valid models, vocab-only files, shards, files that are not models, the real corpus."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from corpus import corpus_dir
from tiny_model import LLAMA2_RENDER, Q, V, codes, corpus_files, parse, python_lines, tiny, write

from gguf_audit.audit import AuditConfig, audit_file
from gguf_audit.checks.header import check_header, check_semantics, check_structural
from gguf_audit.checks.structure import check_structure
from gguf_audit.findings import CODES, Finding, Severity
from gguf_audit.format.shard_names import parse_shard_name

SEMANTIC_CODES = {
    "meta.missing_key": (Severity.ERROR, True),
    "meta.wrong_type": (Severity.ERROR, True),
    "meta.unknown_architecture": (Severity.ERROR, True),  # b11312's own architecture table
    "tensor.missing": (Severity.ERROR, True),
    "tensor.unexpected": (Severity.ERROR, True),
    "tensor.wrong_shape": (Severity.ERROR, True),
    "meta.block_count_mismatch": (Severity.ERROR, True),
    "tokenizer.vocab_mismatch": (Severity.ERROR, True),
    "tokenizer.array_length_mismatch": (Severity.ERROR, True),  # refused since llama.cpp PR #27075
    "tokenizer.wrong_array_type": (Severity.ERROR, True),  # refused since llama.cpp PR #27075
    "tokenizer.special_id_out_of_range": (Severity.WARNING, False),  # llama.cpp keeps the default id
    "tokenizer.bad_token_type": (Severity.WARNING, False),
    "tokenizer.missing_pre": (Severity.WARNING, False),
    "tokenizer.eos_not_in_template": (Severity.WARNING, False),
    "tokenizer.double_bos": (Severity.INFO, False),
    "meta.file_type_mismatch": (Severity.WARNING, False),
    "meta.missing_quantization_version": (Severity.WARNING, False),
    "meta.control_characters": (Severity.WARNING, False),
}


def test_codes_are_registered_with_their_verdicts() -> None:
    for code, (severity, refused) in SEMANTIC_CODES.items():
        info = CODES[code]
        assert (info.severity, info.refused) == (severity, refused), code
        assert info.doc and "\n" not in info.doc


def test_valid_tiny_llama_has_no_finding(audit: Callable[..., list[Finding]]) -> None:
    assert audit(tiny()) == []


def test_tied_output_is_not_missing(audit: Callable[..., list[Finding]]) -> None:
    assert audit(tiny(tied=True)) == []


# qwen3 (attn_q_norm, attn_k_norm) and gemma3 (post-norms) require more than llama's tensors
# (tests/checks/test_loader.py; b11312 refuses them without, asked).
@pytest.mark.parametrize("arch", ["qwen2", "gemma"])
def test_llama_like_architectures_accept_llama_shapes(arch: str, audit: Callable[..., list[Finding]]) -> None:
    m = tiny(arch)
    if arch == "gemma":
        del m.tensors["output.weight"]  # gemma 1 always ties it: llama.cpp never creates output
    assert audit(m) == []


def test_vocab_only_file_needs_no_tensors_or_hyperparameters(audit: Callable[..., list[Finding]]) -> None:
    m = tiny().drop("{arch}.context_length", "{arch}.attention.head_count")
    m.tensors.clear()
    assert audit(m) == []
    m.drop("tokenizer.ggml.tokens")
    assert codes(audit(m)) == ["meta.missing_key"]


def test_split_model_shards(tmp_path: Path) -> None:
    m = tiny(n_layer=3, wtype=Q.Q8_0)
    paths = write(m, tmp_path / "tiny-Q8_0.gguf", split_max_tensors=8)
    assert len(paths) > 2
    for i, path in enumerate(paths):
        header = parse(path)
        # A later shard alone is refused by llama.cpp ('illegal split file idx'): an info finding, no more.
        assert codes(list(check_semantics(header, url=str(path)))) == (["shard.later_shard"] if i else []), path.name
    # A later shard holds no metadata at all: no missing architecture, no missing tensors.
    last = parse(paths[-1])
    assert last.architecture is None
    # The first shard still gets its own checks.
    m.set("llama.block_count", 2, V.UINT32)
    paths = write(m, tmp_path / "bad.gguf", split_max_tensors=29)
    found = list(check_semantics(parse(paths[0]), url=str(paths[0])))
    assert codes(found) == ["meta.block_count_mismatch"] and "blocks 2 exist" in found[0].message


@pytest.mark.parametrize(
    ("key", "value"),
    [("general.type", "adapter"), ("general.type", "imatrix"), ("general.architecture", "clip")],
)
def test_files_that_are_not_models_get_no_model_checks(
    key: str, value: str, audit: Callable[..., list[Finding]]
) -> None:
    m = tiny().drop("{arch}.context_length", "tokenizer.ggml.model")
    m.tensors["blk.0.attn_q.weight.lora_a"] = ((32, 8), Q.F32)
    m.set(key, value, V.STRING)
    found = audit(m)
    if value == "clip":  # a projector gets clip.cpp's checks instead (tests/checks/test_clip.py)
        assert found and {f.code.partition(".")[0] for f in found} == {"clip"}
    else:
        assert found == []


@pytest.mark.parametrize("path", corpus_files(), ids=lambda p: p.name)
def test_corpus_has_no_semantic_finding(path: Path) -> None:
    found = list(check_semantics(parse(path), url=str(path)))
    # The one finding is true: the gpt-neox vocab file has no tokenizer.ggml.pre.
    expected = ["tokenizer.missing_pre"] if path.name == "ggml-vocab-gpt-neox.gguf" else []
    shard = parse_shard_name(path.name)
    if shard is not None and shard.shard_index > 1:
        expected = ["shard.later_shard"]  # llama.cpp refuses a later shard given alone
    assert codes(found) == expected, found


def test_largest_corpus_vocabulary_is_checked_without_a_python_step_per_token() -> None:
    """The largest vocabulary (102,400 tokens) is checked in about 8,000 lines of Python, not a line a token:
    counted, so a busy machine cannot fail it nor a fast one hide a loop (it was a 50 ms time limit)."""
    path = max((corpus_dir() / "vocab").glob("*.gguf"), key=lambda p: p.stat().st_size)
    header = parse(path)
    [tokens] = [kv.value for kv in header.kvs if kv.key == "tokenizer.ggml.tokens"]
    assert len(tokens) >= 100_000
    assert python_lines(lambda: list(check_semantics(header, url=str(path)))) < 20_000


# --- the steps audit_file runs: structure, templates, semantics, mapping ----------------


def test_audit_runs_structure_then_templates_then_semantics(tmp_path: Path) -> None:
    """audit_file's findings are the structural ones, then the chat templates', then the semantic ones
    computed with the templates' renders (a BOS the template adds twice needs them)."""
    path = tmp_path / "tiny-llama-Q4_K_M.gguf"
    path.write_bytes((corpus_dir() / "models/tiny-llama-Q4_K_M.gguf").read_bytes() + bytes(32))
    audit = audit_file(path, config=AuditConfig())
    header = parse(path)
    structural = check_structural(header, path.stat().st_size)
    template = [f for t in audit.templates for f in t.findings]
    renders = {t.key: t.rendered for t in audit.templates if t.rendered is not None}
    semantic = list(check_semantics(header, url=str(path), template_renders=renders))
    assert codes(structural) == ["data.trailing_bytes"] and renders
    assert "tokenizer.double_bos" in codes(semantic)
    assert "tokenizer.double_bos" not in codes(check_semantics(header, url=str(path)))
    assert codes(audit.findings) == codes([*structural, *template, *semantic])


def test_check_header_is_structure_and_semantics(tmp_path: Path) -> None:
    m = tiny().set("llama.block_count", 3, V.UINT32)
    path = tmp_path / "tiny.Q4_K_M.gguf"
    write(m, path)
    header = parse(path)
    size = path.stat().st_size + 5
    structural = list(check_structure(header, size))
    semantic = list(check_semantics(header, url=str(path)))
    assert codes(structural) == ["data.trailing_bytes"]
    assert codes(semantic) == ["meta.block_count_mismatch", "meta.file_type_mismatch"]
    assert list(check_header(header, file_size=size, url=str(path))) == structural + semantic
    # semantics=False (the audit's config flag) leaves the structural findings only.
    assert list(check_header(header, file_size=size, url=str(path), semantics=False)) == structural
    with_renders = list(check_header(header, file_size=size, url=str(path), template_renders={"t": LLAMA2_RENDER}))
    assert codes(with_renders) == [*codes(structural), codes(semantic)[0], "tokenizer.double_bos", codes(semantic)[1]]
