"""The ``clip.*`` codes: multimodal projector (mmproj) files.

libllama refuses every ``clip`` file ("CLIP cannot be used as main model, use it with --mmproj instead",
asked of the oracle): that is ``clip.projector_file``'s verdict. The other ``clip.*`` verdicts are what
libmtmd's ``tools/mtmd/clip.cpp`` (b11312) does when it loads the projector: the oracle runs libllama only and
cannot load one, so these were read from the source, not asked; each doc says which throw (refuses) or
``GGML_ASSERT`` (aborts) it mirrors.
"""

from __future__ import annotations

from typing import Final

from gguf_audit.codes.code import Code
from gguf_audit.codes.model import CodeInfo, LlamaCpp, Severity

__all__ = ["ENTRIES"]

ENTRIES: Final[tuple[CodeInfo, ...]] = (
    CodeInfo(
        Code.CLIP_PROJECTOR_FILE,
        Severity.INFO,
        LlamaCpp.REFUSES,
        (
            "A multimodal projector (mmproj, general.architecture 'clip'): loaded by libmtmd beside a language model "
            "(--mmproj), refused by libllama as a model ('CLIP cannot be used as main model'), so loadable is false. "
            "Its clip.* findings are clip.cpp's verdicts, read from its source (the oracle cannot load projectors)."
        ),
    ),
    CodeInfo(
        Code.CLIP_NO_ENCODER,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "Neither clip.has_vision_encoder nor has_audio_encoder is true (has_gen_audio_encoder alone included): "
            "clip.cpp loads no vision or audio encoder and mtmd_init refuses the projector ('Failed to load CLIP "
            "model')."
        ),
    ),
    CodeInfo(
        Code.CLIP_UNKNOWN_PROJECTOR,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "clip.projector_type (or clip.vision/audio.projector_type) is absent or not one clip.cpp b11312 knows; "
            "it throws 'unknown projector type'."
        ),
    ),
    CodeInfo(
        Code.CLIP_MISSING_KEY,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "A key clip.cpp requires of this modality or projector is absent (embedding, feed-forward and projection "
            "sizes, head and block counts, norm epsilon, image and patch size, mel bins, ...); it throws 'Key not "
            "found'."
        ),
    ),
    CodeInfo(
        Code.CLIP_WRONG_TYPE,
        Severity.ERROR,
        LlamaCpp.ABORTS,
        (
            "A scalar key clip.cpp reads (general.name, a projector type, a size, a flag) is stored with another "
            "type (a uint32 as int32, a string as an array, a bool as uint8): gguf_get_val_* fails its GGML_ASSERT "
            "and the process loading the projector aborts."
        ),
    ),
    CodeInfo(
        Code.CLIP_BAD_HPARAM,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "A hyperparameter clip.cpp rejects: image_size past 8192, patch_size 0 or past 65535, embedding length "
            "0, a value past INT32_MAX, merge factor 0 or past 65535, window size past 4096, image_max_pixels below "
            "image_min_pixels, mel bins outside 1 to 256, an odd image_grid_pinpoints, use_gelu and use_silu both, "
            "image_mean/image_std shorter than 3, a feature layer past block_count, an array of the wrong type."
        ),
    ),
    CodeInfo(
        Code.CLIP_HPARAM_ABORT,
        Severity.ERROR,
        LlamaCpp.ABORTS,
        (
            "A hyperparameter clip.cpp checks with GGML_ASSERT (minicpmv4_6 scale factor other than 2 or 4, a zero "
            "minimax_m3 merge size, internvl tiles min past max): the process loading the projector aborts."
        ),
    ),
    CodeInfo(
        Code.CLIP_MISSING_TENSOR,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "An encoder block lacks a tensor clip.cpp's load_tensors requires of every block ({v,a}.blk.N.attn_out, "
            "and ffn_up and ffn_down unless the block has experts), often a block_count past the blocks present; it "
            "throws 'unable to find tensor'. Projector-specific tensors are not checked."
        ),
    ),
    CodeInfo(
        Code.CLIP_EMBD_MISMATCH,
        Severity.WARNING,
        LlamaCpp.REFUSES,
        (
            "A projector paired with a language model of the collection (same directory) projects to another width "
            "(clip.vision.projection_dim) than the model's embedding length: mtmd refuses the pair. A warning: the "
            "pair is guessed from the directory; legacy projector types (mlp, ldp, resampler...) are not compared."
        ),
    ),
    CodeInfo(
        Code.CLIP_ARCH_MISMATCH,
        Severity.WARNING,
        None,
        (
            "A projector paired with a language model of the collection (same directory) is of a type made for other "
            "architectures (a gemma3 projector beside a qwen2 model): likely the wrong mmproj file, which mtmd may "
            "load and feed the model embeddings it was not trained on."
        ),
    ),
)
