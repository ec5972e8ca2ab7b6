"""``gguf-audit report``: the HTML page of a real night, rendered by a real browser (Debian's headless chromium).

The night (tests/pipelines/report_nights.py) has a truncated file, a missing
shard, and a file whose name, ``general.name`` and chat template hold
``<script>`` and ``onerror=`` payloads that would write ``PWNED`` into the
document if they ran. A control page with the same payloads unescaped shows
that the browser here does run them, so their absence from the report means
something.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from html.parser import HTMLParser
from pathlib import Path

import pytest
from report_nights import DOWNLOAD, MARK, PAYLOAD_FILE, PAYLOAD_NAME, PAYLOAD_TEMPLATE, SHARD_1, Nights

from gguf_audit.cli import main
from gguf_audit.pipelines.nights.picture import night_row
from gguf_audit.pipelines.store.output import Output
from gguf_audit.report.html import SORT_SCRIPT, STYLE

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
BROWSER_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--hide-scrollbars",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
REQUIRE_BROWSER_ENV = "GGUF_AUDIT_REQUIRE_BROWSER"
"""Set to 1 (``.ci/run`` does) to make a missing chromium a failure instead of a skip."""

pytestmark = pytest.mark.browser


def _browser(*args: str) -> str:
    if not Path(CHROMIUM).exists():
        why = "chromium is not installed (Debian: apt-get install -y chromium; .ci/run installs it)"
        if os.environ.get(REQUIRE_BROWSER_ENV) == "1":
            pytest.fail(why)
        pytest.skip(why)
    # Its own profile each time (another chromium on the machine would lock a shared one), and a virtual-time
    # budget so timers and failed image loads (onerror) get their turn before the DOM is dumped.
    with tempfile.TemporaryDirectory(prefix="gguf-audit-chromium-") as profile:
        flags = [*BROWSER_FLAGS, f"--user-data-dir={profile}", "--virtual-time-budget=3000"]
        done = subprocess.run([CHROMIUM, *flags, *args], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout


class _Tags(HTMLParser):
    """Every start tag with its attributes, and the text of each script and style element."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.raw: dict[str, list[str]] = {"script": [], "style": []}
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        if tag in self.raw:
            self._in = tag
            self.raw[tag].append("")

    def handle_endtag(self, tag: str) -> None:
        if tag == self._in:
            self._in = None

    def handle_data(self, data: str) -> None:
        if self._in is not None:
            self.raw[self._in][-1] += data


