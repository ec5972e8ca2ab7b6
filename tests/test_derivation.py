"""Derivation proven from samples: re-quantized source blocks against the quant's bytes.

The re-quantizers are trusted only because they are bit-exact with ggml's own
``ggml_quantize_chunk`` (the pinned build's ``libggml-base``, called through
ctypes) on random and edge-case rows, and with the corpus quants that
``llama-quantize`` made from the corpus F32 file.
"""

from __future__ import annotations

import ctypes
import os
from pathlib import Path

import numpy as np
import pytest
from corpus import corpus_dir

from gguf_audit.compare import compare_files
from gguf_audit.decode.requant import (
    IMATRIX_TYPES,
    REPRODUCIBLE_TYPES,
    Derivation,
    block_derived,
    derivation_of,
    reproducible,
    requantize,
)
from gguf_audit.report.text import render_comparison
from gguf_audit.testing.oracle import find_oracle

MODELS = corpus_dir() / "models"
F32 = MODELS / "tiny-llama-F32.gguf"


def _ggml() -> ctypes.CDLL:
    oracle = find_oracle()
    if oracle is None:
        if os.environ.get("GGUF_AUDIT_REQUIRE_ORACLE") == "1":
            pytest.fail("llama.cpp's libraries are missing (../shared/llama.cpp)")
        pytest.skip("llama.cpp's libraries are missing (../shared/llama.cpp or GGUF_AUDIT_LLAMA_CPP)")
    lib = ctypes.CDLL(str(Path(oracle.binary).parent.parent / "lib" / "libggml-base.so"))
    lib.ggml_quantize_chunk.restype = ctypes.c_size_t
    lib.ggml_quantize_chunk.argtypes = [
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_void_p,
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_int64,
        ctypes.c_void_p,
    ]
    return lib


def _rows(seed: int) -> list[np.ndarray]:
    """Rows a quantizer finds hard: tiny and huge scales, zeros, constants, one outlier, ties at half steps."""
    rng = np.random.default_rng(seed)
    rows = [(rng.standard_normal((4, 256)) * s).astype(np.float32) for s in (1e-8, 1e-3, 1.0, 1e3, 6e4)]
    edge = rng.standard_normal((4, 256)).astype(np.float32)
    edge[0, :32] = 0.0
    edge[1, :32] = 0.75
    edge[2, 5] = 1e6
    edge[3, :32] = np.arange(32, dtype=np.float32) / 2 - 8
    return [*rows, edge]


@pytest.mark.conformance
@pytest.mark.parametrize("type_id", sorted(REPRODUCIBLE_TYPES - {0}))
def test_requantize_is_bit_exact_with_ggml(type_id: int) -> None:
    ggml = _ggml()
    for seed in range(3):
        for x in _rows(seed):
            dst = ctypes.create_string_buffer(x.size * 4)
            size = ggml.ggml_quantize_chunk(type_id, x.ctypes.data, dst, 0, x.shape[0], x.shape[1], None)
            assert requantize(x, type_id) == dst.raw[:size]


@pytest.mark.parametrize(
    ("quant", "reference", "expected"),
    [
        ("Q8_0", "F32", Derivation.DERIVED),
        ("Q4_0", "F32", Derivation.DERIVED),
        ("F16", "F32", Derivation.DERIVED),
        ("BF16", "F32", Derivation.DERIVED),
        # Made from the F32 file, not from the F16 one: F16's rounding changes what Q8_0 would make of it.
        ("Q8_0", "F16", Derivation.CONTRADICTED),
        ("Q4_0", "BF16", Derivation.CONTRADICTED),
        # K-quants and IQ types have no re-quantizer here; IQ2_XXS was also made with an importance matrix.
        ("Q4_K_M", "F32", Derivation.UNPROVABLE),
        ("IQ2_XXS", "F32", Derivation.UNPROVABLE),
    ],
)
def test_corpus_quants_against_their_sources(quant: str, reference: str, expected: Derivation) -> None:
    result = compare_files(str(MODELS / f"tiny-llama-{quant}.gguf"), str(MODELS / f"tiny-llama-{reference}.gguf"))
    assert result.derivation is expected
    converted = [t for t in result.tensors if t.quant_type != t.reference_type]
    if expected is Derivation.DERIVED:
        decided = [t for t in converted if t.derivation == Derivation.DERIVED]
        assert decided and all(t.n_derived_blocks == t.n_blocks for t in decided)
    assert result.summary()["derivation"] == str(expected)
    said = render_comparison(result)
    if expected is Derivation.DERIVED:
        summary = result.summary()
        assert 0 < summary["n_derived_blocks"] <= summary["n_converted_blocks"]
        assert (
            f"derivation: derived (every compared block of a converted tensor is the reference's, re-quantized bit "
            f"for bit): {summary['n_derived_blocks']} of the {summary['n_converted_blocks']} blocks read re-made"
        ) in said
        assert f"in {summary['n_derived_tensors']} of {summary['n_converted_tensors']} converted tensors" in said
    else:
        assert "blocks read re-made" not in said


def test_one_changed_value_contradicts() -> None:
    rng = np.random.default_rng(1)
    x = rng.standard_normal(64).astype(np.float32)
    raw = requantize(x, 8)  # Q8_0
    assert block_derived(raw, x, 8)
    y = x.copy()
    y[np.argmax(np.abs(y))] *= 1.01  # the block's largest magnitude sets its scale
    assert not block_derived(raw, y, 8)


def test_an_importance_matrix_makes_legacy_types_unprovable() -> None:
    assert all(not reproducible(t, imatrix=True) for t in IMATRIX_TYPES)
    assert reproducible(8, imatrix=True)  # Q8_0's quantizer takes no importance matrix
    assert not reproducible(12, imatrix=False)  # Q4_K: no re-quantizer here
    assert derivation_of([True, None, True]) is Derivation.DERIVED
    assert derivation_of([True, False]) is Derivation.CONTRADICTED
    assert derivation_of([None, None]) is Derivation.UNPROVABLE
