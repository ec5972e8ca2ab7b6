"""A record longer than the first read (a megabytes-long key or string) costs one more round, not several.

llama.cpp reads keys and strings of up to 1 GiB, so the parser must too. Once
the parser knows such a record's length, the next request asks for the whole
record and a guess at the rest of the header, so the record is fetched and
parsed once (before, each later round stopped a few bytes after it and parsed
it again from its start).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from gguf_audit.audit import AuditConfig, audit_file
from gguf_audit.format.model import Header
from gguf_audit.format.parser import parse_header
from gguf_audit.testing.builder import build_gguf, kv_str, tiny_llama_like
from gguf_audit.testing.http import RangeHTTPServer

_LONG = 3 * 1024 * 1024 + 17


def _with_long(where: str) -> bytes:
    kvs, tensors = tiny_llama_like()
    long = kv_str("x" * _LONG, "v") if where == "key" else kv_str("general.description", "d" * _LONG)
    return build_gguf([*kvs[:3], long, *kvs[3:]], tensors)


@pytest.mark.parametrize("where", ["key", "value"])
def test_a_long_record_is_read_in_one_more_round(http: RangeHTTPServer, where: str) -> None:
    data = _with_long(where)
    http.put(f"long-{where}.gguf", data)
    config = AuditConfig(semantics=False, templates=False)
    audit = audit_file(http.url_for(f"long-{where}.gguf"), config=config)
    local = parse_header(data, len(data))
    assert isinstance(local, Header)
    assert audit.header is not None and audit.header.header_bytes == local.header_bytes
    assert audit.io.requests == 2 and len(http.requests) == 2
    # The second round reads the record, the rest of the header and at most a few percent more.
    assert audit.io.bytes_read <= int(local.header_bytes * 1.05) + 8192


def test_a_long_record_is_read_in_one_more_round_from_a_small_first_read(http: RangeHTTPServer) -> None:
    data = _with_long("key")
    http.put("long-small.gguf", data)
    base = AuditConfig(semantics=False, templates=False)
    config = replace(base, read=replace(base.read, initial_bytes=4096))
    audit = audit_file(http.url_for("long-small.gguf"), config=config)
    assert audit.header is not None and not audit.findings
    assert audit.io.requests == 2
