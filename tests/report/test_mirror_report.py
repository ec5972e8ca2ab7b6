"""The mirror's place in a night's diff (text and JSON) and in the HTML report's section."""

from __future__ import annotations

from gguf_audit.report.mirror_html import mirror_section
from gguf_audit.report.nightly import MirrorChange, MirrorRow, NightDiff, diff_to_json, render_diff_text


def test_a_copy_that_stops_being_faithful_is_an_alert() -> None:
    diff = NightDiff("a", "b")
    assert diff.empty and not diff.mirror_alerts
    diff.mirror_changes = [
        MirrorChange("r/q.gguf", "faithful", "stale", "r/q.gguf: copied at revision 111, the source is at 222"),
        MirrorChange("r/new.gguf", "absent", "missing", "hf://o/r/new.gguf has no copy in the mirror"),
        MirrorChange("r/x.gguf", "size_differs", "faithful", "r/x.gguf: sha256 aaa on both sides"),
    ]
    assert not diff.empty
    assert [c.path for c in diff.mirror_alerts] == ["r/q.gguf"]
    text = render_diff_text(diff)
    assert "mirror changes (3):" in text
    assert "  ALERT r/q.gguf: faithful -> stale: " in text and "  r/new.gguf: absent -> missing" in text
    payload = diff_to_json(diff)
    assert [c["alert"] for c in payload["mirror_changes"]] == [True, False, False]


def test_the_report_section() -> None:
    assert mirror_section(None) is None
    faithful = MirrorRow("r/a.gguf", "faithful", "sha256", None, None, "r/a.gguf: sha256 on both sides")
    assert "every copy is faithful" in (mirror_section([faithful]) or "")
    hostile = MirrorRow("r/<b>.gguf", "extra", "listing", "mirror.extra", "info", "s3://m/r/<b>.gguf is extra")
    page = mirror_section([faithful, hostile]) or ""
    assert "1 faithful, 1 extra" in page and "mirror.extra" in page
    assert "<b>" not in page and "&lt;b&gt;" in page
