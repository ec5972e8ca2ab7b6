"""The ``audit`` fixture of the header-check tests: write a tiny model, parse it, check its semantics."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from tiny_model import Model, parse, write

from gguf_audit.checks.header import check_semantics
from gguf_audit.findings import Finding


@pytest.fixture
def audit(tmp_path: Path) -> Callable[..., list[Finding]]:
    def run(model: Model, name: str = "model.gguf", renders: dict[str, str] | None = None) -> list[Finding]:
        path = tmp_path / name
        write(model, path)
        return list(check_semantics(parse(path), url=str(path), template_renders=renders))

    return run
