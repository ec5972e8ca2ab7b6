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
