"""The format layer is pure: importing and using it pulls in no I/O or scheduling library."""

from __future__ import annotations

import subprocess
import sys

from corpus import corpus_dir

FORBIDDEN = ("fsspec", "aiohttp", "s3fs", "dask", "distributed", "pyarrow", "duckdb", "jinja2")


def test_format_and_checks_import_no_io_library() -> None:
    path = corpus_dir() / "models" / "tiny-llama-Q4_K_M.gguf"
    code = f"""
import sys
from gguf_audit.format import parse_header
from gguf_audit.checks.structure import check_structure
data = open({str(path)!r}, "rb").read()
header = parse_header(data, len(data))
list(check_structure(header, len(data)))
loaded = [m for m in {FORBIDDEN!r} if m in sys.modules]
print(",".join(loaded))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert result.stdout.strip() == ""
