"""A comparison from the tensor infos the audit located gives what one from the whole headers gives, for less."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest
from corpus import corpus_dir

from gguf_audit.checks.lineage import Pair
from gguf_audit.compare import (
    DEFAULT_COMPARE_BUDGET,
    Comparison,
    measure,
    open_reference,
    read_reference_ranges,
    sample_quantized,
)
from gguf_audit.format.tensor_table import TensorTableAt, tensor_table_at
from gguf_audit.io.header import read_header
from gguf_audit.io.source import DEFAULT_READ_CONFIG, open_source
from gguf_audit.pipelines.work.compare_task import CompareBatch, CompareOptions, CompareResult, compare_batch

MODELS = corpus_dir() / "models"
REFERENCE = MODELS / "tiny-llama-F16.gguf"


def _table(path: Path) -> TensorTableAt:
    at = tensor_table_at(read_header(open_source(str(path))).header)
    assert at is not None
    return at


def _compare(quant: Path, *, tables: bool) -> tuple[Comparison, int]:
    reference = open_reference(str(REFERENCE), table=_table(REFERENCE) if tables else None)
    sample = sample_quantized(
        str(quant), reference, budget=DEFAULT_COMPARE_BUDGET, table=_table(quant) if tables else None
    )
    store = read_reference_ranges(reference, [sample])
    result = measure(sample, reference, store)
    return result, sample.io.bytes_read + reference.source.stats.bytes_read


@pytest.mark.parametrize("quant", ["Q8_0", "Q4_0", "Q4_K_M", "IQ2_XXS", "IQ4_NL"])
def test_the_same_figures_from_the_tensor_infos_alone(quant: str) -> None:
    path = MODELS / f"tiny-llama-{quant}.gguf"
    whole, whole_bytes = _compare(path, tables=False)
    table, table_bytes = _compare(path, tables=True)
    assert table.tensors == whole.tensors and table.tensors
    assert (table.findings, table.skipped, table.derivation) == (whole.findings, whole.skipped, whole.derivation)
    # the two headers (vocabulary included) are not read again: a tenth of the bytes or less
    assert table_bytes * 10 <= whole_bytes


def _batch(family: Path, tmp_path: Path, tables: dict[str, TensorTableAt], tag: str) -> CompareResult:
    reference = str(family / REFERENCE.name)
    pairs = tuple(
        Pair(str(family / f"tiny-llama-{q}.gguf"), reference, f"model-{q}", "tiny-llama") for q in ("Q8_0", "Q4_0")
    )
    options = CompareOptions(
        run_id=f"night-{tag}",
        storage_options={},
        read=DEFAULT_READ_CONFIG,
        budget=DEFAULT_COMPARE_BUDGET,
        threads=2,
        out=str(tmp_path / f"out-{tag}"),
    )
    return compare_batch(CompareBatch(tag, reference, pairs, tables), options)


def test_a_file_changed_since_its_audit_is_compared_from_its_whole_header(tmp_path: Path) -> None:
    family = tmp_path / "family"
    family.mkdir()
    for q in ("F16", "Q8_0", "Q4_0"):
        shutil.copy(MODELS / f"tiny-llama-{q}.gguf", family)
    whole = _batch(family, tmp_path, {}, "whole")
    q8, q4, ref = (str(family / f"tiny-llama-{q}.gguf") for q in ("Q8_0", "Q4_0", "F16"))
    fresh = {q8: _table(family / "tiny-llama-Q8_0.gguf"), ref: _table(family / "tiny-llama-F16.gguf")}
    located = _batch(family, tmp_path, fresh, "located")
    # The tables say where the infos were; Q4_0 was since replaced, so they are not there any more.
    stale = {**fresh, q4: dataclasses.replace(_table(family / "tiny-llama-Q4_0.gguf"), info_offset=8)}
    stale_ref = {ref: dataclasses.replace(fresh[ref], header_bytes=fresh[ref].header_bytes + 24)}
    for result in (located, _batch(family, tmp_path, stale, "stale"), _batch(family, tmp_path, stale_ref, "ref")):
        assert result.findings == whole.findings
        assert sorted(p.rows for p in result.parts) == sorted(p.rows for p in whole.parts)
        assert sum(p.rows for p in result.parts) > 0
    by_url = {url: b for url, _, b in located.io}
    whole_by_url = {url: b for url, _, b in whole.io}
    assert by_url[q8] * 5 < whole_by_url[q8] and by_url[ref] * 5 < whole_by_url[ref]
    assert by_url[q4] == whole_by_url[q4]  # no table for it: its header read whole, as before
