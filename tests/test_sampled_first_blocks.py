"""A NaN scale in a tensor's first block is found at the default budget: a small data section is read whole.

The corpus IQ2_XXS file (948 KB of data, under the 1 MiB budget) is read in
two requests, the header read and the rest; the windows that sample a file
over the budget missed some tensors' first blocks in it (attn_k, attn_v).
The Q4_K_M, Q8_0 and F16 files (1.7 to 5.2 MB of data) are over the budget and keep
the windows, which prefer the boundaries that add first blocks not yet read.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import pytest
from corpus import corpus_dir

from gguf_audit.audit import AuditConfig, FileAudit, audit_file
from gguf_audit.format import Header, parse_header
from gguf_audit.plan import SampleConfig, plan_samples, tensor_geometry
from gguf_audit.testing.http import RangeHTTPServer

CONFIG = AuditConfig(samples=SampleConfig(), semantics=False, templates=False)

F16_NAN = struct.pack("<e", float("nan"))
SCALE_AT = {0: (0, struct.pack("<f", float("nan"))), 10: (80, F16_NAN), 12: (0, F16_NAN), 13: (0, F16_NAN)}
"""Per ggml type: where a block's scale ``d`` sits and a NaN to write there (F32, F16: the first value).
Q2_K keeps ``d`` after its 16 scale bytes and 64 quant bytes, Q6_K after 208 bytes; the others first."""
SCALE_AT |= {16: (0, F16_NAN), 14: (208, F16_NAN), 8: (0, F16_NAN), 1: (0, F16_NAN)}


@pytest.fixture(scope="module")
def server() -> Iterator[RangeHTTPServer]:
    with RangeHTTPServer() as srv:
        yield srv


def _with_nan_first_blocks(name: str, tensors: set[str] | None = None) -> tuple[bytes, Header]:
    data = bytearray((corpus_dir() / "models" / name).read_bytes())
    header = parse_header(bytes(data), len(data))
    assert isinstance(header, Header)
    for t in header.tensors:
        if tensors is None or t.name in tensors:
            at, nan = SCALE_AT[t.type_id]
            data[t.data_offset + at : t.data_offset + at + len(nan)] = nan
    return bytes(data), header


def _audit(server: RangeHTTPServer, data: bytes) -> tuple[FileAudit, int]:
    server.put("m.gguf", data)
    server.reset_stats()
    try:
        audit = audit_file(server.url_for("m.gguf"), config=CONFIG)
        return audit, len(server.requests)
    finally:
        server.remove("m.gguf")


def test_a_data_section_within_the_budget_is_read_whole_and_every_first_block_checked(
    server: RangeHTTPServer,
) -> None:
    data, header = _with_nan_first_blocks("tiny-llama-IQ2_XXS.gguf")
    assert len(data) - header.data_offset <= SampleConfig().budget_bytes
    audit, n_requests = _audit(server, data)
    nonfinite = {f.tensor for f in audit.findings if f.code == "data.nonfinite"}
    assert nonfinite == {t.name for t in header.tensors}
    # The header read, then the rest of the file in one range.
    assert n_requests == audit.io.requests == 2
    assert audit.io.bytes_read == len(data)
    every_block = sum(g.n_blocks for t in header.tensors if (g := tensor_geometry(t)) is not None)
    assert len(audit.samples) == every_block and audit.sampled_strata == 0xFFFF


@pytest.mark.parametrize("tensor", ["blk.0.attn_k.weight", "blk.1.attn_v.weight"])
def test_one_nan_scale_in_a_small_tensor_is_found(server: RangeHTTPServer, tensor: str) -> None:
    data, _ = _with_nan_first_blocks("tiny-llama-IQ2_XXS.gguf", {tensor})
    audit, _ = _audit(server, data)
    assert [(f.code, f.tensor) for f in audit.findings] == [("data.nonfinite", tensor)]


@pytest.mark.parametrize("name", ["tiny-llama-Q4_K_M.gguf", "tiny-llama-Q8_0.gguf", "tiny-llama-F16.gguf"])
def test_a_data_section_over_the_budget_keeps_the_windows_and_they_read_every_first_block(
    server: RangeHTTPServer, name: str
) -> None:
    data, header = _with_nan_first_blocks(name)
    assert len(data) - header.data_offset > SampleConfig().budget_bytes
    plan = plan_samples(header, config=SampleConfig(), file_size=len(data))
    assert 1 < len(plan.fetch) <= SampleConfig().max_requests
    assert plan.fetch_bytes <= SampleConfig().budget_bytes
    audit, n_requests = _audit(server, data)
    assert n_requests == audit.io.requests <= 1 + SampleConfig().max_requests
    assert audit.io.bytes_read < len(data)
    # The windows prefer boundaries that add first blocks not yet read: the 21 tensors' all are.
    nonfinite = {f.tensor for f in audit.findings if f.code == "data.nonfinite"}
    assert nonfinite == {t.name for t in header.tensors}


def test_a_raised_budget_never_reads_a_huge_section_whole() -> None:
    from gguf_audit.plan.windows import WHOLE_READ_MAX_BLOCKS

    _, header = _with_nan_first_blocks("tiny-llama-Q4_0.gguf", set())
    blocks = sum(g.n_blocks for t in header.tensors if (g := tensor_geometry(t)) is not None)
    assert blocks > WHOLE_READ_MAX_BLOCKS  # 1.6 MB of mostly Q4_0: 18 bytes a block
    plan = plan_samples(header, config=SampleConfig(budget_bytes=64 << 20))
    assert len(plan.blocks) < blocks
