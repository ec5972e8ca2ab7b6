"""Every renderer survives any header the parser accepts: forged counts, huge values, mutated bytes.

``inspect``'s text report used to raise OverflowError on a forged parameter
count (tensors whose elements add up past 2**1024, where ``n / 1e12`` is no
float); the JSON of the same file worked.
"""

from __future__ import annotations

import json
import struct
import uuid
from functools import cache
from pathlib import Path

import fsspec
import pytest
from corpus import corpus_dir
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gguf_audit.audit import AuditConfig, FileAudit, audit_file
from gguf_audit.cli import main
from gguf_audit.format.model import Header
from gguf_audit.format.parser import parse_header
from gguf_audit.report.dump import parameter_label
from gguf_audit.report.format import fmt_bytes
from gguf_audit.report.json import audit_to_json, dumps
from gguf_audit.report.sarif import results_of_findings, sarif_json, sarif_log, sarif_run
from gguf_audit.report.text import render_text
from gguf_audit.tables.listed import ListedFile
from gguf_audit.tables.per_file import AuditedFile, audits_to_tables
from gguf_audit.testing.builder import Tensor, build_gguf, tiny_llama_like

_BIG = (1 << 63) - 1
_CONFIG = AuditConfig(templates=False)


def _forged(path: Path, n_dims: int) -> Path:
    kvs, tensors = tiny_llama_like()
    forged = [Tensor(name=f"forged.{i}", dims=[_BIG] * n_dims, ggml_type=0, data=b"") for i in range(40)]
    path.write_bytes(build_gguf(kvs, forged + tensors))
    return path


def _render_all(audit: FileAudit) -> None:
    render_text(audit, samples=True)
    json.loads(dumps(audit_to_json(audit, full_arrays=True, samples=True)))
    run = sarif_run(results_of_findings(audit.url, audit.findings), artifacts={audit.url: audit.size})
    json.loads(sarif_json(sarif_log([run])))
    audits_to_tables([AuditedFile(audit, ListedFile(url=audit.url, size=audit.size), "m")], run_id="r")


@pytest.mark.parametrize("fmt", ["text", "json", "sarif"])
def test_inspect_survives_a_forged_parameter_count(
    tmp_path: Path, fmt: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # 40 tensors of 2**1071 elements each; gguf.cpp, and the parser, stop reading at the first (17 dims).
    path = _forged(tmp_path / "forged.gguf", 17)
    assert main(["inspect", str(path), "--format", fmt]) == 1  # problems found, not a failed command (2)
    out = capsys.readouterr().out
    if fmt == "text":
        line = next(x for x in out.splitlines() if x.strip().startswith("parameters"))
        assert "e+322" in line and "(323 digits)" in line and len(line) < 200


def test_labels_of_huge_counts() -> None:
    assert parameter_label(8030261248) == "8.03 B (8030261248)"
    assert parameter_label(10**15) == "1.000e+15 (1000000000000000)"
    assert parameter_label(2**1100).startswith("1.358e+331 (") and parameter_label(2**1100).endswith("(332 digits))")
    assert fmt_bytes(2**1100).endswith("TiB")


@cache
def _header_bytes() -> bytes:
    data = (corpus_dir() / "models/tiny-llama-Q4_K_M.gguf").read_bytes()
    header = parse_header(data, len(data))
    assert isinstance(header, Header)
    return data[: header.data_offset + 4096]


_nasty = st.sampled_from([0, 1, 2**31, 2**32 - 1, 2**62, 2**63, 2**64 - 1, 10**9])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    writes=st.lists(st.tuples(st.integers(min_value=0), _nasty, st.sampled_from([4, 8])), min_size=1, max_size=3),
    patch=st.tuples(st.integers(min_value=0), st.binary(min_size=1, max_size=8)),
)
def test_any_accepted_header_renders_in_every_format(
    writes: list[tuple[int, int, int]], patch: tuple[int, bytes]
) -> None:
    buf = bytearray(_header_bytes())
    for at, value, width in writes:
        at %= len(buf) - width
        buf[at : at + width] = struct.pack("<" + ("Q" if width == 8 else "I"), value % (1 << (8 * width)))
    at, raw = patch
    at %= len(buf)
    buf[at : at + len(raw)] = raw
    url = f"memory://renderers/{uuid.uuid4().hex}.gguf"
    fs = fsspec.filesystem("memory")
    fs.pipe_file(url, bytes(buf))
    try:
        audit = audit_file(url, config=_CONFIG)
    finally:
        fs.rm_file(url)
    assert not [f for f in audit.findings if f.code.startswith("internal.")], audit.findings
    _render_all(audit)
