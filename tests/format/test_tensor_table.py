"""gguf_audit.format.tensor_table: the tensor infos parsed back from just their bytes, as the whole header has them."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from corpus import corpus_dir

from gguf_audit.errors import FormatError
from gguf_audit.format.model import Header
from gguf_audit.format.parser import parse_header
from gguf_audit.format.tensor_table import KnownTable, TensorTableAt, parse_tensor_table, tensor_table_at

MODELS = sorted((corpus_dir() / "models").glob("*.gguf"))


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.name)
def test_the_table_alone_gives_the_header_s_tensors(path: Path) -> None:
    data = path.read_bytes()
    header = parse_header(data, len(data))
    assert isinstance(header, Header)
    at = tensor_table_at(header)
    assert at is not None
    assert at.table_bytes < len(data) // 2 or at.header_bytes < 4096  # the vocabulary is not in it
    table = parse_tensor_table(data[at.info_offset : at.header_bytes], at)
    assert table.tensors == header.tensors
    for name in ("data_offset", "min_file_size", "alignment", "byte_order", "header_bytes", "n_tensors"):
        assert getattr(table, name) == getattr(header, name), name
    assert table.kvs == ()
    imatrix = any(kv.key.startswith("quantize.imatrix.") for kv in header.kvs)
    assert at.imatrix is imatrix
    assert at.imatrix is ("IQ2_XXS" in path.name)  # the corpus' one quant made with an importance matrix


def test_bytes_that_are_not_the_table_are_refused() -> None:
    data = (corpus_dir() / "models" / "tiny-llama-Q4_0.gguf").read_bytes()
    header = parse_header(data, len(data))
    assert isinstance(header, Header)
    at = tensor_table_at(header)
    assert at is not None
    with pytest.raises(FormatError, match=r"ends before its \d+ infos"):
        parse_tensor_table(data[at.info_offset : at.header_bytes - 1], at)
    with pytest.raises(FormatError, match="not at"):
        parse_tensor_table(data[at.info_offset : at.header_bytes + 8], at)
    moved = dataclasses.replace(at, info_offset=at.info_offset - 8)
    with pytest.raises(FormatError):
        parse_tensor_table(data[moved.info_offset : moved.header_bytes], moved)


@pytest.mark.parametrize("file_size", [None, 0, 1 << 40])
def test_the_packed_value_round_trips(file_size: int | None) -> None:
    data = (corpus_dir() / "models" / "tiny-llama-IQ2_XXS.gguf").read_bytes()
    header = parse_header(data, len(data))
    assert isinstance(header, Header)
    at = tensor_table_at(header)
    assert at is not None
    at = dataclasses.replace(at, file_size=file_size, byte_order="big", alignment=1 << 31)
    packed = at.packed()
    assert len(packed) == 62
    assert TensorTableAt.unpacked(packed) == at


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.name)
def test_a_known_table_packs_and_unpacks_to_the_same_tensors(path: Path) -> None:
    data = path.read_bytes()
    header = parse_header(data, len(data))
    assert isinstance(header, Header)
    imatrix = "IQ2_XXS" in path.name
    known = KnownTable(dataclasses.replace(header, kvs=(), metadata={}), imatrix=imatrix)
    packed = known.packed()
    back = KnownTable.unpacked(packed)
    assert back.imatrix is imatrix and back.file_size == len(data)
    fields = ("name", "shape", "type_id", "offset", "data_offset", "n_elements", "n_bytes")
    assert [tuple(getattr(t, f) for f in fields) for t in back.header.tensors] == [
        tuple(getattr(t, f) for f in fields) for t in header.tensors
    ]
    for name in ("version", "byte_order", "alignment", "header_bytes", "data_offset", "min_file_size", "n_kv"):
        assert getattr(back.header, name) == getattr(header, name), name
    # Far smaller than the header it stands for (the vocabulary is not in it), under 100 bytes a tensor.
    assert len(packed) < 100 * len(header.tensors) + 100
    unknown = KnownTable.unpacked(
        dataclasses.replace(known, header=dataclasses.replace(known.header, file_size=None)).packed()
    )
    assert unknown.file_size is None