@pytest.fixture(scope="module")
def page(report_nights: Nights, tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report") / "night.html"
    assert main(["report", str(report_nights.out), "--run", report_nights.runs[1], "--html", str(path)]) == 0
    return path


def test_the_page_is_self_contained(page: Path) -> None:
    source = page.read_text(encoding="utf-8")
    parsed = _Tags()
    parsed.feed(source)
    names = {tag for tag, _ in parsed.tags}
    assert not names & {"img", "link", "iframe", "object", "embed", "frame", "audio", "video", "source", "base"}
    for tag, attrs in parsed.tags:
        fetching = {"src", "href", "srcset", "action", "xlink:href", "poster", "background"} & set(attrs)
        # In-page links (the contents line, a file's template) fetch nothing: only '#' and an id of hex digits.
        if tag == "a" and fetching == {"href"}:
            assert re.fullmatch(r"#[a-z]+-[0-9a-z-]+", attrs["href"] or ""), attrs
            fetching = set()
        assert not fetching, (tag, attrs)
        assert not [a for a in attrs if a.startswith("on")], (tag, attrs)  # no inline handler, from a file or not
    assert parsed.raw["script"] == [SORT_SCRIPT] and parsed.raw["style"] == [STYLE]
    assert "url(" not in STYLE and "@import" not in STYLE
    [csp] = [a["content"] for t, a in parsed.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp is not None and "default-src 'none'" in csp and "unsafe-inline" not in csp
    assert "<svg" in source  # the charts are inline


def test_no_payload_runs_and_the_night_shows(page: Path, report_nights: Nights) -> None:
    dom = _browser("--dump-dom", page.as_uri())
    assert 'data-sortable="ready"' in dom  # the page's own script ran: scripts were on, under its CSP
    assert MARK not in dom
    # The payloads are there, as text.
    assert "&lt;script&gt;document.body.append('PW'+'NED')&lt;/script&gt;" in dom
    assert "onerror=document.body.append('PW'+'NED')&gt;-Q4_K_M.gguf" in dom
    assert "&lt;svg onload=" in dom  # the chat template's start
    # The night's numbers.
    run = night_row(Output(str(report_nights.out)), report_nights.runs[1])
    assert f"<b>{run['n_files']}</b>files" in dom and f"<b>{run['n_models']}</b>models" in dom
    loadable = run["n_files"] - 1  # the truncated download only: the shard set's present shard loads alone
    assert f"<b>{loadable / run['n_files']:.1%}</b>loadable" in dom
    assert "data.truncated" in dom and "shard.missing" in dom
    assert "Tensor data extends past the end of the file" in dom  # the code's explanation
    assert report_nights.url(DOWNLOAD) in dom
    shard_set = report_nights.url(SHARD_1).removesuffix("-00001-of-00002.gguf")
    assert '<table id="incomplete"><thead>' in dom and shard_set in dom
    counts = re.findall(r"(New|Resolved) problems \((\d+)\)", dom)
    # New: the cut download, the missing shard, and lineage's note for the two new families without a
    # full-precision file (the payload file's own name, the incomplete set's own tensor set).
    assert ("Resolved", "0") in counts and ("New", "4") in counts, counts
    start = dom.index("New problems (")
    new = dom[start : dom.index("Resolved problems (", start)]
    assert [new.count(code) for code in ("data.truncated", "shard.missing", "lineage.no_full_precision")] == [1, 1, 2]
    assert report_nights.url(PAYLOAD_FILE).replace("<", "&lt;").replace(">", "&gt;") in dom


def test_the_browser_would_run_the_payloads_unescaped(tmp_path: Path) -> None:
    """The control: the same payloads pasted raw into a page do write the mark, so the test above can fail."""
    control = tmp_path / "control.html"
    control.write_text(f"<!DOCTYPE html><html><body><p>{PAYLOAD_NAME}</p><div>{PAYLOAD_TEMPLATE}</div></body></html>")
    assert MARK in _browser("--dump-dom", control.as_uri())


def test_a_screenshot(page: Path, tmp_path: Path) -> None:
    shot = tmp_path / "night.png"
    _browser(f"--screenshot={shot}", "--window-size=1200,1600", page.as_uri())
    data = shot.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_report_usage_errors(report_nights: Nights, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(report_nights.out), "--run", "nope", "--html", str(tmp_path / "x.html")]) == 2
    assert "no committed night 'nope'" in capsys.readouterr().err
    assert not (tmp_path / "x.html").exists()
    assert main(["report", str(report_nights.out)]) == 2  # --html is required
    latest = tmp_path / "latest.html"
    assert main(["report", str(report_nights.out), "--html", str(latest), "--nights", "2"]) == 0
    text = latest.read_text()
    assert report_nights.runs[2] in text and "Trend over the last 2 nights" in text
    # The collection holds no full-precision file: the compare table has no row for the night.
    assert "no tensor was compared this night" in text


def test_files_collapsed_and_each_template_once(page: Path) -> None:
    source = page.read_text(encoding="utf-8")
    assert source.count('<details class="file">') == 4 and '<details class="file" open' not in source
    ids = re.findall(r'<details class="template" id="(tpl-[0-9a-f]+)">', source)
    assert ids and len(ids) == len(set(ids))
    assert source.count("&lt;svg onload=") == 1  # the payload template, once, however many files carry it
    assert "max-width:1100px" not in source
