"""Sampled blocks of many one-block tensors are decoded in batches by type and size, not a call per tensor."""

from __future__ import annotations

import sys
from types import FrameType
from typing import Any

import numpy as np
from ggml_blocks import q8_0_block

from gguf_audit.decode import kernels
from gguf_audit.decode.sampled import SampleStatus, decode_sample, decode_samples
from gguf_audit.plan import PlannedBlock

Q8_0, F16 = 8, 1
N_TENSORS = 4_096


def _calls_to_decode_blocks(run: Any) -> int:
    """How many times ``run()`` enters the kernel's ``decode_blocks`` (counted by a profile hook)."""
    code = kernels.decode_blocks.__code__
    calls = 0

    def hook(frame: FrameType, event: str, arg: object) -> None:
        nonlocal calls
        if event == "call" and frame.f_code is code:
            calls += 1

    sys.setprofile(hook)
    try:
        run()
    finally:
        sys.setprofile(None)
    return calls


def _relisted() -> list[tuple[PlannedBlock, bytes | None]]:
    """A header's worth of one-block tensors: Q8_0 of two scales, F16 runs, and one block unread."""
    items: list[tuple[PlannedBlock, bytes | None]] = []
    for i in range(N_TENSORS):
        if i % 3 == 2:
            raw = np.linspace(-1, 1, 32, dtype=np.float16).tobytes()
            items.append((PlannedBlock(i, f"x.{i}", F16, 0, 0, 32, 64 * i, 64), raw))
        else:
            raw = q8_0_block(0.01 * (1 + i % 7))
            items.append((PlannedBlock(i, f"x.{i}", Q8_0, 0, 0, 32, 64 * i, 34), raw))
    items[5] = (items[5][0], None)
    return items


def test_one_block_tensors_are_decoded_in_a_call_per_type() -> None:
    items = _relisted()
    calls = _calls_to_decode_blocks(lambda: decode_samples(items))
    assert calls <= 2, f"{calls} calls of decode_blocks for {N_TENSORS} one-block tensors"


def test_a_batch_across_tensors_decodes_each_block_as_alone() -> None:
    items = _relisted()
    together = decode_samples(items)
    assert [d.block for d in together] == [b for b, _ in items]
    assert together[5].status is SampleStatus.UNREAD
    for d, (block, raw) in zip(together, items, strict=True):
        alone = decode_sample(block, raw)
        assert d.status is alone.status and d.stats == alone.stats and d.scales == alone.scales
        if alone.values is not None:
            assert d.values is not None and np.array_equal(d.values, alone.values)
