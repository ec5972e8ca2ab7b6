"""The audit tables' schemas, and docs/tables.md describing every column."""

from __future__ import annotations

import re
from pathlib import Path

import pyarrow as pa
import pytest

from gguf_audit.tables.schema import (
    PARTITION_COLUMN,
    SCHEMA_VERSION,
    SCHEMAS,
    TABLE_NAMES,
    schema_version_of,
    stored_schema,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "tables.md"


def test_schemas() -> None:
    assert TABLE_NAMES == (
        "runs",
        "files",
        "models",
        "tensors",
        "metadata",
        "problems",
        "samples",
        "compare",
        "mirror",
    )
    for name in TABLE_NAMES:
        stored = stored_schema(name)
        assert PARTITION_COLUMN not in stored.names
        assert SCHEMAS[name].names == [*stored.names, PARTITION_COLUMN]
        assert schema_version_of(stored) == SCHEMA_VERSION
    files = stored_schema("files")
    for column in [
        "url",
        "size",
        "etag",
        "status",
        "loadable",
        "version",
        "byte_order",
        "n_tensors",
        "n_kv",
        "header_bytes",
        "architecture",
        "name",
        "file_type",
        "model_id",
        "shard_index",
        "shard_count",
        "fingerprint",
        "bytes_read",
        "requests",
        "seconds",
    ]:
        assert column in files.names, column
    assert files.field("fingerprint").nullable
    assert set(["url", "model_id", "tensor", "code", "severity", "message", "offset"]) <= set(
        stored_schema("problems").names
    )
    assert stored_schema("tensors").field("shape").type == pa.list_(pa.int64())
    assert {"count", "min", "max", "mean", "std", "max_abs", "n_nan", "n_inf", "zero_fraction"} <= set(
        stored_schema("samples").names
    )
    with pytest.raises(KeyError, match=r"Got 'file'\."):
        stored_schema("file")


def test_docs_describe_every_column() -> None:
    text = DOCS.read_text()
    assert f"Schema version: {SCHEMA_VERSION}" in text
    for name in TABLE_NAMES:
        section = re.search(rf"^## `{name}`\n(.*?)(?=^## |\Z)", text, re.M | re.S)
        assert section is not None, f"docs/tables.md has no section for {name}"
        documented = re.findall(r"^\| `([a-z_0-9]+)` \|", section.group(1), re.M)
        assert documented == SCHEMAS[name].names, name
