"""One version everywhere a user meets it: ``pyproject.toml``, ``gguf-audit --version``, the newest
``CHANGELOG.md`` section and the README's install line for the release (``.ci/release-check`` installs that wheel)."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib

from corpus import REPO


def test_the_release_is_named_alike_everywhere() -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    shown = subprocess.run(
        [sys.executable, "-m", "gguf_audit", "--version"], capture_output=True, text=True, check=True, timeout=60
    )
    assert shown.stdout.strip() == f"gguf-audit {version}"
    sections = re.findall(r"^## (\S+) \((\d{4}-\d\d-\d\d)\)$", (REPO / "CHANGELOG.md").read_text(), re.M)
    assert sections and sections[0][0] == version, sections
    readme = (REPO / "README.md").read_text()
    wheel = f"dist/gguf_audit-{version}-py3-none-any.whl"
    assert f"pipx install '{wheel}[pipeline]'" in readme
    assert f"uv tool install 'gguf-audit[pipeline] @ ./{wheel}'" in readme
    assert len(readme.encode()) < 15_000


def test_the_sdist_takes_the_changelog_and_ci_checks_the_release() -> None:
    assert "CHANGELOG.md" in (REPO / "MANIFEST.in").read_text().split()
    run = (REPO / ".ci" / "run").read_text()
    assert run.index(".venv/bin/mypy") < run.index(".ci/release-check")
