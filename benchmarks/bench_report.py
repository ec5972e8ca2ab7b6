"""What the HTML night report costs a reader: bytes, printed pages and template copies on a 300-file night.

Run as ``python benchmarks/bench_report.py [--files 300] [--keep DIR] [--json OUT]``.

It writes ``--files`` real GGUF files (the corpus's tiny llama in Q4_K_M, Q8_0,
Q4_0 and Q6_K, each with its Llama-2 chat template) as a mirror would hold
them: one file per repository folder, every tenth with a second chat template
(one word changed), every twentieth truncated (a cut upload), one in fifty
renamed. One real night is scanned into a fresh
``--out`` (a LocalCluster of two worker processes, samples on, so the
``duplicates`` view has fingerprints), then ``gguf-audit report`` writes the
page. It prints the page's bytes, the copies of the chat template's first line
in it, and the pages Debian's headless chromium prints it to
(``chromium --headless --print-to-pdf``, A4 by default, pages counted in the
PDF's page tree). Run it once with the old code on ``PYTHONPATH`` and once
with the new to compare.
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Final

CORPUS: Final = Path("/work/shared/corpus/models")
QUANTS: Final = ("Q4_K_M", "Q8_0", "Q4_0", "Q6_K")
TEMPLATE_MARK: Final = "{% if messages[0]['role'] == 'system' %}"
"""The start of the corpus model's Llama-2 template, as the page shows it escaped or not."""


def _retemplated(data: bytes) -> bytes:
    """The same model with another chat template: one word of it changed for one of the same length."""
    old, new = b"Conversation roles must alternate", b"Conversation turns must alternate"
    if data.count(old) != 1:
        raise SystemExit("the corpus template is not the expected one")
    return data.replace(old, new)


def write_collection(root: Path, n: int) -> None:
    """``n`` files: 4 quantizations of one model across repositories, every tenth re-templated, every
    twentieth cut short, one in fifty renamed."""
    models = {q: (CORPUS / f"tiny-llama-{q}.gguf").read_bytes() for q in QUANTS}
    for i in range(n):
        quant = QUANTS[i % len(QUANTS)]
        body = models[quant] if i % 10 != 3 else _retemplated(models[quant])
        if i % 20 == 7:
            body = body[: len(body) * 3 // 5]
        name = f"tiny-llama-{quant}.gguf" if i % 50 else f"renamed-{i}.gguf"
        path = root / f"org{i % 7}" / f"repo{i // len(QUANTS):04d}" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(body)


def pdf_pages(pdf: bytes) -> int:
    """Pages in a PDF: the ``/Count`` of its root page tree (the largest one), else the ``/Type /Page`` objects."""
    counts = [int(c) for c in re.findall(rb"/Type\s*/Pages\b[^>]*?/Count\s+(\d+)", pdf)]
    counts += [int(c) for c in re.findall(rb"/Count\s+(\d+)[^>]*?/Type\s*/Pages\b", pdf)]
    return max(counts) if counts else len(re.findall(rb"/Type\s*/Page\b", pdf))


def print_to_pdf(page: Path, pdf: Path) -> int:
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    with tempfile.TemporaryDirectory(prefix="bench-report-chromium-") as profile:
        subprocess.run(
            [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", f"--user-data-dir={profile}",
             "--no-pdf-header-footer", f"--print-to-pdf={pdf}", page.as_uri()],
            capture_output=True, timeout=300, check=True,
        )  # fmt: skip
    return pdf_pages(pdf.read_bytes())


def measure(page: Path, pdf: Path) -> dict[str, Any]:
    source = page.read_text(encoding="utf-8")
    escaped = TEMPLATE_MARK.replace("'", "&#x27;")
    return {
        "html_bytes": len(source.encode("utf-8")),
        "template_copies": source.count(escaped) + source.count(TEMPLATE_MARK),
        "pdf_pages": print_to_pdf(page, pdf),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=300)
    parser.add_argument("--keep", type=Path, help="keep the collection, output and page here")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)

    from distributed import Client, LocalCluster

    from gguf_audit.cli import main as cli_main
    from gguf_audit.pipelines.config import ScanConfig
    from gguf_audit.pipelines.scan.run import run_scan

    work = args.keep or Path(tempfile.mkdtemp(prefix="bench-report-"))
    collection, out, page = work / "collection", work / "out", work / "night.html"
    if not (out / "runs").exists():
        write_collection(collection, args.files)
        started = time.perf_counter()
        with (
            LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",  # type: ignore[no-untyped-call]
                         dashboard_address="127.0.0.1:0", silence_logs=logging.CRITICAL) as cluster,
            Client(cluster) as client,  # type: ignore[no-untyped-call]
        ):  # fmt: skip
            run_scan(ScanConfig().replace(roots=(str(collection),), out=str(out)), client=client)
        print(f"scanned {args.files} files in {time.perf_counter() - started:.1f} s", file=sys.stderr)
    started = time.perf_counter()
    if cli_main(["report", str(out), "--html", str(page)]) != 0:
        raise SystemExit("report failed")
    seconds = time.perf_counter() - started
    result = {"files": args.files, "report_seconds": round(seconds, 2), **measure(page, work / "night.pdf")}
    print(json.dumps(result))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    if args.keep is None:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
