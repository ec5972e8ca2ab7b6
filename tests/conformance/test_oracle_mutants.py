"""Seeded mutants of the corpus models, judged by gguf-audit and by llama.cpp: the same verdict.

The mutation engine is :mod:`gguf_audit.testing.mutate` (the benchmarks share
it). Disagreements in the hyperparameter and vocabulary domain belong to the
architecture and tokenizer checks; they are listed by class in
:data:`KNOWN_HPARAMS_VOCAB` until those checks match llama.cpp, and every
other class fails the test.
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

KNOWN_HPARAMS_VOCAB: Final[dict[str, re.Pattern[str]]] = {
    # checks/arch.py matches a tensor name's base and lets any suffix through ("output.w" passes as
    # "output" + ".w"); llama.cpp creates only the names its architecture has, so one more tensor in
    # the file ends the load. Belongs to the generated tensor-name table.
    "tensor name suffixes not judged (arch name table)": re.compile(
        r"^refused/loads: done_getting_tensors: wrong number of tensors"
    ),
    # A hyperparameter stored with another type, e.g. head_count as a per-layer array: llama.cpp reads
    # and uses it (tensor shapes, n_rot) and refuses; the hyperparameter checks pass the file.
    "retyped hyperparameters judged apart (hparams)": re.compile(
        r"^refused/loads: (error loading model hyperparameters: invalid n_rot|check_tensor_dims: tensor)"
    ),
    # general.architecture or tokenizer.ggml.model stored as another type: llama.cpp names the value it
    # read unknown and refuses; the checks call the verdict unknown (checks/metadata.py, checks/tokenizer.py).
    "retyped architecture or tokenizer name (metadata, tokenizer)": re.compile(
        r"^refused/unknown: (unknown model architecture|error loading model vocabulary: unknown tokenizer)"
    ),
    # {arch}.block_count past LLAMA_MAX_LAYERS aborts in b11312 (issue 18); checks/tensors.py refuses it.
    "block_count past 512 aborts (hparams)": re.compile(r"^aborted/refuses: .*meta\.block_count_mismatch"),
    # Two tokens with the same text: llama_vocab asserts id_to_token.size() == token_to_id.size().
    "duplicate token texts abort (vocabulary)": re.compile(r"^aborted/loads: .*llama-vocab\.cpp.*id_to_token"),
}
"""Disagreement classes of the hyperparameter and vocabulary checks (another area's), by name: each
pattern matches :attr:`Outcome.klass`. Remove an entry once its class is fixed."""


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
