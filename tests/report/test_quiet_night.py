"""A quiet night's page: "nothing changed" once, not a heading per kind of change; and trend lines with the very
same values stay visible (the later one dashed over the earlier), checked in chromium's own pixels."""

from __future__ import annotations

import os
import shutil
import struct
import subprocess
import tempfile
import zlib
from collections import Counter
from pathlib import Path

import pytest

from gguf_audit.report.charts import COLORS, Series, line_chart
from gguf_audit.report.html import render_html
from gguf_audit.report.nightly import NightDiff, NightReport, NightSummary


def _night(run_id: str, errors: int, warnings: int) -> NightSummary:
    return NightSummary(
        run_id=run_id, finished_at=f"2026-01-0{run_id[-1]} 00:00:00 UTC", n_files=4, n_models=4, n_loadable=4,
        n_unloadable=0, n_incomplete=0, n_errors=errors, n_warnings=warnings, n_infos=0, bytes_read=10,
        collection_bytes=100, seconds=1.5, n_read=0, n_reused=4, statuses={"ok": 4},
    )  # fmt: skip


def _quiet_report() -> NightReport:
    trend = [_night("R1", 2, 2), _night("R2", 3, 3), _night("R3", 3, 3)]
    return NightReport(
        out="audit-out", night=trend[-1], trend=trend, problems=[], files=[], models=[],
        diff=NightDiff("R2", "R3"), compare=None, templates={}, duplicates=[],
    )  # fmt: skip


def test_a_quiet_night_says_nothing_changed_once() -> None:
    page = render_html(_quiet_report())
    assert page.count("nothing changed since night R2") == 1
    for heading in ("New problems (", "Resolved problems (", "Changed files (", "Models flipped (", "New files ("):
        assert heading not in page


def test_identical_series_are_named_in_the_legend() -> None:
    svg = line_chart(["a", "b"], [Series("errors", [1, 2], "#000"), Series("warnings", [1, 2], "#111")])
    assert "warnings (= errors)" in svg and "stroke-dasharray" in svg
    apart = line_chart(["a", "b"], [Series("errors", [1, 2], "#000"), Series("warnings", [2, 1], "#111")])
    assert "(=" not in apart and "stroke-dasharray" not in apart


def _png_pixels(data: bytes) -> tuple[int, int, list[bytes]]:
    """Width, height and rows of RGB(A) bytes of a non-interlaced 8-bit PNG (what chromium writes)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, channels = 8, b"", 0, 0, 4
    while pos < len(data):
        (length,), kind = struct.unpack(">I", data[pos : pos + 4]), data[pos + 4 : pos + 8]
        body = data[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, color = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and color in (2, 6)
            channels = 3 if color == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride, rows = zlib.decompress(idat), width * channels, []
    prev = bytearray(stride)
    for r in range(height):
        kind, line = raw[r * (stride + 1)], bytearray(raw[r * (stride + 1) + 1 : (r + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - channels] if i >= channels else 0
            b, c = prev[i], prev[i - channels] if i >= channels else 0
            if kind == 1:
                line[i] = (line[i] + a) & 0xFF
            elif kind == 2:
                line[i] = (line[i] + b) & 0xFF
            elif kind == 3:
                line[i] = (line[i] + (a + b) // 2) & 0xFF
            elif kind == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 0xFF
        rows.append(bytes(line))
        prev = line
    return width, channels, rows


def _colors_on_screen(page: Path, shot: Path) -> Counter[str]:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        why = "chromium is not installed (Debian: apt-get install -y chromium; .ci/run installs it)"
        if os.environ.get("GGUF_AUDIT_REQUIRE_BROWSER") == "1":
            pytest.fail(why)
        pytest.skip(why)
    with tempfile.TemporaryDirectory(prefix="gguf-audit-chromium-") as profile:
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--user-data-dir={profile}"]
        done = subprocess.run(
            [chromium, *flags, f"--screenshot={shot}", "--window-size=800,300", page.as_uri()],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    width, channels, rows = _png_pixels(shot.read_bytes())
    wanted = {bytes.fromhex(COLORS[k][1:]): k for k in ("error", "warning", "unloadable", "incomplete")}
    seen: Counter[str] = Counter()
    for row in rows[:200]:  # the plot, above the legend's swatches
        for x in range(width):
            name = wanted.get(row[x * channels : x * channels + 3])
            if name:
                seen[name] += 1
    return seen


@pytest.mark.browser
def test_identical_trend_lines_stay_visible(tmp_path: Path) -> None:
    page = render_html(_quiet_report())
    start = page.index("<svg", page.index('id="s-trend"'))
    chart = page[start : page.index("</svg>", start) + len("</svg>")]
    html = tmp_path / "trend.html"
    html.write_text(f'<!DOCTYPE html><html><body style="margin:0">{chart}</body></html>', encoding="utf-8")
    seen = _colors_on_screen(html, tmp_path / "trend.png")
    # errors = warnings and unloadable = incomplete on every night: each of the four lines shows.
    assert all(seen[k] >= 20 for k in ("error", "warning", "unloadable", "incomplete")), seen
