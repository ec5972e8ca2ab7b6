"""The translated loaders against llama.cpp: every modelled architecture's tensor sets, asked of the oracle.

For each architecture of ``b11312-tensors.json`` whose loader builds a small model
(dense, and MoE where the architecture has experts), :func:`semantic_cases` makes the
complete model (llama.cpp must load it, and gguf-audit call it loadable), the model
without each required global and block-0 tensor, with one tensor the loader does not
create, and with a tensor widened (llama.cpp must refuse each, and gguf-audit say so
naming the tensor). About 3,200 files, asked in batches; then about 1,100 complete models' tensors
under edited hyperparameters (head sizes, per-layer arrays, rope scaling, block count).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from gguf_audit.audit import audit_file
from gguf_audit.findings import Severity
from gguf_audit.llama import tensor_programs
from gguf_audit.testing.arch_files import Case, complete_model, semantic_cases, variant_cases
from gguf_audit.testing.conformance import CONFORMANCE_AUDIT, compare, confusion
from gguf_audit.testing.oracle import Oracle

pytestmark = pytest.mark.conformance


def _write(cases: list[Case], tmp: Path) -> list[Path]:
    paths = []
    for i, case in enumerate(cases):
        paths.append(tmp / f"{i:05d}.gguf")
        paths[-1].write_bytes(case.data())
    return paths


def test_most_architectures_are_modelled_and_build_a_model_that_loads() -> None:
    programs = tensor_programs()
    assert len(programs.architectures) + len(programs.unmodelled) == 152
    assert len(programs.architectures) >= 105
    for arch in ("llama", "qwen2", "qwen3", "qwen3moe", "gemma", "gemma2", "gemma3", "phi3", "starcoder2", "bert"):
        assert complete_model(arch) is not None or complete_model(arch, moe=True) is not None, arch


def test_every_generated_tensor_set_gets_llama_cpps_verdict(oracle: Oracle, tmp_path: Path) -> None:
    cases = [c for arch in sorted(tensor_programs().architectures) for c in semantic_cases(arch)]
    assert len(cases) > 1000
    outcomes = compare(oracle, _write(cases, tmp_path))
    wrong = {
        c.label: (o.ours, o.theirs, o.codes, o.message[-120:])
        for c, o in zip(cases, outcomes, strict=True)
        if o.theirs != c.expect or not o.agrees or (o.loadable is not (c.expect == "loaded"))
    }
    assert wrong == {}, f"confusion {dict(confusion(outcomes))}"
    # A refusal is gguf-audit's own, naming the tensor llama.cpp stops on: not a neighbour's finding.
    unnamed = []
    for case, outcome in zip(cases, outcomes, strict=True):
        if case.tensor is None:
            continue
        findings = audit_file(outcome.path, config=CONFORMANCE_AUDIT).findings
        if not any(f.tensor == case.tensor and f.severity is Severity.ERROR for f in findings):
            unnamed.append(case.label)
    assert unnamed == []
    kinds = Counter(c.label.split(" ", 1)[1].split(" ")[0] for c in cases)
    assert kinds["complete"] > 150 and kinds["without"] > 1500 and kinds["with"] > 50


def test_edited_hyperparameters_size_the_tensors_as_llama_cpp_does(oracle: Oracle, tmp_path: Path) -> None:
    """The keys a loader reads its shapes from, derived as load_hparams derives them: a complete model's
    tensors under edited keys load exactly when the program computes the same tensors from them."""
    cases = [c for arch in sorted(tensor_programs().architectures) for c in variant_cases(arch)]
    assert len(cases) > 1000
    outcomes = compare(oracle, _write(cases, tmp_path))
    wrong = {
        c.label: (o.ours, o.theirs, o.message[-120:])
        for c, o in zip(cases, outcomes, strict=True)
        if o.theirs != c.expect or not o.agrees
    }
    assert wrong == {}, f"confusion {dict(confusion(outcomes))}"
    assert Counter(c.expect for c in cases)["refused"] > 400
