"""The tokenizer: its keys, arrays, special ids and token types, and the tokens rendered chat
templates end turns with."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
from tiny_model import (
    CHATML_RENDER,
    LLAMA2_RENDER,
    Model,
    V,
    codes,
    corpus_files,
    only,
    parse,
    python_lines,
    tiny,
    tokenizer_kvs,
    write,
)

from gguf_audit.audit import AuditConfig, audit_file
from gguf_audit.checks.header import check_semantics
from gguf_audit.findings import Finding, Severity
from gguf_audit.format.model import Header, ValueType
from gguf_audit.templates.audit import audit_templates
from gguf_audit.testing.builder import build_gguf, kv_array, kv_str, tiny_llama_like


def test_bpe_needs_merges_and_warns_without_pre(audit: Callable[..., list[Finding]]) -> None:
    m = tiny()
    tokenizer_kvs(m, 64, kind="gpt2")
    assert audit(m) == []
    m.drop("tokenizer.ggml.merges", "tokenizer.ggml.pre")
    found = audit(m)
    assert sorted(codes(found)) == ["meta.missing_key", "tokenizer.missing_pre"]
    assert "'tokenizer.ggml.merges'" in only(found, "meta.missing_key")[0].message


def test_array_length_mismatch(audit: Callable[..., list[Finding]]) -> None:
    m = tiny().set("tokenizer.ggml.scores", [0.0] * 63, V.ARRAY, V.FLOAT32)
    found = audit(m)
    assert codes(found) == ["tokenizer.array_length_mismatch"]
    assert "tokenizer.ggml.scores has 63 entries but tokenizer.ggml.tokens has 64" in found[0].message


def test_wrong_array_types(audit: Callable[..., list[Finding]]) -> None:
    m = tiny().set("tokenizer.ggml.scores", [0.0] * 64, V.ARRAY, V.FLOAT64)
    m.set("tokenizer.ggml.token_type", [1] * 64, V.ARRAY, V.UINT8)
    assert codes(audit(m)) == ["tokenizer.wrong_array_type"] * 2


def test_special_ids_out_of_range(audit: Callable[..., list[Finding]]) -> None:
    m = tiny().set("tokenizer.ggml.eos_token_id", 64, V.UINT32)
    m.set("tokenizer.ggml.padding_token_id", 1000, V.UINT32)
    found = audit(m)
    assert codes(found) == ["tokenizer.special_id_out_of_range"] * 2
    eos, pad = found
    assert "tokenizer.ggml.eos_token_id is 64" in eos.message and eos.severity is Severity.WARNING
    assert "padding_token_id is 1000" in pad.message and pad.severity is Severity.WARNING


def test_bad_token_types(audit: Callable[..., list[Finding]]) -> None:
    types = [2, 3, 3] + [1] * 61
    types[10], types[20] = 0, 9
    found = audit(tiny().set("tokenizer.ggml.token_type", types, V.ARRAY, V.INT32))
    assert codes(found) == ["tokenizer.bad_token_type"]
    assert "2 values outside 1 to 6, the first 0 at token 10" in found[0].message


def test_template_checks_skipped_without_renders(audit: Callable[..., list[Finding]]) -> None:
    assert audit(tiny(), renders=None) == []


def test_llama2_template_closes_turns_with_eos(audit: Callable[..., list[Finding]]) -> None:
    found = audit(tiny(), renders={"tokenizer.chat_template": LLAMA2_RENDER})
    # The only remark: the template writes <s> and add_bos_token defaults to true for SPM.
    assert codes(found) == ["tokenizer.double_bos"] and found[0].severity is Severity.INFO
    m = tiny().set("tokenizer.ggml.add_bos_token", False, V.BOOL)
    assert audit(m, renders={"tokenizer.chat_template": LLAMA2_RENDER}) == []


def test_template_without_eos(audit: Callable[..., list[Finding]]) -> None:
    render = LLAMA2_RENDER.replace("</s>", "")
    m = tiny().set("tokenizer.ggml.add_bos_token", False, V.BOOL)
    found = audit(m, renders={"tokenizer.chat_template": render})
    assert codes(found) == ["tokenizer.eos_not_in_template"]
    assert "not closed by EOS '</s>'" in found[0].message


def test_template_eos_must_be_control(audit: Callable[..., list[Finding]]) -> None:
    m = tiny().set("tokenizer.ggml.add_bos_token", False, V.BOOL)
    m.set("tokenizer.ggml.token_type", [2, 3, 1] + [1] * 61, V.ARRAY, V.INT32)
    found = audit(m, renders={"tokenizer.chat_template": LLAMA2_RENDER})
    assert codes(found) == ["tokenizer.eos_not_in_template"]
    assert "'</s>' (id 2), a normal token, not a control token" in found[0].message


def chatml(eos_id: int | None, im_end_type: int = 3) -> Model:
    m = tiny()
    tokens = ["<unk>", "<s>", "</s>", "<|im_start|>", "<|im_end|>"] + [f"t{i}" for i in range(5, 64)]
    m.set("tokenizer.ggml.tokens", tokens, V.ARRAY, V.STRING)
    m.set("tokenizer.ggml.token_type", [2, 3, 3, 3, im_end_type] + [1] * 59, V.ARRAY, V.INT32)
    m.set("tokenizer.ggml.add_bos_token", False, V.BOOL)
    if eos_id is not None:
        m.set("tokenizer.ggml.eos_token_id", eos_id, V.UINT32)
    return m


def test_chatml_template_with_im_end_as_eos(audit: Callable[..., list[Finding]]) -> None:
    assert audit(chatml(eos_id=4), renders={"tokenizer.chat_template": CHATML_RENDER}) == []
    m = chatml(eos_id=2).set("tokenizer.ggml.eot_token_id", 4, V.UINT32)
    assert audit(m, renders={"tokenizer.chat_template": CHATML_RENDER}) == []


def test_chatml_template_with_another_eos_is_info(audit: Callable[..., list[Finding]]) -> None:
    # llama.cpp stops on <|im_end|> by its text, so only a remark.
    found = audit(chatml(eos_id=2), renders={"tokenizer.chat_template": CHATML_RENDER})
    assert codes(found) == ["tokenizer.eos_not_in_template"] and found[0].severity is Severity.INFO
    assert "ends with '<|im_end|>' (id 4), not EOS '</s>'" in found[0].message


def test_chatml_user_defined_im_end(audit: Callable[..., list[Finding]]) -> None:
    found = audit(chatml(eos_id=4, im_end_type=4), renders={"tokenizer.chat_template": CHATML_RENDER})
    assert codes(found) == ["tokenizer.eos_not_in_template"] and found[0].severity is Severity.WARNING
    assert "a user-defined token, not a control token (llama.cpp warns" in found[0].message


def test_eos_equal_to_bos_is_not_found_in_the_bos(audit: Callable[..., list[Finding]]) -> None:
    # gpt-2 style: bos = eos = <|endoftext|>; a render that only starts with it does not close turns.
    m = chatml(eos_id=3).set("tokenizer.ggml.bos_token_id", 3, V.UINT32)
    render = "<|im_start|>user Hello! Who are you? assistant I am an assistant. How can I help?"
    found = audit(m, renders={"tokenizer.chat_template": render})
    assert codes(found) == ["tokenizer.eos_not_in_template"]


def test_lookup_by_text_is_bounded_and_then_silent(audit: Callable[..., list[Finding]]) -> None:
    # 10000 tokens of 10 bytes, none of them <|im_end|>: past the compare budget nothing is claimed.
    n = 10_000
    m = tiny(n_vocab=n).set("tokenizer.ggml.add_bos_token", False, V.BOOL)
    m.set("tokenizer.ggml.tokens", ["<unk>", "<s>", "</s>"] + [f"x{i:09d}" for i in range(3, n)], V.ARRAY, V.STRING)
    m.tensors.clear()
    assert audit(m, renders={"tokenizer.chat_template": CHATML_RENDER}) == []
    # A short vocabulary is searched to the end: the text is not a token, so the turn is not closed.
    assert codes(audit(tiny().set("tokenizer.ggml.add_bos_token", False, V.BOOL), renders={"t": CHATML_RENDER})) == [
        "tokenizer.eos_not_in_template"
    ]


def test_corpus_templates_as_the_template_audit_renders_them() -> None:
    """The real templates, rendered by the template audit: remarks at most, never a warning."""
    seen: dict[str, set[str]] = {}
    for path in corpus_files():
        header = parse(path)
        templates = {kv.key: kv.value for kv in header.kvs if kv.key.startswith("tokenizer.chat_template")}
        if not templates:
            continue
        tokens = header.get("tokenizer.ggml.tokens")
        assert isinstance(tokens, Sequence)
        bos, eos = header.get("tokenizer.ggml.bos_token_id"), header.get("tokenizer.ggml.eos_token_id")
        audits, _ = audit_templates(
            {k: v for k, v in templates.items() if isinstance(v, str)},
            bos_token=tokens[bos] if isinstance(bos, int) else "",
            eos_token=tokens[eos] if isinstance(eos, int) else "",
        )
        renders = {a.key: a.rendered for a in audits if a.rendered is not None}
        assert renders, path.name
        found = list(check_semantics(header, url=str(path), template_renders=renders))
        assert all(f.severity is Severity.INFO for f in found), found
        seen[path.name] = set(codes(found))
    # Llama-2's template writes <s> itself; Phi-3's ends turns with <|end|> while its EOS is <|endoftext|>.
    assert seen["tiny-llama-Q4_K_M.gguf"] == {"tokenizer.double_bos"}
    assert seen["ggml-vocab-phi-3.gguf"] == {"tokenizer.double_bos", "tokenizer.eos_not_in_template"}


@pytest.fixture(scope="module")
def big_vocab(tmp_path_factory: pytest.TempPathFactory) -> Header:
    n = 256_000
    m = tiny(n_vocab=n)
    tokens = ["<unk>", "<s>", "</s>"] + [f"tok{i}" for i in range(3, n - 1)] + ["<|im_end|>"]
    m.set("tokenizer.ggml.tokens", tokens, V.ARRAY, V.STRING)
    m.set("tokenizer.ggml.token_type", [2, 3, 3] + [1] * (n - 4) + [3], V.ARRAY, V.INT32)
    m.tensors.clear()
    path = tmp_path_factory.mktemp("big") / "big-vocab.gguf"
    write(m, path)
    return parse(path)


def test_256k_vocabulary_is_checked_without_a_python_step_per_token(big_vocab: Header) -> None:
    # The render ends turns with <|im_end|>, not the EOS: the slow path, a lookup by text.
    renders = {"tokenizer.chat_template": CHATML_RENDER}
    found = list(check_semantics(big_vocab, template_renders=renders))
    assert codes(found) == ["tokenizer.eos_not_in_template"]
    # About 1,000 lines of Python for 256,000 tokens (a count, not a time: it was a 50 ms limit)
    assert python_lines(lambda: list(check_semantics(big_vocab, template_renders=renders))) < 5_000


def test_unknown_tokenizer_and_pre_tokenizer(tmp_path: Path) -> None:
    kvs, tensors = tiny_llama_like()
    for key, value, code, loadable in (
        ("tokenizer.ggml.model", "sentencepiece2", "tokenizer.unknown_model", False),
        ("tokenizer.ggml.pre", "not-a-real-pre", None, True),
    ):
        changed = [kv_str(key, value) if kv.key == key else kv for kv in kvs]
        if key == "tokenizer.ggml.pre":
            # Only BPE reads the pre-tokenizer: make it a gpt2 tokenizer with merges.
            changed = [
                kv_str("tokenizer.ggml.model", "gpt2") if kv.key == "tokenizer.ggml.model" else kv for kv in changed
            ]
            changed.append(kv_array("tokenizer.ggml.merges", ValueType.STRING, ["▁ t", "h e"]))
            code = "tokenizer.unknown_pre"
            loadable = False
        path = tmp_path / f"{code}.gguf"
        path.write_bytes(build_gguf(changed, tensors))
        audit = audit_file(str(path), config=AuditConfig())
        assert code in [f.code for f in audit.findings]
        assert audit.loadable is loadable
