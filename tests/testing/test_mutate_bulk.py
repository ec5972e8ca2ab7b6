"""Whole-header mutants (spliced, duplicated sections, lengths equal to the bytes left): audited, never a crash."""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest
from corpus import corpus_dir

from gguf_audit.audit import AuditConfig, audit_file
from gguf_audit.report.json import audit_to_json, dumps
from gguf_audit.report.text import render_text
from gguf_audit.samples import SampleConfig
from gguf_audit.testing.mutate import read_seed
from gguf_audit.testing.mutate_bulk import BULK_KINDS, bulk_mutants

pytestmark = pytest.mark.slow  # headers of 10^6 entries: outside the fast loop


def test_the_stream_is_the_same_every_time() -> None:
    seeds = [read_seed(corpus_dir() / "models/tiny-llama-Q4_0.gguf")]
    first = [(m.ident, m.size, len(m.content)) for m in bulk_mutants(seeds, 12, seed=3) if m.kind != "tiny_entries"]
    again = [(m.ident, m.size, len(m.content)) for m in bulk_mutants(seeds, 12, seed=3) if m.kind != "tiny_entries"]
    assert first == again and first


@pytest.mark.slow
def test_bulk_mutants_are_audited_without_internal_errors(tmp_path: Path) -> None:
    seeds = [read_seed(p) for p in sorted((corpus_dir() / "models").glob("tiny-llama-*.gguf")) if "-BE" not in p.name]
    config = AuditConfig(samples=SampleConfig())
    kinds: Counter[str] = Counter()
    for m in bulk_mutants(seeds, 80, seed=11):
        kinds[m.kind] += 1
        path = m.write(tmp_path)
        audit = audit_file(os.fspath(path), config=config)
        render_text(audit)
        dumps(audit_to_json(audit))
        path.unlink()
        internal = [f.message for f in audit.findings if f.code.startswith("internal.")]
        assert internal == [], (m.ident, internal)
    assert set(kinds) == set(BULK_KINDS)
