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


def test_a_sampled_match_is_its_own_status() -> None:
    diff = NightDiff("a", "b")
    diff.mirror_changes = [
        MirrorChange("r/a.gguf", "sampled_match", "content_differs", "r/a.gguf: sha256 aaa against bbb (hashed)"),
        MirrorChange("r/b.gguf", "faithful", "sampled_match", "r/b.gguf: the sampled blocks agree"),
        MirrorChange("r/c.gguf", "sampled_match", "faithful", "r/c.gguf: sha256 ccc on both sides"),
    ]
    assert [c.path for c in diff.mirror_alerts] == ["r/a.gguf"]
    assert "  r/b.gguf: faithful -> sampled_match: " in render_diff_text(diff)
    sampled = MirrorRow("r/s.gguf", "sampled_match", "fingerprint", None, None, "r/s.gguf: the samples read 9%")
    missing = MirrorRow("r/z.gguf", "missing", "listing", "mirror.missing", "warning", "hf://o/r/z.gguf is missing")
    page = mirror_section([sampled, missing]) or ""
    assert "every copy is faithful" not in page
    assert "1 sampled_match, 1 missing" in page and "1 sampled match: the sampled blocks agree" in page
    assert page.index("r/z.gguf") < page.index("r/s.gguf")  # problems first
