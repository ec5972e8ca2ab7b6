"""The chat-template audit's limits and its render child: resource limits, restarts, the one child per file."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

import jinja2
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from template_helpers import FAST, KEY, TEMPLATES, SpawnCounter, by_key, codes, named_key

from gguf_audit.codes import Code
from gguf_audit.findings import Severity
from gguf_audit.templates import audit as tpl
from gguf_audit.templates.audit import TemplateAudit, audit_templates
from gguf_audit.templates.inspect.inspector import TemplateInspectionError, inspect_template_source
from gguf_audit.templates.limits import MAX_TEMPLATE_CHARS, TAIL_CHARS, TemplateLimits
from gguf_audit.templates.sandbox import runner

pytestmark = pytest.mark.slow  # sandbox children killed and restarted: outside the fast loop

# --- the registry ------------------------------------------------------------


DOS = {
    # Output stops at the limit (or the CPU limit fires first).
    "nested_loops": (
        "{% for a in range(100000) %}{% for b in range(100000) %}x{% endfor %}{% endfor %}",
        {"output size", "CPU time", "wall-clock"},
    ),
    "silent_loops": (
        "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}",
        {"CPU time", "wall-clock"},
    ),
    "huge_string": ("{{ 'A' * 10**10 }}", {"memory"}),
    "huge_range": ("{{ range(10**9)|list }}", {"range()"}),
    "macro_recursion": ("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}", {"recursion"}),
    "huge_power": ("{{ 10 ** (10 ** 9) }}", {"CPU time", "wall-clock"}),
    "string_doubling": (
        "{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}",
        {"memory", "output size", "CPU time", "wall-clock"},
    ),
}


@pytest.fixture(scope="module")
def dos_audits() -> tuple[dict[str, TemplateAudit], float]:
    start = time.monotonic()
    audits, _ = audit_templates({named_key(k): v for k, (v, _) in DOS.items()}, limits=FAST)
    return by_key(audits), time.monotonic() - start


@pytest.mark.parametrize("name", sorted(DOS))
def test_denial_of_service_hits_a_named_limit(dos_audits: tuple[dict[str, TemplateAudit], float], name: str) -> None:
    audits, _ = dos_audits
    audit = audits[named_key(name)]
    limits = [f for f in audit.findings if f.code == Code.TEMPLATE_RESOURCE_LIMIT]
    assert len(limits) == 1, audit.findings
    assert any(word in limits[0].message for word in DOS[name][1]), limits[0].message
    assert limits[0].severity == Severity.ERROR
    assert audit.rendered is None and audit.rendered_tail is None


def test_denial_of_service_ends_within_the_limits(dos_audits: tuple[dict[str, TemplateAudit], float]) -> None:
    _, elapsed = dos_audits
    # Each template gets at most its wall limit (plus the parent's grace); most
    # stop at the CPU limit or sooner.
    assert elapsed < len(DOS) * (FAST.wall_seconds + 1.0)


def test_deep_expression_is_a_resource_limit_not_a_crash() -> None:
    source = "{{ " + " + ".join(["1"] * 5000) + " }}"
    with pytest.raises(TemplateInspectionError):
        inspect_template_source(source)
    audits, _ = audit_templates({KEY: source}, limits=FAST)
    assert codes(audits[0]) == {Code.TEMPLATE_RESOURCE_LIMIT}


def test_oversized_template_is_not_parsed() -> None:
    audits, _ = audit_templates({KEY: "x" * (MAX_TEMPLATE_CHARS + 1)}, limits=FAST)
    assert codes(audits[0]) == {Code.TEMPLATE_RESOURCE_LIMIT}
    assert str(MAX_TEMPLATE_CHARS) in audits[0].findings[0].message


# --- syntax and render errors --------------------------------------------------


def test_syntax_error_names_the_line() -> None:
    source = "{% for m in messages %}\n{{ m.content }}\n{{ m.role }\n{% endfor %}"
    with pytest.raises(jinja2.TemplateSyntaxError):
        inspect_template_source(source)
    audits, _ = audit_templates({KEY: source}, limits=FAST)
    (audit,) = audits
    assert [f.code for f in audit.findings] == [Code.TEMPLATE_SYNTAX_ERROR]
    assert audit.findings[0].message.startswith(f"{KEY}: line 3: ")
    assert audit.rendered is None


def test_render_error_only_when_even_the_simplest_conversation_fails() -> None:
    templates = {
        named_key("always"): "{{ raise_exception('no chat for you') }}",
        named_key("no_system"): "{% for m in messages %}{% if m.role == 'system' %}"
        "{{ raise_exception('System role not supported') }}{% endif %}{{ m.content }}{% endfor %}",
        named_key("undefined_method"): "{{ messages[0].content.nonexistent() }}",
    }
    audits = by_key(audit_templates(templates, limits=FAST)[0])
    always = audits[named_key("always")]
    assert [f.code for f in always.findings] == [Code.TEMPLATE_RENDER_ERROR]
    assert always.findings[0].severity == Severity.WARNING
    assert "no chat for you" in always.findings[0].message
    assert always.rendered is None
    assert audits[named_key("no_system")].findings == ()
    assert audits[named_key("no_system")].conversation == "no_system"
    assert codes(audits[named_key("undefined_method")]) == {Code.TEMPLATE_RENDER_ERROR}


def test_mutating_a_list_is_a_render_error_not_unsafe() -> None:
    # transformers' immutable sandbox refuses list.append too: broken, not hostile.
    audits, _ = audit_templates({KEY: "{% set x = [] %}{{ x.append(1) }}"}, limits=FAST)
    assert codes(audits[0]) == {Code.TEMPLATE_RENDER_ERROR}


def test_digest_and_tail() -> None:
    source = (TEMPLATES / "chatml.jinja").read_text(encoding="utf-8")
    audits, _ = audit_templates({KEY: source}, limits=FAST)
    (audit,) = audits
    assert audit.digest == hashlib.sha256(source.encode("utf-8")).hexdigest()
    assert audit.rendered is not None and audit.rendered_tail is not None
    assert len(audit.rendered_tail) == min(TAIL_CHARS, len(audit.rendered))
    assert audit.rendered_tail.endswith("It is 18 degrees Celsius in Paris.<|im_end|>\n")


def test_output_limit_bounds_the_render() -> None:
    limits = TemplateLimits(cpu_seconds=1.0, wall_seconds=3.0, output_chars=1000)
    source = "{% for i in range(5000) %}x{% endfor %}"
    audits, _ = audit_templates({KEY: source}, limits=limits)
    assert codes(audits[0]) == {Code.TEMPLATE_RESOURCE_LIMIT}
    assert "1000 characters" in audits[0].findings[0].message


@pytest.mark.parametrize(
    "kwargs",
    [{"cpu_seconds": 0}, {"wall_seconds": -1.0}, {"memory_bytes": 1024}, {"output_chars": 10}, {"cpu_seconds": True}],
)
def test_limits_are_validated(kwargs: Mapping[str, Any]) -> None:
    with pytest.raises(ValueError, match="Got"):
        TemplateLimits(**kwargs)


# --- the child process ----------------------------------------------------------


def test_one_child_renders_all_templates_of_a_file(spawns: SpawnCounter) -> None:
    names = ("chatml", "llama3", "qwen_tools")
    templates = {named_key(n): (TEMPLATES / f"{n}.jinja").read_text(encoding="utf-8") for n in names}
    audits, _ = audit_templates(templates, limits=FAST)
    assert spawns.calls == 1
    assert all(a.rendered is not None and a.findings == () for a in audits)


def test_a_limit_the_child_catches_needs_no_restart(spawns: SpawnCounter) -> None:
    templates = {
        named_key("spin"): DOS["silent_loops"][0],
        named_key("chatml"): (TEMPLATES / "chatml.jinja").read_text(encoding="utf-8"),
    }
    audits = by_key(audit_templates(templates, limits=FAST)[0])
    assert spawns.calls == 1
    assert codes(audits[named_key("spin")]) == {Code.TEMPLATE_RESOURCE_LIMIT}
    assert audits[named_key("chatml")].findings == ()


def test_a_killed_child_is_restarted_for_the_rest(spawns: SpawnCounter, monkeypatch: pytest.MonkeyPatch) -> None:
    # A child whose own timers cannot fire (the signals are blocked) stands
    # for one stuck in C code: only the parent's wall-clock deadline stops it.
    blocked = (
        "import runpy, signal; "
        "signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM, signal.SIGPROF, signal.SIGXCPU}); "
        "runpy.run_module('gguf_audit.templates.sandbox.worker', run_name='__main__')"
    )
    monkeypatch.setattr(runner, "_child_command", lambda: [sys.executable, "-s", "-c", blocked])
    limits = TemplateLimits(cpu_seconds=1.0, wall_seconds=1.0)
    templates = {
        named_key("spin"): DOS["silent_loops"][0],
        named_key("chatml"): (TEMPLATES / "chatml.jinja").read_text(encoding="utf-8"),
    }
    start = time.monotonic()
    audits = by_key(audit_templates(templates, limits=limits)[0])
    elapsed = time.monotonic() - start
    assert spawns.calls == 2
    (limit,) = audits[named_key("spin")].findings
    assert limit.code == Code.TEMPLATE_RESOURCE_LIMIT
    assert "wall-clock" in limit.message
    assert audits[named_key("chatml")].findings == ()
    assert audits[named_key("chatml")].rendered is not None
    assert elapsed < 10


def test_identical_templates_render_once(spawns: SpawnCounter) -> None:
    source = (TEMPLATES / "chatml.jinja").read_text(encoding="utf-8")
    audits, _ = audit_templates({KEY: source, named_key("default"): source}, limits=FAST)
    assert spawns.calls == 1
    assert audits[0].rendered == audits[1].rendered is not None
    assert [a.key for a in audits] == [KEY, named_key("default")]


def test_the_child_refuses_files_and_processes() -> None:
    probe = (
        "import json, subprocess, sys\n"
        "from gguf_audit.templates.sandbox import worker as w\n"
        "sys.addaudithook(w._audit_hook)\n"
        "w._locked = True\n"
        "out = {}\n"
        "for name, action in [('open', lambda: open('/etc/hostname')),\n"
        "                     ('popen', lambda: subprocess.run(['true'])),\n"
        "                     ('import', lambda: __import__('sqlite3'))]:\n"
        "    try:\n"
        "        action()\n"
        "        out[name] = 'allowed'\n"
        "    except BaseException as exc:\n"
        "        out[name] = type(exc).__name__\n"
        "sys.stdout.write(json.dumps(out))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        timeout=30,
        check=True,
        cwd=str(runner._package_root()),
    )
    assert json.loads(done.stdout) == {"open": "_Blocked", "popen": "_Blocked", "import": "_Blocked"}


def test_sandbox_refusal_during_render_is_unsafe() -> None:
    # The static rule is the first line; a refusal the sandbox records during the
    # render is reported even when the static rule found nothing.
    result = {"status": "error", "attempts": [{"error": "SecurityError: access to attribute '__class__'"}]}
    result["refused"] = ["'__class__' of 'str'"]
    found = tpl._interpret(KEY, result, FAST, unsafe_known=False)
    assert [f.code for f in found.findings] == [Code.TEMPLATE_UNSAFE]
    assert "'__class__' of 'str'" in found.findings[0].message


# --- robustness --------------------------------------------------------------------

_JINJA_BITS = st.sampled_from(
    [
        "{{",
        "}}",
        "{%",
        "%}",
        " for x in messages ",
        " endfor ",
        " if ",
        " endif ",
        " set ns = namespace(a=1) ",
        " set ns.a = ",
        "x",
        "'__'",
        "'class'",
        " ~ ",
        " + ",
        "[",
        "]",
        "(",
        ")",
        ".",
        "|join",
        "|reverse",
        "|attr(",
        "[::-1]",
        "messages[0]",
        "loop.index0",
        "ns.a",
        "1",
        ",",
        "'a'",
        "{#",
        "#}",
        "\n",
    ]
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_JINJA_BITS, max_size=40).map("".join))
def test_inspection_of_any_text_answers_or_raises_typed(source: str) -> None:
    try:
        reasons = inspect_template_source(source)
    except (jinja2.TemplateSyntaxError, TemplateInspectionError):
        return
    assert isinstance(reasons, list)
    assert all(isinstance(r, str) and r.startswith("line ") and "\n" not in r for r in reasons)
