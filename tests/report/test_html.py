"""The HTML page from plain values: every string from a file is text, control and bidi characters shown escaped."""

from __future__ import annotations

from gguf_audit.report.html import CSP_POLICY, render_html
from gguf_audit.report.nightly import FileRow, ModelRow, NightReport, NightSummary, Problem

HOSTILE = "x\u202eevil\x1b[2J\"'><b onmouseover=alert(1)>"


def _night() -> NightSummary:
    return NightSummary(
        run_id="R1", finished_at="2026-01-01 00:00:00 UTC", n_files=1, n_models=1, n_loadable=0, n_unloadable=1,
        n_incomplete=0, n_errors=1, n_warnings=0, n_infos=0, bytes_read=10, collection_bytes=100, seconds=1.5,
        n_read=1, n_reused=0, statuses={"error": 1},
    )  # fmt: skip


def test_hostile_strings_are_text_everywhere() -> None:
    url = f"s3://b/{HOSTILE}.gguf"
    report = NightReport(
        out="s3://b/audit",
        night=_night(),
        trend=[_night()],
        problems=[Problem("file", url, url[:-5], "data.truncated", "error", f"tensor {HOSTILE!r} ends late", HOSTILE)],
        files=[FileRow(url, url[:-5], "error", False, 100, name=HOSTILE, chat_template=HOSTILE)],
        models=[ModelRow(url[:-5], "error", False, True, False, 1, (), 1, 100, HOSTILE, "Q4_K_M", 1, (url,))],
        diff=None,
        compare=None,
    )
    page = render_html(report)
    assert "\u202e" not in page and "\x1b" not in page
    assert "x\\u202eevil\\x1b[2J&quot;&#x27;&gt;&lt;b onmouseover=alert(1)&gt;" in page
    assert "<b onmouseover" not in page
    assert page.count("<script>") == 1 and f'content="{CSP_POLICY}"' in page
    assert "the first night: nothing to compare with" in page
    assert "<b>0.0%</b>loadable" in page and "<b>1</b>files" in page
