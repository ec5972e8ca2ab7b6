"""The HTML report's mirror section: the night's paths by status, and every one not faithful.

Only a whole-file hash makes a copy ``faithful``; a ``sampled_match`` agrees on its sampled blocks, and its
row says how much of the data section they covered. Problems are listed first, sampled matches after them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Final

from gguf_audit.report.charts import text
from gguf_audit.report.nightly import MirrorRow

__all__ = ["mirror_section"]

STATUS_ORDER: Final = (
    "faithful",
    "sampled_match",
    "missing",
    "extra",
    "size_differs",
    "content_differs",
    "stale",
    "undecided",
)
MAX_ROWS: Final = 500
"""Paths listed at most (the counts cover them all; the ``mirror`` table holds every row)."""


def mirror_section(rows: Sequence[MirrorRow] | None) -> str | None:
    """The section's content, or None when the night checked no mirror."""
    if rows is None:
        return None
    counts = Counter(r.status for r in rows)
    order = [*STATUS_ORDER, *sorted(set(counts) - set(STATUS_ORDER))]
    summary = ", ".join(f"{counts[s]} {text(s)}" for s in order if counts[s])
    off = sorted((r for r in rows if r.status != "faithful"), key=lambda r: r.status == "sampled_match")
    if not off:
        return f'<p>{summary or "no path"}</p><p class="empty">every copy is faithful to its source</p>'
    sampled = counts["sampled_match"]
    if sampled:
        summary += (
            f'</p><p class="sub">{sampled} sampled {"match" if sampled == 1 else "matches"}: the sampled blocks '
            "agree, the bytes between them are not compared (scan --verify full hashes whole files)"
        )
    body = "".join(
        f"<tr><td>{text(r.path)}</td><td>{text(r.status)}</td><td>{text(r.evidence)}</td>"
        f"<td>{text(r.code or '')}</td><td>{text(r.message)}</td></tr>"
        for r in off[:MAX_ROWS]
    )
    more = f'<p class="sub">… {len(off) - MAX_ROWS} more in the mirror table</p>' if len(off) > MAX_ROWS else ""
    return (
        f"<p>{summary}</p><table><thead><tr><th>path</th><th>status</th><th>evidence</th><th>code</th>"
        f"<th>message</th></tr></thead><tbody>{body}</tbody></table>{more}"
    )
