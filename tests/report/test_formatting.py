"""gguf_audit.report.format: the one escape, the one finding line (both widths), byte sizes."""

from __future__ import annotations

from gguf_audit.findings import finding
from gguf_audit.report.format import (
    INSPECT_CODE_WIDTH,
    MEASURE_CODE_WIDTH,
    escape,
    finding_line,
    fmt_bytes,
    fmt_stat,
)


def test_escape_shows_controls_and_bidi_overrides() -> None:
    assert escape("a\x1b[31mb\n\tc\u202ed\x85") == "a\\x1b[31mb\\n\\tc\\u202ed\\x85"
    assert escape("abcdef", 3) == "abc… (6 characters)"
    assert escape("plain, ünïcode") == "plain, ünïcode"


def test_inspect_finding_line_has_a_32_column_code_and_the_place() -> None:
    f = finding("data.truncated", "cut\x1b short", tensor="w\u202e", offset=7)
    assert INSPECT_CODE_WIDTH == 32
    assert finding_line(f) == f"  ERROR   {'data.truncated':32} cut\\x1b short  [tensor w\\u202e, @7]"
    bare = finding("data.truncated", "m")
    assert finding_line(bare) == f"  ERROR   {'data.truncated':32} m"


def test_sample_and_compare_lines_have_a_24_column_code_and_no_place() -> None:
    f = finding("data.zero_filled", "all zero", tensor="w", offset=7)
    assert MEASURE_CODE_WIDTH == 24
    line = finding_line(f, code_width=MEASURE_CODE_WIDTH, place=False)
    assert line == f"  WARNING {'data.zero_filled':24} all zero"


def test_byte_sizes_and_statistics() -> None:
    assert fmt_bytes(None) == "?"
    assert fmt_bytes(1023) == "1023 B"
    assert fmt_bytes(1719840) == "1.6 MiB"
    assert fmt_bytes(1719840, exact=True) == "1.6 MiB (1719840 B)"
    assert fmt_stat(None) == "-" and fmt_stat(0.123456) == "0.1235"
