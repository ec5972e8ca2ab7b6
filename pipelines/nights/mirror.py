"""Committed nights' ``mirror`` rows: one night's (the HTML report's section), two nights' changes (``diff``)."""

from __future__ import annotations

from typing import Final

from gguf_audit.pipelines.store import Output
from gguf_audit.report.nightly import MirrorChange, MirrorRow

__all__ = ["mirror_changes", "night_mirror"]

MIRROR_COLUMNS: Final = ["path", "status", "evidence", "code", "severity", "message"]


def night_mirror(out: Output, night: str) -> list[MirrorRow] | None:
    """The night's mirror rows by path; None when it checked no mirror (or the output has no ``mirror`` table)."""
    if out.delta.open("mirror") is None:
        return None
    rows = out.read("mirror", [night], columns=MIRROR_COLUMNS).to_pylist()
    if not rows:
        return None
    for r in rows:
        if r["status"] == "faithful" and r["evidence"] == "fingerprint":
            r["status"] = "sampled_match"  # what it proved: nights before issue 38 called a sampled match faithful
    return sorted((MirrorRow(**{c: r[c] for c in MIRROR_COLUMNS}) for r in rows), key=lambda r: r.path)


def mirror_changes(out: Output, before: str, after: str) -> list[MirrorChange]:
    """The paths whose status differs between the nights (``absent`` where a night has no row for the path).

    Two nights of which one checked no mirror have no changes: a night without
    the check says nothing about the copies.
    """
    old, new = night_mirror(out, before), night_mirror(out, after)
    if old is None or new is None:
        return []
    was = {r.path: r for r in old}
    now = {r.path: r for r in new}
    changes = []
    for path in sorted(set(was) | set(now)):
        o, n = was.get(path), now.get(path)
        before_status = "absent" if o is None else o.status
        after_status = "absent" if n is None else n.status
        if before_status != after_status:
            message = n.message if n is not None else "the path is in neither listing any more"
            changes.append(MirrorChange(path, before_status, after_status, message))
    return changes
