"""Hypothesis mutates and truncates real and generated headers: the parser either returns a
header or raises FormatError, and never allocates beyond what the bytes hold; generated
files parse back to exactly what was built, whole or streamed."""

from __future__ import annotations

import struct
import tracemalloc
from functools import cache

import pytest
from corpus import corpus_dir
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gguf_audit.checks.structure import check_structure
from gguf_audit.errors import FormatError
from gguf_audit.findings import CODES
from gguf_audit.format.model import Header, NeedMore
from gguf_audit.format.parser import parse_header
from gguf_audit.testing.strategies import GGUFFile, gguf_files, summarize


@cache
def _header_bytes(name: str) -> bytes:
    path = corpus_dir() / name
    data = path.read_bytes()
    header = parse_header(data, len(data))
    assert isinstance(header, Header)
    # The header and a little data: mutations then hit every field.
    return data[: header.data_offset + 64]


SOURCES = [
    "split/tiny-llama-Q4_K_M-00002-of-00004.gguf",
    "models/tiny-llama-Q4_K_M.gguf",
    "bigendian/tiny-llama-Q8_0-BE.gguf",
]

# Generated headers (every value type, nested arrays, v1 to v3, both byte
# orders) with a little data after the padding, as the corpus headers have.
_generated = gguf_files(versions=(1, 2, 3), include_data=False).map(lambda f: f.content + bytes(64))

# Half corpus headers, half generated ones: the tests below run twice the
# examples they ran on the corpus alone, so the corpus keeps its share.
_sources = st.one_of(st.sampled_from(SOURCES).map(_header_bytes), _generated)


def _judge(buf: bytes, file_size: int | None) -> None:
    try:
        result = parse_header(buf, file_size)
    except FormatError as exc:
        assert exc.code in CODES
        return
    if isinstance(result, Header):
        for f in check_structure(result, file_size):
            assert f.code in CODES
            assert "\n" not in f.message
    else:
        assert isinstance(result, NeedMore)
        assert result.needed_bytes > len(buf)
        assert result.estimated_bytes >= result.needed_bytes


_mutation = st.tuples(st.integers(min_value=0), st.binary(min_size=1, max_size=8))
# Values that break counts and lengths: zero, huge, negative as int64, just past the end.
_nasty = st.sampled_from([0, 1, 2**31, 2**32 - 1, 2**62, 2**63, 2**64 - 1, 10**9])


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(source=_sources, mutations=st.lists(_mutation, min_size=1, max_size=6), cut=st.integers(0, 100))
def test_mutated_headers_give_a_header_or_a_format_error(
    source: bytes, mutations: list[tuple[int, bytes]], cut: int
) -> None:
    buf = bytearray(source)
    for at, patch in mutations:
        at %= len(buf)
        buf[at : at + len(patch)] = patch
    data = bytes(buf[: max(0, len(buf) - cut)])
    _judge(data, len(data))
    # The same bytes as the start of a longer file: the parser asks for more
    # or judges what it has, never anything else.
    _judge(data, len(data) + 4096)


@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    source=_sources,
    at=st.integers(min_value=0),
    value=_nasty,
    width=st.sampled_from([4, 8]),
    order=st.sampled_from("<>"),
)
def test_forged_counts_are_refused_before_allocating(
    source: bytes, at: int, value: int, width: int, order: str
) -> None:
    buf = bytearray(source)
    at %= len(buf) - width
    buf[at : at + width] = struct.pack(order + ("Q" if width == 8 else "I"), value % (1 << (8 * width)))
    data = bytes(buf)
    tracemalloc.start()
    try:
        _judge(data, len(data))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # Everything the parser builds is proportional to the bytes it was given,
    # whatever a count claims (tensor infos cost the most, ~40x their record).
    assert peak <= 64 * len(data) + (1 << 20)


@pytest.mark.parametrize("source", SOURCES)
def test_every_truncation_point(source: str) -> None:
    data = _header_bytes(source)
    step = max(1, len(data) // 400)
    for end in range(0, len(data), step):
        buf = data[:end]
        _judge(buf, end)
        _judge(buf, None)
        _judge(buf, len(data))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=_generated)
def test_every_truncation_point_of_generated_headers(data: bytes) -> None:
    for end in range(len(data)):
        buf = data[:end]
        _judge(buf, end)
        _judge(buf, None)
        _judge(buf, len(data))


# ---------------------------------------------------------------- round trip


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(file=gguf_files(versions=(1, 2, 3)))
def test_built_then_parsed_gives_back_what_was_built(file: GGUFFile) -> None:
    header = parse_header(file.content, len(file.content))
    assert isinstance(header, Header)
    assert summarize(header) == file.expected
    assert header.findings == ()


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(file=gguf_files(), cut=st.floats(0, 1, exclude_max=True), size_known=st.booleans())
def test_a_streamed_parse_resumes_to_the_same_header(file: GGUFFile, cut: float, size_known: bool) -> None:
    """Cut anywhere inside the header, the parser asks for more; resumed with the
    whole file, it gives back the header a one-shot parse gives."""
    content = file.content
    end = int(cut * file.expected.header_bytes)
    file_size = len(content) if size_known else None
    first = parse_header(content[:end], file_size)
    assert isinstance(first, NeedMore)
    assert end < first.needed_bytes <= first.estimated_bytes
    resumed = parse_header(content, file_size, resume=first.resume)
    assert isinstance(resumed, Header)
    assert summarize(resumed) == file.expected
