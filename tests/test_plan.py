"""gguf_audit.plan: which blocks are sampled, deterministically, within the budget."""

from __future__ import annotations

import itertools
import subprocess
import sys

import pytest
from corpus import corpus_dir, truth
from hypothesis import given
from hypothesis import strategies as st

from gguf_audit.format.ggml_types import ggml_type_info
from gguf_audit.format.model import Header
from gguf_audit.format.parser import parse_header
from gguf_audit.plan import (
    RUN_ELEMS,
    STRATA,
    ByteRange,
    SampleConfig,
    SamplePlan,
    SelectionError,
    data_section,
    file_identity,
    merge_ranges,
    plan_blocks,
    plan_fetch,
    plan_samples,
    plan_spread,
    spread_indices,
    strata_mask,
    stratum_bounds,
    tensor_geometry,
)
from gguf_audit.testing.builder import Tensor, build_gguf, kv_str
from gguf_audit.testing.layouts import LLAMA_70B_LIKE, SyntheticGGUF, llama_table

F32, F16, Q8_0, Q4_K, Q6_K = 0, 1, 8, 12, 14


def _header(tensors: list[Tensor], **kw: object) -> Header:
    data = build_gguf([kv_str("general.architecture", "llama")], tensors, **kw)  # type: ignore[arg-type]
    header = parse_header(data, len(data))
    assert isinstance(header, Header)
    return header


def _big_header() -> Header:
    """Tensors of 4096 Q8_0 blocks each, header only (data never allocated)."""
    # Offsets written as where packed data would go, so the geometry is real.
    size = 4096 * 32 // 32 * 34
    tensors = [Tensor(f"blk.{i}.ffn_up.weight", (4096, 32), Q8_0, offset=i * size, data=b"") for i in range(8)]
    data = build_gguf([kv_str("general.architecture", "llama")], tensors, include_data=False)
    header = parse_header(data, None)
    assert isinstance(header, Header)
    return header


CORPUS_Q4_K_M = "models/tiny-llama-Q4_K_M.gguf"


def _corpus_header(rel: str = CORPUS_Q4_K_M) -> Header:
    path = corpus_dir() / rel
    data = path.read_bytes()
    header = parse_header(data, len(data))
    assert isinstance(header, Header)
    return header


# --- geometry ------------------------------------------------------------------


def test_geometry_of_block_types_and_element_runs() -> None:
    header = _header(
        [
            Tensor("q", (256, 4), Q4_K),
            Tensor("f", (100,), F32),
            Tensor("h", (64, 2), F16),
        ]
    )
    q, f, h = (tensor_geometry(t) for t in header.tensors)
    assert q is not None and (q.n_blocks, q.block_elems, q.block_bytes) == (4, 256, 144)
    # One-element types: runs of 32 elements, the last one short.
    assert f is not None and (f.n_blocks, f.block_elems, f.block_bytes, f.element_bytes) == (4, RUN_ELEMS, 128, 4)
    assert h is not None and (h.n_blocks, h.block_bytes) == (4, 64)
    plan = plan_blocks(header, {"f": [-1]})
    (last,) = plan.blocks
    assert (last.block_index, last.first_element, last.n_elements, last.n_bytes) == (3, 96, 4, 16)
    assert last.offset == header.tensors[1].data_offset + 3 * 128


def test_corpus_truth_offsets_follow_from_the_geometry() -> None:
    for rel in ("models/tiny-llama-Q4_K_M.gguf", "models/tiny-llama-F32.gguf", "models/tiny-llama-BF16.gguf"):
        header = _corpus_header(rel)
        by_name = {t.name: t for t in header.tensors}
        for s in truth(corpus_dir() / rel)["samples"]:
            plan = plan_blocks(header, {s["tensor"]: [s["block_index"]]})
            (block,) = plan.blocks
            assert (block.offset, block.n_bytes) == (s["abs_offset"], s["block_bytes"])
            geo = tensor_geometry(by_name[s["tensor"]])
            assert geo is not None and geo.block_elems == s["elems_per_block"]


