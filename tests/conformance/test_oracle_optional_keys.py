"""The keys an architecture's own ``load_arch_hparams`` reads without requiring them, of the wrong type.

``get_key(KEY, x, /*required=*/false)`` returns false for a key that is absent, but a key that is
there as another type throws 'wrong type' all the same. The generator tables each architecture's
scalar optional reads that always run (``arch_optional_key_types``); :func:`optional_key_cases`
stores each as another type in the architecture's small model, and llama.cpp decides.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gguf_audit.testing.arch_files import optional_key_cases
from gguf_audit.testing.conformance import compare, confusion
from gguf_audit.testing.oracle import Oracle

pytestmark = pytest.mark.conformance


def test_an_optional_key_of_another_type_is_refused_as_llama_cpp_refuses_it(oracle: Oracle, tmp_path: Path) -> None:
    cases = optional_key_cases()
    assert len(cases) > 200
    paths = []
    for i, case in enumerate(cases):
        paths.append(tmp_path / f"{i:04d}.gguf")
        paths[-1].write_bytes(case.data())
    outcomes = compare(oracle, paths)
    wrong = {
        c.label: (o.ours, o.theirs, o.codes[:4], o.message[-120:])
        for c, o in zip(cases, outcomes, strict=True)
        if not o.agrees or o.theirs != c.expect or (("wrong type" in o.message) and "meta.wrong_type" not in o.codes)
    }
    assert wrong == {}, f"confusion {dict(confusion(outcomes))}"
    # Nearly all stop on the key itself (eagle3's stop on its target layers comes first).
    assert sum("wrong type" in o.message for o in outcomes) >= len(outcomes) - 5
