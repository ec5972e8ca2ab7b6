"""Quantization error maths: the step of a ggml type at given values, and the error of values against a reference.

Pure: float arrays in, a :class:`TensorError` out. A correct quantizer rounds
each value to a nearby level, so its error stays within about half a
*quantization step* (the block's largest magnitude over ``2**(bits - 1)``)
and a value well away from zero keeps its sign. A wrong layout (nibbles
swapped, scales misread, a permuted block) puts values in the wrong places:
errors reach whole steps and signs flip for about half of the values, which
:attr:`TensorError.layout_suspect` says.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Final

import numpy as np
import numpy.typing as npt

from gguf_audit.format.ggml_types import ggml_type_name

__all__ = ["OVER_STEP_LIMIT", "SIGN_FLIP_LIMIT", "TensorError", "compare_values", "quantization_steps"]

# Fractions of compared values past which a tensor's layout is suspect. A
# correct quantization has (almost) no error beyond one step and no sign flip
# among values of at least one step; a wrong layout has tens of percent of both.
# The real llama.cpp quantizations in the corpus (Q8_0 to IQ2_XXS, with an
# importance matrix for the last) stay below 1% on both.
OVER_STEP_LIMIT: Final = 0.05
SIGN_FLIP_LIMIT: Final = 0.05
_MIN_SIGNIFICANT: Final = 32

# Levels per value, as the bits of a uniform grid: the step is a block's
# largest magnitude over 2**(bits - 1). Non-uniform and vector grids (IQ*,
# MXFP4, NVFP4) get their nominal bits; their widest gaps still fall within
# a step of this size.
_GRID_BITS: Final[dict[str, int]] = {
    "Q1_0": 1,
    "Q2_0": 2,
    "Q4_0": 4,
    "Q4_1": 4,
    "Q5_0": 5,
    "Q5_1": 5,
    "Q8_0": 8,
    "Q8_1": 8,
    "Q2_K": 2,
    "Q3_K": 3,
    "Q4_K": 4,
    "Q5_K": 5,
    "Q6_K": 6,
    "Q8_K": 8,
    "IQ1_S": 1,
    "IQ1_M": 1,
    "IQ2_XXS": 2,
    "IQ2_XS": 2,
    "IQ2_S": 2,
    "IQ3_XXS": 3,
    "IQ3_S": 3,
    "IQ4_NL": 4,
    "IQ4_XS": 4,
    "TQ1_0": 1,
    "TQ2_0": 1,
    "MXFP4": 4,
    "NVFP4": 4,
}

# Mantissa bits and the smallest step (subnormal spacing) of the float types.
_FLOAT_STEPS: Final[dict[str, tuple[int, float]]] = {
    "F64": (52, 2.0**-1074),
    "F32": (23, 2.0**-149),
    "F16": (10, 2.0**-24),
    "BF16": (7, 2.0**-133),
}


def quantization_steps(
    type_id: int, reference: npt.NDArray[np.floating[Any]], block_elems: int
) -> npt.NDArray[np.float64]:
    """Per value, the quantization step of ``type_id`` at the reference values.

    For block types: the largest magnitude of the value's block over
    ``2**(bits - 1)``. For float types: the spacing of the format at the
    value. ``reference`` holds whole blocks of ``block_elems`` values.
    """
    r = np.abs(np.asarray(reference, dtype=np.float64))
    name = ggml_type_name(type_id)
    if name in _FLOAT_STEPS:
        mantissa, smallest = _FLOAT_STEPS[name]
        return np.asarray(np.maximum(r * 2.0**-mantissa, smallest), dtype=np.float64)
    bits = _GRID_BITS.get(name)
    if bits is None or block_elems < 2 or r.size % block_elems:
        return np.ones_like(r)  # integers: one unit
    block_max = r.reshape(-1, block_elems).max(axis=1, keepdims=True)
    step = np.broadcast_to(block_max / 2.0 ** (bits - 1), (block_max.shape[0], block_elems)).reshape(-1)
    return np.asarray(np.maximum(step, np.finfo(np.float32).tiny), dtype=np.float64)


@dataclass(frozen=True, slots=True)
class TensorError:
    """The error of one tensor's sampled values against the reference."""

    name: str
    shape: tuple[int, ...]
    quant_type: str
    reference_type: str
    n_blocks: int
    n_values: int
    """Values compared (both finite)."""
    n_nonfinite: int
    """Values left out because either side is NaN or Inf."""
    rmse: float
    max_abs_error: float
    reference_rms: float
    relative_rmse: float
    """RMSE over the reference's RMS (0 when both are 0)."""
    sign_flips: int
    """Values whose sign differs (one negative, the other positive)."""
    n_significant: int
    """Reference values of at least one quantization step."""
    significant_sign_flips: int
    over_step_fraction: float
    """Fraction of values whose error is a whole quantization step or more."""
    rmse_steps: float
    """RMSE in quantization steps (about 0.29 for uniform rounding)."""
    layout_suspect: bool
    max_error_steps: float = 0.0
    """The largest error in quantization steps (about 0.5 for rounding to the nearest level)."""
    derivation: str | None = None
    """Whether the sampled blocks are the reference's re-quantized (``derived``, ``contradicted``,
    ``unprovable``: :mod:`gguf_audit.decode.requant`); None when not judged."""
    n_derived_blocks: int = 0
    """Compared blocks identical to the reference's blocks re-quantized."""

    @property
    def sign_flip_fraction(self) -> float:
        """Sign flips among the significant values."""
        return self.significant_sign_flips / self.n_significant if self.n_significant else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "shape": list(self.shape),
            "quant_type": self.quant_type,
            "reference_type": self.reference_type,
            "n_blocks": self.n_blocks,
            "n_values": self.n_values,
            "n_nonfinite": self.n_nonfinite,
            "rmse": self.rmse,
            "max_abs_error": self.max_abs_error,
            "reference_rms": self.reference_rms,
            "relative_rmse": self.relative_rmse,
            "sign_flips": self.sign_flips,
            "n_significant": self.n_significant,
            "significant_sign_flips": self.significant_sign_flips,
            "sign_flip_fraction": self.sign_flip_fraction,
            "over_step_fraction": self.over_step_fraction,
            "rmse_steps": self.rmse_steps,
            "layout_suspect": self.layout_suspect,
            "max_error_steps": self.max_error_steps,
            "derivation": self.derivation,
            "n_derived_blocks": self.n_derived_blocks,
        }


