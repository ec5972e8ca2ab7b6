"""Loops that can run past the render budget are ``template.resource_limit`` without rendering, whatever gates them.

The render audit renders the conversations runtimes send; a loop of 10**8 that
only a magic word in a message, or exactly seven messages, opens never runs for
them. The static count finds it anyway; benign templates stay unflagged.
"""

from __future__ import annotations

import json
from pathlib import Path

import jinja2
import pytest
from corpus import corpus_dir

from gguf_audit.cli import main
from gguf_audit.codes import Code
from gguf_audit.format.model import ValueType
from gguf_audit.templates.audit import audit_templates
from gguf_audit.templates.inspect.cost import MAX_ITERATIONS, template_cost_reasons
from gguf_audit.templates.inspect.inspector import parse_template_source
from gguf_audit.templates.limits import TemplateLimits
from gguf_audit.testing.retype import replace_kv

FAST = TemplateLimits(cpu_seconds=1.0, wall_seconds=3.0)
_TURNS = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"

GATED = {
    "magic_word": "{% for m in messages %}{% if 'xyzzy' in m.content %}{% for i in range(100000000) %}.{% endfor %}"
    "{% endif %}{% endfor %}" + _TURNS,
    "exactly_seven": "{% if messages|length == 7 %}{% for i in range(10 ** 8) %}.{% endfor %}{% endif %}" + _TURNS,
    "nested_named_constants": "{% set n = 20000 %}{% if messages[0].content == 'go' %}{% for a in range(n) %}"
    "{% for b in range(n) %}{% endfor %}{% endfor %}{% endif %}" + _TURNS,
    "macro_in_a_loop": "{% macro spin() %}{% for i in range(100000) %}{% endfor %}{% endmacro %}"
    "{% if tools %}{% for i in range(1000) %}{{ spin() }}{% endfor %}{% endif %}" + _TURNS,
    "self_calling_macro": "{% macro f(x) %}{{ f(x) }}{% endmacro %}{% if messages|length == 9 %}{{ f(1) }}{% endif %}"
    + _TURNS,
    "halving_macro": "{% macro f(n) %}{% if n > 0 %}{{ f(n - 1) }}{{ f(n - 1) }}{% endif %}{% endmacro %}"
    "{% if 'zz' in messages[-1].content %}{{ f(64) }}{% endif %}" + _TURNS,
}

BENIGN = {
    "turns": _TURNS,
    "arithmetic": "{% set big = 1000 * 100000 %}{% for m in messages %}{% if loop.index0 * 2 > 3 %}{{ big }}{% endif %}"
    "{{ m.content }}{% endfor %}",
    "small_ranges": "{% for i in range(10) %}{% for j in range(1000) %}{% endfor %}{% endfor %}" + _TURNS,
    "schema_recursion": "{% macro show(s) %}{% if s.properties %}{% for k, v in s.properties.items() %}{{ k }}: "
    "{{ show(v) }}{% endfor %}{% elif s.items %}{{ show(s.items) }}{% else %}{{ s.type }}{% endif %}{% endmacro %}"
    "{% for t in tools or [] %}{{ show(t.parameters) }}{% endfor %}" + _TURNS,
}
FIXTURES = sorted((Path(__file__).parent / "fixtures").glob("*.jinja")) + sorted(
    (Path(__file__).parent / "families").glob("*.jinja")
)


@pytest.mark.parametrize("name", sorted(GATED))
def test_gated_big_loops_are_counted_without_rendering(name: str) -> None:
    source = GATED[name]
    # The gate stays shut for the conversations a plain render gets: fast and short.
    plain = jinja2.Environment().from_string(source)
    assert len(plain.render(messages=[{"role": "user", "content": "hi"}], tools=None)) < 100
    reasons = template_cost_reasons(parse_template_source(source))
    assert reasons, name


@pytest.mark.parametrize("name", sorted(BENIGN))
def test_benign_loops_are_not_flagged(name: str) -> None:
    assert template_cost_reasons(parse_template_source(BENIGN[name])) == []


@pytest.mark.parametrize("path", FIXTURES, ids=lambda p: p.stem)
def test_real_templates_are_not_flagged(path: Path) -> None:
    assert template_cost_reasons(parse_template_source(path.read_text())) == []


def test_the_static_finding_is_one_and_the_render_still_happens() -> None:
    audits, _ = audit_templates({"tokenizer.chat_template": GATED["magic_word"]}, limits=FAST)
    (audit,) = audits
    limits = [f for f in audit.findings if f.code == Code.TEMPLATE_RESOURCE_LIMIT]
    assert len(limits) == 1 and "without rendering" in limits[0].message and "1.0e+08" in limits[0].message
    assert audit.rendered is not None and "<|user|>" in audit.rendered  # the tokenizer checks still get a render
    assert f"{MAX_ITERATIONS:.0e}" in limits[0].message


@pytest.mark.parametrize("name", ["magic_word", "exactly_seven"])
def test_inspect_reports_a_gated_loop(tmp_path: Path, name: str, capsys: pytest.CaptureFixture[str]) -> None:
    data = (corpus_dir() / "models/tiny-llama-Q4_K_M.gguf").read_bytes()
    path = tmp_path / f"{name}.gguf"
    path.write_bytes(replace_kv(data, "tokenizer.chat_template", ValueType.STRING, GATED[name]))
    main(["inspect", str(path), "--json"])
    report = json.loads(capsys.readouterr().out)
    codes = [p["code"] for p in report["problems"]]
    assert codes.count(Code.TEMPLATE_RESOURCE_LIMIT) == 1, report["problems"]
    assert not [c for c in codes if c.startswith("internal.")]
