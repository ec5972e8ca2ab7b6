"""What the template-audit tests share: the fixtures folder, fast limits, small views of an audit, and a count
of the render children started."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from gguf_audit.findings import Finding
from gguf_audit.templates.audit import TemplateAudit
from gguf_audit.templates.limits import TemplateLimits

TEMPLATES = Path(__file__).parent / "fixtures"
#: Small limits so every hostile template ends quickly; no per-file budget (these "files" hold dozens).
FAST = TemplateLimits(cpu_seconds=1.0, wall_seconds=3.0, max_templates=100, max_renders=100, file_seconds=600)
KEY = "tokenizer.chat_template"


def named_key(name: str) -> str:
    """The key of the named template ``name``."""
    return f"{KEY}.{name}"


def codes(audit: TemplateAudit) -> set[str]:
    return {f.code for f in audit.findings}


def template_findings(audit: TemplateAudit) -> list[Finding]:
    return [f for f in audit.findings if f.code.startswith("template.")]


def by_key(audits: tuple[TemplateAudit, ...]) -> dict[str, TemplateAudit]:
    return {a.key: a for a in audits}


class SpawnCounter:
    """``subprocess.Popen`` counting its calls (each a render child); the ``spawns`` fixture installs it."""

    def __init__(self) -> None:
        self.calls = 0
        self._popen = subprocess.Popen

    def __call__(self, *args: Any, **kwargs: Any) -> subprocess.Popen[bytes]:
        self.calls += 1
        return self._popen(*args, **kwargs)
