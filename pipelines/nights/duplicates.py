"""The ``duplicates`` view: a night's files grouped by ``weights_fingerprint``.

Each group of two or more files holding the same weights (see
:mod:`gguf_audit.decode.fingerprints`: same tensor table and same first
blocks read) names, per file, which groups of inference metadata
(``template``, ``special_tokens``, ``tokenizer``, ``vocabulary``, ``context``,
``rope``) differ from the group's first file. Files from any repository or
store group together; files without a weights fingerprint (no sampling, a
block unread, rows from runs before the column) are left out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any, Final

from gguf_audit.pipelines.store import Output
from gguf_audit.report.nightly import DuplicateFile, DuplicateGroup

__all__ = ["DUPLICATE_COLUMNS", "DuplicateFile", "DuplicateGroup", "duplicate_groups", "night_duplicates"]

DUPLICATE_COLUMNS: Final = ("url", "model_id", "weights_fingerprint", "metadata_fingerprint", "metadata_parts")


def _parts(cell: Any) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in cell or ():
        group, _, part = str(item).partition("=")
        out[group] = part
    return out


def _differs(base: Mapping[str, str], other: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(g for g in dict.fromkeys([*base, *other]) if base.get(g) != other.get(g))


def duplicate_groups(rows: Iterable[Mapping[str, Any]]) -> list[DuplicateGroup]:
    """Group ``files`` rows (dicts with :data:`DUPLICATE_COLUMNS`) by weights fingerprint.

    Only groups of two or more, largest first, then by fingerprint.
    """
    by_weights: dict[str, list[Mapping[str, Any]]] = defaultdict(list)
    for row in rows:
        fp = row.get("weights_fingerprint")
        if isinstance(fp, str) and fp:
            by_weights[fp].append(row)
    groups = []
    for fp, members in by_weights.items():
        if len(members) < 2:
            continue
        members = sorted(members, key=lambda r: str(r["url"]))
        base = _parts(members[0].get("metadata_parts"))
        files = tuple(
            DuplicateFile(
                url=str(r["url"]),
                model_id=str(r["model_id"]),
                metadata_fingerprint=r.get("metadata_fingerprint"),
                differs=_differs(base, _parts(r.get("metadata_parts"))),
            )
            for r in members
        )
        groups.append(DuplicateGroup(weights_fingerprint=fp, files=files))
    return sorted(groups, key=lambda g: (-len(g.files), g.weights_fingerprint))


def night_duplicates(out: Output, night: str) -> list[DuplicateGroup]:
    """:func:`duplicate_groups` over one night's ``files`` table."""
    files = out.read("files", [night], columns=list(DUPLICATE_COLUMNS))
    return duplicate_groups(files.to_pylist())