# --- the sampling plan -----------------------------------------------------------


def _llama_layout(n_layer: int, n_embd: int, n_ff: int, n_vocab: int, n_embd_kv: int) -> Header:
    """A Q4_K_M llama tensor table (Q6_K for attn_v, ffn_down and output), header only."""
    model = SyntheticGGUF(llama_table(n_layer, n_embd, n_ff, n_vocab, n_embd_kv))
    header = parse_header(model.header, None)
    assert isinstance(header, Header)
    return header


def _last_tensor(header: Header) -> int:
    return max(range(len(header.tensors)), key=lambda i: header.tensors[i].end_offset)


def test_a_70b_layout_costs_32_requests_and_covers_strata_types_and_ends() -> None:
    header = _llama_layout(*LLAMA_70B_LIKE)
    section = data_section(header)
    assert len(header.tensors) == 723 and section.n_bytes > 40 * 10**9
    plan = plan_samples(header)
    assert len(plan.fetch) <= SampleConfig().max_requests == 32
    assert plan.fetch_bytes <= SampleConfig().budget_bytes
    assert plan.strata == (1 << STRATA) - 1 == 0xFFFF
    assert {b.type_id for b in plan.blocks} == {t.type_id for t in header.tensors} == {F32, Q4_K, Q6_K}
    last = _last_tensor(header)
    n_last = tensor_geometry(header.tensors[last]).n_blocks  # type: ignore[union-attr]
    sampled = {(b.tensor_index, b.block_index) for b in plan.blocks}
    # The truncation tell, and both ends of the first and the last tensor.
    assert {(last, n_last - 1), (last, 0), (0, 0)} <= sampled
    n_first = tensor_geometry(header.tensors[0]).n_blocks  # type: ignore[union-attr]
    assert (0, n_first - 1) in sampled
    # Windows sit on tensor boundaries: about two tensors a request.
    assert plan.n_tensors >= 1.5 * len(plan.fetch)
    assert list(plan.blocks) == sorted(plan.blocks, key=lambda b: b.offset)


def test_windows_span_tensor_boundaries_and_decode_every_whole_block_inside() -> None:
    header = _llama_layout(4, 256, 512, 1024, 256)
    plan = plan_samples(header, config=SampleConfig(max_requests=8, window_blocks=16))
    spanning = 0
    for r in plan.fetch:
        inside = [b for b in plan.blocks if r.start <= b.offset and b.end_offset <= r.end]
        assert inside and inside[0].offset == r.start and inside[-1].end_offset == r.end
        tensors_inside = {b.tensor_index for b in inside}
        spanning += len(tensors_inside) > 1
        # Every whole block of every tensor in the range is planned.
        for i in tensors_inside:
            t = header.tensors[i]
            geo = tensor_geometry(t)
            assert geo is not None
            whole = {
                k
                for k in range(geo.n_blocks)
                if r.start <= t.data_offset + k * geo.block_bytes
                and t.data_offset + (k + 1) * geo.block_bytes <= min(r.end, t.end_offset)
            }
            assert whole == {b.block_index for b in inside if b.tensor_index == i}
    assert spanning >= len(plan.fetch) // 2
    assert len(plan.fetch) <= 8


def test_plan_is_deterministic_and_the_seed_moves_windows_not_the_ends() -> None:
    header = _llama_layout(*LLAMA_70B_LIKE)
    a = plan_samples(header, seed=1)
    assert plan_samples(header, seed=1) == a
    b = plan_samples(header, seed=2)
    assert a.blocks != b.blocks
    last = _last_tensor(header)

    def ends(p: SamplePlan) -> set[tuple[int, int]]:
        return {(x.tensor_index, x.block_index) for x in p.blocks if x.tensor_index in (0, last) and x.block_index == 0}

    assert ends(a) == ends(b) == {(0, 0), (last, 0)}
    assert a.strata == b.strata == 0xFFFF
    # The identity decides too; by default it is the tensor table's digest.
    assert plan_samples(header, seed=1, file_identity="other").blocks != a.blocks
    assert a.file_identity == file_identity(header)


