"""Seeded mutants of the corpus models, judged by gguf-audit and by llama.cpp: the same verdict.

The mutation engine is :mod:`gguf_audit.testing.mutate` (the benchmarks share
it). Every disagreement fails the test. :data:`KNOWN_HPARAMS_VOCAB` names
classes waiting for a fix; it is empty since the generated name tables and the
hyperparameter and vocabulary checks landed (the five classes it held are fixed).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Final

import pytest
from corpus import corpus_dir

from gguf_audit.testing.conformance import Outcome, compare, confusion
from gguf_audit.testing.mutate import Seed, mutants, read_seed
from gguf_audit.testing.oracle import Oracle

pytestmark = [pytest.mark.conformance, pytest.mark.slow]

MUTANTS: Final = 2000
FUZZ_SEED: Final = 18

KNOWN_HPARAMS_VOCAB: Final[dict[str, re.Pattern[str]]] = {}
"""Disagreement classes waiting for a fix, by name: each pattern matches :attr:`Outcome.klass`. Empty: add
one only with the issue that fixes it, and remove it with the fix."""


def known(outcome: Outcome) -> str | None:
    return next((name for name, p in KNOWN_HPARAMS_VOCAB.items() if p.search(outcome.klass)), None)


@pytest.fixture(scope="module")
def seeds() -> list[Seed]:
    return [read_seed(p) for p in sorted((corpus_dir() / "models").glob("*.gguf")) if "-BE" not in p.name]


def test_seeded_mutants_get_llama_cpps_verdict(oracle: Oracle, seeds: list[Seed], tmp_path: Path) -> None:
    paths = [m.write(tmp_path) for m in mutants(seeds, MUTANTS, seed=FUZZ_SEED)]
    outcomes = compare(oracle, paths)
    matrix = confusion(outcomes)
    unexplained = Counter(o.klass for o in outcomes if not o.agrees and known(o) is None)
    assert dict(unexplained) == {}, f"confusion {dict(matrix)}"
    # The stream reaches every verdict llama.cpp has, so agreement is not a one-column accident.
    assert {theirs for _, theirs in matrix} >= {"loaded", "refused", "aborted"}
