"""The oracle for the conformance suite: llama.cpp b11312's ``llama-verdict``.

Missing, the suite skips with the reason, unless ``GGUF_AUDIT_REQUIRE_ORACLE=1``
(set by ``.ci/run``) makes that a failure.
"""

from __future__ import annotations

import os

import pytest

from gguf_audit.testing.oracle import ORACLE_ENV, Oracle, find_oracle, oracle_dir

REQUIRE_ORACLE_ENV = "GGUF_AUDIT_REQUIRE_ORACLE"


@pytest.fixture(scope="session")
def oracle() -> Oracle:
    found = find_oracle()
    if found is None:
        reason = f"no llama.cpp oracle at {oracle_dir()} (bin/llama-verdict; set {ORACLE_ENV})"
        if os.environ.get(REQUIRE_ORACLE_ENV) == "1":
            pytest.fail(f"{reason}, and {REQUIRE_ORACLE_ENV}=1")
        pytest.skip(reason)
    return found
