"""The night page's per-file sections: the files (collapsed, problems first), each chat template once, duplicates.

A 300-file night of one model's quantizations used to print its chat template
300 times and every file open. Here each file is one ``<details>`` line (closed:
no script needed, and a printed page shows only the summaries), in three groups:
files with errors, then with warnings, then the rest, each by URL. A template is
shown once, under its ``chat_template_sha256``, with the files that carry it; a
file names its template by that hash and links to it. The duplicates section
groups the files with the same weights and says, for each, which groups of
inference metadata differ from the group's first file.

Every string from a file goes through :func:`~gguf_audit.report.charts.text`.
Anchors (``id`` and ``href="#..."``) are built from hex digests only.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Sequence
from typing import Final

from gguf_audit.codes import SEVERITY_RANK
from gguf_audit.report.charts import text
from gguf_audit.report.format import fmt_bytes
from gguf_audit.report.nightly import DuplicateGroup, FileRow, Problem

__all__ = [
    "MAX_FILE_DETAILS",
    "MAX_ROWS",
    "TEMPLATE_SHOWN",
    "file_group",
    "files_in_detail",
    "render_duplicates",
    "render_files",
    "render_templates",
    "template_key",
]

MAX_FILE_DETAILS: Final = 2000
"""Files shown with their problems (those with problems first); the rest are counted."""
MAX_ROWS: Final = 500
"""Rows of a list shown; the rest are counted."""
TEMPLATE_SHOWN: Final = 4000
"""Characters of each distinct chat template the page shows (once per template, not per file)."""
SHORT: Final = 12
"""Hex digits of a digest shown (and used as the anchor)."""

_RANK: Final = {str(s): rank for s, rank in SEVERITY_RANK.items()}
GROUPS: Final = (
    ("errors", "with errors"),
    ("warnings", "with warnings"),
    ("clean", "without errors or warnings"),
)

ProblemTable = Callable[[Sequence[Problem]], str]
"""Renders a file's problems (the page's own table, without the 'where' column)."""
Verdict = Callable[[bool | None, str | None], str]


def template_key(f: FileRow) -> str | None:
    """The file's chat template digest: as ``files`` recorded it, or of the text the row carries."""
    if f.chat_template_sha256:
        return f.chat_template_sha256
    if f.chat_template is not None:
        return hashlib.sha256(f.chat_template.encode("utf-8", "surrogatepass")).hexdigest()
    return None


def _anchor(prefix: str, digest: str) -> str:
    """An id from a digest: its hex digits only, so nothing from a file reaches an attribute unescaped."""
    return prefix + "".join(c for c in digest[:SHORT].lower() if c in "0123456789abcdef")


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _model_of(url: str, model_id: str) -> str:
    """``model ID, `` when the file is one shard of a set (a single file is its own model: nothing to say)."""
    return "" if model_id == url.removesuffix(".gguf") else f"model {text(model_id)}, "


def _file_problems(problems: Iterable[Problem]) -> dict[str, list[Problem]]:
    by_url: dict[str, list[Problem]] = {}
    for p in problems:
        if p.scope == "file" and p.url is not None:
            by_url.setdefault(p.url, []).append(p)
    return by_url


def file_group(f: FileRow, mine: Sequence[Problem] = ()) -> str:
    """``errors``, ``warnings`` or ``clean``: where the page lists the file."""
    severities = {p.severity for p in mine}
    if f.n_errors or "error" in severities or f.status in ("error", "unreadable") or f.loadable is False:
        return "errors"
    if f.n_warnings or "warning" in severities or f.status == "warning":
        return "warnings"
    return "clean"


def files_in_detail(files: Sequence[FileRow], problems: Iterable[Problem]) -> list[FileRow]:
    """The files the page shows, in its order: with errors, with warnings, the rest; each group by URL."""
    by_url = _file_problems(problems)
    order = {g: i for i, (g, _) in enumerate(GROUPS)}
    return sorted(files, key=lambda f: (order[file_group(f, by_url.get(f.url, ()))], f.url))[:MAX_FILE_DETAILS]


def _template_ref(f: FileRow, carriers: dict[str, int]) -> str:
    key = template_key(f)
    if key is None:
        return '<p class="sub">no chat template</p>'
    others = carriers.get(key, 1) - 1
    shared = f", shared with {others} other file{'s' if others != 1 else ''}" if others else ""
    return (
        f'<p class="sub">chat template <a href="#{_anchor("tpl-", key)}"><code>{text(key[:SHORT])}</code></a>'
        f"{shared}</p>"
    )


