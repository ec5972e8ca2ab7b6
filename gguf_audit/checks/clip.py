"""Multimodal projector (mmproj, ``clip``) files: what libmtmd's clip.cpp refuses from the header alone.

A vision or audio GGUF ships as two files: the language model, and a
projector (``general.architecture = "clip"``) that libmtmd's
``tools/mtmd/clip.cpp`` loads beside it. libllama refuses a projector as a
model ("CLIP cannot be used as main model"), so such a file is never
``loadable`` (``clip.projector_file``); the other ``clip.*`` findings say what
clip.cpp b11312 does with it, read from ``clip_model_loader::load_hparams``
(the oracle runs libllama and cannot load projectors):

- one load per modality whose ``clip.has_*_encoder`` is true (audio is
  skipped beside a ``gemma3nv`` vision projector); none at all is refused;
- the projector type, from ``clip.projector_type`` or the modality's own key,
  must be one clip.cpp knows;
- the scalar hyperparameters are read with ``gguf_get_val_*``, which asserts
  the stored type (a wrong type aborts the process), and a uint32 past
  INT32_MAX throws;
- arrays (pinpoints, image mean and std, feature layers) must be arrays of
  the type read; the bounds of its sanity block (image size, patch size,
  embedding length, merge factor, window size, pixels, mel bins) throw.

Every standard encoder block must hold attn_out, ffn_up and ffn_down (or experts);
projector-specific tensor requirements are not checked here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

import numpy as np

from gguf_audit.codes import Code
from gguf_audit.findings import Finding, finding
from gguf_audit.format.model import KV, Header, ValueType

__all__ = [
    "CLIP_LLAMA_CPP_BUILD",
    "PACKED_PREFIXES",
    "PROJECTOR_TYPES",
    "check_clip",
    "check_packed_multimodal",
    "is_projector",
    "projector_type",
]

CLIP_LLAMA_CPP_BUILD: Final = "b11312"
"""The clip.cpp the tables below were read from (tools/mtmd/clip-impl.h, clip.cpp)."""

PROJECTOR_TYPES: Final = frozenset(
    {
        "mlp", "ldp", "ldpv2", "resampler", "adapter", "qwen2vl_merger", "qwen2.5vl_merger",
        "qwen3vl_merger", "ling3vl", "step3vl", "gemma3", "gemma3nv", "gemma3na", "gemma4v", "gemma4a",
        "gemma4uv", "gemma4ua", "phi4", "idefics3", "pixtral", "ultravox", "internvl", "llama4", "qwen2a",
        "qwen3a", "glma", "qwen2.5o", "voxtral", "meralion", "musicflamingo", "lfm2", "kimivl", "paddleocr",
        "lightonocr", "cogvlm", "janus_pro", "dots_ocr", "dots3note_v", "dots3note_a", "deepseekocr",
        "deepseekocr2", "deepseek4v", "lfm2a", "glm4v", "glm5v", "youtuvl", "yasa2", "kimik25",
        "nemotron_v2_vl", "exaone4_5", "hunyuanvl", "minicpmv4_6", "granite_speech", "mimovl", "minimax_m3",
        "granite4_vision", "mimo_audio", "parakeet", "qwen3tts_spkenc", "qwen3tts_gen", "pockettts_spkenc",
        "pockettts_gen", "muse-glimmer",
    }
)  # fmt: skip
"""``PROJECTOR_TYPE_NAMES`` of clip-impl.h (b11312)."""

_SCALE_FACTOR_MERGE: Final = frozenset(
    {"internvl", "nemotron_v2_vl", "idefics3", "lfm2", "kimivl", "kimik25", "gemma3", "gemma3nv", "step3vl", "llama4"}
)
"""Projectors whose merge factor is ``clip.vision.projector.scale_factor``, when present."""
_SPATIAL_MERGE: Final = frozenset(
    {
        "pixtral", "lightonocr", "qwen2vl_merger", "qwen2.5vl_merger", "qwen3vl_merger", "ling3vl",
        "muse-glimmer", "mimovl", "youtuvl", "glm4v", "glm5v", "hunyuanvl", "exaone4_5",
    }
)  # fmt: skip
"""Projectors whose merge factor is ``clip.vision.spatial_merge_size``, when present."""
_REQUIRED_MERGE: Final = {
    "dots_ocr": "clip.vision.projector.scale_factor",
    "deepseek4v": "clip.vision.projector.scale_factor",
    "dots3note_v": "clip.vision.spatial_merge_size",
}
"""Projectors that require their merge factor key."""
_REQUIRED_PIXELS: Final = frozenset({"phi4", "dots_ocr", "dots3note_v", "mimovl", "glm5v", "paddleocr", "exaone4_5"})
"""Projectors that require clip.vision.image_min_pixels and image_max_pixels."""
_WINDOW_KEY: Final = {
    "mimovl": "clip.vision.window_size",
    "youtuvl": "clip.vision.window_size",
    "deepseekocr": "clip.vision.window_size",
    "deepseekocr2": "clip.vision.window_size",
    "mimo_audio": "clip.audio.window_size",
}
"""Projectors that require a window size; clip.cpp refuses one past 4096."""
_NOT_FFT: Final = frozenset({"gemma4ua", "pockettts_spkenc"})
"""Audio projectors without a mel filterbank: their n_mel_bins may pass 256."""

PACKED_PREFIXES: Final = ("v.", "a.", "mm.", "resampler.")
"""Tensor-name prefixes of clip.cpp's encoders and projectors (TN_* in clip-impl.h); llama.cpp's models use none."""

_NO_STANDARD_LAYERS: Final = frozenset({"gemma3nv", "qwen3tts_spkenc", "pockettts_gen"})
"""Projectors whose encoder has no standard blocks (clip.cpp's ``has_standard_layers``)."""
_TENSOR_PREFIX: Final = {"vision": "v", "audio": "a", "gen.audio": "a.gen.code"}

_INT32_MAX: Final = 2**31 - 1
_MODALITIES: Final = (
    ("vision", "clip.has_vision_encoder", "clip.vision.projector_type"),
    ("audio", "clip.has_audio_encoder", "clip.audio.projector_type"),
    ("gen.audio", "clip.has_gen_audio_encoder", "clip.gen.audio.projector_type"),
)


def is_projector(header: Header) -> bool:
    """A multimodal projector file: architecture ``clip`` (or ``general.type`` ``mmproj``)."""
    return header.get_str("general.architecture") == "clip" or header.get_str("general.type") == "mmproj"


def projector_type(header: Header, modality: str = "vision") -> str | None:
    """The projector type clip.cpp reads for ``modality``: the shared key first, then the modality's own."""
    shared = header.get_str("clip.projector_type")
    if shared:
        return shared
    own = dict((m, key) for m, _, key in _MODALITIES).get(modality)
    return header.get_str(own) if own else None


def check_clip(header: Header) -> Iterator[Finding]:
    """Yield the findings of a projector file's header, as libllama and clip.cpp judge it."""
    yield finding(Code.CLIP_PROJECTOR_FILE, _projector_summary(header))
    reader = _Reader(header)
    # The loader's constructor: name and description (get_string asserts a string), then every modality flag.
    reader.kv("general.name", ValueType.STRING, False)
    reader.kv("general.description", ValueType.STRING, False)
    enabled = {modality: reader.bool(flag) for modality, flag, _ in _MODALITIES}
    yield from reader.take()
    loaded: list[str] = []
    skip_audio = False
    for modality, _, own_key in _MODALITIES:
        if not enabled[modality] or (modality == "audio" and skip_audio):
            continue
        loaded.append(modality)
        reader.kv("clip.projector_type", ValueType.STRING, False)
        if not header.get_str("clip.projector_type"):
            reader.kv(own_key, ValueType.STRING, False)
        aborted = reader.take()
        if aborted:
            yield from aborted
            continue
        proj = projector_type(header, modality)
        found = list(_check_modality(reader, modality, proj))
        yield from found
        if not found and proj is not None:
            # load_tensors runs only once load_hparams passed.
            yield from _check_layer_tensors(header, modality, proj)
        if modality == "vision" and proj == "gemma3nv":
            skip_audio = True  # clip_init: Gemma 3n's audio tensors are not loaded
    yield from reader.take()
    if "vision" not in loaded and "audio" not in loaded:
        # mtmd_init refuses a projector without a vision or audio context (a gen-audio one alone included).
        yield finding(Code.CLIP_NO_ENCODER, "neither clip.has_vision_encoder nor has_audio_encoder is true")


def check_packed_multimodal(header: Header) -> Iterator[Finding]:
    """A language-model file that also holds encoder tensors (one finding naming how many and the first)."""
    packed = [t.name for t in header.tensors if t.name.startswith(PACKED_PREFIXES)]
    if packed:
        yield finding(
            Code.TENSOR_PACKED_MULTIMODAL,
            f"{len(packed)} vision/audio encoder tensors in a language-model file, first {packed[0]!r}",
            tensor=packed[0],
        )


def _projector_summary(header: Header) -> str:
    kinds = [m for m, flag, _ in _MODALITIES if header.get_bool(flag)]
    proj = header.get_str("clip.projector_type") or "/".join(
        p for m, _, key in _MODALITIES if (p := header.get_str(key))
    )
    return (
        f"a multimodal projector ({proj or 'no projector type'}; {', '.join(kinds) or 'no encoder'}) for "
        "libmtmd (--mmproj); libllama refuses it as a model"
    )


class _Reader:
    """clip.cpp's get_* helpers over a header: each read records the finding clip.cpp's own read would raise."""

    def __init__(self, header: Header) -> None:
        self.header = header
        self.found: list[Finding] = []

    def take(self) -> list[Finding]:
        out, self.found = self.found, []
        return out

    def kv(self, key: str, want: ValueType, required: bool) -> KV | None:
        kv = self.header.metadata.get(key)
        if kv is None:
            if required:
                self.found.append(finding(Code.CLIP_MISSING_KEY, f"{key} is absent"))
            return None
        if kv.type is not want:
            self.found.append(finding(Code.CLIP_WRONG_TYPE, f"{key} is {kv.type_name}, read as {want.spelling}"))
            return None
        return kv

    def u32(self, key: str, *, required: bool = True) -> int | None:
        kv = self.kv(key, ValueType.UINT32, required)
        if kv is None:
            return None
        value = self.header.get_int(key) or 0
        if value > _INT32_MAX:
            self.found.append(finding(Code.CLIP_BAD_HPARAM, f"{key} is {value}, past INT32_MAX"))
            return None
        return value

    def f32(self, key: str, *, required: bool = True) -> None:
        self.kv(key, ValueType.FLOAT32, required)

    def bool(self, key: str) -> bool:
        kv = self.kv(key, ValueType.BOOL, False)
        return kv is not None and bool(kv.value)

    def array(self, key: str, item: ValueType) -> list[float] | None:
        kv = self.header.metadata.get(key)
        if kv is None:
            return None
        if kv.type is not ValueType.ARRAY or kv.item_type is not item:
            self.found.append(finding(Code.CLIP_BAD_HPARAM, f"{key} is {kv.type_name}, read as array[{item.spelling}]"))
            return None
        return [float(x) for x in np.asarray(kv.value).tolist()]

    def bad(self, message: str) -> None:
        self.found.append(finding(Code.CLIP_BAD_HPARAM, message))


def _check_modality(r: _Reader, modality: str, proj: str | None) -> Iterator[Finding]:
    """One modality's load_hparams, in clip.cpp's order as far as the header decides it."""
    if not proj or proj not in PROJECTOR_TYPES:
        shown = repr(proj) if proj else "absent"
        yield finding(Code.CLIP_UNKNOWN_PROJECTOR, f"the {modality} projector type is {shown}")
        return
    if proj == "qwen2.5o":
        proj = "qwen2.5vl_merger" if modality == "vision" else "qwen2a"
    p = f"clip.{modality}"
    n_embd = r.u32(f"{p}.embedding_length")
    r.u32(f"{p}.attention.head_count")
    r.u32(f"{p}.attention.head_dim", required=False)
    r.u32(f"{p}.feed_forward_length")
    n_layer = r.u32(f"{p}.block_count")
    r.u32(f"{p}.projection_dim")
    r.f32(f"{p}.attention.layer_norm_epsilon")
    r.u32(f"{p}.attention.head_count_kv", required=False)
    yield from r.take()
    image_size = patch_size = None
    if modality == "vision":
        image_size = r.u32("clip.vision.image_size")
        patch_size = r.u32("clip.vision.patch_size")
        r.kv("clip.minicpmv_version", ValueType.INT32, False)
        r.u32("clip.minicpmv_query_num", required=False)
    elif modality == "audio":
        n_mel = r.u32("clip.audio.num_mel_bins")
        if n_mel is not None and (n_mel <= 0 or (n_mel > 256 and proj not in _NOT_FFT)):
            r.bad(f"clip.audio.num_mel_bins is {n_mel}, outside [1, 256]")
    else:
        r.kv("clip.gen.audio.model_variant", ValueType.STRING, False)
    pinpoints = r.array("clip.vision.image_grid_pinpoints", ValueType.INT32)
    if pinpoints is not None and len(pinpoints) % 2:
        r.bad(f"clip.vision.image_grid_pinpoints has {len(pinpoints)} items, odd")
    if r.bool("clip.use_gelu") and r.bool("clip.use_silu"):
        r.bad("clip.use_gelu and clip.use_silu are both true")
    r.kv("clip.vision.mm_patch_merge_type", ValueType.STRING, False)
    if modality == "vision":
        for key in ("clip.vision.image_mean", "clip.vision.image_std"):
            values = r.array(key, ValueType.FLOAT32)
            if key not in r.header.metadata or (values is not None and len(values) < 3):
                r.bad(f"{key} has {len(values or [])} items, fewer than 3")
    layers = r.array(f"{p}.feature_layer", ValueType.INT32)
    if layers is not None and n_layer is not None:
        past = [int(v) for v in layers if v > n_layer]
        if past:
            r.bad(f"{p}.feature_layer holds {past[0]}, past block_count {n_layer}")
    yield from r.take()
    yield from _check_projector(r, proj, n_embd, image_size, patch_size)


def _check_layer_tensors(header: Header, modality: str, proj: str) -> Iterator[Finding]:
    """The first block without the tensors load_tensors requires of every block: attn_out, and ffn_up and
    ffn_down unless the block is a mixture of experts (``ffn_gate_exps``)."""
    n_layer = header.get_int(f"clip.{modality}.block_count")
    if proj in _NO_STANDARD_LAYERS or n_layer is None or n_layer <= 0:
        return
    names = {t.name for t in header.tensors}
    p = _TENSOR_PREFIX[modality]
    # Past the tensor count some block must lack its tensors: a forged block_count costs no more than that.
    for il in range(min(n_layer, len(names) + 1)):
        needed = [f"{p}.blk.{il}.attn_out.weight"]
        if f"{p}.blk.{il}.ffn_gate_exps.weight" not in names:
            needed += [f"{p}.blk.{il}.ffn_up.weight", f"{p}.blk.{il}.ffn_down.weight"]
        missing = [n for n in needed if n not in names]
        if missing:
            yield finding(
                Code.CLIP_MISSING_TENSOR,
                f"tensor {missing[0]!r} is absent ({modality} block_count {n_layer})",
                tensor=missing[0],
            )
            return


def _check_projector(
    r: _Reader, proj: str, n_embd: int | None, image_size: int | None, patch_size: int | None
) -> Iterator[Finding]:
    """The projector-specific keys the header decides, then clip.cpp's sanity block."""
    merge_key = _REQUIRED_MERGE.get(proj)
    if merge_key is None and proj in _SCALE_FACTOR_MERGE:
        merge_key = "clip.vision.projector.scale_factor"
    elif merge_key is None and proj in _SPATIAL_MERGE:
        merge_key = "clip.vision.spatial_merge_size"
    merge = r.u32(merge_key, required=proj in _REQUIRED_MERGE) if merge_key else None
    if proj == "minicpmv4_6":
        merge = r.u32("clip.vision.projector.scale_factor", required=False)
        if merge is not None and merge not in (2, 4):
            yield finding(Code.CLIP_HPARAM_ABORT, f"minicpmv4_6 scale_factor is {merge}, not 2 or 4")
        merge = None
    elif proj == "minimax_m3" and merge == 0:
        yield finding(Code.CLIP_HPARAM_ABORT, "minimax_m3 spatial_merge_size is 0 (GGML_ASSERT n_merge > 0)")
        merge = None
    if proj == "internvl":
        lo = r.u32("clip.vision.preproc_min_tiles", required=False)
        hi = r.u32("clip.vision.preproc_max_tiles", required=False)
        if lo is not None and hi is not None and lo > hi:
            yield finding(Code.CLIP_HPARAM_ABORT, f"internvl preproc_min_tiles {lo} is past preproc_max_tiles {hi}")
    pixels = None
    if proj in _REQUIRED_PIXELS or proj == "hunyuanvl":
        required = proj in _REQUIRED_PIXELS
        pixels = (
            r.u32("clip.vision.image_min_pixels", required=required),
            r.u32("clip.vision.image_max_pixels", required=required),
        )
    window_key = _WINDOW_KEY.get(proj)
    window = r.u32(window_key) if window_key else None
    yield from r.take()
    # The sanity block, for every modality (audio sets image_size 0, patch_size 1).
    if image_size is not None and image_size > 8192:
        r.bad(f"clip.vision.image_size is {image_size}, past 8192")
    if patch_size is not None and not 0 < patch_size < 65536:
        r.bad(f"clip.vision.patch_size is {patch_size}, not in [1, 65535]")
    if n_embd == 0:
        r.bad("the encoder's embedding_length is 0")
    if pixels is not None and pixels[0] is not None and pixels[1] is not None and pixels[1] < pixels[0]:
        r.bad(f"image_max_pixels {pixels[1]} is below image_min_pixels {pixels[0]}")
    if merge is not None and merge_key is not None and not 0 < merge < 65536:
        r.bad(f"{merge_key} is {merge}, not in [1, 65535]")
    if window is not None and window_key is not None and window > 4096:
        r.bad(f"{window_key} is {window}, past 4096")
    yield from r.take()
