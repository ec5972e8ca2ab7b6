"""gguf_audit.compare within a CompareBudget (scans): few tensors, the sampling request and byte budget per file."""

from __future__ import annotations

from pathlib import Path

from corpus import corpus_dir

from gguf_audit.compare import CompareBudget, compare_files
from gguf_audit.testing.http import RangeHTTPServer

MODELS = corpus_dir() / "models"
F32 = MODELS / "tiny-llama-F32.gguf"


def test_a_budget_bounds_tensors_requests_and_bytes() -> None:
    files = {name: (MODELS / name).read_bytes() for name in ("tiny-llama-Q4_K_M.gguf", "tiny-llama-F32.gguf")}
    budget = CompareBudget(max_tensors=3, max_requests=6, budget_bytes=64 << 10)
    with RangeHTTPServer(files=files) as srv:
        c = compare_files(srv.url_for("tiny-llama-Q4_K_M.gguf"), srv.url_for("tiny-llama-F32.gguf"), budget=budget)
    assert 0 < len(c.tensors) <= 3 and c.n_suspect == 0
    # Only quantized tensors are chosen (a norm copied as F32 tells nothing), spread over the file.
    assert all(t.quant_type != "F32" for t in c.tensors)
    # One request for each header (the reference's format sniffed from it), then the sampled ranges.
    assert c.quant_io.requests - 1 <= budget.max_requests and c.reference_io.requests - 1 <= budget.max_requests
    # The blocks read stay within the byte budget, beyond the header reads (512 KiB each).
    assert c.reference_io.bytes_read - 512 * 1024 <= budget.budget_bytes
    assert c.quant_io.bytes_read - 512 * 1024 <= budget.budget_bytes


def test_without_a_budget_every_common_tensor_is_measured() -> None:
    c = compare_files(str(MODELS / "tiny-llama-Q8_0.gguf"), str(F32))
    bounded = compare_files(str(MODELS / "tiny-llama-Q8_0.gguf"), str(F32), budget=CompareBudget(max_tensors=5))
    assert len(c.tensors) == 21 and len(bounded.tensors) == 5
    by_name = {t.name: t for t in c.tensors}
    for t in bounded.tensors:  # the same measure on fewer blocks: the same size of error
        assert 0.5 < t.relative_rmse / by_name[t.name].relative_rmse < 2.0
        assert t.max_error_steps <= 0.55


def test_budget_paths_are_plain_paths(tmp_path: Path) -> None:
    copy = tmp_path / "q.gguf"
    copy.write_bytes((MODELS / "tiny-llama-IQ2_XXS.gguf").read_bytes())
    c = compare_files(str(copy), str(F32), budget=CompareBudget(max_tensors=1))
    [t] = c.tensors
    assert t.quant_type != "F32" and not t.layout_suspect
