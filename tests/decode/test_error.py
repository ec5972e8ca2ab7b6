"""gguf_audit.decode.error: quantization steps and the error measures, on known values."""

from __future__ import annotations

import numpy as np
import pytest

from gguf_audit.decode.error import compare_values, quantization_steps

Q4_0 = 2


def test_error_measures_on_known_values() -> None:
    r = np.array([1.0, -1.0, 0.5, -0.5], dtype=np.float32)
    q = np.array([1.0, -1.0, 0.5, 0.5], dtype=np.float32)  # one sign flip, error 1.0
    steps = quantization_steps(Q4_0, np.tile(r, 8), 32)[:4]
    assert np.allclose(steps, 1.0 / 8)  # max |x| over 2**(4-1)
    e = compare_values("w", q, r, steps)
    assert e.rmse == pytest.approx(0.5) and e.max_abs_error == pytest.approx(1.0)
    assert e.reference_rms == pytest.approx(np.sqrt(0.625)) and e.sign_flips == 1
    assert e.over_step_fraction == 0.25 and e.significant_sign_flips == 1
    assert e.layout_suspect  # a quarter of the values off by 8 steps
    same = compare_values("w", r, r, steps)
    assert same.rmse == 0.0 and same.relative_rmse == 0.0 and not same.layout_suspect
    with pytest.raises(ValueError, match="one length"):
        compare_values("w", q, r[:3], steps)
