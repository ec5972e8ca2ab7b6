"""``upstream.*``: a GGUF (written by gguf-py's GGUFWriter) against upstream JSON it matches or not."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from corpus import corpus_dir
from tiny_model import Model, V, codes, only, parse, tiny, write
from upstream_families import FAMILIES, LLAMA3, QW, Family, family_model

from gguf_audit.checks.facts import header_facts
from gguf_audit.checks.upstream import Upstream, check_upstream
from gguf_audit.checks.upstream_template import diff_summary
from gguf_audit.findings import Finding, Severity
from gguf_audit.format.model import Header
from gguf_audit.format.parser import parse_header

Check = Callable[..., list[Finding]]


@pytest.fixture
def check(tmp_path: Path) -> Check:
    def run(model: Model, documents: dict[str, Any], unreadable: tuple[tuple[str, str], ...] = ()) -> list[Finding]:
        path = tmp_path / "model.gguf"
        write(model, path)
        facts = header_facts(parse(path), str(path))
        return list(check_upstream(facts, Upstream(str(tmp_path), documents, unreadable)))

    return run


def _upstream(codes_: list[str]) -> list[str]:
    return [c for c in codes_ if c.startswith("upstream.")]


@pytest.mark.parametrize("family", FAMILIES, ids=lambda f: f.name)
def test_real_family_templates_and_ids_match_cleanly(check: Check, family: Family) -> None:
    assert check(family_model(family), family.upstream_documents()) == []


def _qwen() -> Family:
    return next(f for f in FAMILIES if f.name == "qwen2.5")


def _llama3() -> Family:
    return next(f for f in FAMILIES if f.name == "llama-3.1")


def test_template_that_differs_in_substance_is_a_warning_with_a_diff_summary(check: Check) -> None:
    family = _qwen()
    docs = family.upstream_documents()
    # Qwen's tokenizer_config.json holds the list form: [{"name": "default", "template": ...}].
    docs["tokenizer_config.json"]["chat_template"][0]["template"] = family.template.replace(
        "'<|im_end|>'", "'<|endoftext|>'"
    )
    found = check(family_model(family), docs)
    assert codes(found) == ["upstream.template_differs"]
    (f,) = found
    assert f.severity is Severity.WARNING and f.offset is not None
    assert "tokenizer.chat_template differs from tokenizer_config.json" in f.message
    assert "+1/-1 lines" in f.message and "line 2" in f.message and "<|endoftext|>" in f.message


def test_whitespace_only_template_difference_is_info(check: Check) -> None:
    family = _llama3()
    docs = family.upstream_documents()
    docs["tokenizer_config.json"]["chat_template"] = "\n" + family.template.replace("%}{%", "%}\n  {%") + "\r\n"
    found = check(family_model(family), docs)
    assert codes(found) == ["upstream.template_whitespace"]
    assert found[0].severity is Severity.INFO


def test_trailing_newline_and_crlf_alone_are_no_difference(check: Check) -> None:
    family = _llama3()
    docs = family.upstream_documents()
    docs["tokenizer_config.json"]["chat_template"] = family.template + "\n"
    assert check(family_model(family), docs) == []


def test_chat_template_jinja_takes_precedence_over_tokenizer_config(check: Check) -> None:
    family = _llama3()
    docs = family.upstream_documents()
    docs["chat_template.jinja"] = "{{ messages[0]['content'] }}"
    found = check(family_model(family), docs)
    assert codes(found) == ["upstream.template_differs"] and "chat_template.jinja" in found[0].message


def test_template_missing_from_gguf_is_reported(check: Check) -> None:
    family = _llama3()
    found = check(family_model(family).drop("tokenizer.chat_template"), family.upstream_documents())
    assert codes(found) == ["upstream.template_missing"] and found[0].severity is Severity.WARNING


def test_eos_differing_from_config_json_is_an_error(check: Check) -> None:
    family = _qwen()
    model = family_model(family).set("tokenizer.ggml.eos_token_id", QW["<|im_start|>"], V.UINT32)
    docs = family.upstream_documents()
    found = only(check(model, docs), "upstream.eos_not_stop")
    assert len(found) == 1 and found[0].severity is Severity.ERROR
    assert f"eos_token_id {QW['<|im_start|>']} ('<|im_start|>')" in found[0].message
    assert "config.json eos_token_id" in found[0].message


def test_eos_differing_from_generation_config_list_is_an_error(check: Check) -> None:
    family = _llama3()
    docs = family.upstream_documents()
    # Only generation_config.json names stops; the GGUF's EOS (<|eot_id|>) is not among them.
    docs["config.json"].pop("eos_token_id")
    docs["tokenizer_config.json"].pop("eos_token")
    end = docs["generation_config.json"]["eos_token_id"][0]
    docs["generation_config.json"]["eos_token_id"] = [end, end - 50]
    found = check(family_model(family), docs)
    eos = only(found, "upstream.eos_not_stop")
    assert len(eos) == 1 and "generation_config.json eos_token_id [" in eos[0].message
    stop = only(found, "upstream.stop_not_eog")
    assert len(stop) == 1 and f"eos_token_id {end - 50} ('t{end - 50}')" in stop[0].message
    assert stop[0].severity is Severity.WARNING


def test_upstream_stop_token_the_gguf_does_not_end_on_is_a_warning(check: Check) -> None:
    family = _qwen()
    docs = family.upstream_documents()
    docs["generation_config.json"]["eos_token_id"].append(QW["<|im_start|>"])
    found = check(family_model(family), docs)
    assert codes(found) == ["upstream.stop_not_eog"] and "<|im_start|>" in found[0].message


def test_bos_pad_and_special_text_differences(check: Check) -> None:
    family = _llama3()
    docs = family.upstream_documents()
    docs["config.json"]["bos_token_id"] = 5
    docs["generation_config.json"]["bos_token_id"] = 5
    docs["config.json"]["pad_token_id"] = 7
    model = family_model(family).set("tokenizer.ggml.padding_token_id", 6, V.UINT32)
    # The upstream names its eot id differently: the vocabularies disagree.
    docs["tokenizer_config.json"]["added_tokens_decoder"][str(family.specials["<|eot_id|>"])]["content"] = "<|x|>"
    found = check(model, docs)
    assert sorted(_upstream(codes(found))) == [
        "upstream.bos_mismatch",
        "upstream.pad_mismatch",
        "upstream.special_text",
    ]
    assert only(found, "upstream.pad_mismatch")[0].severity is Severity.INFO
    assert "'<|x|>' upstream" in only(found, "upstream.special_text")[0].message


def test_rope_scaling_that_differs_is_a_warning(check: Check) -> None:
    family = _qwen()
    docs = family.upstream_documents()
    docs["config.json"]["rope_scaling"] = {"type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64}
    found = check(family_model(family), docs)
    assert codes(found) == ["upstream.rope_scaling", "upstream.rope_scaling"]
    assert "llama.rope.scaling.factor 4 differs from config.json rope_scaling factor 2" in found[0].message
    assert "original_context_length 32 differs" in found[1].message


def test_rope_scaling_type_absent_and_llama3_factors_missing(check: Check) -> None:
    family = _llama3()
    model = family_model(family)
    del model.tensors["rope_freqs.weight"]
    found = check(model, family.upstream_documents())
    assert codes(found) == ["upstream.rope_scaling"] and "rope_freqs.weight" in found[0].message
    docs = _qwen().upstream_documents()
    found = check(family_model(_qwen()).drop("llama.rope.scaling.type"), docs)
    assert codes(found) == ["upstream.rope_scaling"] and "absent differs" in found[0].message


def test_rope_theta_context_length_and_shapes(check: Check) -> None:
    family = _llama3()
    docs = family.upstream_documents()
    docs["config.json"].update(rope_theta=10000.0, max_position_embeddings=8192, num_key_value_heads=4)
    found = check(family_model(family), docs)
    assert codes(found) == ["upstream.hparam_mismatch", "upstream.context_length", "upstream.rope_freq_base"]
    by = {f.code: f for f in found}
    assert by["upstream.context_length"].message == (
        "llama.context_length 128 differs from config.json max_position_embeddings 8192"
    )
    assert by["upstream.rope_freq_base"].severity is Severity.ERROR
    assert (
        "llama.attention.head_count_kv 2 differs from config.json num_key_value_heads 4"
        in by["upstream.hparam_mismatch"].message
    )


def test_text_config_of_a_multimodal_config_is_read(check: Check) -> None:
    family = _llama3()
    docs = family.upstream_documents()
    docs["config.json"] = {"architectures": ["X"], "text_config": {**docs["config.json"], "num_hidden_layers": 9}}
    found = check(family_model(family), docs)
    assert codes(found) == ["upstream.hparam_mismatch"] and "num_hidden_layers 9" in found[0].message


def test_vocab_size_padding_is_info_and_missing_tokens_a_warning(check: Check) -> None:
    family = _qwen()
    docs = family.upstream_documents()
    docs["config.json"]["vocab_size"] = 128
    found = check(family_model(family), docs)
    assert codes(found) == ["upstream.vocab_size"] and found[0].severity is Severity.INFO
    docs["tokenizer.json"] = {"added_tokens": [], "vocab_count": 100}
    found = check(family_model(family), docs)
    assert codes(found) == ["upstream.vocab_size"] and found[0].severity is Severity.WARNING
    docs["config.json"]["vocab_size"] = 32
    found = check(family_model(family), docs)
    assert codes(found) == ["upstream.vocab_size"] and "lacks" in found[0].message


def test_unreadable_files_are_findings(check: Check) -> None:
    found = check(tiny(), {}, (("config.json", "not valid JSON (Expecting value at line 1)"),))
    assert codes(found) == ["upstream.unreadable"] and "config.json: not valid JSON" in found[0].message


def test_wrongly_typed_upstream_values_are_ignored_not_crashed_on(check: Check) -> None:
    docs: dict[str, Any] = {
        "config.json": {
            "eos_token_id": "two",
            "bos_token_id": [True, None],
            "rope_scaling": "yarn",
            "rope_theta": "big",
            "num_attention_heads": 4.0,
            "text_config": [],
        },
        "tokenizer_config.json": {"chat_template": [{"name": 1}, "x"], "eos_token": {"content": 5}},
        "generation_config.json": {"eos_token_id": [None, "x"]},
        "tokenizer.json": {"added_tokens": "no"},
    }
    assert check(tiny(), docs) == []


def test_the_corpus_llama2_model_against_its_own_upstream() -> None:
    data = (corpus_dir() / "models" / "tiny-llama-Q8_0.gguf").read_bytes()
    header = parse_header(data, len(data))
    assert isinstance(header, Header)
    template = header.get_str("tokenizer.chat_template")
    assert template is not None and "[INST]" in template
    config = {
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "max_position_embeddings": 2048,
        "rope_theta": 10000.0,
        "vocab_size": 2048,
        "bos_token_id": 1,
        "eos_token_id": 2,
    }
    tc = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "chat_template": template}
    facts = header_facts(header, "tiny-llama-Q8_0.gguf")
    clean = Upstream("up", {"config.json": config, "tokenizer_config.json": tc})
    assert list(check_upstream(facts, clean)) == []
    tc_llama3 = {**tc, "chat_template": LLAMA3}
    found = list(check_upstream(facts, Upstream("up", {"config.json": config, "tokenizer_config.json": tc_llama3})))
    assert codes(found) == ["upstream.template_differs"]


def test_diff_summary_counts_lines_and_shows_the_first_difference() -> None:
    summary = diff_summary("a\nb\nc", "a\nB\nc\nd")
    assert summary.startswith("+2/-1 lines") and "line 2, char 2" in summary and "\\nB" in summary
    assert json.dumps(summary)  # one line of text
    assert "\n" not in summary.replace("\\n", "")
