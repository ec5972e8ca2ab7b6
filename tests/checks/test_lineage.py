"""gguf_audit.checks.lineage: families from per-file facts, on the corpus' real llama.cpp files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from corpus import corpus_dir

from gguf_audit.checks.lineage import (
    combine_digests,
    families,
    is_full_precision,
    judge_family,
    model_lineage,
    tensor_set_digest,
)
from gguf_audit.codes import Code
from gguf_audit.format.model import Header
from gguf_audit.io.header import read_header
from gguf_audit.io.source import open_source
from gguf_audit.tables.provenance import lineage_cells

MODELS = corpus_dir() / "models"
SPLIT = corpus_dir() / "split"


def _header(path: Path) -> Header:
    return read_header(open_source(str(path))).header


def _row(path: Path, **changes: Any) -> dict[str, Any]:
    h = _header(path)
    row: dict[str, Any] = {
        "url": f"file://{path}",
        "architecture": h.get_str("general.architecture"),
        "name": h.get_str("general.name"),
        "file_type_name": path.stem.rsplit("-", 1)[-1],
        "shard_index": None,
        **lineage_cells(h),
    }
    row.update(changes)
    return row


def test_the_tensor_set_is_the_same_in_every_precision_and_full_precision_is_told_apart() -> None:
    digests = {}
    for quant in ("F32", "F16", "BF16", "Q8_0", "Q4_K_M", "IQ2_XXS"):
        h = _header(MODELS / f"tiny-llama-{quant}.gguf")
        digests[quant] = tensor_set_digest(h)
        assert is_full_precision(h) is (quant in ("F32", "F16", "BF16")), quant
    assert len(set(digests.values())) == 1 and len(digests["F32"] or "") == 32


def test_the_shards_of_a_model_add_up_to_the_whole_tensor_set() -> None:
    shards = sorted(SPLIT.glob("*.gguf"))
    assert len(shards) == 4
    parts = [tensor_set_digest(_header(p)) for p in shards]
    assert all(parts) and len(set(parts)) == 4
    whole = tensor_set_digest(_header(MODELS / "tiny-llama-Q4_K_M.gguf"))
    assert combine_digests(p for p in parts if p) == whole
    # So the split Q4_K_M falls in the F32 file's family, one member for its four files.
    rows = [_row(p, shard_index=i + 1) for i, p in enumerate(shards)]
    split = model_lineage("split", rows)
    f32 = model_lineage("f32", [_row(MODELS / "tiny-llama-F32.gguf")])
    [family] = families([split, f32])
    assert family.quantized == (split,) and family.full == (f32,)
    verdict = judge_family(family)
    assert verdict.findings == () and verdict.source == "gguf"
    assert [(p.quant_url, p.reference_url) for p in verdict.pairs] == [(r["url"], f32.urls[0]) for r in rows]


def test_a_quantized_family_without_full_precision_gets_one_finding() -> None:
    quants = [model_lineage(q, [_row(MODELS / f"tiny-llama-{q}.gguf")]) for q in ("Q8_0", "Q4_0", "IQ2_XXS")]
    renamed = model_lineage("renamed", [_row(MODELS / "tiny-llama-Q6_K.gguf", name="another-model")])
    grouped = families([*quants, renamed])
    assert len(grouped) == 2  # the name refines the family
    main = next(f for f in grouped if len(f.models) == 3)
    verdict = judge_family(main)
    [f] = verdict.findings
    assert f.code == Code.LINEAGE_NO_FULL_PRECISION and str(f.severity) == "info"
    assert "3 quantized model(s) (IQ2_XXS, Q4_0, Q8_0)" in f.message and verdict.pairs == ()
    assert main.anchor == "IQ2_XXS"
    # A safetensors file beside a member is a source: no finding, nothing to compare.
    beside = judge_family(main, {quants[0].directory})
    assert beside.findings == () and beside.source == "safetensors" and beside.pairs == ()


def test_a_base_model_refines_the_family_and_unreadable_files_have_none() -> None:
    a = model_lineage("a", [_row(MODELS / "tiny-llama-Q8_0.gguf", base_model_repo_url="https://example.org/org/x")])
    b = model_lineage("b", [_row(MODELS / "tiny-llama-F32.gguf", base_model_repo_url="https://example.org/org/y")])
    assert a.key != b.key and len(families([a, b])) == 2
    broken = model_lineage("c", [{"url": "file:///c.gguf", "tensor_set_digest": None, "full_precision": None}])
    assert broken.key is None and families([broken]) == []


def test_provenance_cells_of_the_imatrix_file() -> None:
    cells = lineage_cells(_header(MODELS / "tiny-llama-IQ2_XXS.gguf"))
    assert cells["imatrix_file"] == "imatrix.dat" and cells["imatrix_dataset"] == "calib.txt"
    assert (cells["imatrix_entries_count"], cells["imatrix_chunks_count"]) == (14, 40)
    assert cells["full_precision"] is False and cells["base_model_count"] is None
    plain = lineage_cells(_header(MODELS / "tiny-llama-F32.gguf"))
    assert plain["imatrix_file"] is None and plain["full_precision"] is True


def test_lineage_only_adds_nullable_columns_at_the_end() -> None:
    from gguf_audit.tables.schema import stored_schema

    added = {
        "files": ["tensor_set_digest", "metadata_parts"],  # mmproj pairing, compare I/O, Hub requests, fingerprints
        "models": ["family_key", "reference_url"],
        "runs": ["compare_version", "mirror_rows"],  # listing_requests, skipped entries, the mirror table came later
    }
    # after lineage: the verdict, then (files) the rest of the provenance
    later: dict[str, list[str]] = {
        "files": ["llama_cpp", "made_with_imatrix", "quantize_keys"],
        "models": ["llama_cpp"],
        "runs": ["listing_wait_s"],  # the Hub's rate-limit waits (issue 38)
    }
    for table, (first, last) in ((t, (c[0], c[-1])) for t, c in added.items()):
        names = stored_schema(table).names
        assert names[len(names) - len(later[table]) - 1 :] == [last, *later[table]], table
        tail = names[names.index(first) :]
        assert all(stored_schema(table).field(n).nullable for n in tail), table
