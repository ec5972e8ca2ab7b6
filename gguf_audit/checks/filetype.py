"""Declared against observed: ``general.file_type`` and the file name's label, against the tensor types.

llama.cpp only prints the declared file type, but catalogues and people go by it
and by the ``-Q4_K_M`` in a file name. :func:`file_name_quantization` reads the
label; the weight matrices ``llama-quantize`` gives its default type (norms,
routers and embeddings left out) must hold at least one of the types the ftype
stands for. A shard holds some blocks only, so there only a wholesale contradiction
(float matrices for a quantized type, or the reverse) counts. Quantized tensors
also want ``general.quantization_version``.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from functools import cache, lru_cache
from typing import Final

from gguf_audit.checks.arch import block_index
from gguf_audit.checks.facts import HeaderFacts
from gguf_audit.codes import Code
from gguf_audit.findings import Finding, finding
from gguf_audit.format.ggml_types import ggml_type_info
from gguf_audit.format.model import TensorInfo
from gguf_audit.format.shard_names import model_id_for
from gguf_audit.gguf_constants import GGMLQuantizationType, Keys, LlamaFileType

__all__ = ["check_file_type", "file_name_quantization"]


Q = GGMLQuantizationType

# For each llama ftype, the ggml types llama-quantize gives the weight matrices it does not
# bump (default_type in llama_model_quantize_impl, and its siblings in the same mix).
_FTYPE_MAIN_TYPES: Final[dict[str, frozenset[int]]] = {
    name: frozenset(int(t) for t in types)
    for name, types in {
        "ALL_F32": (Q.F32,),
        "MOSTLY_F16": (Q.F16,),
        "MOSTLY_BF16": (Q.BF16,),
        "MOSTLY_Q4_0": (Q.Q4_0,),
        "MOSTLY_Q4_1": (Q.Q4_1,),
        "MOSTLY_Q5_0": (Q.Q5_0,),
        "MOSTLY_Q5_1": (Q.Q5_1,),
        "MOSTLY_Q8_0": (Q.Q8_0,),
        "MOSTLY_Q2_K": (Q.Q2_K,),
        "MOSTLY_Q2_K_S": (Q.Q2_K,),
        "MOSTLY_Q3_K_S": (Q.Q3_K,),
        "MOSTLY_Q3_K_M": (Q.Q3_K,),
        "MOSTLY_Q3_K_L": (Q.Q3_K,),
        "MOSTLY_Q4_K_S": (Q.Q4_K,),
        "MOSTLY_Q4_K_M": (Q.Q4_K,),
        "MOSTLY_Q5_K_S": (Q.Q5_K,),
        "MOSTLY_Q5_K_M": (Q.Q5_K,),
        "MOSTLY_Q6_K": (Q.Q6_K,),
        "MOSTLY_IQ2_XXS": (Q.IQ2_XXS,),
        "MOSTLY_IQ2_XS": (Q.IQ2_XS,),
        "MOSTLY_IQ2_S": (Q.IQ2_XS, Q.IQ2_S),
        "MOSTLY_IQ2_M": (Q.IQ2_S, Q.IQ2_XS),
        "MOSTLY_IQ3_XXS": (Q.IQ3_XXS,),
        "MOSTLY_IQ3_XS": (Q.IQ3_S, Q.IQ3_XXS),
        "MOSTLY_IQ3_S": (Q.IQ3_S,),
        "MOSTLY_IQ3_M": (Q.IQ3_S,),
        "MOSTLY_IQ1_S": (Q.IQ1_S,),
        "MOSTLY_IQ1_M": (Q.IQ1_M,),
        "MOSTLY_IQ4_NL": (Q.IQ4_NL,),
        "MOSTLY_IQ4_XS": (Q.IQ4_XS,),
        "MOSTLY_TQ1_0": (Q.TQ1_0,),
        "MOSTLY_TQ2_0": (Q.TQ2_0,),
        # Experts get MXFP4, every other matrix Q8_0 (a dense model has no MXFP4 at all).
        "MOSTLY_MXFP4_MOE": (Q.MXFP4, Q.Q8_0),
    }.items()
}
_FLOAT_TYPES: Final = frozenset(int(t) for t in (Q.F32, Q.F16, Q.BF16, Q.F64))

# Matrices llama-quantize gives the default type unless its mix bumps them; norms,
# routers, convolutions and embeddings are left out (kept in float or chosen apart).
_WEIGHT_BASES: Final = frozenset(
    {
        "attn_q",
        "attn_k",
        "attn_v",
        "attn_qkv",
        "attn_output",
        "ffn_gate",
        "ffn_up",
        "ffn_down",
        "ffn_gate_exps",
        "ffn_up_exps",
        "ffn_down_exps",
        "ffn_gate_shexp",
        "ffn_up_shexp",
        "ffn_down_shexp",
    }
)

_LABEL_ALIASES: Final[dict[str, tuple[str, ...]]] = {
    "FP32": ("ALL_F32",),
    "FP16": ("MOSTLY_F16",),
    "Q2_K": ("MOSTLY_Q2_K", "MOSTLY_Q2_K_S"),
    "Q3_K": ("MOSTLY_Q3_K_S", "MOSTLY_Q3_K_M", "MOSTLY_Q3_K_L"),
    "Q4_K": ("MOSTLY_Q4_K_S", "MOSTLY_Q4_K_M"),
    "Q5_K": ("MOSTLY_Q5_K_S", "MOSTLY_Q5_K_M"),
    "MXFP4": ("MOSTLY_MXFP4_MOE",),
}


@cache
def _labels() -> dict[str, frozenset[str]]:
    """Quantization label as written in file names -> the llama ftype names it stands for."""
    labels: dict[str, frozenset[str]] = {}
    for ft in LlamaFileType:
        if ft is LlamaFileType.GUESSED:
            continue
        labels[ft.name.split("_", 1)[1]] = frozenset({ft.name})
    for label, names in _LABEL_ALIASES.items():
        labels[label] = frozenset(names)
    return labels


def file_name_quantization(url: str) -> tuple[str, frozenset[str]] | None:
    """The quantization label at the end of a file name and the llama ftype names it means.

    ``model-Q4_K_M.gguf``, ``model.Q4_K_M.gguf``, ``model-q4_k_m-00001-of-00003.gguf`` give
    ``("Q4_K_M", {"MOSTLY_Q4_K_M"})``; one short trailing tag is looked past
    (``model-Q8_0-BE.gguf``). Labels that are not llama ftypes (``Q4_K_XL``, ``Q6_K_L``) give None.
    """
    stem = model_id_for(url).rsplit("/", 1)[-1]
    labels = _labels()
    ordered = sorted(labels, key=len, reverse=True)
    for _ in range(2):
        upper = stem.upper()
        for label in ordered:
            start = len(upper) - len(label)
            if upper.endswith(label) and (start == 0 or upper[start - 1] in "-._"):
                return label, labels[label]
        cut = max(stem.rfind("-"), stem.rfind("."))
        if cut <= 0 or len(stem) - cut > 6:
            return None
        stem = stem[:cut]
    return None


@lru_cache(maxsize=1 << 16)
def _block_weight(name: str) -> bool:
    """Whether ``name`` is ``blk.N.<base>.weight`` with a base llama-quantize quantizes (kept per name)."""
    b = block_index(name)
    return b is not None and name.endswith(".weight") and name[len(f"blk.{b}.") : -len(".weight")] in _WEIGHT_BASES


def _weights(tensors: Iterable[TensorInfo], allowed: frozenset[int]) -> list[TensorInfo]:
    """The matrices that llama-quantize would have given one of ``allowed`` (not too narrow for its blocks)."""
    blocks = [_block_elems(t) for t in allowed]
    out = []
    for t in tensors:
        if not _block_weight(t.name):
            continue
        if len(t.shape) < 2 or t.shape[0] <= 0 or any(t.shape[0] % n for n in blocks):
            continue
        out.append(t)
    return out


def _matrices(tensors: Iterable[TensorInfo]) -> list[TensorInfo]:
    """The 2-D (or wider) weights llama-quantize quantizes: the blocks' matrices, else any matrix."""
    tensors = list(tensors)
    in_blocks = [t for t in tensors if len(t.shape) >= 2 and _block_weight(t.name)]
    return in_blocks or [t for t in tensors if t.name.endswith(".weight") and len(t.shape) >= 2]


