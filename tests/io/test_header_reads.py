"""Headers read at their size: two requests at most and at most 1.05 times the header's bytes, over a real
range server.

The first request is :attr:`ReadConfig.initial_bytes`; the second is sized by the parser's estimate of the
whole header. Real tokenizer headers (the corpus's vocab files, followed here by tensor data so the file does
not end where the header does) and the header benchmark's 32k, 152k and 256k vocabularies.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from corpus import corpus_dir

from gguf_audit.format.model import Header
from gguf_audit.format.parser import parse_header
from gguf_audit.io.header import read_header
from gguf_audit.io.plain import PlainHTTPSource
from gguf_audit.io.read_config import ReadConfig
from gguf_audit.io.source import open_source
from gguf_audit.testing.http import RangeHTTPServer

MAX_REQUESTS = 2
MAX_OVER_HEADER = 1.05
DATA_BYTES = 64 << 20
"""Tensor data after a vocab file's header (zeros made on demand): a read past the header is paid for."""
VOCABS = sorted(p.name for p in (corpus_dir() / "vocab").glob("*.gguf"))
OVER_HEADER = {"ggml-vocab-baichuan.gguf": 1.12}
"""Vocabularies the estimate cannot size within 1.05: Baichuan's last 36,000 tokens are single CJK characters,
half as long as the 28,000 before them, which the first read sees alone (it extrapolates their length)."""
BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture(scope="module")
def server() -> Iterator[RangeHTTPServer]:
    with RangeHTTPServer() as server:
        yield server


def _serve_with_data(server: RangeHTTPServer, name: str, head: bytes) -> int:
    """Serve ``head`` followed by :data:`DATA_BYTES` of zeros at ``name``; the file's size."""
    size = len(head) + DATA_BYTES

    def read(start: int, end: int) -> bytes:
        inside = head[start:end]
        return inside + bytes(end - start - len(inside))

    server.put_virtual(name, size, read)
    return size


def _header_bytes(head: bytes, size: int) -> int:
    header = parse_header(head, size)
    assert isinstance(header, Header)
    return header.header_bytes


@pytest.mark.parametrize("vocab", VOCABS)
@pytest.mark.parametrize("reader", ["stdlib", "fsspec"])
def test_a_real_vocabulary_is_read_at_its_size(server: RangeHTTPServer, vocab: str, reader: str) -> None:
    head = (corpus_dir() / "vocab" / vocab).read_bytes()
    size = _serve_with_data(server, vocab, head)
    header_bytes = _header_bytes(head, size)
    assert header_bytes > ReadConfig().initial_bytes  # the second read is the estimate's
    server.reset_stats()
    url = server.url_for(vocab)
    source = PlainHTTPSource(url=url, known_size=size) if reader == "stdlib" else open_source(url, size=size)
    read = read_header(source)
    assert read.header.header_bytes == header_bytes
    assert len(server.requests) <= MAX_REQUESTS
    assert header_bytes <= server.bytes_sent <= OVER_HEADER.get(vocab, MAX_OVER_HEADER) * header_bytes
    assert source.stats.requests == len(server.requests) and source.stats.bytes_read == server.bytes_sent


def _bench_headers() -> ModuleType:
    spec = importlib.util.spec_from_file_location("_bench_headers", BENCHMARKS / "headers.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


@pytest.mark.slow
@pytest.mark.parametrize("label", ["32k", "152k", "256k"])
@pytest.mark.parametrize("size_listed", [True, False])
def test_the_benchmark_vocabularies_are_read_at_their_size(tmp_path: Path, label: str, size_listed: bool) -> None:
    """bench_header.py's three shapes (Llama-2, Qwen2 with merges, Gemma), whole files with sparse data."""
    headers = _bench_headers()
    g = headers.write_model(headers.SPECS[label], tmp_path)
    with RangeHTTPServer(root=tmp_path) as server:
        source = PlainHTTPSource(url=server.url_for(g.path.name), known_size=g.file_size if size_listed else None)
        read = read_header(source)
        assert read.header.header_bytes == g.header_bytes
        assert len(server.requests) <= MAX_REQUESTS
        assert g.header_bytes <= server.bytes_sent <= MAX_OVER_HEADER * g.header_bytes
