"""Hand-built ggml blocks and headers for the tests of decoding and the data checks."""

from __future__ import annotations

import struct

from gguf_audit.format.model import Header
from gguf_audit.format.parser import parse_header
from gguf_audit.testing.builder import Tensor, build_gguf, kv_str

__all__ = ["INF16", "NAN16", "built_header", "q8_0_block"]

NAN16, INF16 = 0x7E00, 0x7C00
"""fp16 NaN and +Inf, as raw bits."""


def q8_0_block(d: float | int, qs: list[int] | None = None) -> bytes:
    """A Q8_0 block: fp16 scale (a float, or raw bits as an int) and 32 int8 quants."""
    scale = struct.pack("<H", d) if isinstance(d, int) else struct.pack("<e", d)
    return scale + struct.pack("<32b", *(qs if qs is not None else [((i * 7) % 255) - 127 for i in range(32)]))


def built_header(tensors: list[Tensor], *, big_endian: bool = False) -> Header:
    data = build_gguf([kv_str("general.architecture", "llama")], tensors, big_endian=big_endian)
    header = parse_header(data, len(data))
    assert isinstance(header, Header)
    return header
