"""The template tests' fixtures."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator

import pytest
from template_helpers import SpawnCounter


@pytest.fixture
def spawns(monkeypatch: pytest.MonkeyPatch) -> Iterator[SpawnCounter]:
    """Counts the render children started while the test runs."""
    counter = SpawnCounter()
    monkeypatch.setattr(subprocess, "Popen", counter)
    yield counter


@pytest.fixture(autouse=True)
def _no_spare_child() -> None:
    """No render child started ahead by an earlier test (an in-process ``inspect`` prestarts one) is left for
    this test to take: tests that change the child's command must get a child running that command."""
    from gguf_audit.templates.sandbox import runner

    runner._SPARE.stop()
