"""Rows at positions of chunked columns and tables, without joining the chunks (:mod:`gguf_audit.tables.take`)."""

from __future__ import annotations

import random
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pytest

from gguf_audit.tables.take import take_rows, take_strings


def _urls(n: int) -> list[str]:
    return [f"s3://bucket/d{i // 100:05d}/m-{i:07d}.gguf" for i in range(n)]


def _chunked(values: list[str], sizes: list[int]) -> pa.ChunkedArray:
    chunks, start = [], 0
    for size in sizes:
        chunks.append(pa.array(values[start : start + size], pa.string()))
        start += size
    return pa.chunked_array(chunks, pa.string())


@pytest.mark.parametrize("seed", range(6))
def test_take_rows_equals_arrow_s_take_on_chunked_columns_and_tables(seed: int) -> None:
    rng = random.Random(seed)
    n = 1_000
    sizes: list[int] = []
    while sum(sizes) < n:
        sizes.append(min(rng.choice([0, 1, 7, 100, 333]), n - sum(sizes)))
    urls = _chunked(_urls(n), sizes)
    # a table whose columns are chunked differently: its batches cut at every column's boundaries
    sizes_column = pa.chunked_array([pa.array(range(0, 500)), pa.array(range(500, n))], pa.int64())
    table = pa.table({"url": urls, "size": sizes_column})
    for positions in (
        [rng.randrange(n) for _ in range(50)],  # any order, repeats
        sorted(rng.sample(range(n), 200)),
        [n - 1, 0, n - 1],
        [rng.randrange(n)],
    ):
        at = pa.array(positions, pa.int64())
        assert take_rows(urls, positions).equals(urls.take(at))
        assert take_rows(table, np.array(positions)).equals(table.take(at))
        assert take_strings(urls, positions) == [str(u) for u in urls.take(at).to_pylist()]
    assert take_rows(urls, []).to_pylist() == []
    assert take_rows(table, []).num_rows == 0 and take_rows(table, []).schema == table.schema
    with pytest.raises(IndexError):
        take_rows(urls, [n])
    with pytest.raises(IndexError):
        take_rows(table, [-1])


def test_one_value_of_a_long_chunked_column_costs_its_chunk_not_the_column(
    counting_pool: Callable[[], pa.MemoryPool],
) -> None:
    """Arrow's own take joins every chunk first (about 4 MB for these 100,000 URLs); this one reads one chunk."""
    counted_pool = counting_pool()
    n = 100_000
    urls = _chunked(_urls(n), [4096] * (n // 4096) + [n % 4096])
    base = counted_pool.max_memory()

    assert take_strings(urls, [77_777]) == [_urls(n)[77_777]]
    assert take_strings(urls, [5, 99_999, 5]) == [_urls(n)[5], _urls(n)[99_999], _urls(n)[5]]

    assert counted_pool.max_memory() - base < 64 * 1024
    urls.take(pa.array([77_777], pa.int64()))  # the peer in the same run: this pool sees its copy
    assert counted_pool.max_memory() - base > 3 * 1024 * 1024