def test_identity_follows_the_tensor_table_not_the_metadata_values() -> None:
    t = [Tensor("w", (32, 4), Q8_0)]
    same = file_identity(_header(t))
    assert file_identity(_header(t)) == same
    assert file_identity(_header([Tensor("w", (32, 8), Q8_0)])) != same
    assert file_identity(_header([Tensor("v", (32, 4), Q8_0)])) != same


def test_request_and_byte_budgets_hold_and_the_end_comes_first() -> None:
    header = _big_header()
    for config in (
        SampleConfig(max_requests=3),
        SampleConfig(budget_bytes=5 * 34),
        SampleConfig(max_requests=2, budget_bytes=1000, window_blocks=300, max_gap_bytes=10_000),
    ):
        plan = plan_samples(header, config=config)
        assert len(plan.fetch) <= config.max_requests
        assert plan.block_bytes <= plan.fetch_bytes <= config.budget_bytes
        last = plan.blocks[-1]
        assert (last.tensor_index, last.block_index) == (7, 4095), config


def test_a_small_data_section_is_read_whole_in_one_request() -> None:
    header = _header([Tensor("a", (32, 8), Q8_0), Tensor("b", (100,), F32), Tensor("c", (256, 2), Q4_K)])
    plan = plan_samples(header)
    assert len(plan.fetch) == 1
    expected = sum(g.n_blocks for t in header.tensors if (g := tensor_geometry(t)) is not None)
    assert len(plan.blocks) == expected and plan.n_tensors == 3 and plan.strata == 0xFFFF


def test_strata_mask_counts_sixteenths_of_the_span() -> None:
    assert strata_mask([(0, 1)], 0, 160) == 0b1
    assert strata_mask([(9, 11)], 0, 160) == 0b11  # bytes 9 and 10 straddle strata 0 and 1
    assert strata_mask([(150, 500)], 0, 160) == 1 << 15
    assert strata_mask([(0, 160)], 0, 160) == 0xFFFF
    assert strata_mask([(200, 300), (5, 5)], 0, 160) == 0
    assert strata_mask([(0, 10)], 0, 0) == 0
    # Uneven spans: stratum k holds the x with (x - start) * 16 // size == k.
    for x in range(1000, 1000 + 37):
        (k,) = [k for k in range(STRATA) if strata_mask([(x, x + 1)], 1000, 1037) == 1 << k]
        assert k == (x - 1000) * 16 // 37
        bounds = stratum_bounds(k, 1000, 1037)
        assert bounds.start <= x < bounds.end


def test_blocks_past_the_file_end_are_not_planned() -> None:
    header = _big_header()
    cut = header.tensors[3].data_offset + 100
    plan = plan_samples(header, file_size=cut)
    assert all(b.end_offset <= cut for b in plan.blocks)
    assert {b.tensor_index for b in plan.blocks} == {0, 1, 2, 3}


def test_tensors_filter_and_types_without_blocks() -> None:
    header = _header([Tensor("a", (32,), Q8_0), Tensor("b", (32,), Q8_0), Tensor("z", (0,), F32)])
    plan = plan_samples(header, tensors={"b"})
    assert {b.tensor for b in plan.blocks} == {"b"}
    assert tensor_geometry(header.tensors[2]) is None
    assert {b.tensor for b in plan_samples(header).blocks} == {"a", "b"}


def test_sample_config_rejects_bad_values() -> None:
    with pytest.raises(ValueError, match=r"budget_bytes.*Got 0\."):
        SampleConfig(budget_bytes=0)
    with pytest.raises(ValueError, match=r"max_requests.*>= 1\. Got 0\."):
        SampleConfig(max_requests=0)
    with pytest.raises(ValueError, match=r"max_gap_bytes.*Got -1\."):
        SampleConfig(max_gap_bytes=-1)


# --- explicit selections -------------------------------------------------------


