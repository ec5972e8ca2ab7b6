"""The night report as one self-contained HTML page: ``gguf-audit report OUT --html FILE``.

Self-contained: no external script, style, font or image. The charts are
inline SVG (:mod:`~gguf_audit.report.charts`); the one stylesheet and the one
small script (click a column head to sort the models table) are inline, and
the page's Content-Security-Policy allows exactly those two by their SHA-256
hashes and nothing else (``default-src 'none'``): no other script, no inline
event handler, no fetch, no image, no form, even if something slipped past
the escaping.

The layout is :mod:`~gguf_audit.report.html_files`'s for the files, templates
and duplicates (collapsed ``<details>``, problems first, each chat template
once); the page spans the window, opens with a line of in-page links (``#`` and
an id, never a URL from a file), and takes further sections from
:attr:`~gguf_audit.report.nightly.NightReport.sections`.

Every string that comes from a file or a URL (names, templates, messages, token
texts) goes through :func:`~gguf_audit.report.charts.text`: control and bidi
characters shown as escapes, then ``html.escape`` (quotes too), so a file's
text is always text, in element content and attribute values alike.
"""

from __future__ import annotations

import base64
import hashlib
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Final

from gguf_audit.codes import CODES, LLAMA_CPP_BUILD, SEVERITY_RANK
from gguf_audit.findings import llama_cpp_label
from gguf_audit.report.charts import COLORS, Bar, Box, Series, bar_chart, box_chart, line_chart, text
from gguf_audit.report.format import counted, fmt_bytes
from gguf_audit.report.html_files import (
    MAX_ROWS,
    render_duplicates,
    render_files,
    render_templates,
    template_key,
)
from gguf_audit.report.mirror_html import mirror_section
from gguf_audit.report.nightly import ModelRow, NightDiff, NightReport, NightSummary, Problem, Section

__all__ = ["CSP_POLICY", "SORT_SCRIPT", "STYLE", "render_html"]

_RANK: Final = {str(s): rank for s, rank in SEVERITY_RANK.items()}
MODELS_OPEN: Final = 50
"""A night with more models shows their table collapsed (each file's own line is in "Files")."""

STYLE: Final = """
body{font:14px/1.45 system-ui,sans-serif;margin:0;padding:0 24px 40px;color:#212121}
h1{font-size:22px;margin:20px 0 4px}h2{font-size:18px;margin:28px 0 8px;border-bottom:1px solid #ccc}
h3{font-size:15px;margin:16px 0 6px}nav{margin:8px 0;line-height:1.9}nav a{margin-right:14px}
.sub{color:#555}.cards{display:flex;flex-wrap:wrap;gap:10px;margin:14px 0}
.card{border:1px solid #ccc;border-radius:6px;padding:8px 12px;flex:1 1 0;min-width:110px}
.card b{display:block;font-size:22px}.card span{color:#555}svg{max-width:100%;height:auto}
table{border-collapse:collapse;width:100%;margin:6px 0}th,td{border-bottom:1px solid #e0e0e0;padding:3px 6px;
text-align:left;vertical-align:top}th{background:#f5f5f5}table.sortable th{cursor:pointer}
td.n,th.n{text-align:right}.error{color:#c62828;font-weight:600}.warning{color:#b26a00;font-weight:600}
.info{color:#1565c0}.ok{color:#2e7d32}.url{font-family:ui-monospace,monospace;font-size:12px;word-break:break-all}
pre{white-space:pre-wrap;word-break:break-all;background:#f7f7f7;padding:6px;font-size:12px;max-height:24em;
overflow:auto}details{margin:2px 0;border-left:3px solid #e0e0e0;padding-left:8px}summary{cursor:pointer}
details[open]{border-left-color:#90caf9}ul.made{margin:4px 0;padding-left:20px}
.empty{color:#777;font-style:italic}@media print{body{padding:0}nav{display:none}pre{max-height:none}}
""".strip()

SORT_SCRIPT: Final = """
document.documentElement.setAttribute("data-sortable", "ready");
document.querySelectorAll("table.sortable").forEach(function (table) {
  table.querySelectorAll("th").forEach(function (th, col) {
    th.addEventListener("click", function () {
      var body = table.tBodies[0];
      var rows = Array.prototype.slice.call(body.rows);
      var down = th.getAttribute("data-dir") !== "asc";
      th.setAttribute("data-dir", down ? "asc" : "desc");
      rows.sort(function (a, b) {
        var x = a.cells[col].getAttribute("data-sort") || a.cells[col].textContent;
        var y = b.cells[col].getAttribute("data-sort") || b.cells[col].textContent;
        var nx = parseFloat(x), ny = parseFloat(y);
        var c = (!isNaN(nx) && !isNaN(ny)) ? nx - ny : x.localeCompare(y);
        return down ? c : -c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});
""".strip()


