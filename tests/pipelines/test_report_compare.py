"""The report's quantization-error section, from the ``compare`` table a real scan writes."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from corpus import corpus_dir

from gguf_audit.pipelines.commands.report import build_report
from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.scan.run import run_scan
from gguf_audit.pipelines.store.output import Output
from gguf_audit.report.html import render_html


def test_quantization_error_per_type(client: Any, tmp_path: Path) -> None:
    family = tmp_path / "collection" / "family"
    family.mkdir(parents=True)
    for quant in ("F32", "Q8_0", "Q4_K_M"):
        shutil.copy(corpus_dir() / "models" / f"tiny-llama-{quant}.gguf", family)
    out = tmp_path / "out"
    result = run_scan(ScanConfig(roots=(str(tmp_path / "collection"),), out=str(out)), client=client)
    rows = Output(str(out)).read("compare", [result.run_id]).to_pylist()
    assert rows, "the scan compared the quantized files with the F32 one"

    report = build_report(Output(str(out)), result.run_id)
    assert report.compare is not None
    stats = {s.type: s for s in report.compare}
    by_type: dict[str, list[float]] = {}
    for r in rows:
        by_type.setdefault(r["type"], []).append(r["relative_rmse"])
    assert set(stats) == set(by_type)
    for qtype, errors in by_type.items():
        assert stats[qtype].n == len(errors)
        assert (stats[qtype].minimum, stats[qtype].maximum) == (min(errors), max(errors))
        assert stats[qtype].n_suspect == 0  # llama-quantize's own files: rounding, not a broken layout
    page = render_html(report)
    section = page[page.index('id="s-quantization"') :]
    assert "<svg" in section and all(qtype in section for qtype in by_type)
    assert "no compare table" not in page and "no tensor was compared" not in page
