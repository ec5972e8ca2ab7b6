"""gguf_audit.testing.layouts: synthetic models whose bytes are made on demand, the same every time."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from gguf_audit.decode.sampled import decode_samples
from gguf_audit.format.model import Header
from gguf_audit.format.parser import parse_header
from gguf_audit.plan import plan_blocks
from gguf_audit.testing.layouts import LLAMA_7B_LIKE, LLAMA_70B_LIKE, SyntheticGGUF, llama_table


def _header(model: SyntheticGGUF) -> Header:
    header = parse_header(model.read(0, len(model.header)), model.size)
    assert isinstance(header, Header)
    return header


def test_tables_have_the_real_models_shape() -> None:
    assert len(llama_table(*LLAMA_7B_LIKE)) == 291 and len(llama_table(*LLAMA_70B_LIKE)) == 723
    seven = SyntheticGGUF(llama_table(*LLAMA_7B_LIKE))
    assert 4.0e9 < seven.size < 4.5e9
    header = _header(seven)
    assert [(t.name, t.data_offset, t.n_bytes) for t in header.tensors] == [
        (r.name, r.start, r.n_bytes) for r in seven.regions
    ]
    assert header.min_file_size == seven.size


def test_reads_are_deterministic_and_agree_at_any_split() -> None:
    model = SyntheticGGUF(llama_table(2, 256, 512, 1024, 256), seed=3)
    whole = model.read(0, model.size)
    assert len(whole) == model.size and model.read(0, model.size) == whole
    for a, b in [(0, 7), (1000, 5000), (model.size - 10, model.size + 50)]:
        assert model.read(a, b) == whole[a:b]
    assert SyntheticGGUF(llama_table(2, 256, 512, 1024, 256), seed=4).read(0, model.size) != whole


def test_data_looks_like_weights_and_defects_are_planted() -> None:
    model = SyntheticGGUF(llama_table(2, 256, 512, 1024, 256))
    header = _header(model)
    plan = plan_blocks(header, blocks=[0, 1, -1])
    decoded = decode_samples([(b, model.read(b.offset, b.end_offset)) for b in plan.blocks])
    assert all(d.stats is not None and d.stats.n_nan == d.stats.n_inf == 0 for d in decoded)
    assert all(d.stats is not None and d.stats.n_zero < d.stats.count for d in decoded)
    q = model.region("blk.0.attn_q.weight")
    model.nan_scales(q.start, q.start + 144)  # the first Q4_K block only
    model.zero(q.end - 10, q.end)
    data = np.frombuffer(model.read(q.start, q.end), dtype=np.uint8)
    assert data[:2].tobytes() == b"\x00\x7e" and data[144:146].tobytes() == b"\x00\x24"
    assert not data[-10:].any() and data[-30:-10].any()
    model.cut(q.start + 5)
    assert model.size == q.start + 5 and model.read(q.start, q.end) == data[:5].tobytes()


def test_write_sparse_keeps_the_header_and_the_size(tmp_path: Path) -> None:
    model = SyntheticGGUF(llama_table(2, 256, 512, 1024, 256))
    path = tmp_path / "m.gguf"
    assert model.write_sparse(path) == model.size == path.stat().st_size
    assert path.read_bytes()[: len(model.header)] == model.header


def test_over_header_writes_weight_like_bytes_where_asked_and_a_hole_elsewhere(tmp_path: Path) -> None:
    source = SyntheticGGUF(llama_table(2, 256, 512, 1024, 256), seed=1)
    header = _header(source)
    model = SyntheticGGUF.over_header(header, source.header, size=source.size, seed=5)
    assert [r.start for r in model.regions] == [r.start for r in source.regions]
    region = model.regions[1]
    wanted = [(region.start, region.start + 4096), (model.size - 100, model.size)]
    path = tmp_path / "m.gguf"
    assert model.write_ranges(path, wanted) == model.size == path.stat().st_size
    data = path.read_bytes()
    assert data[: len(source.header)] == source.header
    for start, end in wanted:
        assert data[start:end] == model.read(start, end) and any(data[start:end])
    assert not any(data[region.start + 4096 : region.start + 8192])  # not asked: a hole
    # Another seed, other weights; the same seed, the same.
    other = SyntheticGGUF.over_header(header, source.header, size=source.size, seed=6)
    assert other.read(*wanted[0]) != model.read(*wanted[0])
    assert (
        SyntheticGGUF.over_header(header, source.header, size=source.size, seed=5).read(*wanted[0])
        == data[wanted[0][0] : wanted[0][1]]
    )