def _sha256(source: str) -> str:
    return "sha256-" + base64.b64encode(hashlib.sha256(source.encode()).digest()).decode()


CSP_POLICY: Final = (
    f"default-src 'none'; style-src '{_sha256(STYLE)}'; script-src '{_sha256(SORT_SCRIPT)}'; "
    "img-src 'none'; font-src 'none'; connect-src 'none'; base-uri 'none'; form-action 'none'"
)


_LLAMA_CPP_CLASS: Final = {"loads": "ok", "refuses": "error", "aborts": "error"}


def _verdict(loadable: bool | None, llama_cpp: str | None = None) -> str:
    """``loadable`` as yes / NO / unknown, with llama.cpp's verdict beside it when it is not plain ``loads``."""
    if loadable is None:
        said = '<span class="warning">unknown</span>'
    else:
        said = '<span class="ok">yes</span>' if loadable else '<span class="error">NO</span>'
    if llama_cpp is None or llama_cpp == "loads":
        return said
    css = _LLAMA_CPP_CLASS.get(llama_cpp, "warning")
    return f'{said} <span class="{css}">({"ABORTS" if llama_cpp == "aborts" else text(llama_cpp)})</span>'


def _severity(severity: str) -> str:
    return f'<span class="{text(severity)}">{text(severity)}</span>'


def _share(part: int, whole: int) -> str:
    return f"{part / whole:.1%}" if whole else "-"


def _headline(n: NightSummary) -> str:
    cards = [
        (str(n.n_files), "files", f"{n.n_read} read, {n.n_reused} reused"),
        (str(n.n_models), "models", f"{n.n_incomplete} incomplete shard sets"),
        (
            _share(n.n_loadable, n.n_files),
            "loadable",
            f"{n.n_loadable} of {counted(n.n_files, 'file')}; {n.n_aborts} abort{'s' if n.n_aborts == 1 else ''} "
            f"llama.cpp {n.llama_cpp_build or LLAMA_CPP_BUILD}",
        ),
        (
            fmt_bytes(n.bytes_read),
            "read",
            f"of {fmt_bytes(n.collection_bytes)} ({_share(n.bytes_read, n.collection_bytes)})",
        ),
        (f"{n.seconds:.1f} s", "wall time", f"finished {n.finished_at}"),
        (
            str(n.n_errors),
            "error" if n.n_errors == 1 else "errors",
            f"{counted(n.n_warnings, 'warning')}, {n.n_infos} info",
        ),
    ]
    html = ['<div class="cards" id="headline">']
    for value, label, note in cards:
        html.append(f'<div class="card"><b>{text(value)}</b>{text(label)}<br><span>{text(note)}</span></div>')
    html.append("</div>")
    statuses = ", ".join(f"{text(k)} {v}" for k, v in sorted(n.statuses.items()))
    html.append(f'<p class="sub">files by status: {statuses or "none"}</p>')
    return "".join(html)


def _by_code(problems: Sequence[Problem]) -> str:
    counts = Counter((p.code, p.severity) for p in problems)
    ordered = sorted(counts.items(), key=lambda kv: (-_RANK.get(kv[0][1], -1), -kv[1], kv[0][0]))
    bars = [
        Bar(code, n, COLORS.get(severity, COLORS["other"]), f"{code} ({severity})") for (code, severity), n in ordered
    ]
    rows = []
    for (code, severity), n in ordered:
        info = CODES.get(code)
        refused = llama_cpp_label(info.llama_cpp) if info else "?"
        rows.append(
            f'<tr><td><code>{text(code)}</code></td><td>{_severity(severity)}</td><td class="n">{n}</td>'
            f"<td>{refused}</td><td>{text(info.doc if info else 'unregistered code')}</td></tr>"
        )
    table = (
        '<table><thead><tr><th>code</th><th>severity</th><th class="n">problems</th><th>llama.cpp</th>'
        f"<th>what it means</th></tr></thead><tbody>{''.join(rows)}</tbody></table>"
    )
    return bar_chart(bars, label_width=300) + (table if rows else "")


