"""Headers that claim more records than the parser's read budgets: it stops where gguf.cpp would refuse,
or gives up with ``header.too_many_entries``, after reading no more than the budget."""

from __future__ import annotations

import pytest

from gguf_audit.codes import CODES, Code
from gguf_audit.errors import FormatError
from gguf_audit.format.model import Header, NeedMore
from gguf_audit.format.parser import parse_header
from gguf_audit.format.wire import Limits
from gguf_audit.testing.builder import KV, build_gguf, kv_u8, tiny_llama_like

SMALL = Limits(max_kv_read=64)


def _with_keys(extra: list[KV]) -> bytes:
    kvs, tensors = tiny_llama_like()
    return build_gguf([*kvs, *extra], tensors)


def _refusal(raw: bytes, limits: Limits = SMALL) -> FormatError:
    with pytest.raises(FormatError) as caught:
        parse_header(raw, len(raw), limits=limits)
    return caught.value


def test_past_the_budget_the_first_empty_key_ends_the_parse_as_gguf_cpp_refuses_there() -> None:
    n_seed = len(tiny_llama_like()[0])
    raw = _with_keys([kv_u8(f"k.{i}", 1) for i in range(10)] + [kv_u8("", 0)] * 500)
    error = _refusal(raw)
    assert error.code is Code.HEADER_EMPTY_KEY
    assert error.message.startswith(f"key {n_seed + 10} is empty; gguf.cpp stops reading there")
    assert error.offset is not None and raw[error.offset : error.offset + 8] == bytes(8)


def test_past_the_budget_a_repeated_key_ends_the_parse() -> None:
    raw = _with_keys([kv_u8(f"k.{i % 20}", 1) for i in range(500)])
    error = _refusal(raw)
    assert error.code is Code.HEADER_DUPLICATE_KEY
    assert "'k.0'" in error.message and "repeats an earlier key" in error.message


def test_past_the_budget_distinct_keys_are_not_judged() -> None:
    raw = _with_keys([kv_u8(f"k.{i}", 1) for i in range(500)])
    error = _refusal(raw)
    assert error.code is Code.HEADER_TOO_MANY_ENTRIES
    assert "claims 5" in error.message and "read 64 of them" in error.message
    # Unknown to llama.cpp's verdict: the file may load (llama.cpp reads a million distinct keys).
    assert CODES[Code.HEADER_TOO_MANY_ENTRIES].refused is None


def test_the_default_budget_stops_a_large_header_of_tiny_keys() -> None:
    raw = _with_keys([kv_u8(f"k{i:x}", 1) for i in range(Limits().max_kv_read + 10)])
    assert _refusal(raw, Limits()).code is Code.HEADER_TOO_MANY_ENTRIES


def test_within_the_budget_every_key_is_read_and_the_checks_judge_them() -> None:
    raw = _with_keys([kv_u8("", 0)] * 20)
    header = parse_header(raw, len(raw), limits=SMALL)
    assert isinstance(header, Header) and len(header.kvs) == header.n_kv


def test_the_budget_holds_across_a_resumed_parse() -> None:
    """A repeated key read after the buffer ran short is still seen against the keys read before."""
    raw = _with_keys([kv_u8(f"k.{i}", 1) for i in range(30)] + [kv_u8("k.3", 1)] * 100)
    first = parse_header(raw[:1200], len(raw), limits=SMALL)
    assert isinstance(first, NeedMore) and first.resume is not None
    with pytest.raises(FormatError) as caught:
        parse_header(raw, len(raw), resume=first.resume, limits=SMALL)
    assert caught.value.code is Code.HEADER_DUPLICATE_KEY


def test_a_short_buffer_asks_for_no_more_than_the_budget() -> None:
    raw = _with_keys([kv_u8(f"k.{i}", 1) for i in range(100_000)])
    more = parse_header(raw[:4096], len(raw))
    assert isinstance(more, NeedMore)
    assert more.estimated_bytes < 2 * Limits().max_kv_read * 64 < len(raw)


def test_past_the_tensor_budget_the_file_is_not_judged() -> None:
    kvs, tensors = tiny_llama_like()
    raw = build_gguf(kvs, tensors)
    error = _refusal(raw, Limits(max_tensor_read=4))
    assert error.code is Code.HEADER_TOO_MANY_ENTRIES
    assert f"claims {len(tensors)} tensor infos" in error.message and "read 4 of them" in error.message
