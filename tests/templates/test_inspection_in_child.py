"""The render child parses and inspects every template; the auditing process parses none.

A child killed while inspecting blames that template and is restarted for the
rest; the render budget (``max_renders``) holds across restarts; a template no
child reached before the file's budget ran out is still inspected, here.
"""

from __future__ import annotations

import subprocess
import sys

import pytest
from template_helpers import TEMPLATES, SpawnCounter, by_key, codes, named_key

from gguf_audit.codes import Code
from gguf_audit.templates.audit import audit_templates
from gguf_audit.templates.limits import TemplateLimits
from gguf_audit.templates.sandbox import runner

pytestmark = pytest.mark.slow  # sandbox children killed and restarted: outside the fast loop

UNSAFE = "{{ cycler.__init__.__globals__.os.popen('id').read() }}"
CHATML = (TEMPLATES / "chatml.jinja").read_text(encoding="utf-8")
LLAMA3 = (TEMPLATES / "llama3.jinja").read_text(encoding="utf-8")
SPIN_RENDER = "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}"

# A child whose timers cannot fire (signals blocked) and whose inspection of a template holding SPIN-INSPECT
# never returns: only the parent's deadline for the next line stops it, as for one stuck in C code.
STUCK_CHILD = """
import runpy, signal
signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM, signal.SIGPROF, signal.SIGXCPU})
import gguf_audit.templates.inspect.verdict as verdict
real = verdict.static_verdict
def stuck(source):
    while "SPIN-INSPECT" in source:
        pass
    return real(source)
verdict.static_verdict = stuck
runpy.run_module("gguf_audit.templates.sandbox.worker", run_name="__main__")
"""


@pytest.fixture
def stuck_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner, "_child_command", lambda: [sys.executable, "-s", "-c", STUCK_CHILD])


def test_the_auditing_process_imports_no_jinja2() -> None:
    probe = (
        "import sys\n"
        "from gguf_audit.templates.audit import audit_templates\n"
        f"audits, _ = audit_templates({{'a': {UNSAFE!r}, 'b': '{{{{ x', 'c': {CHATML!r}}})\n"
        "print(sorted({str(f.code) for a in audits for f in a.findings}), audits[2].rendered is not None)\n"
        "print([m for m in ('jinja2', 'gguf_audit.templates.inspect') if m in sys.modules])\n"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, check=True)
    found, imported = done.stdout.splitlines()
    assert found == f"{sorted([str(Code.TEMPLATE_SYNTAX_ERROR), str(Code.TEMPLATE_UNSAFE)])!r} True"
    assert imported == "[]"


def test_a_child_that_dies_inspecting_blames_that_template(spawns: SpawnCounter, stuck_child: None) -> None:
    templates = {named_key("spin"): "SPIN-INSPECT {{ x }}", named_key("chatml"): CHATML}
    audits = by_key(audit_templates(templates, limits=TemplateLimits(cpu_seconds=1.0, wall_seconds=1.0))[0])
    assert spawns.calls == 2
    (limit,) = audits[named_key("spin")].findings
    assert limit.code == Code.TEMPLATE_RESOURCE_LIMIT
    assert "inspecting it met the render child's wall limit" in limit.message
    assert audits[named_key("spin")].rendered is None
    assert audits[named_key("chatml")].findings == ()
    assert audits[named_key("chatml")].rendered is not None


def test_the_render_budget_holds_across_a_restart(spawns: SpawnCounter, stuck_child: None) -> None:
    # The first render never ends (its timers are blocked): the child is killed on it, and the second child may
    # render only one more of the two left.
    templates = {named_key("spin"): SPIN_RENDER, named_key("chatml"): CHATML, named_key("llama3"): LLAMA3}
    limits = TemplateLimits(cpu_seconds=1.0, wall_seconds=1.0, max_renders=2)
    audits, file_level = audit_templates(templates, limits=limits)
    found = by_key(audits)
    assert spawns.calls == 2
    assert codes(found[named_key("spin")]) == {Code.TEMPLATE_RESOURCE_LIMIT}
    assert found[named_key("chatml")].rendered is not None
    assert found[named_key("llama3")].rendered is None and found[named_key("llama3")].findings == ()
    (too_many,) = file_level
    assert too_many.code == Code.TEMPLATE_TOO_MANY
    assert "distinct templates past the first 2 not rendered: 1" in too_many.message


def test_a_template_no_child_reached_is_inspected_here(spawns: SpawnCounter) -> None:
    audits, file_level = audit_templates({"a": UNSAFE, "b": CHATML}, limits=TemplateLimits(file_seconds=1e-9))
    assert spawns.calls == 0
    assert codes(audits[0]) == {Code.TEMPLATE_UNSAFE}
    assert audits[1].findings == () and audits[1].rendered is None
    (too_many,) = file_level
    assert "not rendered within the file's" in too_many.message