def _trend(nights: Sequence[NightSummary]) -> str:
    labels = [n.finished_at[5:19] for n in nights]
    chart = line_chart(
        labels,
        [
            Series("errors", [n.n_errors for n in nights], COLORS["error"]),
            Series("warnings", [n.n_warnings for n in nights], COLORS["warning"]),
            Series("unloadable files", [n.n_unloadable for n in nights], COLORS["unloadable"]),
            Series("incomplete shard sets", [n.n_incomplete for n in nights], COLORS["incomplete"]),
        ],
        integer=True,
    )
    rows = "".join(
        f'<tr><td>{text(n.run_id)}</td><td>{text(n.finished_at)}</td><td class="n">{n.n_files}</td>'
        f'<td class="n">{n.n_errors}</td><td class="n">{n.n_warnings}</td><td class="n">{n.n_unloadable}</td>'
        f'<td class="n">{n.n_incomplete}</td></tr>'
        for n in reversed(nights)
    )
    return chart + (
        '<table id="trend-table"><thead><tr><th>night</th><th>finished</th><th class="n">files</th>'
        '<th class="n">errors</th><th class="n">warnings</th><th class="n">unloadable</th>'
        f'<th class="n">incomplete</th></tr></thead><tbody>{rows}</tbody></table>'
    )


def _problem_rows(problems: Iterable[Problem], *, with_place: bool = True) -> str:
    rows = []
    for p in problems:
        place = ""
        if with_place:
            where = p.url if p.url is not None else f"model {p.model_id}"
            place = f'<td class="url">{text(where)}</td>'
        tensor = text(p.tensor) if p.tensor else ""
        offset = "" if p.offset is None else str(p.offset)
        rows.append(
            f"<tr>{place}<td><code>{text(p.code)}</code></td><td>{_severity(p.severity)}</td>"
            f'<td>{text(p.message, 600)}</td><td>{tensor}</td><td class="n">{offset}</td></tr>'
        )
    return "".join(rows)


def _problem_table(problems: Sequence[Problem], *, with_place: bool = True, limit: int = MAX_ROWS) -> str:
    if not problems:
        return '<p class="empty">none</p>'
    head = "<th>where</th>" if with_place else ""
    more = f'<p class="sub">… {len(problems) - limit} more</p>' if len(problems) > limit else ""
    return (
        f"<table><thead><tr>{head}<th>code</th><th>severity</th><th>message</th><th>tensor</th>"
        f'<th class="n">offset</th></tr></thead><tbody>{_problem_rows(problems[:limit], with_place=with_place)}'
        f"</tbody></table>{more}"
    )


def _url_list(urls: Sequence[str]) -> str:
    if not urls:
        return '<p class="empty">none</p>'
    items = "".join(f'<li class="url">{text(u)}</li>' for u in urls[:MAX_ROWS])
    more = f"<li>… {len(urls) - MAX_ROWS} more</li>" if len(urls) > MAX_ROWS else ""
    return f"<ul>{items}{more}</ul>"


def _changes(diff: NightDiff | None) -> str:
    if diff is None:
        return '<p class="empty">the first night: nothing to compare with</p>'
    if diff.empty:  # a quiet night: one line, not a heading per kind of change with nothing under it
        return f'<p class="empty" id="nothing-changed">nothing changed since night {text(diff.before)}</p>'
    parts = [f'<p class="sub">since night {text(diff.before)}</p>']
    if diff.new_aborts:
        aborts = "".join(
            f'<li><span class="error">{text(a.scope)}</span> <span class="url">{text(a.where)}</span>: '
            f"{text(a.llama_cpp_before or 'unknown')} → aborts</li>"
            for a in diff.new_aborts[:MAX_ROWS]
        )
        parts.append(f"<h3>Now aborting llama.cpp ({len(diff.new_aborts)})</h3><ul>{aborts}</ul>")
    parts.append(f"<h3>New problems ({len(diff.new_problems)})</h3>{_problem_table(diff.new_problems)}")
    parts.append(f"<h3>Resolved problems ({len(diff.resolved_problems)})</h3>{_problem_table(diff.resolved_problems)}")
    changed = [c.after for c in diff.changed_problems]
    parts.append(f"<h3>Changed problems ({len(changed)})</h3>{_problem_table(changed)}")
    parts.append(f"<h3>New files ({len(diff.new_files)})</h3>{_url_list(diff.new_files)}")
    parts.append(f"<h3>Removed files ({len(diff.removed_files)})</h3>{_url_list(diff.removed_files)}")
    rows = "".join(
        f'<tr><td class="url">{text(c.url)}</td><td>{text(c.status_before)} → {text(c.status_after)}</td>'
        f"<td>{_verdict(c.loadable_before, c.llama_cpp_before)} → {_verdict(c.loadable_after, c.llama_cpp_after)}</td>"
        f"<td>{fmt_bytes(c.size_before)} → {fmt_bytes(c.size_after)}</td></tr>"
        for c in diff.changed_files[:MAX_ROWS]
    )
    parts.append(f"<h3>Changed files ({len(diff.changed_files)})</h3>" + _table_or_none(FILE_HEAD, rows))
    flips = "".join(
        f'<tr><td class="url">{text(m.model_id)}</td><td>{_verdict(m.loadable_before, m.llama_cpp_before)} → '
        f"{_verdict(m.loadable_after, m.llama_cpp_after)}"
        f"</td><td>{'complete' if m.complete_before else 'incomplete'} → "
        f"{'complete' if m.complete_after else 'incomplete'}</td></tr>"
        for m in diff.model_flips[:MAX_ROWS]
    )
    parts.append(f"<h3>Models flipped ({len(diff.model_flips)})</h3>" + _table_or_none(MODEL_HEAD, flips))
    return "".join(parts)


