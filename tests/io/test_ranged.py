"""gguf_audit.io.ranged: what a ranged answer must be before a byte of it is used."""

from __future__ import annotations

import asyncio

import pytest

from gguf_audit.errors import SourceError
from gguf_audit.io.errors import RangeAnswerError, classify_error
from gguf_audit.io.ranged import ContentRange, check_body, check_partial, parse_content_range, read_upto, whole_body_end


def test_parse_content_range() -> None:
    assert parse_content_range("bytes 0-9/100") == ContentRange(0, 9, 100)
    assert parse_content_range("bytes 5-9/*") == ContentRange(5, 9, None)
    assert parse_content_range("bytes */100") == ContentRange(None, None, 100)
    assert parse_content_range(None) is None and parse_content_range("items 0-1/2") is None


def test_a_partial_answer_must_name_the_bytes_asked() -> None:
    assert check_partial(10, 20, "bytes 10-19/100") == 10
    assert check_partial(90, 120, "bytes 90-99/100") == 10  # the file ends there
    for wrong in ("bytes 0-9/100", "bytes 10-18/100", "bytes 10-19/15", None, "garbage"):
        with pytest.raises(RangeAnswerError, match=r"asked bytes=10-19"):
            check_partial(10, 20, wrong)
    # A wrong answer is worth a retry, like a dropped connection.
    assert classify_error(RangeAnswerError("x")) == ("io.error", True)


def test_bodies_must_have_the_length_announced() -> None:
    assert check_body(b"abc", 3, "bytes=0-2") == b"abc"
    with pytest.raises(RangeAnswerError, match=r"the body has 2 of 3 bytes"):
        check_body(b"ab", 3, "bytes=0-2")


def test_whole_body_answers_are_read_only_within_the_limit() -> None:
    assert whole_body_end(100, 200, 10_000, 1000) == 200
    assert whole_body_end(100, 200, 150, 1000) == 150
    with pytest.raises(SourceError) as err:
        whole_body_end(5000, 6000, 10_000, 1000)
    assert err.value.code == "io.range_ignored"
    assert "bytes=5000-5999" in err.value.message and "(1000)" in err.value.message
    assert classify_error(err.value) == ("io.range_ignored", False)


def test_read_upto_stops_at_n_or_the_end() -> None:
    data = bytearray(b"x" * 10)

    async def read(k: int) -> bytes:
        out = bytes(data[:k])
        del data[:k]
        return out

    assert asyncio.run(read_upto(read, 4)) == b"xxxx"
    assert asyncio.run(read_upto(read, 100)) == b"x" * 6