def render_files(
    files: Sequence[FileRow], problems: Sequence[Problem], *, problem_table: ProblemTable, verdict: Verdict
) -> str:
    """Every file, collapsed, in three groups; a file's details hold its problems, provenance and template."""
    by_url = _file_problems(problems)
    carriers: dict[str, int] = {}
    for f in files:
        key = template_key(f)
        if key is not None:
            carriers[key] = carriers.get(key, 0) + 1
    grouped: dict[str, list[str]] = {g: [] for g, _ in GROUPS}
    for f in files_in_detail(files, problems):
        mine = sorted(by_url.get(f.url, []), key=lambda p: (-_RANK.get(p.severity, -1), p.code))
        facts = ", ".join(
            text(v)
            for v in (f.status, f.architecture, f.file_type_name, fmt_bytes(f.size), _count(len(mine), "problem"))
            if v
        )
        name = f"<p>name: {text(f.name)}</p>" if f.name else ""
        made = "".join(f"<li>{text(p)}</li>" for p in f.provenance)
        made = f'<ul class="made">{made}</ul>' if made else ""
        body = problem_table(mine) if mine else ""
        grouped[file_group(f, mine)].append(
            f'<details class="file"><summary><span class="url">{text(f.url)}</span> — {facts}, loadable '
            f"{verdict(f.loadable, f.llama_cpp)}</summary>{name}"
            f'<p class="sub">{_model_of(f.url, f.model_id)}read by night {text(f.source_run_id)}</p>'
            f"{made}{_template_ref(f, carriers)}{body}</details>"
        )
    parts = []
    for group, title in GROUPS:
        rows = grouped[group]
        parts.append(f'<h3 id="files-{group}">Files {title} ({len(rows)})</h3>')
        parts.append("".join(rows) or '<p class="empty">none</p>')
    if len(files) > MAX_FILE_DETAILS:
        parts.append(f'<p class="sub">… {len(files) - MAX_FILE_DETAILS} more files without details</p>')
    return "".join(parts) if files else '<p class="empty">none</p>'


def _url_items(urls: Sequence[str]) -> str:
    items = "".join(f'<li class="url">{text(u)}</li>' for u in urls[:MAX_ROWS])
    more = f"<li>… {len(urls) - MAX_ROWS} more</li>" if len(urls) > MAX_ROWS else ""
    return f"<ul>{items}{more}</ul>"


def render_templates(files: Sequence[FileRow], texts: dict[str, str]) -> str:
    """Each distinct chat template once (most carried first), with the files that carry it.

    ``texts`` maps a digest to the template's text; a file row's own
    ``chat_template`` stands in where it lacks one.
    """
    carriers: dict[str, list[str]] = {}
    for f in files:
        key = template_key(f)
        if key is None:
            continue
        carriers.setdefault(key, []).append(f.url)
        if key not in texts and f.chat_template is not None:
            texts = {**texts, key: f.chat_template}
    if not carriers:
        return '<p class="empty">no file of the night has a chat template</p>'
    parts = [f'<p class="sub">{len(carriers)} distinct templates in {sum(map(len, carriers.values()))} files</p>']
    for key, urls in sorted(carriers.items(), key=lambda kv: (-len(kv[1]), kv[0])):
        body = texts.get(key)
        shown = (
            f"<pre>{text(body, TEMPLATE_SHOWN)}</pre>"
            if body is not None
            else '<p class="empty">its text was not read back (the metadata row is missing)</p>'
        )
        size = f", {len(body):,} characters" if body is not None else ""
        parts.append(
            f'<details class="template" id="{_anchor("tpl-", key)}"><summary>template <code>{text(key[:SHORT])}'
            f"</code> — {len(urls)} file{'s' if len(urls) != 1 else ''}{size}</summary>{shown}"
            f"{_url_items(sorted(urls))}</details>"
        )
    return "".join(parts)


def render_duplicates(groups: Sequence[DuplicateGroup] | None, files: Sequence[FileRow]) -> str:
    """The files with the same weights, a group each, and how their inference metadata differs."""
    if groups is None:
        return '<p class="empty">this night has no weights fingerprints (scans with sampling record them)</p>'
    if not groups:
        return '<p class="empty">no two files share a weights fingerprint</p>'
    by_url = {f.url: f for f in files}
    n_files = sum(len(g.files) for g in groups)
    parts = [
        f'<p class="sub">{len(groups)} groups of the same weights fingerprint, {n_files} files. What a group '
        "shares: the tensor table (names, types, shapes) and the bytes of each tensor's first block the scan "
        "read; the blocks not fingerprinted are not compared (docs/checks.md)</p>"
    ]
    for g in groups:
        differs = ", ".join(g.differs) or "nothing: the same inference metadata"
        rows = []
        for i, d in enumerate(g.files[:MAX_ROWS]):
            said = "the group's first (compared with)" if i == 0 else (", ".join(d.differs) or "same")
            row = by_url.get(d.url)
            key = template_key(row) if row is not None else None
            tpl = f'<a href="#{_anchor("tpl-", key)}"><code>{text(key[:SHORT])}</code></a>' if key else ""
            model = _model_of(d.url, d.model_id).removesuffix(", ")
            rows.append(
                f'<tr><td class="url">{text(d.url)}</td><td class="url">{model}</td>'
                f"<td>{text(said)}</td><td>{tpl}</td></tr>"
            )
        more = f'<p class="sub">… {len(g.files) - MAX_ROWS} more</p>' if len(g.files) > MAX_ROWS else ""
        parts.append(
            f'<details class="dup" id="{_anchor("w-", g.weights_fingerprint)}"><summary>weights '
            f"<code>{text(g.weights_fingerprint[:SHORT])}</code> — {len(g.files)} files; metadata differs in: "
            f"{text(differs)}</summary><table><thead><tr><th>file</th><th>model</th>"
            f"<th>metadata against the first</th><th>chat template</th></tr></thead><tbody>{''.join(rows)}"
            f"</tbody></table>{more}</details>"
        )
    return "".join(parts)