FILE_HEAD: Final = ("file", "status", "loadable", "size")
MODEL_HEAD: Final = ("model", "loadable", "complete")


def _table_or_none(head: Sequence[str], rows: str) -> str:
    """A table of ``rows`` (already escaped ``<tr>`` markup) under ``head``, or "none" when there is no row."""
    if not rows:
        return '<p class="empty">none</p>'
    cells = "".join(f"<th>{h}</th>" for h in head)
    return f"<table><thead><tr>{cells}</tr></thead><tbody>{rows}</tbody></table>"


def _incomplete(models: Sequence[ModelRow]) -> str:
    rows = "".join(
        f'<tr><td class="url">{text(m.model_id)}</td><td class="n">{m.n_files}</td><td class="n">{m.shard_count}</td>'
        f"<td>{', '.join(f'{i:05d}' for i in m.shards_missing)}</td></tr>"
        for m in models
        if not m.complete
    )
    if not rows:
        return '<p class="empty">none</p>'
    return (
        '<table id="incomplete"><thead><tr><th>model</th><th class="n">files present</th><th class="n">shards</th>'
        f"<th>missing shards (file numbers)</th></tr></thead><tbody>{rows}</tbody></table>"
    )


def _yes_no(value: bool) -> str:
    return "yes" if value else '<span class="error">no</span>'


def _problem_counts(report: NightReport) -> Counter[str]:
    """Problems per model: its own (model scope) and its files' (by the night's grouping of files)."""
    model_of = {f.url: f.model_id for f in report.files}
    counts: Counter[str] = Counter()
    for p in report.problems:
        counts[model_of.get(p.url or "", p.model_id) if p.scope == "file" else p.model_id] += 1
    return counts


def _models(models: Sequence[ModelRow], counts: Counter[str]) -> str:
    if not models:
        return '<p class="empty">none</p>'
    rows = []
    for m in models:
        files = "<br>".join(f'<span class="url" title="{text(u)}">{text(u.rsplit("/", 1)[-1])}</span>' for u in m.urls)
        loadable_sort = 0 if m.llama_cpp == "aborts" else {True: 3, None: 2, False: 1}[m.loadable]
        rows.append(
            f'<tr><td class="url">{text(m.model_id)}</td><td>{text(m.name or "")}</td>'
            f'<td data-sort="{text(m.status)}" class="{text(m.status)}">{text(m.status)}</td>'
            f'<td data-sort="{loadable_sort}">{_verdict(m.loadable, m.llama_cpp)}</td>'
            f"<td>{_yes_no(m.complete)}</td>"
            f'<td class="n">{m.shard_count}</td><td>{text(m.file_type_name or "")}</td>'
            f'<td class="n" data-sort="{m.size or 0}">{fmt_bytes(m.size)}</td>'
            f'<td class="n">{counts.get(m.model_id, 0)}</td><td>{files}</td></tr>'
        )
    table = (
        '<p class="sub">click a column head to sort</p><table class="sortable" id="models"><thead><tr><th>model</th>'
        '<th>name</th><th>status</th><th>loadable</th><th>complete</th><th class="n">shards</th><th>file type</th>'
        '<th class="n">size</th><th class="n">problems</th><th>files</th></tr></thead>'
        f"<tbody>{''.join(rows)}</tbody></table>"
    )
    if len(models) <= MODELS_OPEN:
        return table
    bad = sum(1 for m in models if m.status != "ok" or not m.complete or m.loadable is not True)
    return (
        f'<details id="models-all"><summary>all {len(models)} models ({bad} not ok, loadable and complete): '
        f"a sortable table</summary>{table}</details>"
    )


