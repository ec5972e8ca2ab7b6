"""Every real llama.cpp-made file parses to exactly what ggml itself reads."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from corpus import gguf_files, truth

from gguf_audit.audit import AuditConfig, audit_file
from gguf_audit.checks.structure import check_structure
from gguf_audit.findings import Severity
from gguf_audit.format.model import KV, Header, StringArray, ValueType
from gguf_audit.format.parser import parse_header

FILES = gguf_files()


def _parse(path: Path) -> Header:
    data = path.read_bytes()
    header = parse_header(data, len(data))
    assert isinstance(header, Header)
    return header


def _same_scalar(ours: Any, theirs: Any) -> bool:
    if isinstance(theirs, float):
        return math.isclose(float(ours), theirs, rel_tol=0, abs_tol=0) or (math.isnan(ours) and math.isnan(theirs))
    return bool(ours == theirs) and type(ours) is type(theirs)


def _items(kv: KV, index: slice) -> list[Any]:
    value = kv.value
    if isinstance(value, StringArray):
        return value[index]
    assert isinstance(value, np.ndarray)
    return [v.item() if isinstance(v, np.generic) else v for v in value[index]]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_metadata_matches_ggml(path: Path) -> None:
    expected = truth(path)
    header = _parse(path)
    assert header.version == expected["gguf_version"]
    assert header.alignment == expected["alignment"]
    assert header.n_kv == expected["n_kv"] == len(header.kvs)
    assert [kv.key for kv in header.kvs] == [kv["key"] for kv in expected["kv"]]
    for kv, want in zip(header.kvs, expected["kv"], strict=True):
        assert kv.type.name == want["type"], kv.key
        if kv.type is ValueType.ARRAY:
            assert kv.item_type is not None and kv.item_type.name == want["array_type"], kv.key
            assert kv.length == want["n"], kv.key
            head, tail = want["head"], want["tail"]
            assert _items(kv, slice(0, len(head))) == head, kv.key
            assert _items(kv, slice(kv.length - len(tail), kv.length)) == tail, kv.key
        else:
            assert _same_scalar(kv.value, want["value"]), (kv.key, kv.value, want["value"])


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_tensors_match_ggml(path: Path) -> None:
    expected = truth(path)
    header = _parse(path)
    assert header.data_offset == expected["data_offset"]
    assert header.n_tensors == expected["n_tensors"] == len(header.tensors)
    for tensor, want in zip(header.tensors, expected["tensors"], strict=True):
        ne = list(tensor.shape) + [1] * (4 - len(tensor.shape))
        assert tensor.name == want["name"]
        assert ne == want["ne"] + [1] * (4 - len(want["ne"]))
        assert tensor.type_id == want["ggml_type"]
        assert tensor.type_name.lower() == want["type_name"].lower()
        assert tensor.data_offset == want["abs_offset"]
        assert tensor.offset == want["abs_offset"] - expected["data_offset"]
        assert tensor.n_bytes == want["nbytes"]
    assert header.min_file_size <= expected["size"] == path.stat().st_size


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_corpus_files_have_no_errors(path: Path) -> None:
    header = _parse(path)
    findings = list(check_structure(header, path.stat().st_size))
    errors = [f for f in findings if f.severity is Severity.ERROR]
    assert errors == []
    codes = {f.code for f in findings}
    if header.byte_order == "big":
        assert "header.big_endian" in codes
    else:
        assert codes <= {"header.noncanonical_key"}, findings


def test_big_endian_twin_reads_the_same() -> None:
    big_path = next(p for p in FILES if p.parent.name == "bigendian")
    little_path = next(p for p in FILES if p.name == big_path.name.replace("-BE", ""))
    big, little = _parse(big_path), _parse(little_path)
    assert big.byte_order == "big" and little.byte_order == "little"
    assert (big.version, big.alignment, big.data_offset) == (little.version, little.alignment, little.data_offset)
    assert [(k.key, k.type, k.item_type, k.length) for k in big.kvs] == [
        (k.key, k.type, k.item_type, k.length) for k in little.kvs
    ]
    for a, b in zip(big.kvs, little.kvs, strict=True):
        if isinstance(a.value, StringArray):
            assert a.value.to_list() == b.value.to_list()  # type: ignore[union-attr]
        elif isinstance(a.value, np.ndarray):
            assert np.array_equal(a.value, b.value)  # type: ignore[arg-type]
        else:
            assert a.value == b.value
    assert [(t.name, t.shape, t.type_id, t.offset, t.n_bytes) for t in big.tensors] == [
        (t.name, t.shape, t.type_id, t.offset, t.n_bytes) for t in little.tensors
    ]
    audit = audit_file(str(big_path), config=AuditConfig())
    assert audit.loadable is False
    assert [f.code for f in audit.findings if f.severity is not Severity.INFO] == ["header.big_endian"]


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_audit_reads_only_the_header(path: Path) -> None:
    audit = audit_file(str(path), config=AuditConfig())
    assert audit.header is not None
    # llama.cpp refuses a later shard given alone ('illegal split file idx'); its set loads.
    later = (audit.header.get_int("split.no") or 0) > 0
    assert audit.loadable is (audit.header.byte_order == "little" and not later)
    # At most the first request's read-ahead plus what the estimate asked for.
    assert audit.io.bytes_read <= max(audit.header.header_bytes * 1.10, 512 * 1024)
    assert audit.io.requests <= 3  # info + at most 2 reads
