"""The finding codes of multimodal projector (mmproj, ``clip``) files, as data: :mod:`gguf_audit.codes` registers them.

Each entry is ``(code, severity, verdict, doc)``, the verdict as
:class:`~gguf_audit.codes.LlamaCpp`'s value. libllama refuses every ``clip``
file ("CLIP cannot be used as main model, use it with --mmproj instead", asked
of the oracle): that is ``clip.projector_file``'s verdict. The other ``clip.*``
verdicts are what libmtmd's ``tools/mtmd/clip.cpp`` (b11312) does when it loads
the projector: the oracle runs libllama only and cannot load one, so these were
read from the source, not asked; each doc says which throw (refuses) or
``GGML_ASSERT`` (aborts) it mirrors.
"""

from __future__ import annotations

from typing import Final

__all__ = ["CLIP_CODES"]

ClipCode = tuple[str, str, str | None, str]

CLIP_CODES: Final[tuple[ClipCode, ...]] = (
    (
        "clip.projector_file",
        "info",
        "refuses",
        "A multimodal projector (mmproj, general.architecture 'clip'): loaded by libmtmd beside a language model "
        "(--mmproj), refused by libllama as a model ('CLIP cannot be used as main model'), so loadable is false. "
        "Its clip.* findings are clip.cpp's verdicts, read from its source (the oracle cannot load projectors).",
    ),
    (
        "clip.no_encoder",
        "error",
        "refuses",
        "Neither clip.has_vision_encoder nor has_audio_encoder is true (has_gen_audio_encoder alone included): "
        "clip.cpp loads no vision or audio encoder and mtmd_init refuses the projector ('Failed to load CLIP model').",
    ),
    (
        "clip.unknown_projector",
        "error",
        "refuses",
        "clip.projector_type (or clip.vision/audio.projector_type) is absent or not one clip.cpp b11312 knows; it "
        "throws 'unknown projector type'.",
    ),
    (
        "clip.missing_key",
        "error",
        "refuses",
        "A key clip.cpp requires of this modality or projector is absent (embedding, feed-forward and projection "
        "sizes, head and block counts, norm epsilon, image and patch size, mel bins, ...); it throws 'Key not found'.",
    ),
    (
        "clip.wrong_type",
        "error",
        "aborts",
        "A scalar key clip.cpp reads (general.name, a projector type, a size, a flag) is stored with another type "
        "(a uint32 as int32, a string as an array, a bool as uint8): "
        "gguf_get_val_* fails its GGML_ASSERT and the process loading the projector aborts.",
    ),
    (
        "clip.bad_hparam",
        "error",
        "refuses",
        "A hyperparameter clip.cpp rejects: image_size past 8192, patch_size 0 or past 65535, embedding length 0, a "
        "value past INT32_MAX, merge factor 0 or past 65535, window size past 4096, image_max_pixels below "
        "image_min_pixels, mel bins outside 1 to 256, an odd image_grid_pinpoints, use_gelu and use_silu both, "
        "image_mean/image_std shorter than 3, a feature layer past block_count, an array of the wrong type.",
    ),
    (
        "clip.hparam_abort",
        "error",
        "aborts",
        "A hyperparameter clip.cpp checks with GGML_ASSERT (minicpmv4_6 scale factor other than 2 or 4, a zero "
        "minimax_m3 merge size, internvl tiles min past max): the process loading the projector aborts.",
    ),
    (
        "clip.missing_tensor",
        "error",
        "refuses",
        "An encoder block lacks a tensor clip.cpp's load_tensors requires of every block ({v,a}.blk.N.attn_out, "
        "and ffn_up and ffn_down unless the block has experts), often a block_count past the blocks present; it "
        "throws 'unable to find tensor'. Projector-specific tensors are not checked.",
    ),
    (
        "clip.embd_mismatch",
        "warning",
        "refuses",
        "A projector paired with a language model of the collection (same directory) projects to another width "
        "(clip.vision.projection_dim) than the model's embedding length: mtmd refuses the pair. A warning: the pair "
        "is guessed from the directory; legacy projector types (mlp, ldp, resampler...) are not compared.",
    ),
    (
        "clip.arch_mismatch",
        "warning",
        None,
        "A projector paired with a language model of the collection (same directory) is of a type made for "
        "other architectures (a gemma3 projector beside a qwen2 model): likely the wrong mmproj file, which mtmd may "
        "load and feed the model embeddings it was not trained on.",
    ),
    (
        "tensor.packed_multimodal",
        "error",
        "refuses",
        "A language-model file also holds vision or audio encoder tensors (v.*, a.*, mm.*, resampler.*), as some "
        "exporters pack them: llama.cpp creates none of them and fails with 'wrong number of tensors'. Split the "
        "projector into its own mmproj file.",
    ),
)
