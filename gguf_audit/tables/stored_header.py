"""A file's tensor table rebuilt from the rows a night stored: its ``files`` row and its ``tensors`` rows.

An incremental night does not read an unchanged file again, yet compares it
when its family's reference changed. The comparison needs the file's tensors
(names, types, shapes, data offsets), its byte order and sizes, and whether
an importance matrix made it; the night that read the file stored all of it:
``files`` (``version``, ``byte_order``, ``alignment``, ``header_bytes``,
``data_offset``, ``min_file_size``, ``n_kv``, ``n_tensors``,
``made_with_imatrix``) and one ``tensors`` row per tensor info. :func:`known_table`
turns those rows back into a :class:`~gguf_audit.format.tensor_table.KnownTable`,
or says None whenever the rows cannot stand for the header: a column that is
null (an output written before it existed, or a value past int64), a name
the table may have altered (cut, or escaped: it would no longer match the
reference's), rows that skip an index or disagree with the file's data
offset. None means: read the header, as before.

Pure: pyarrow and values in, a value out; which rows are fresh enough is the caller's.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

import pyarrow as pa

from gguf_audit.bounded import NAME_LIMIT
from gguf_audit.format.model import Header, TensorInfo
from gguf_audit.format.tensor_table import KnownTable

__all__ = ["STORED_FILE_COLUMNS", "STORED_TENSOR_COLUMNS", "known_table"]

STORED_FILE_COLUMNS: Final = (
    "version",
    "byte_order",
    "alignment",
    "header_bytes",
    "data_offset",
    "min_file_size",
    "n_kv",
    "n_tensors",
    "made_with_imatrix",
)
"""The ``files`` columns a stored tensor table needs besides its rows (the file's size is the listing's)."""

STORED_TENSOR_COLUMNS: Final = (
    "url",
    "index",
    "name",
    "type_id",
    "shape",
    "offset",
    "data_offset",
    "n_bytes",
    "n_elements",
)
"""The ``tensors`` columns a stored tensor table is rebuilt from."""

_BYTE_ORDERS: Final = ("little", "big")


def _altered(name: str) -> bool:
    """Whether the table may hold ``name`` otherwise than the file does: cut past :data:`NAME_LIMIT`, or
    with its undecodable bytes escaped (``arrow_text`` writes them as backslash sequences)."""
    return len(name) > NAME_LIMIT or "\\" in name


def known_table(file_row: Mapping[str, Any], tensors: pa.Table, file_size: int | None) -> KnownTable | None:
    """The tensor table of one file from its stored ``files`` row and ``tensors`` rows (of that file only).

    ``file_size`` is the size the listing gives now (the caller has checked the
    file is the one those rows describe). None when the rows cannot stand for
    the header (see the module's docstring).
    """
    facts: dict[str, Any] = {name: file_row.get(name) for name in STORED_FILE_COLUMNS}
    if any(value is None for value in facts.values()) or facts["byte_order"] not in _BYTE_ORDERS:
        return None
    if tensors.num_rows == 0 or any(tensors.column(c).null_count for c in STORED_TENSOR_COLUMNS):
        return None
    columns = {c: tensors.column(c).to_pylist() for c in STORED_TENSOR_COLUMNS}
    order = sorted(range(tensors.num_rows), key=columns["index"].__getitem__)
    if [columns["index"][i] for i in order] != list(range(tensors.num_rows)):
        return None
    data_offset = int(facts["data_offset"])
    infos: list[TensorInfo] = []
    for i in order:
        name, shape = str(columns["name"][i]), columns["shape"][i]
        if _altered(name) or None in shape or columns["data_offset"][i] != data_offset + columns["offset"][i]:
            return None
        infos.append(
            TensorInfo(
                name=name,
                shape=tuple(int(d) for d in shape),
                type_id=int(columns["type_id"][i]),
                offset=int(columns["offset"][i]),
                data_offset=int(columns["data_offset"][i]),
                n_elements=int(columns["n_elements"][i]),
                n_bytes=int(columns["n_bytes"][i]),
                info_offset=0,
            )
        )
    header = Header(
        version=int(facts["version"]),
        byte_order="big" if facts["byte_order"] == "big" else "little",
        alignment=int(facts["alignment"]),
        kvs=(),
        tensors=tuple(infos),
        header_bytes=int(facts["header_bytes"]),
        data_offset=data_offset,
        min_file_size=int(facts["min_file_size"]),
        file_size=file_size,
        n_kv=int(facts["n_kv"]),
        n_tensors=int(facts["n_tensors"]),
    )
    return KnownTable(header, bool(facts["made_with_imatrix"]))