def compare_values(
    name: str,
    quant: npt.NDArray[np.floating[Any]],
    reference: npt.NDArray[np.floating[Any]],
    steps: npt.NDArray[np.float64],
    *,
    shape: tuple[int, ...] = (),
    quant_type: str = "",
    reference_type: str = "",
    n_blocks: int = 0,
) -> TensorError:
    """The error of ``quant`` against ``reference`` (same length), judged in ``steps``."""
    q = np.asarray(quant, dtype=np.float64).reshape(-1)
    r = np.asarray(reference, dtype=np.float64).reshape(-1)
    s = np.asarray(steps, dtype=np.float64).reshape(-1)
    if not q.shape == r.shape == s.shape:
        raise ValueError(f"quant, reference and steps must have one length. Got {q.size}, {r.size}, {s.size}.")
    finite = np.isfinite(q) & np.isfinite(r)
    q, r, s = q[finite], r[finite], s[finite]
    n = int(q.size)
    err = q - r
    rmse = float(np.sqrt(np.mean(err**2))) if n else 0.0
    ref_rms = float(np.sqrt(np.mean(r**2))) if n else 0.0
    flips = (q * r) < 0
    significant = np.abs(r) >= s
    over = np.abs(err) >= s
    n_significant = int(significant.sum())
    significant_flips = int((flips & significant).sum())
    over_fraction = float(over.mean()) if n else 0.0
    flip_fraction = significant_flips / n_significant if n_significant else 0.0
    suspect = over_fraction > OVER_STEP_LIMIT or (n_significant >= _MIN_SIGNIFICANT and flip_fraction > SIGN_FLIP_LIMIT)
    return TensorError(
        name=name,
        shape=shape,
        quant_type=quant_type,
        reference_type=reference_type,
        n_blocks=n_blocks,
        n_values=n,
        n_nonfinite=int((~finite).sum()),
        rmse=rmse,
        max_abs_error=float(np.abs(err).max()) if n else 0.0,
        reference_rms=ref_rms,
        relative_rmse=rmse / ref_rms if ref_rms else (0.0 if rmse == 0 else math.inf),
        sign_flips=int(flips.sum()),
        n_significant=n_significant,
        significant_sign_flips=significant_flips,
        over_step_fraction=over_fraction,
        rmse_steps=float(np.sqrt(np.mean((err / s) ** 2))) if n else 0.0,
        layout_suspect=bool(suspect),
        max_error_steps=float(np.max(np.abs(err) / s)) if n else 0.0,
    )