def test_plan_blocks_resolves_negative_indices_and_rejects_others() -> None:
    header = _header([Tensor("w", (32, 10), Q8_0)])
    plan = plan_blocks(header, {"w": [0, 5, -1, 9]})
    assert [b.block_index for b in plan.blocks] == [0, 5, 9]
    assert plan.budget_bytes is None
    with pytest.raises(SelectionError, match=r"block 10 is outside tensor 'w'.*Got 10\."):
        plan_blocks(header, {"w": [10]})
    with pytest.raises(SelectionError, match=r"block -11"):
        plan_blocks(header, {"w": [-11]})
    with pytest.raises(SelectionError, match=r"no tensor named 'x'"):
        plan_blocks(header, {"x": [0]})
    default = plan_blocks(header)
    assert [b.block_index for b in default.blocks] == [0, 5, 9]


# --- ranges --------------------------------------------------------------------


def test_merge_ranges_coalesces_near_ranges() -> None:
    assert merge_ranges([(10, 20), (0, 5), (5, 8), (15, 30)], 0) == [ByteRange(0, 8), ByteRange(10, 30)]
    assert merge_ranges([(0, 10), (12, 20), (100, 110)], 2) == [ByteRange(0, 20), ByteRange(100, 110)]
    assert merge_ranges([(0, 10), (5, 5)], 0) == [ByteRange(0, 10)]
    assert merge_ranges([], 10) == []


def test_merge_ranges_spends_the_budget_on_the_smallest_gaps() -> None:
    ranges = [(0, 10), (20, 30), (32, 42), (100, 110)]
    # Gaps 10, 2 and 58; a budget of 40 + 2 + 10 allows the two small ones.
    assert merge_ranges(ranges, 100, budget_bytes=52) == [ByteRange(0, 42), ByteRange(100, 110)]
    assert merge_ranges(ranges, 100, budget_bytes=45) == [ByteRange(0, 10), ByteRange(20, 42), ByteRange(100, 110)]


@given(
    st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 300)), max_size=40),
    st.integers(0, 500),
    st.one_of(st.none(), st.integers(0, 20_000)),
)
def test_merge_ranges_properties(raw: list[tuple[int, int]], max_gap: int, budget: int | None) -> None:
    ranges = [(s, s + n) for s, n in raw]
    out = merge_ranges(ranges, max_gap, budget_bytes=budget)
    assert all(a.end < b.start for a, b in itertools.pairwise(out))
    for s, e in ranges:
        if e > s:
            assert any(r.start <= s and e <= r.end for r in out)
    covered = sum(r.n_bytes for r in out)
    union = len({i for s, e in ranges for i in range(s, e)})
    if budget is not None and union <= budget:
        assert covered <= budget
    # Each merged range is made of input ranges and gaps of at most max_gap.
    for r in out:
        inside = sorted((s, e) for s, e in ranges if e > s and r.start <= s and e <= r.end)
        end = inside[0][1]
        assert inside[0][0] == r.start
        for s, e in inside[1:]:
            assert s - end <= max_gap
            end = max(end, e)
        assert end == r.end


def test_plan_fetch_skips_what_the_header_read_holds() -> None:
    header = _big_header()
    plan = plan_samples(header, config=SampleConfig(max_gap_bytes=0))
    first = plan.blocks[0]
    held = first.end_offset + 10  # the first block and part of the next gap or block
    fetch = plan_fetch(plan, held_bytes=held, max_gap_bytes=0)
    assert all(r.end > held and r.start >= held for r in fetch)
    assert plan_fetch(plan, max_gap_bytes=0) == list(plan.fetch)


