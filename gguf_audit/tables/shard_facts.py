"""Shard facts read back from stored rows: what an incremental run knows of shards it does not read again.

:func:`shard_facts_from_tables` gives the same :class:`ShardFacts` that
:func:`gguf_audit.checks.shards.shard_facts` takes from a live audit, from the
``files``, ``metadata`` and ``tensors`` rows an earlier run stored, so a shard
set is judged again whole when only some of its shards changed.

Pure: Arrow tables in, frozen values out.
"""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.compute as pc

from gguf_audit.audit import Status
from gguf_audit.checks.shards import AGREEING_KEYS, SPLIT_NO, ShardFacts, canonical_value
from gguf_audit.format.shard_names import parse_shard_name

__all__ = ["shard_facts_from_tables"]


def shard_facts_from_tables(files: pa.Table, metadata: pa.Table, tensors: pa.Table) -> list[ShardFacts]:
    """The :class:`ShardFacts` of the shard files in stored ``files`` rows.

    ``metadata`` and ``tensors`` are those files' stored rows; only the split
    keys, :data:`AGREEING_KEYS` and tensor names are used.
    """
    wanted = {SPLIT_NO, *AGREEING_KEYS}
    declared: dict[str, list[tuple[str, str]]] = {}
    split_no_type: dict[str, str] = {}
    if metadata.num_rows:
        keep = metadata.filter(pc.is_in(metadata.column("key"), value_set=pa.array(sorted(wanted))))
        for row in keep.select(["url", "key", "type", "value"]).to_pylist():
            if row["key"] == SPLIT_NO:
                split_no_type.setdefault(row["url"], row["type"])
                continue
            try:
                text = canonical_value(json.loads(row["value"])) if row["value"] is not None else None
            except json.JSONDecodeError:
                text = None
            if text is not None:
                declared.setdefault(row["url"], []).append((row["key"], text))
    names: dict[str, list[str]] = {}
    if tensors.num_rows:
        ordered = tensors.select(["url", "index", "name"]).sort_by([("url", "ascending"), ("index", "ascending")])
        for url, name in zip(ordered.column("url").to_pylist(), ordered.column("name").to_pylist(), strict=True):
            names.setdefault(url, []).append(name)
    out = []
    for row in files.to_pylist():
        shard = parse_shard_name(row["url"])
        if shard is None:
            continue
        readable = row["status"] != str(Status.UNREADABLE)
        order = {k: i for i, k in enumerate(AGREEING_KEYS)}
        split_no = row["split_no"]
        if split_no is None and row["url"] in split_no_type:
            split_no = -1
        out.append(
            ShardFacts(
                url=row["url"],
                index=shard.shard_index,
                count=shard.shard_count,
                readable=readable,
                loadable=row["loadable"],
                version=row["version"],
                byte_order=row["byte_order"],
                split_no=split_no if readable else None,
                split_no_type=split_no_type.get(row["url"]),
                split_count=row["split_count"],
                split_tensors_count=row["split_tensors_count"],
                n_tensors=row["n_tensors"],
                tensor_names=tuple(names.get(row["url"], ())),
                declared=tuple(sorted(declared.get(row["url"], ()), key=lambda kv: order[kv[0]])),
            )
        )
    return out
