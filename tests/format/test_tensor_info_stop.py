"""The parser stops reading tensor infos where gguf.cpp does, and decodes corrupt text at a bounded cost.

Verdicts of these shapes of file were asked of the b11312 oracle (tests/conformance/test_oracle_tensor_stop.py).
"""

from __future__ import annotations

import pytest

from gguf_audit.bounded import quote
from gguf_audit.checks.structure import check_structure
from gguf_audit.findings import LlamaCpp, llama_cpp_verdict
from gguf_audit.format.model import ESCAPED_TEXT_BYTES, Header, decode_lenient, decode_utf8, escape_invalid
from gguf_audit.format.parser import parse_header
from gguf_audit.testing.builder import Tensor, build_gguf, kv_u32, tiny_llama_like

Q4_0, F32 = 2, 0


def _parse(data: bytes) -> Header:
    header = parse_header(data, len(data))
    assert isinstance(header, Header)
    return header


def test_a_forged_tensor_count_over_zeros_stops_at_the_second_nameless_info() -> None:
    kvs, tensors = tiny_llama_like()
    # Zeros after the real infos read as nameless F32 scalars: the second repeats the first's empty name.
    data = build_gguf(kvs, tensors, n_tensors=len(tensors) + 5000, trailing=bytes(24 * 6000))
    header = _parse(data)
    assert len(header.tensors) == len(tensors) + 2 and header.n_tensors == len(tensors) + 5000
    findings = list(check_structure(header, len(data)))
    duplicates = [f for f in findings if f.code == "tensor.duplicate_name"]
    assert len(duplicates) == 1 and "4998 of " in duplicates[0].message
    assert llama_cpp_verdict(findings) is LlamaCpp.REFUSES


@pytest.mark.parametrize(
    ("bad", "code"),
    [
        (Tensor("b.weight", (32,), 99), "tensor.unknown_type"),
        (Tensor("b.weight", (32,), 4), "tensor.removed_type"),
        (Tensor("b.weight", (-32,), F32, data=b""), "tensor.bad_dims"),
        (Tensor("b.weight", (31,), Q4_0, data=bytes(18)), "tensor.row_not_block_multiple"),
        (Tensor("b.weight", (2, 1, 1, 1, 1), F32), "tensor.bad_dims"),
        (Tensor("b.weight", (1 << 62, 4), F32, data=b""), "tensor.bad_dims"),
    ],
)
def test_reading_stops_after_the_first_info_gguf_cpp_refuses(bad: Tensor, code: str) -> None:
    kvs, _ = tiny_llama_like()
    # The third info repeats the first name: it is never read, so it is not reported.
    tensors = [Tensor("a.weight", (32,), F32), bad, Tensor("a.weight", (32,), F32)]
    data = build_gguf(kvs, tensors)
    header = _parse(data)
    assert [t.name for t in header.tensors] == ["a.weight", "b.weight"]
    findings = [f for f in check_structure(header, len(data)) if f.code == code]
    assert len(findings) == 1 and findings[0].tensor == "b.weight" and "1 of 3 infos unread" in findings[0].message
    assert not any(f.code == "tensor.duplicate_name" for f in check_structure(header, len(data)))


def test_an_info_gguf_cpp_accepts_does_not_stop_reading() -> None:
    kvs, _ = tiny_llama_like()
    tensors = [Tensor("a.weight", (0, 3), F32), Tensor("b.weight", (64, 2), Q4_0), Tensor("c.weight", (), F32)]
    header = _parse(build_gguf(kvs, tensors))
    assert [t.name for t in header.tensors] == ["a.weight", "b.weight", "c.weight"]


def test_utf8_is_checked_across_chunk_edges_and_the_first_bad_byte_found() -> None:
    text = "a" * 65535 + "é" + "ж" * 70000 + "b"
    raw = text.encode()
    assert decode_utf8(raw) == text
    for at in (3, 65535, 65536, 200_000):
        bad = raw[:at] + b"\xff" + raw[at:]
        with pytest.raises(UnicodeDecodeError) as exc:
            bad.decode("utf-8")
        assert decode_utf8(bad) == exc.value.start
    assert decode_utf8(b"\x00" * 100_000 + b"\xc3") == 100_000  # cut inside the last character


def test_text_that_is_not_utf8_is_escaped_and_a_long_one_keeps_its_head() -> None:
    assert decode_lenient(b"ab\xffc") == "ab\\xffc" == escape_invalid(b"ab\xffc")
    long = b"\xff" * (4 << 20)
    shown = decode_lenient(long)
    assert shown.startswith("\\xff") and shown.endswith("(4,194,304 bytes, not UTF-8)")
    assert len(shown) < 4 * ESCAPED_TEXT_BYTES + 50


def test_a_megabytes_long_key_that_is_not_utf8_is_reported_where_it_breaks() -> None:
    kvs, tensors = tiny_llama_like()
    key = b"k" * 1000 + b"\xff" + bytes(range(256)) * 16384
    data = build_gguf([*kvs, kv_u32(key, 1)], tensors)
    header = _parse(data)
    bad = [f for f in header.findings if f.code == "header.invalid_utf8"]
    assert len(bad) == 1 and "(byte 1000: b'\\xff" in bad[0].message
    assert header.kvs[-1].raw_key == key and len(header.kvs[-1].key) < 4 * ESCAPED_TEXT_BYTES + 50


def test_quoted_bytes_are_cut_before_repr() -> None:
    shown = quote(b"\x00" * (16 << 20), 20)
    assert shown.startswith("b'\\x00") and shown.endswith("(16,777,216 bytes)") and len(shown) < 50
