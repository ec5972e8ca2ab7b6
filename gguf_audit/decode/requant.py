"""Was this quant made from that source? Re-quantize the source's sampled rows and compare the bytes.

llama.cpp's quantizers for the legacy block types (Q4_0, Q4_1, Q5_0, Q5_1,
Q8_0) and its F16/BF16 conversions are deterministic functions of the float
rows when no importance matrix is given: ``llama-quantize`` from an F32, F16 or
BF16 GGUF gives the same bytes every time. gguf-py's numpy quantizers
(``gguf.quants.quantize``) reproduce them bit for bit (tested against ggml's
own ``ggml_quantize_chunk`` from the pinned build, on random and edge-case
rows, and against the corpus quants ``llama-quantize`` made), so a quant whose
sampled blocks are exactly the re-quantized source blocks was made from that
source (``derived``); one whose blocks differ was not, or was made another way
(``contradicted``); a type without such a quantizer, or a quantization that
used an importance matrix, cannot be decided from samples (``unprovable``).

Pure: float32 rows and block bytes in, a verdict out.
"""

from __future__ import annotations

from collections.abc import Iterable
from enum import StrEnum
from typing import Final

import numpy as np
import numpy.typing as npt
from gguf.quants import quantize

from gguf_audit.format.ggml_types import ggml_type_info
from gguf_audit.gguf_constants import GGMLQuantizationType

__all__ = [
    "IMATRIX_TYPES",
    "REPRODUCIBLE_TYPES",
    "Derivation",
    "block_derived",
    "derivation_of",
    "reproducible",
    "requantize",
]


class Derivation(StrEnum):
    """What the sampled blocks prove of a quant against a full-precision source."""

    DERIVED = "derived"
    """Every compared block is exactly the source's block re-quantized."""
    CONTRADICTED = "contradicted"
    """A compared block differs: not made from this source, or by another quantizer or recipe."""
    UNPROVABLE = "unprovable"
    """No block could be decided (a type without a deterministic quantizer here, or an importance matrix)."""


REPRODUCIBLE_TYPES: Final = frozenset(
    int(t)
    for t in (
        GGMLQuantizationType.F32,
        GGMLQuantizationType.F16,
        GGMLQuantizationType.BF16,
        GGMLQuantizationType.Q4_0,
        GGMLQuantizationType.Q4_1,
        GGMLQuantizationType.Q5_0,
        GGMLQuantizationType.Q5_1,
        GGMLQuantizationType.Q8_0,
    )
)
"""The ggml types whose bytes a float row determines (no importance matrix), proven bit-exact against ggml."""

IMATRIX_TYPES: Final = frozenset(
    int(t)
    for t in (
        GGMLQuantizationType.Q4_0,
        GGMLQuantizationType.Q4_1,
        GGMLQuantizationType.Q5_0,
        GGMLQuantizationType.Q5_1,
    )
)
"""The reproducible types whose quantizer takes an importance matrix when one is given (ggml-quants.c's
``quantize_q4_0`` and kin: a weighted search replaces the reference rounding). Q8_0 ignores it."""


def reproducible(type_id: int, *, imatrix: bool) -> bool:
    """Whether a block of ``type_id`` can be re-made from float rows (``imatrix``: the quant says it used one)."""
    return type_id in REPRODUCIBLE_TYPES and not (imatrix and type_id in IMATRIX_TYPES)


def requantize(values: npt.NDArray[np.float32], type_id: int) -> bytes:
    """``values`` (a whole number of the type's blocks) quantized as llama.cpp quantizes them."""
    block_elems = ggml_type_info(type_id).block_elems
    rows = np.ascontiguousarray(values, dtype=np.float32).reshape(-1, block_elems)
    # Values past a half float's range (or zero blocks) overflow and divide as ggml's C does: same bytes, no noise.
    with np.errstate(over="ignore", divide="ignore", invalid="ignore"):
        return bytes(np.asarray(quantize(rows, GGMLQuantizationType(type_id))).tobytes())


def block_derived(raw: bytes, source_values: npt.NDArray[np.float32], type_id: int) -> bool:
    """Whether the quant's bytes ``raw`` are exactly ``source_values`` re-quantized as ``type_id``."""
    return requantize(source_values, type_id) == bytes(raw)


def derivation_of(judgements: Iterable[bool | None]) -> Derivation:
    """A verdict over blocks (or tensors): True derived, False contradicted, None undecided."""
    seen = set(judgements)
    if False in seen:
        return Derivation.CONTRADICTED
    if True in seen:
        return Derivation.DERIVED
    return Derivation.UNPROVABLE
