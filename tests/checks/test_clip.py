"""Multimodal projector (mmproj, clip) files: clip.cpp's header checks, and what libllama says of them.

The oracle runs libllama, which refuses every projector; the clip.* verdicts
are clip.cpp's (read from its source), so only the libllama side is asked here.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest
from corpus import llama_source

from gguf_audit.audit import AuditConfig, FileAudit, audit_file
from gguf_audit.checks.clip import PROJECTOR_TYPES, check_clip
from gguf_audit.findings import CODES, LlamaCpp, llama_cpp_verdict
from gguf_audit.format import Header, parse_header
from gguf_audit.format.model import ValueType as VT
from gguf_audit.testing.builder import (
    KV,
    Tensor,
    build_gguf,
    kv_array,
    kv_bool,
    kv_f32,
    kv_i32,
    kv_str,
    kv_u32,
    tiny_llama_like,
)
from gguf_audit.testing.oracle import find_oracle

NO_TEMPLATES = AuditConfig(templates=False)


def _vision(proj: str = "gemma3", **changes: KV | None) -> list[KV]:
    kvs = {
        "general.architecture": kv_str("general.architecture", "clip"),
        "clip.has_vision_encoder": kv_bool("clip.has_vision_encoder", True),
        "clip.projector_type": kv_str("clip.projector_type", proj),
        "clip.vision.image_size": kv_u32("clip.vision.image_size", 896),
        "clip.vision.patch_size": kv_u32("clip.vision.patch_size", 14),
        "clip.vision.embedding_length": kv_u32("clip.vision.embedding_length", 64),
        "clip.vision.feed_forward_length": kv_u32("clip.vision.feed_forward_length", 128),
        "clip.vision.block_count": kv_u32("clip.vision.block_count", 2),
        "clip.vision.projection_dim": kv_u32("clip.vision.projection_dim", 256),
        "clip.vision.attention.head_count": kv_u32("clip.vision.attention.head_count", 4),
        "clip.vision.attention.layer_norm_epsilon": kv_f32("clip.vision.attention.layer_norm_epsilon", 1e-6),
        "clip.vision.image_mean": kv_array("clip.vision.image_mean", VT.FLOAT32, [0.5, 0.5, 0.5]),
        "clip.vision.image_std": kv_array("clip.vision.image_std", VT.FLOAT32, [0.5, 0.5, 0.5]),
    }
    for key, kv in changes.items():
        key = key.replace("__", ".")
        if kv is None:
            kvs.pop(key)
        else:
            kvs[key] = kv
    return list(kvs.values())


def _blocks(prefix: str, n: int) -> list[Tensor]:
    """The tensors clip.cpp requires of each of ``n`` encoder blocks."""
    names = ("attn_out", "ffn_up", "ffn_down")
    return [Tensor(f"{prefix}.blk.{i}.{name}.weight", (8, 8), 0) for i in range(n) for name in names]


def _header(kvs: list[KV], tensors: list[Tensor] | None = None) -> Header:
    if tensors is None:
        tensors = [Tensor("v.patch_embd.weight", (14, 14, 3, 64), 0), *_blocks("v", 2), *_blocks("a", 2)]
    data = build_gguf(kvs, tensors)
    header = parse_header(data, len(data))
    assert isinstance(header, Header)
    return header


def _codes(kvs: list[KV]) -> list[str]:
    return [f.code for f in check_clip(_header(kvs))]


def test_a_valid_projector_is_only_named() -> None:
    assert _codes(_vision()) == ["clip.projector_file"]


def _u(key: str, n: int) -> dict[str, KV]:
    return {key.replace(".", "__"): kv_u32(key, n)}


CASES: dict[str, tuple[Callable[[], list[KV]], str, str]] = {
    "image size past 8192": (lambda: _vision(**_u("clip.vision.image_size", 8193)), "clip.bad_hparam", "8193"),
    "patch size 0": (lambda: _vision(**_u("clip.vision.patch_size", 0)), "clip.bad_hparam", "patch_size is 0"),
    "patch size 65536": (lambda: _vision(**_u("clip.vision.patch_size", 65536)), "clip.bad_hparam", "65536"),
    "embedding length 0": (lambda: _vision(**_u("clip.vision.embedding_length", 0)), "clip.bad_hparam", "is 0"),
    "past INT32_MAX": (lambda: _vision(**_u("clip.vision.block_count", 2**31)), "clip.bad_hparam", "INT32_MAX"),
    "unknown projector": (lambda: _vision("gemma9"), "clip.unknown_projector", "'gemma9'"),
    "no projector": (lambda: _vision(clip__projector_type=None), "clip.unknown_projector", "absent"),
    "no image size": (lambda: _vision(clip__vision__image_size=None), "clip.missing_key", "image_size"),
    "no projection dim": (lambda: _vision(clip__vision__projection_dim=None), "clip.missing_key", "projection_dim"),
    "image size as int32": (
        lambda: _vision(clip__vision__image_size=kv_i32("clip.vision.image_size", 896)),
        "clip.wrong_type",
        "int32, read as uint32",
    ),
    "has_vision as uint8": (
        lambda: _vision(clip__has_vision_encoder=KV("clip.has_vision_encoder", VT.UINT8, 1)),
        "clip.wrong_type",
        "uint8, read as bool",
    ),
    "projector type as an array": (
        lambda: _vision(clip__projector_type=kv_array("clip.projector_type", VT.STRING, ["gemma3"])),
        "clip.wrong_type",
        "array[string], read as string",
    ),
    "name as uint32": (
        lambda: _vision(general__name=kv_u32("general.name", 1)),
        "clip.wrong_type",
        "general.name is uint32",
    ),
    "no encoder": (lambda: _vision(clip__has_vision_encoder=None), "clip.no_encoder", "neither clip.has_vision"),
    "short image mean": (
        lambda: _vision(clip__vision__image_mean=kv_array("clip.vision.image_mean", VT.FLOAT32, [0.5, 0.5])),
        "clip.bad_hparam",
        "2 items",
    ),
    "no image std": (lambda: _vision(clip__vision__image_std=None), "clip.bad_hparam", "image_std has 0"),
    "odd pinpoints": (
        lambda: _vision(
            clip__vision__image_grid_pinpoints=kv_array("clip.vision.image_grid_pinpoints", VT.INT32, [336, 672, 1])
        ),
        "clip.bad_hparam",
        "3 items, odd",
    ),
    "gelu and silu": (
        lambda: _vision(clip__use_gelu=kv_bool("clip.use_gelu", True), clip__use_silu=kv_bool("clip.use_silu", True)),
        "clip.bad_hparam",
        "both true",
    ),
    "feature layer past block count": (
        lambda: _vision(
            clip__vision__feature_layer=kv_array("clip.vision.feature_layer", VT.INT32, [1, 3]),
        ),
        "clip.bad_hparam",
        "holds 3, past block_count 2",
    ),
    "feature layers as uint32": (
        lambda: _vision(clip__vision__feature_layer=kv_array("clip.vision.feature_layer", VT.UINT32, [1])),
        "clip.bad_hparam",
        "read as array[int32]",
    ),
    "merge size 0": (
        lambda: _vision("qwen2vl_merger", **_u("clip.vision.spatial_merge_size", 0)),
        "clip.bad_hparam",
        "spatial_merge_size is 0",
    ),
    "minicpmv4_6 scale 3": (
        lambda: _vision("minicpmv4_6", **_u("clip.vision.projector.scale_factor", 3)),
        "clip.hparam_abort",
        "not 2 or 4",
    ),
    "pixels inverted": (
        lambda: _vision("glm5v", **_u("clip.vision.image_min_pixels", 1000), **_u("clip.vision.image_max_pixels", 10)),
        "clip.bad_hparam",
        "below image_min_pixels",
    ),
    "phi4 without pixels": (lambda: _vision("phi4"), "clip.missing_key", "image_min_pixels"),
    "window past 4096": (
        lambda: _vision("youtuvl", **_u("clip.vision.window_size", 5000)),
        "clip.bad_hparam",
        "past 4096",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_each_defect_gives_its_code(case: str) -> None:
    build, code, named = CASES[case]
    found = [f for f in check_clip(_header(build())) if f.code != "clip.projector_file"]
    # The first finding is clip.cpp's verdict (what follows an abort or a throw is never reached).
    assert found and found[0].code == code, found
    assert named in found[0].message


def test_audio_mel_bins_are_bounded_unless_the_projector_takes_raw_frames() -> None:
    audio = [
        kv_str("general.architecture", "clip"),
        kv_bool("clip.has_audio_encoder", True),
        kv_str("clip.audio.projector_type", "ultravox"),
        *(kv_u32(f"clip.audio.{k}", 64) for k in ("embedding_length", "feed_forward_length", "projection_dim")),
        kv_u32("clip.audio.block_count", 2),
        kv_u32("clip.audio.attention.head_count", 4),
        kv_f32("clip.audio.attention.layer_norm_epsilon", 1e-5),
    ]
    assert _codes([*audio, kv_u32("clip.audio.num_mel_bins", 128)]) == ["clip.projector_file"]
    assert _codes([*audio, kv_u32("clip.audio.num_mel_bins", 640)]) == ["clip.projector_file", "clip.bad_hparam"]
    raw = [
        kv if kv.key != "clip.audio.projector_type" else kv_str("clip.audio.projector_type", "gemma4ua") for kv in audio
    ]
    assert _codes([*raw, kv_u32("clip.audio.num_mel_bins", 640)]) == ["clip.projector_file"]
    assert _codes(audio) == ["clip.projector_file", "clip.missing_key"]


def test_a_block_without_its_tensors_is_named() -> None:
    tensors = [t for t in _blocks("v", 2) if t.name != "v.blk.1.ffn_down.weight"]
    found = [f for f in check_clip(_header(_vision(), tensors)) if f.code != "clip.projector_file"]
    assert [(f.code, f.tensor) for f in found] == [("clip.missing_tensor", "v.blk.1.ffn_down.weight")]
    # Experts stand for the dense feed-forward; a forged block count is judged at the first missing block.
    experts = [
        *(t for t in _blocks("v", 2) if "ffn" not in t.name),
        *(Tensor(f"v.blk.{i}.ffn_gate_exps.weight", (8, 8, 2), 0) for i in range(2)),
    ]
    assert _codes(_vision()) == ["clip.projector_file"]
    assert [f.code for f in check_clip(_header(_vision(), experts))] == ["clip.projector_file"]
    forged = _vision(**_u("clip.vision.block_count", 2**31 - 1))
    assert [f.message for f in check_clip(_header(forged)) if f.code == "clip.missing_tensor"] == [
        "tensor 'v.blk.2.attn_out.weight' is absent (vision block_count 2147483647)"
    ]


def test_verdicts_say_what_clip_cpp_does() -> None:
    assert CODES["clip.projector_file"].llama_cpp is LlamaCpp.REFUSES
    assert CODES["clip.wrong_type"].llama_cpp is LlamaCpp.ABORTS
    assert CODES["clip.hparam_abort"].llama_cpp is LlamaCpp.ABORTS
    assert all("clip.cpp" in CODES[c].doc or "mtmd" in CODES[c].doc for c in CODES if c.startswith("clip."))
    header = _header(_vision(clip__vision__image_size=kv_i32("clip.vision.image_size", 1)))
    assert llama_cpp_verdict(check_clip(header)) is LlamaCpp.ABORTS


def test_projector_types_are_those_of_the_pinned_clip_impl() -> None:
    text = (llama_source() / "tools" / "mtmd" / "clip-impl.h").read_text(encoding="utf-8")
    table = text[text.index("PROJECTOR_TYPE_NAMES") :]
    table = table[: table.index("};")]
    names = set(re.findall(r'\{\s*PROJECTOR_TYPE_\w+,\s*"([^"]+)"\s*\}', table))
    assert names == PROJECTOR_TYPES


def _write(tmp_path: Path, name: str, kvs: list[KV], tensors: list[Tensor]) -> Path:
    path = tmp_path / name
    path.write_bytes(build_gguf(kvs, tensors))
    return path


def test_libllama_refuses_a_projector_and_a_packed_model_and_the_audit_agrees(tmp_path: Path) -> None:
    projector = _write(
        tmp_path, "mmproj.gguf", _vision(), [Tensor("v.patch_embd.weight", (14, 14, 3, 64), 0), *_blocks("v", 2)]
    )
    kvs, tensors = tiny_llama_like()
    packed = _write(tmp_path, "packed.gguf", kvs, [*tensors, Tensor("v.patch_embd.weight", (14, 14, 3, 64), 0)])
    plain = _write(tmp_path, "plain.gguf", kvs, list(tensors))
    audits: list[FileAudit] = [audit_file(str(p), config=NO_TEMPLATES) for p in (projector, packed, plain)]
    assert [f.code for f in audits[0].findings] == ["clip.projector_file"]
    assert audits[0].status.value == "ok" and audits[0].loadable is False
    assert "tensor.packed_multimodal" in {f.code for f in audits[1].findings} and audits[1].loadable is False
    assert audits[2].findings == [] and audits[2].loadable is True
    oracle = find_oracle()
    if oracle is None:
        pytest.skip("no llama.cpp oracle")
    verdicts = oracle.ask([projector, packed, plain])
    assert [v.verdict for v in verdicts] == ["refused", "refused", "loaded"], verdicts
    assert "CLIP cannot be used as main model" in verdicts[0].message
    assert "wrong number of tensors" in verdicts[1].message


def test_a_gen_audio_encoder_alone_is_refused_by_mtmd() -> None:
    kvs = [
        kv_str("general.architecture", "clip"),
        kv_bool("clip.has_gen_audio_encoder", True),
        kv_str("clip.gen.audio.projector_type", "pockettts_gen"),
    ]
    assert _codes(kvs)[-1] == "clip.no_encoder"
