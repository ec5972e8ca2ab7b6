"""gguf_audit.decode.stats: statistics of decoded values, per block and combined."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from gguf_audit.decode.stats import block_stats, combine_stats, row_stats


def test_block_stats_counts_nonfinite_and_summarises_the_rest() -> None:
    v = np.array([0.0, -0.0, 1.0, -3.0, np.nan, np.inf, -np.inf, 2.0], dtype=np.float32)
    s = block_stats(v)
    assert (s.count, s.n_nan, s.n_inf, s.n_zero) == (8, 1, 2, 2)
    assert (s.min, s.max, s.max_abs) == (-3.0, 2.0, 3.0)
    assert s.mean == pytest.approx(0.0) and s.std == pytest.approx(np.std([0, 0, 1, -3, 2]))
    assert s.zero_fraction == 0.25
    empty = block_stats(np.array([np.nan, np.nan], dtype=np.float32))
    assert empty.min is None and empty.mean is None and empty.n_nan == 2


@given(
    st.lists(
        hnp.arrays(np.float32, st.integers(1, 40), elements=st.floats(-1e3, 1e3, width=32) | st.just(float("nan"))),
        min_size=1,
        max_size=6,
    )
)
def test_combined_stats_equal_the_stats_of_all_values(parts: list[np.ndarray]) -> None:
    whole = block_stats(np.concatenate(parts))
    combined = combine_stats(block_stats(p) for p in parts)
    assert combined is not None
    assert (combined.count, combined.n_nan, combined.n_inf, combined.n_zero) == (
        whole.count,
        whole.n_nan,
        whole.n_inf,
        whole.n_zero,
    )
    assert (combined.min, combined.max, combined.max_abs) == (whole.min, whole.max, whole.max_abs)
    if whole.mean is not None:
        assert combined.mean == pytest.approx(whole.mean, abs=1e-6)
        assert combined.std == pytest.approx(whole.std, rel=1e-6, abs=1e-6)


def test_row_stats_all_finite_path_matches_the_masked_path_exactly() -> None:
    # All-finite rows skip the masks; a NaN row in the same array forces them. Same floats, bit for bit.
    rng = np.random.default_rng(7)
    rows = rng.standard_normal((40, 256)).astype(np.float32) * np.float32(0.02)
    rows[3, :17] = 0.0
    bad = np.full((1, 256), np.nan, dtype=np.float32)
    fast = row_stats(rows)
    masked = row_stats(np.concatenate([rows, bad]))[:-1]
    assert fast == masked
    assert all(s.n_nan == 0 and s.n_inf == 0 for s in fast) and fast[3].n_zero == 17
