"""What a night that re-reads only a family's reference spends comparing its unchanged siblings.

Run as ``python benchmarks/bench_siblings.py [--workers 2]``.

Two families from the corpus (``../shared/corpus/models`` or ``GGUF_AUDIT_CORPUS``),
each on local disk into its own output, on a LocalCluster: the tests' family
(``tests/pipelines/test_nights.py``: F16, Q8_0, Q4_0 and a truncated Q4_K_M)
and the whole corpus family (every ``tiny-llama-*.gguf``: F32, F16, BF16 and six
quantized files). For each, a full incremental night, then the family's
reference touched (a new modification time: read again, its family judged
again) and a second night. Per second night it prints the night's requests
and bytes, the compare phase's, and those of the unchanged siblings alone
(``files.compare_requests`` and ``compare_bytes``): with the siblings' tensor
tables taken from the stored rows they are their sampled blocks only; before
(each sibling's header read whole) they held a 512 KiB header read each.

To measure the code before a change, run the same script with that code first
on ``PYTHONPATH`` (an exported tree of the older commit).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CORPUS = Path(os.environ.get("GGUF_AUDIT_CORPUS", Path(__file__).resolve().parents[2] / "shared" / "corpus"))
MODELS = CORPUS / "models"


def _tests_family(root: Path) -> None:
    for quant in ("F16", "Q8_0", "Q4_0"):
        shutil.copy(MODELS / f"tiny-llama-{quant}.gguf", root)
    data = (MODELS / "tiny-llama-Q4_K_M.gguf").read_bytes()
    (root / "tiny-llama-Q4_K_M.gguf").write_bytes(data[: len(data) * 2 // 3])


def _corpus_family(root: Path) -> None:
    for path in sorted(MODELS.glob("tiny-llama-*.gguf")):
        if path.name.count(".gguf") == 1:
            shutil.copy(path, root)


def _night_two(client: Any, root: Path, out: Path) -> dict[str, Any]:
    from gguf_audit.pipelines.config import ScanConfig
    from gguf_audit.pipelines.scan.run import run_scan
    from gguf_audit.pipelines.store.output import Output

    config = ScanConfig().replace(roots=(str(root),), out=str(out), incremental=True)
    first = run_scan(config, client=client)
    models = Output(str(out)).read("models", [first.run_id], columns=["reference_url"]).to_pylist()
    references = sorted({str(m["reference_url"]) for m in models if m["reference_url"]})
    for url in references:
        later = time.time() + 10
        os.utime(url.removeprefix("file://"), (later, later))
    second = run_scan(config, client=client)
    files = Output(str(out)).read("files", [second.run_id]).to_pylist()
    siblings = [f for f in files if f["reused"] and f["compare_requests"] is not None]
    return {
        "files": len(files),
        "read": second.n_read,
        "siblings compared": len(siblings),
        "night requests": second.requests,
        "night bytes": second.bytes_read,
        "compare requests": sum(f["compare_requests"] or 0 for f in files),
        "compare bytes": sum(f["compare_bytes"] or 0 for f in files),
        "sibling requests": sum(f["compare_requests"] for f in siblings),
        "sibling bytes": sum(f["compare_bytes"] for f in siblings),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args(argv)
    from distributed import Client, LocalCluster

    import gguf_audit

    print(f"gguf_audit from {Path(gguf_audit.__file__).parent}")
    with (
        tempfile.TemporaryDirectory() as tmp,
        LocalCluster(
            n_workers=args.workers,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.ERROR,
        ) as cluster,
        Client(cluster) as client,
    ):
        for name, make in (("tests' family", _tests_family), ("corpus family", _corpus_family)):
            root = Path(tmp) / name.replace("'", "").replace(" ", "-")
            root.mkdir()
            make(root)
            figures = _night_two(client, root, root.with_name(root.name + "-out"))
            shown = ", ".join(f"{k} {v:,}" for k, v in figures.items())
            print(f"{name}, the reference's night: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