def _block_elems(type_id: int) -> int:
    return max(ggml_type_info(type_id).block_elems, 1)


def _type_summary(tensors: Iterable[TensorInfo]) -> str:
    counts = Counter(t.type_name for t in tensors)
    return ", ".join(f"{n} {name}" for name, n in counts.most_common(4))


def _contradicts(f: HeaderFacts, ftype_name: str) -> str | None:
    """Why the tensors contradict ``ftype_name``, or None when they agree (or cannot tell)."""
    allowed = _FTYPE_MAIN_TYPES.get(ftype_name)
    if allowed is None:
        return None
    if not allowed & _FLOAT_TYPES:
        # Rows that fit no block of the ftype's type fall back to another quantized
        # type or F16 in llama-quantize, never F32: all-F32 matrices contradict any
        # quantized ftype, whatever their width.
        matrices = _matrices(f.header.tensors)
        if matrices and all(t.type_id == Q.F32 for t in matrices):
            wanted = "/".join(sorted(Q(t).name for t in allowed))
            return (
                f"no weight matrix is {wanted}; all {len(matrices)} are F32, "
                "which llama-quantize never leaves a weight matrix at for a quantized type"
            )
    weights = _weights(f.header.tensors, allowed)
    if not weights:
        return None
    if any(t.type_id in allowed for t in weights):
        return None
    if f.shard:
        # A shard holds some blocks only (perhaps just the ones the mix bumps): judge only a
        # wholesale contradiction, float matrices for a quantized type or the reverse.
        floats = [t.type_id in _FLOAT_TYPES for t in weights]
        if not (all(floats) if not allowed & _FLOAT_TYPES else not any(floats)):
            return None
    wanted = "/".join(sorted(Q(t).name for t in allowed))
    return f"no weight matrix is {wanted}; they are {_type_summary(weights)}"


