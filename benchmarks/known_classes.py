"""The conformance suite's list of known (another area's) disagreement classes, for the benchmarks.

Imported from ``tests/conformance/test_oracle_mutants.py`` so the list lives in one place: the test.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

from gguf_audit.testing.conformance import Outcome

_TESTS = Path(__file__).resolve().parents[1] / "tests"


def _test_module() -> ModuleType:
    sys.path.insert(0, str(_TESTS))  # the test imports tests/corpus.py as a top-level module
    spec = importlib.util.spec_from_file_location("_oracle_mutants", _TESTS / "conformance" / "test_oracle_mutants.py")
    if spec is None or spec.loader is None:
        raise ImportError("cannot load tests/conformance/test_oracle_mutants.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def known_class(outcome: Outcome) -> str | None:
    """The name of the known class ``outcome``'s disagreement falls in, or None."""
    name: str | None = _test_module().known(outcome)
    return name
