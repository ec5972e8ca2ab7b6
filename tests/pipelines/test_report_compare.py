"""The report's quantization-error section reads a ``compare`` table when the output has one (newer scans write it)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pyarrow as pa
from deltalake import write_deltalake
from report_nights import Nights

from gguf_audit.pipelines.output import Output
from gguf_audit.pipelines.report_cli import build_report
from gguf_audit.report.html import render_html

# The columns of the compare table the report reads, as the lineage work writes them (docs/tables.md, `compare`).
COMPARE = pa.schema(
    [
        pa.field("url", pa.string(), False),
        pa.field("model_id", pa.string(), False),
        pa.field("reference_url", pa.string(), False),
        pa.field("tensor", pa.string(), False),
        pa.field("type", pa.string()),
        pa.field("relative_rmse", pa.float64()),
        pa.field("verdict", pa.string(), False),
        pa.field("source_run_id", pa.string(), False),
        pa.field("run_id", pa.string(), False),
    ]
)


def test_quantization_error_per_type(report_nights: Nights, tmp_path: Path) -> None:
    out_dir = tmp_path / "out"
    shutil.copytree(report_nights.out, out_dir)
    out = Output(str(out_dir))
    night = report_nights.runs[2]
    models = out.read("models", [night], columns=["model_id", "source_run_id"]).to_pylist()
    rows = []
    for i, m in enumerate(models):
        source = m["source_run_id"] or night
        for t, (qtype, err) in enumerate([("Q4_K", 0.01 * (i + 1)), ("Q8_0", 0.002), ("Q4_K", 0.03)]):
            verdict = "layout_suspect" if (i, t) == (0, 2) else "ok"
            rows.append(
                {"url": f"{m['model_id']}.gguf", "model_id": m["model_id"], "reference_url": "file:///ref-F32.gguf",
                 "tensor": f"blk.{t}.ffn_down.weight", "type": qtype, "relative_rmse": err, "verdict": verdict,
                 "source_run_id": source, "run_id": source}
            )  # fmt: skip
    # A row of a model as another night judged it: not this night's picture.
    rows.append({**rows[0], "type": "IQ2_XXS", "run_id": "19990101T000000000Z-00000000"})
    write_deltalake(str(out_dir / "compare"), pa.Table.from_pylist(rows, schema=COMPARE), partition_by=["run_id"])

    report = build_report(out, night)
    assert report.compare is not None
    stats = {s.type: s for s in report.compare}
    assert set(stats) == {"Q4_K", "Q8_0"}
    n = len(models)
    assert stats["Q4_K"].n == 2 * n and stats["Q8_0"].n == n
    assert stats["Q4_K"].minimum == 0.01 and stats["Q4_K"].maximum == max(0.03, 0.01 * n)
    assert stats["Q8_0"].median == 0.002 and stats["Q4_K"].n_suspect == 1
    page = render_html(report)
    section = page[page.index('id="s-quantization"') :]
    assert "<svg" in section and "Q4_K" in section and "Q8_0" in section
    assert "no compare table" not in page
