"""gguf_audit.decode.sampled: planned blocks decoded into samples-table rows, and the sampled-data fingerprint."""

from __future__ import annotations

import numpy as np
from ggml_blocks import built_header, q8_0_block

from gguf_audit.decode.sampled import decode_sample, sample_fingerprint, sample_rows
from gguf_audit.decode.stats import tensor_stats
from gguf_audit.plan import PlannedBlock, plan_blocks
from gguf_audit.testing.builder import Tensor

Q8_0 = 8


def test_rows_carry_the_samples_table_fields_and_rebuild_tensor_stats() -> None:
    blocks = [q8_0_block(0.01), q8_0_block(0.02)]
    header = built_header([Tensor("blk.0.ffn_up.weight", (32, 2), Q8_0, data=b"".join(blocks))])
    plan = plan_blocks(header, {"blk.0.ffn_up.weight": [0, 1]})
    decoded = [decode_sample(b, blocks[b.block_index]) for b in plan.blocks]
    rows = sample_rows(decoded)
    assert list(rows[0].as_dict()) == [
        "tensor", "block_index", "offset", "n_bytes", "type", "count", "min", "max",
        "mean", "std", "max_abs", "n_nan", "n_inf", "zero_fraction",
    ]  # fmt: skip
    second = rows[1]
    assert (second.tensor, second.block_index, second.type, second.n_bytes) == ("blk.0.ffn_up.weight", 1, "Q8_0", 34)
    assert rows[1].offset == header.tensors[0].data_offset + 34
    per_tensor = tensor_stats(rows)["blk.0.ffn_up.weight"]
    all_values = np.concatenate([d.values for d in decoded if d.values is not None])
    assert per_tensor.count == 64 and per_tensor.max == float(all_values.max())


def test_fingerprint_depends_on_bytes_and_offsets_not_order() -> None:
    def block(offset: int) -> PlannedBlock:
        return PlannedBlock(0, "w", Q8_0, 0, 0, 32, offset, 4)

    a = [(block(100), b"abcd"), (block(200), b"efgh")]
    fp = sample_fingerprint(a)
    assert fp is not None and len(fp) == 64
    assert sample_fingerprint(list(reversed(a))) == fp
    assert sample_fingerprint([(block(100), b"abcd"), (block(201), b"efgh")]) != fp
    assert sample_fingerprint([(block(100), b"abcd"), (block(200), b"efgX")]) != fp
    assert sample_fingerprint([]) is None
