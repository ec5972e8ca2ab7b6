"""Projectors (mmproj) paired with the language models of their directory: widths and architectures."""

from __future__ import annotations

from gguf_audit.checks.mmproj_pairing import PairingFacts, pair_projectors, pair_rows, pairing_facts
from gguf_audit.format import Header, parse_header
from gguf_audit.testing.builder import Tensor, build_gguf, kv_bool, kv_str, kv_u32, tiny_llama_like


def _facts(
    url: str, arch: str, *, proj: str | None = None, dim: int | None = None, n_embd: int | None = None
) -> PairingFacts:
    return PairingFacts(url, arch, proj, dim, n_embd)


def _codes(*files: PairingFacts) -> list[tuple[str, str]]:
    return [(url, f.code) for url, f in pair_projectors(files)]


def test_a_projector_of_the_model_s_width_and_family_passes() -> None:
    assert (
        _codes(
            _facts("s3://b/gemma/model-Q4_K_M.gguf", "gemma3", n_embd=2560),
            _facts("s3://b/gemma/mmproj-F16.gguf", "clip", proj="gemma3", dim=2560),
        )
        == []
    )


def test_another_width_is_a_mismatch_named_with_both_widths() -> None:
    found = pair_projectors(
        [
            _facts("s3://b/qwen/model-Q8_0.gguf", "qwen2vl", n_embd=3584),
            _facts("s3://b/qwen/mmproj.gguf", "clip", proj="qwen2.5vl_merger", dim=2048),
        ]
    )
    assert [(u, f.code) for u, f in found] == [("s3://b/qwen/mmproj.gguf", "clip.embd_mismatch")]
    assert "2048" in found[0][1].message and "3584" in found[0][1].message


def test_a_projector_for_another_family_is_named() -> None:
    found = pair_projectors(
        [
            _facts("hf://o/r/model.gguf", "qwen2", n_embd=2560),
            _facts("hf://o/r/mmproj.gguf", "clip", proj="gemma3", dim=2560),
        ]
    )
    assert [f.code for _, f in found] == ["clip.arch_mismatch"]
    assert "'gemma3'" in found[0][1].message and "qwen2" in found[0][1].message


def test_other_directories_legacy_projectors_and_lone_projectors_are_not_judged() -> None:
    assert (
        _codes(
            _facts("/m/a/model.gguf", "llama", n_embd=4096),
            _facts("/m/b/mmproj.gguf", "clip", proj="gemma3", dim=2560),  # another directory
            _facts("/m/a/mmproj-llava.gguf", "clip", proj="mlp", dim=768),  # legacy llava: CLIP's own projection dim
        )
        == []
    )
    assert _codes(_facts("/m/c/mmproj.gguf", "clip", proj="gemma3", dim=1)) == []


def test_facts_from_headers_and_rows() -> None:
    kvs, tensors = tiny_llama_like()
    model = parse_header(build_gguf(kvs, tensors))
    projector = parse_header(
        build_gguf(
            [
                kv_str("general.architecture", "clip"),
                kv_bool("clip.has_vision_encoder", True),
                kv_str("clip.projector_type", "gemma3"),
                kv_u32("clip.vision.projection_dim", 77),
            ],
            [Tensor("v.patch_embd.weight", (4, 4), 0)],
        )
    )
    assert isinstance(model, Header) and isinstance(projector, Header)
    model_row = {"url": "/d/m.gguf", "architecture": "llama", **pairing_facts(model)}
    proj_row = {"url": "/d/mmproj.gguf", "architecture": "clip", **pairing_facts(projector)}
    assert (
        model_row["embedding_length"] == model.get_int("llama.embedding_length") and model_row["projector_type"] is None
    )
    assert (proj_row["projector_type"], proj_row["projection_dim"]) == ("gemma3", 77)
    assert [(u, f.code) for u, f in pair_rows([model_row, proj_row])] == [
        ("/d/mmproj.gguf", "clip.embd_mismatch"),
        ("/d/mmproj.gguf", "clip.arch_mismatch"),
    ]
