"""gguf_audit.format.safetensors: the safetensors header parsed, and malformed ones refused."""

from __future__ import annotations

import json
import struct

import pytest

from gguf_audit.format.safetensors import ReferenceFormatError, parse_safetensors_header


def test_malformed_safetensors_headers_are_refused() -> None:
    with pytest.raises(ReferenceFormatError, match="header length"):
        parse_safetensors_header(struct.pack("<Q", 1 << 40) + b"{}")
    assert parse_safetensors_header(b"\x10\x00") == 8
    assert parse_safetensors_header(struct.pack("<Q", 100) + b"{") == 108

    def st(entry: object) -> bytes:
        text = json.dumps({"w": entry}).encode()
        return struct.pack("<Q", len(text)) + text

    with pytest.raises(ReferenceFormatError, match="unknown dtype"):
        parse_safetensors_header(st({"dtype": "F13", "shape": [1], "data_offsets": [0, 4]}))
    with pytest.raises(ReferenceFormatError, match="needs 16 bytes"):
        parse_safetensors_header(st({"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 12]}))
    entry = st({"dtype": "F32", "shape": [2], "data_offsets": [0, 8]})
    with pytest.raises(ReferenceFormatError, match="past the"):
        parse_safetensors_header(entry, len(entry) + 4)
    with pytest.raises(ReferenceFormatError, match="passes the"):
        parse_safetensors_header(entry, len(entry) - 1)
    with pytest.raises(ReferenceFormatError, match="not UTF-8 JSON"):
        parse_safetensors_header(struct.pack("<Q", 2) + b"{x")
