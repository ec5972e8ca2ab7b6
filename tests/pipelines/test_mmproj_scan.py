"""A scan pairs a projector (mmproj) with the language model of its directory, on a real cluster."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import numpy as np
from corpus import corpus_dir
from pipeline_helpers import read_dataset

from gguf_audit.format.model import ValueType as VT
from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.scan.run import run_scan
from gguf_audit.testing.builder import Tensor, build_gguf, kv_array, kv_bool, kv_f32, kv_str, kv_u32


def _mmproj(dim: int) -> bytes:
    kvs = [
        kv_str("general.architecture", "clip"),
        kv_bool("clip.has_vision_encoder", True),
        kv_str("clip.projector_type", "gemma3"),
        kv_u32("clip.vision.image_size", 896),
        kv_u32("clip.vision.patch_size", 14),
        *(kv_u32(f"clip.vision.{k}", 64) for k in ("embedding_length", "feed_forward_length")),
        kv_u32("clip.vision.block_count", 1),
        kv_u32("clip.vision.attention.head_count", 4),
        kv_u32("clip.vision.projection_dim", dim),
        kv_f32("clip.vision.attention.layer_norm_epsilon", 1e-6),
        kv_array("clip.vision.image_mean", VT.FLOAT32, [0.5, 0.5, 0.5]),
        kv_array("clip.vision.image_std", VT.FLOAT32, [0.5, 0.5, 0.5]),
    ]
    weights = np.random.default_rng(0).standard_normal(14 * 14 * 3 * 64, dtype=np.float32).tobytes()
    rng = np.random.default_rng(1)
    blocks = [
        Tensor(f"v.blk.0.{name}.weight", (64, 64), 0, data=rng.standard_normal(64 * 64, dtype=np.float32).tobytes())
        for name in ("attn_out", "ffn_up", "ffn_down")
    ]
    return build_gguf(kvs, [Tensor("v.patch_embd.weight", (14, 14, 3, 64), 0, data=weights), *blocks])


def test_a_projector_is_paired_with_the_model_beside_it(client: Any, tmp_path: Path) -> None:
    root = tmp_path / "collection"
    (root / "repo").mkdir(parents=True)
    (root / "alone").mkdir()
    shutil.copy(corpus_dir() / "models" / "tiny-llama-Q8_0.gguf", root / "repo")
    (root / "repo" / "mmproj-F16.gguf").write_bytes(_mmproj(2560))
    (root / "alone" / "mmproj-F16.gguf").write_bytes(_mmproj(2560))
    out = tmp_path / "audit-out"
    result = run_scan(ScanConfig(roots=(str(root),), out=str(out), compare=False), client=client)

    paired, alone = f"file://{root}/repo/mmproj-F16.gguf", f"file://{root}/alone/mmproj-F16.gguf"
    files = {r["url"]: r for r in read_dataset(out, "files").to_pylist()}
    assert (files[paired]["projector_type"], files[paired]["projection_dim"]) == ("gemma3", 2560)
    assert files[f"file://{root}/repo/tiny-llama-Q8_0.gguf"]["embedding_length"] == 256
    assert files[paired]["loadable"] is False and files[paired]["status"] == "ok"
    problems = [p for p in read_dataset(out, "problems").to_pylist() if p["code"].startswith("clip.")]
    pairing = sorted((p["url"], p["code"], p["scope"]) for p in problems if p["code"] != "clip.projector_file")
    assert pairing == [(paired, "clip.arch_mismatch", "model"), (paired, "clip.embd_mismatch", "model")]
    assert result.problem_codes["clip.embd_mismatch"] == 1
    models = {r["urls"][0]: r for r in read_dataset(out, "models").to_pylist()}
    assert "clip.embd_mismatch" in models[paired]["codes"] and models[paired]["status"] == "warning"
    assert "clip.embd_mismatch" not in (models[alone]["codes"] or [])
