"""A name of megabytes gives a report of kilobytes: file text is cut before it is escaped or redacted."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from gguf_audit.bounded import NAME_LIMIT, clip, clip_message, quote
from gguf_audit.cli import main
from gguf_audit.findings import finding
from gguf_audit.redact import redact_text
from gguf_audit.testing.builder import Tensor, build_gguf, tiny_llama_like

_LONG = 16 << 20  # 16 MiB: within llama.cpp's 1 GiB string limit, so a parser may hand it over


def _with_first_name(tmp_path: Path, name: str, file: str) -> Path:
    kvs, tensors = tiny_llama_like()
    first = tensors[0]
    tensors[0] = Tensor(name=name, dims=first.dims, ggml_type=first.ggml_type)
    path = tmp_path / file
    path.write_bytes(build_gguf(kvs, tensors))
    return path


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    tmp = tmp_path_factory.mktemp("bounded")
    return (
        _with_first_name(tmp, "blk." + "A" * 60, "short.gguf"),
        _with_first_name(tmp, "blk." + "A" * _LONG, "long.gguf"),
    )


@pytest.mark.parametrize("fmt", ["text", "json", "jsonl", "sarif"])
def test_inspect_output_of_a_16_mib_name_is_small(
    files: tuple[Path, Path], fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    short, long = files
    assert main(["inspect", str(short), "--format", fmt]) == 1
    baseline = len(capsys.readouterr().out)
    started = time.perf_counter()
    assert main(["inspect", str(long), "--format", fmt]) == 1
    seconds = time.perf_counter() - started
    out = capsys.readouterr().out
    # The same report with a 64-character name, plus the cut names: kilobytes, not the 67 MB it was.
    assert len(out) < baseline + 8 * NAME_LIMIT, (fmt, len(out), baseline)
    # The full length is stated. The parser stops at the name (ggml refuses names of 64 bytes or more, so
    # gguf-audit reads no more of one than its start): nothing past it is judged, nothing of it is quoted whole.
    assert f"{_LONG + 4} bytes" in out
    assert seconds < 10, seconds
    if fmt == "json":
        report = json.loads(out)
        assert [p["code"] for p in report["problems"]] == ["tensor.name_too_long"]
        assert all(len(p["message"]) < NAME_LIMIT + 200 for p in report["problems"])


def test_clip_and_quote_state_the_length() -> None:
    assert clip("abc", 5) == "abc" and quote("abc", 5) == "'abc'"
    assert clip("abcdefgh", 3) == "abc… (8 characters)"
    assert quote("abcdefgh", 3) == "'abc…' (8 characters)"
    assert quote(b"\x00" * 1000, 10).startswith("b'\\x00") and len(quote(b"\x00" * 1000, 10)) < 40
    long = "x" * 10_000 + " is 10000 bytes; ggml allows at most 63"
    cut = clip_message(long)
    assert len(cut) < 1300 and cut.endswith("ggml allows at most 63") and "characters cut" in cut


def test_finding_cuts_message_and_tensor() -> None:
    name = "n" * 100_000
    f = finding("tensor.name_too_long", f"tensor {name} is too long", tensor=name)
    assert len(f.message) < 1300 and f.message.endswith("is too long")
    assert f.tensor is not None and f.tensor.endswith("(100,000 characters)") and len(f.tensor) < NAME_LIMIT + 40


@pytest.mark.parametrize(
    "text",
    [
        "a" * 1_000_000 + "=",  # a run of letters before '=' and no '://': was quadratic (minutes)
        "a" * 1_000_000 + " ://x",
        "token=" * 200_000,
        "https://h/?" + "a=b&" * 200_000,
    ],
)
def test_redaction_is_linear(text: str) -> None:
    started = time.perf_counter()
    redact_text(text)
    assert time.perf_counter() - started < 2.0


def test_redaction_still_finds_a_url_after_a_long_word() -> None:
    assert redact_text("X" * 50 + "https://u:p@host/x?sig=abc") == "X" * 50 + "https://***@host/x?sig=***"
