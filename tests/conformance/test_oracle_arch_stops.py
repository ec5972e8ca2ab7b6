"""The stops of the architectures' own ``load_arch_hparams``, asked of the oracle.

For every stop the generator translated (``hparams_stops`` in ``b11312-tensors.json``),
:func:`~gguf_audit.testing.arch_files.arch_stop_cases` writes a well-formed small model
whose keys make it the first to fire (an assert: llama.cpp aborts; a throw: it refuses),
and one whose keys pass every stop though they differ from the model's. llama.cpp must
say what the case expects, and gguf-audit agree with it, naming the stop.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gguf_audit.codes import Code
from gguf_audit.testing.arch_files import arch_stop_cases
from gguf_audit.testing.conformance import compare, confusion
from gguf_audit.testing.oracle import Oracle

pytestmark = pytest.mark.conformance

_STOP_CODES = {Code.HPARAMS_ARCH_ASSERTS, Code.HPARAMS_ARCH_THROWS}


def test_every_translated_stop_fires_where_llama_cpp_stops(oracle: Oracle, tmp_path: Path) -> None:
    cases = arch_stop_cases()
    paths = []
    for i, case in enumerate(cases):
        paths.append(tmp_path / f"{i:03d}.gguf")
        paths[-1].write_bytes(case.data())
    outcomes = compare(oracle, paths)
    wrong = {}
    for case, outcome in zip(cases, outcomes, strict=True):
        named = bool(_STOP_CODES & set(outcome.codes))
        fires = " fires: " in case.label
        if case.expect == "?":
            # An unmodelled loader's tensors are not judged: llama.cpp must only get past every stop.
            if outcome.theirs == "aborted" or named:
                wrong[case.label] = (outcome.ours, outcome.theirs, outcome.codes[:4], outcome.message[-140:])
            continue
        if not (outcome.agrees and case.expect == outcome.theirs and named is fires):
            wrong[case.label] = (outcome.ours, outcome.theirs, outcome.codes[:4], outcome.message[-140:])
    assert wrong == {}, f"confusion {dict(confusion(outcomes))}"
    fired = [c for c in cases if " fires: " in c.label]
    assert len(fired) >= 10 and sum(" passes " in c.label for c in cases) >= 4
    assert {c.label.split(" ", 1)[0] for c in fired} >= {
        "cohere2moe",
        "gemma-embedding",
        "minimax-m3",
        "glm5-next",
        "hrm_text",
    }
    assert {c.expect for c in fired} == {"aborted", "refused"}