def check_file_type(f: HeaderFacts, url: str | None) -> Iterator[Finding]:
    """general.quantization_version and general.file_type against the tensor types and the file name."""
    h = f.header
    tensors = h.tensors
    quantized = [t for t in tensors if t.type_info.quantized]
    if quantized and Keys.General.QUANTIZATION_VERSION not in h.metadata:
        yield finding(
            Code.META_MISSING_QUANTIZATION_VERSION,
            f"{len(quantized)} tensors are quantized ({_type_summary(quantized)}) but "
            "general.quantization_version is absent",
        )
    kv = h.metadata.get(Keys.General.FILE_TYPE)
    declared: str | None = None
    raw = h.get_int(Keys.General.FILE_TYPE)
    if kv is not None and raw is not None and raw != LlamaFileType.GUESSED:
        base = raw & ~LlamaFileType.GUESSED
        try:
            declared = LlamaFileType(base).name
        except ValueError:
            yield finding(
                Code.META_FILE_TYPE_MISMATCH,
                f"general.file_type is {raw}, not a llama ftype id (removed or from a fork)",
                offset=kv.offset,
            )
        if declared is not None and tensors:
            why = _contradicts(f, declared)
            if why is not None:
                yield finding(
                    Code.META_FILE_TYPE_MISMATCH,
                    f"general.file_type is {raw} ({declared}) but {why}",
                    offset=kv.offset,
                )
    parsed = file_name_quantization(url) if url else None
    if parsed is None:
        return
    label, meant = parsed
    if declared is not None:
        if declared not in meant:
            yield finding(
                Code.META_FILE_TYPE_MISMATCH,
                f"the file name says {label} but general.file_type is {raw} ({declared})",
                offset=kv.offset if kv is not None else None,
            )
    elif tensors:
        reasons = [_contradicts(f, name) for name in sorted(meant)]
        if all(r is not None for r in reasons) and reasons[0] is not None:
            yield finding(Code.META_FILE_TYPE_MISMATCH, f"the file name says {label} but {reasons[0]}")