def test_plan_and_data_checks_are_pure() -> None:
    code = (
        "import sys, gguf_audit.plan, gguf_audit.checks.data, gguf_audit.decode.error, gguf_audit.format.safetensors; "
        "bad = [m for m in ('fsspec', 'aiohttp', 'dask', 'pyarrow', 's3fs') if m in sys.modules]; "
        "sys.exit(f'imported {bad}' if bad else 0)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr + done.stdout


_TYPES = st.sampled_from([F32, F16, Q8_0, Q4_K, 30, 20, 39])  # BF16, IQ4_NL, MXFP4 too


@given(
    st.lists(st.tuples(_TYPES, st.integers(1, 4), st.integers(1, 40)), min_size=1, max_size=6),
    st.integers(1, 40),
    st.integers(1, 6000),
    st.integers(2, 200),
    st.integers(0, 2000),
    st.integers(0, 2**32),
    st.booleans(),
)
def test_plans_stay_inside_tensors_and_budgets(
    table: list[tuple[int, int, int]],
    max_requests: int,
    budget: int,
    window: int,
    gap: int,
    seed: int,
    cut: bool,
) -> None:
    tensors = []
    for i, (type_id, row_blocks, rows) in enumerate(table):
        info = tensor_info_of(type_id)
        tensors.append(Tensor(f"t{i}", (row_blocks * max(info, 32), rows), type_id, data=b""))
    header = _header_with_offsets(tensors)
    config = SampleConfig(max_requests=max_requests, budget_bytes=budget, window_blocks=window, max_gap_bytes=gap)
    section = data_section(header)
    file_size = section.start + section.n_bytes * 2 // 3 if cut else None
    plan = plan_samples(header, config=config, seed=seed, file_size=file_size)
    assert plan == plan_samples(header, config=config, seed=seed, file_size=file_size)
    assert len(plan.fetch) <= max_requests
    assert plan.block_bytes <= plan.fetch_bytes <= budget
    for b in plan.blocks:
        t = header.tensors[b.tensor_index]
        assert t.data_offset <= b.offset < b.end_offset <= t.end_offset
        assert file_size is None or b.end_offset <= file_size
        assert any(r.start <= b.offset and b.end_offset <= r.end for r in plan.fetch)
    assert all(x.end_offset <= y.offset for x, y in itertools.pairwise(plan.blocks))
    assert 0 <= plan.strata <= 0xFFFF and plan.n_tensors == len({b.tensor_index for b in plan.blocks})
    # The file's last block present is always read when the budget holds a window of two blocks.
    present = plan_blocks(header, {t.name: [0, -1] for t in header.tensors}, file_size=None).blocks
    widest = max(b.n_bytes for b in present)
    everything = [
        b
        for i, t in enumerate(header.tensors)
        if (g := tensor_geometry(t)) is not None
        for b in plan_blocks(header, {t.name: list(range(g.n_blocks))}, file_size=file_size).blocks
    ]
    if everything and budget >= 2 * widest:
        last = max(everything, key=lambda b: b.end_offset)
        assert (last.tensor_index, last.block_index) in {(b.tensor_index, b.block_index) for b in plan.blocks}


def tensor_info_of(type_id: int) -> int:
    return ggml_type_info(type_id).block_elems


def _header_with_offsets(tensors: list[Tensor]) -> Header:
    """A header whose tensors sit where their (unwritten) data would go."""
    placed = []
    offset = 0
    for t in tensors:
        placed.append(Tensor(t.name, t.dims, t.ggml_type, offset=offset, data=b""))
        n = t.dims[0] * t.dims[1]
        offset += -(-ggml_type_info(t.ggml_type).n_bytes(n) // 32) * 32
    data = build_gguf([kv_str("general.architecture", "llama")], placed, include_data=False)
    header = parse_header(data, None)
    assert isinstance(header, Header)
    return header


def test_spread_plans_take_evenly_spaced_blocks_of_every_tensor() -> None:
    assert spread_indices(100, 4) == [0, 33, 66, 99]
    assert spread_indices(3, 16) == [0, 1, 2]
    assert spread_indices(5, 1) == [0] and spread_indices(5, 0) == []
    header = _big_header()
    plan = plan_spread(header, 16, tensors={"blk.1.ffn_up.weight", "blk.5.ffn_up.weight"})
    assert plan.budget_bytes is None and plan.n_tensors == 2
    for i in (1, 5):
        indices = [b.block_index for b in plan.blocks if b.tensor_index == i]
        assert indices == spread_indices(4096, 16) and indices[0] == 0 and indices[-1] == 4095
