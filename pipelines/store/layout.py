"""How one data file lays out its columns: which columns it stores, in what row order, and each column's encoding.

A night's fixed cost is its data files' overhead (footer and page headers,
about 150 bytes per column and file) and the rows it writes whatever changed
(a ``files`` row per listed file, a ``models`` row per model, the ``runs``
row). Three choices keep both small without changing what a reader sees:

- **Columns with no value are not stored.** A data file written in one piece
  leaves out its nullable columns that are null in every row; Delta readers
  (delta-rs, DuckDB's ``delta_scan``, polars, Spark) read a column a data file
  lacks as null, exactly as they read files written before a column was added.
- **Rows in key order** for the tables with one row per key (``files`` by URL,
  ``models`` by model id), so neighbouring keys share prefixes.
- **Each column's encoding chosen by measurement** in the driver's data files
  (``measure``): the file's first :data:`TRIAL_ROWS` rows are encoded with
  dictionary, plain and the delta or byte-stream-split encoding each column's
  type allows (three writes in all), and each column keeps the one that made
  it smallest, at zstd level :data:`MEASURED_LEVEL`. Sorted URLs and
  modification times shrink several times over.

Workers' data files (the rows of the files a night read) keep dictionary
encoding and zstd's default level: choosing their encodings too would shrink
a full night but not the fixed part of a night, so a churn night's and the
driver's shares of a full night would grow past the nightly cost targets.
"""

from __future__ import annotations

import contextlib
import io
from dataclasses import dataclass, field
from typing import Any, Final

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = ["COMPRESSION", "MEASURED_LEVEL", "SORT_KEYS", "TRIAL_ROWS", "Layout", "choose_layout", "in_key_order"]

COMPRESSION: Final = "zstd"
MEASURED_LEVEL: Final = 9
"""zstd level of a measured layout: the driver's files are a few rows per file, so the level costs little CPU."""
TRIAL_ROWS: Final = 8192
"""Rows of a column encoded per candidate encoding when choosing (bounds the choice's CPU on big batches)."""
SORT_KEYS: Final[dict[str, tuple[str, ...]]] = {"files": ("url",), "models": ("model_id",)}
"""Tables written in key order (one row per key), and their keys."""

_DICTIONARY: Final = "dictionary"
_PLAIN: Final = "PLAIN"


@dataclass(frozen=True, slots=True)
class Layout:
    """The stored columns of one data file and each one's encoding."""

    schema: pa.Schema
    dictionary: list[str] | bool = True
    """The Parquet column paths that are dictionary-encoded (True: every one)."""
    encodings: dict[str, str] = field(default_factory=dict)
    level: int | None = None
    """zstd level (None: pyarrow's default)."""

    def writer_options(self) -> dict[str, Any]:
        """Keyword arguments for :class:`pyarrow.parquet.ParquetWriter`."""
        options: dict[str, Any] = {"compression": COMPRESSION, "use_dictionary": self.dictionary}
        if self.level is not None:
            options["compression_level"] = self.level
        if self.encodings:
            options["column_encoding"] = self.encodings
        return options


def _leaves(path: str, kind: pa.DataType) -> list[str]:
    """The Parquet column paths of a field (what per-column writer options are keyed by)."""
    if pa.types.is_list(kind) or pa.types.is_large_list(kind):
        return _leaves(f"{path}.list.element", kind.value_type)
    if pa.types.is_struct(kind):
        return [leaf for child in kind for leaf in _leaves(f"{path}.{child.name}", child.type)]
    return [path]


def _special(kind: pa.DataType) -> str | None:
    """The encoding besides dictionary and plain worth trying for a column of type ``kind``, if any."""
    if pa.types.is_string(kind) or pa.types.is_large_string(kind) or pa.types.is_binary(kind):
        return "DELTA_BYTE_ARRAY"
    if (pa.types.is_integer(kind) and kind.bit_width >= 32) or pa.types.is_timestamp(kind):
        return "DELTA_BINARY_PACKED"
    if pa.types.is_floating(kind):
        return "BYTE_STREAM_SPLIT"
    return None


def _chunk_sizes(rows: pa.Table, **options: Any) -> dict[str, int]:
    """Compressed bytes of each column chunk (by Parquet path) of ``rows`` written with ``options``."""
    sink = io.BytesIO()
    pq.write_table(
        rows,
        sink,
        compression=COMPRESSION,
        compression_level=MEASURED_LEVEL,
        store_schema=False,
        write_statistics=False,
        **options,
    )
    group = pq.ParquetFile(io.BytesIO(sink.getvalue())).metadata.row_group(0)
    return {group.column(i).path_in_schema: group.column(i).total_compressed_size for i in range(group.num_columns)}


def _trial(rows: pa.Table, specials: dict[str, str]) -> dict[str, dict[str, int]]:
    """Each candidate encoding's chunk sizes: all columns written once per candidate."""
    sizes = {
        _DICTIONARY: _chunk_sizes(rows, use_dictionary=True),
        _PLAIN: _chunk_sizes(rows, use_dictionary=False),
    }
    # a pyarrow that refuses one of these encodings leaves the choice to the other two
    with contextlib.suppress(pa.ArrowException, OSError, ValueError):
        if specials:
            sizes["special"] = _chunk_sizes(rows, use_dictionary=False, column_encoding=specials)
    return sizes


def choose_layout(schema: pa.Schema, rows: pa.Table, *, complete: bool, measure: bool = False) -> Layout:
    """The layout of a data file of ``schema`` whose first rows are ``rows``.

    ``complete`` says ``rows`` are all the file will hold: only then are the
    columns null in every row left out (a later row group could need them).
    With ``measure`` every column is encoded each way once (the first
    :data:`TRIAL_ROWS` rows, three writes in all) and keeps its smallest (a
    tie keeps the dictionary, then plain); without, every column is
    dictionary-encoded.
    """
    fields = list(schema)
    if complete:
        fields = [f for f in fields if not f.nullable or rows.column(f.name).null_count < rows.num_rows]
    stored = pa.schema(fields, metadata=schema.metadata)
    if not measure:
        return Layout(stored)
    specials = {f.name: e for f in fields if (e := _special(f.type)) is not None}
    sizes = _trial(rows.select(stored.names).slice(0, TRIAL_ROWS), specials)
    dictionary: list[str] = []
    encodings: dict[str, str] = {}
    for f in fields:
        leaves = _leaves(f.name, f.type)
        ranked = [k for k in (_DICTIONARY, _PLAIN, "special") if k in sizes and (k != "special" or f.name in specials)]
        best = min(ranked, key=lambda k: (sum(sizes[k][leaf] for leaf in leaves), ranked.index(k)))
        if best == _DICTIONARY:
            dictionary.extend(leaves)
        elif best == "special":
            encodings[f.name] = specials[f.name]
    return Layout(stored, dictionary, encodings, MEASURED_LEVEL)


def in_key_order(table_name: str, rows: pa.Table) -> pa.Table:
    """``rows`` sorted by the table's key when it has one (:data:`SORT_KEYS`), else as they are."""
    keys = SORT_KEYS.get(table_name)
    if not keys or rows.num_rows < 2:
        return rows
    return rows.sort_by([(k, "ascending") for k in keys])
