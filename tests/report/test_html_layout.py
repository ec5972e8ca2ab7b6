"""The night page's layout: files collapsed with problems first, one copy of each chat template, the duplicates,
a full-width page, whole-number ticks on count axes; and, in chromium, what a 300-file night prints to."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from gguf_audit.report.charts import Series, axis_ticks, line_chart
from gguf_audit.report.html import STYLE, render_html
from gguf_audit.report.nightly import (
    DuplicateFile,
    DuplicateGroup,
    FileRow,
    ModelRow,
    NightReport,
    NightSummary,
    Problem,
    Section,
)

TEMPLATE = "{% for m in messages %}[INST] {{ m['content'] }} [/INST]{% endfor %}<script>x</script>"
OTHER = "{% for m in messages %}<|im_start|>{{ m['role'] }}{% endfor %}"
DIGEST = "ab" * 32
OTHER_DIGEST = "cd" * 32


def _night(n_files: int) -> NightSummary:
    return NightSummary(
        run_id="R2", finished_at="2026-01-02 00:00:00 UTC", n_files=n_files, n_models=n_files, n_loadable=n_files,
        n_unloadable=0, n_incomplete=0, n_errors=3, n_warnings=1, n_infos=0, bytes_read=10, collection_bytes=100,
        seconds=1.5, n_read=n_files, n_reused=0, statuses={"ok": n_files},
    )  # fmt: skip


def _url(i: int) -> str:
    return f"s3://mirror/org{i % 7}/repo{i:04d}/model-Q4_K_M.gguf"


def many_files(n: int) -> NightReport:
    """A night of ``n`` files: every tenth with another template, file 5 with an error, file 6 a warning."""
    files, models, problems = [], [], []
    for i in range(n):
        url = _url(i)
        status = "error" if i == 5 else "warning" if i == 6 else "ok"
        files.append(
            FileRow(
                url, url.removesuffix(".gguf"), status, i != 5, 1000 + i, name="m", architecture="llama",
                file_type_name="Q4_K_M", n_errors=int(i == 5), n_warnings=int(i == 6), source_run_id="R2",
                chat_template_sha256=OTHER_DIGEST if i % 10 == 3 else DIGEST,
                llama_cpp="refuses" if i == 5 else "loads",
                provenance=("quantized_by someone", "derivation from s3://mirror/f16.gguf: derived"),
            )
        )  # fmt: skip
        models.append(ModelRow(url[:-5], status, i != 5, True, False, 1, (), 1, 1000 + i, "m", "Q4_K_M", 0, (url,)))
    problems.append(Problem("file", _url(5), _url(5)[:-5], "data.truncated", "error", "tensor 'a' ends at 9"))
    problems.append(Problem("file", _url(6), _url(6)[:-5], "tokenizer.no_eos", "warning", "no eos"))
    groups = [
        DuplicateGroup(
            "ef" * 32,
            (
                DuplicateFile(_url(0), _url(0)[:-5], "m0", ()),
                DuplicateFile(_url(3), _url(3)[:-5], "m3", ("template",)),
            ),
        )
    ]
    return NightReport(
        out="s3://mirror/audit", night=_night(n), trend=[_night(n)], problems=problems, files=files, models=models,
        diff=None, compare=None, templates={DIGEST: TEMPLATE, OTHER_DIGEST: OTHER}, duplicates=groups,
    )  # fmt: skip


def test_one_copy_of_a_template_shared_by_many_files() -> None:
    page = render_html(many_files(300))
    shown = "[INST] {{ m[&#x27;content&#x27;] }} [/INST]"
    assert page.count(shown) == 1  # 270 files carry it; it is printed once
    assert page.count("&lt;|im_start|&gt;") == 1
    assert "<script>x</script>" not in page and "&lt;script&gt;x&lt;/script&gt;" in page
    assert f'id="tpl-{DIGEST[:12]}"' in page and f'href="#tpl-{DIGEST[:12]}"' in page
    assert "270 files" in page and "shared with 269 other files" in page
    assert "2 distinct templates in 300 files" in page


def test_files_are_collapsed_with_errors_then_warnings_then_the_rest() -> None:
    page = render_html(many_files(40))
    files = page[page.index('<section id="s-files">') : page.index('<section id="s-templates">')]
    assert files.count('<details class="file">') == 40 and '<details class="file" open' not in files
    heads = re.findall(r'<h3 id="files-(\w+)">Files [^(]+\((\d+)\)</h3>', files)
    assert heads == [("errors", "1"), ("warnings", "1"), ("clean", "38")]
    order = re.findall(r'<summary><span class="url">([^<]+)</span>', files)
    assert order[:2] == [_url(5), _url(6)] and order[2:] == sorted(order[2:])
    assert "derivation from s3://mirror/f16.gguf: derived" in files  # provenance next to proof
    assert "data.truncated" in files


def test_duplicates_name_how_the_metadata_differs_and_sections_plug_in() -> None:
    report = many_files(12)
    report.sections.append(Section("mirror", "Mirror against source (0)", "<p>nothing missing</p>"))
    page = render_html(report)
    dup = page[page.index('<section id="s-duplicates">') :]
    assert "2 files; metadata differs in: template" in dup
    assert "the group&#x27;s first (compared with)" in dup and "<td>template</td>" in dup
    # What the grouping rests on, said where the groups are: not every byte.
    assert "first block the scan read" in dup
    assert "the blocks not fingerprinted are not compared" in dup
    assert page.index('id="s-duplicates"') < page.index('id="s-mirror"') < page.index('id="s-quantization"')
    assert '<a href="#s-mirror">Mirror against source</a>' in page
    report.duplicates = None
    assert "this night has no weights fingerprints" in render_html(report)


def test_the_page_is_full_width() -> None:
    body = re.search(r"body\{[^}]*\}", STYLE)
    assert body is not None and "max-width" not in body.group(0)
    assert "svg{max-width:100%" in STYLE


@pytest.mark.parametrize(("top", "ticks"), [(0, [0, 1]), (1, [0, 1]), (3, [0, 1, 2, 3]), (7, [0, 2, 4, 6, 8])])
def test_count_axes_have_whole_ticks(top: int, ticks: list[int]) -> None:
    assert axis_ticks(top, integer=True) == ticks
    svg = line_chart(["a", "b"], [Series("errors", [0, top], "#000")], integer=True)
    labels = re.findall(r'text-anchor="end">([^<]+)</text>', svg)
    assert labels == [str(t) for t in ticks]
    assert axis_ticks(1)[1] == 0.25  # a measure, not a count, keeps fractions


def _print_pages(page: Path, pdf: Path) -> int:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        why = "chromium is not installed (Debian: apt-get install -y chromium; .ci/run installs it)"
        if os.environ.get("GGUF_AUDIT_REQUIRE_BROWSER") == "1":
            pytest.fail(why)
        pytest.skip(why)
    with tempfile.TemporaryDirectory(prefix="gguf-audit-chromium-") as profile:
        flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={profile}"]
        done = subprocess.run(
            [chromium, *flags, "--no-pdf-header-footer", f"--print-to-pdf={pdf}", page.as_uri()],
            capture_output=True, text=True, timeout=120, check=False,
        )  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    data = pdf.read_bytes()
    counts = [int(c) for c in re.findall(rb"/Type\s*/Pages\b[^>]*?/Count\s+(\d+)", data)]
    counts += [int(c) for c in re.findall(rb"/Count\s+(\d+)[^>]*?/Type\s*/Pages\b", data)]
    assert counts, "no page tree in the PDF"
    return max(counts)


@pytest.mark.browser
def test_a_300_file_night_prints_short_and_opened_files_would_not(tmp_path: Path) -> None:
    page = render_html(many_files(300))
    collapsed, opened = tmp_path / "collapsed.html", tmp_path / "opened.html"
    collapsed.write_text(page, encoding="utf-8")
    # The control: the same page with every file and template open prints many more pages.
    opened.write_text(page.replace("<details ", "<details open "), encoding="utf-8")
    short = _print_pages(collapsed, tmp_path / "collapsed.pdf")
    long = _print_pages(opened, tmp_path / "opened.pdf")
    print(f"300 files: {short} pages collapsed, {long} open")
    assert short <= 20 and long > 2 * short, (short, long)