def _compare(report: NightReport) -> str:
    if report.compare is None:
        return '<p class="empty">this output has no compare table (quantization error is measured by newer scans)</p>'
    if not report.compare:
        return '<p class="empty">no tensor was compared this night</p>'
    boxes = [
        Box(s.type, s.minimum, s.q1, s.median, s.q3, s.maximum, f", {s.n_suspect} suspect" if s.n_suspect else "")
        for s in report.compare
    ]
    rows = "".join(
        f'<tr><td>{text(s.type)}</td><td class="n">{s.n}</td><td class="n">{s.minimum:.3g}</td>'
        f'<td class="n">{s.median:.3g}</td><td class="n">{s.maximum:.3g}</td><td class="n">{s.n_suspect}</td></tr>'
        for s in report.compare
    )
    return box_chart(boxes) + (
        '<table><thead><tr><th>type</th><th class="n">tensors</th><th class="n">min</th><th class="n">median</th>'
        f'<th class="n">max</th><th class="n">layout suspect</th></tr></thead><tbody>{rows}</tbody></table>'
    )


def _sections(report: NightReport) -> list[Section]:
    """The page's sections in order: the night, what is wrong, what changed, then per model, file and template."""
    n = report.night
    n_templates = len({k for k in map(template_key, report.files) if k is not None})
    groups = report.duplicates
    files = render_files(
        report.files,
        report.problems,
        problem_table=lambda mine: _problem_table(mine, with_place=False),
        verdict=_verdict,
    )
    sections = [
        Section("headline", "The night", _headline(n)),
        Section("problems", f"Problems by code and severity ({len(report.problems)})", _by_code(report.problems)),
        Section("trend", f"Trend over the last {len(report.trend)} nights", _trend(report.trend)),
        Section("changes", "Since the previous night", _changes(report.diff)),
        Section("incomplete-sets", f"Incomplete shard sets ({n.n_incomplete})", _incomplete(report.models)),
        Section("models-section", f"Models ({len(report.models)})", _models(report.models, _problem_counts(report))),
        Section("files", f"Files and their problems ({len(report.files)})", files),
        Section("templates", f"Chat templates ({n_templates})", render_templates(report.files, report.templates)),
        Section(
            "duplicates",
            f"Same weights, different files ({len(groups) if groups is not None else 0} groups)",
            render_duplicates(groups, report.files),
        ),
        *report.sections,
        Section("quantization", "Quantization error by type (relative RMSE)", _compare(report)),
    ]
    mirror = mirror_section(report.mirror)
    if mirror is not None:
        sections.append(Section("mirror", f"The mirror against its source ({len(report.mirror or ())} paths)", mirror))
    model_problems = [p for p in report.problems if p.scope == "model"]
    if model_problems:
        sections.append(Section("model-problems", "Problems of whole models", _problem_table(model_problems)))
    return sections


def render_html(report: NightReport) -> str:
    """The whole page: full width, a contents line, every file and template collapsed (no script needed)."""
    n = report.night
    sections = _sections(report)
    nav = "".join(f'<a href="#s-{text(s.id)}">{text(s.title.split(" (")[0])}</a>' for s in sections)
    body = "".join(f'<section id="s-{text(s.id)}"><h2>{text(s.title)}</h2>{s.html}</section>' for s in sections)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f'<meta http-equiv="Content-Security-Policy" content="{CSP_POLICY}">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>gguf-audit night {text(n.run_id)}</title><style>{STYLE}</style></head><body>"
        f'<h1>gguf-audit night report</h1><p class="sub">{text(report.out)} — night {text(n.run_id)}, '
        f"finished {text(n.finished_at)}</p><nav>{nav}</nav>{body}"
        f'<footer class="sub"><p>gguf-audit {text(report.tool_version)}; every text from a file is shown escaped.'
        f"</p></footer><script>{SORT_SCRIPT}</script></body></html>\n"
    )
