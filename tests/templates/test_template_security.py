"""Issue 12's template classes: bypasses that follow data, payloads gated on what runtimes send, benign filters.

Every code-execution template here is first shown to run a command in a plain
``jinja2.Environment`` (as an unsandboxed runtime renders it): it touches a file
in a temporary directory. Then the audit must call it ``template.unsafe``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import jinja2
import pytest

from gguf_audit.audit import AuditConfig, AuditResources, audit_file
from gguf_audit.codes import Code
from gguf_audit.findings import CODES, Severity
from gguf_audit.format.model import ValueType
from gguf_audit.templates.audit import TemplateAudit, TemplateCache, audit_templates
from gguf_audit.templates.conversations import PROBE_TEXTS, probe_conversations
from gguf_audit.templates.inspect.inspector import inspect_template_source
from gguf_audit.templates.limits import TemplateLimits
from gguf_audit.testing.builder import build_gguf, kv_array, kv_str

FAST = TemplateLimits(cpu_seconds=1.0, wall_seconds=3.0)
KEY = "tokenizer.chat_template"
FAMILIES = Path(__file__).parent / "families"

#: The command chain's tail: ``CMD`` becomes ``'touch <path>'``.
_RUN = "(CMD).read() }}"
#: What a runtime passes that the payloads read their names from.
_CONTENT = "__init__,__globals__,os,popen"
_BOS = "__globals__|os|popen"

EXEC = {
    # Names assembled in ways constant folding does not follow.
    "translate": "{% set c = cycler %}{% set t = {88: 95} %}{{ c['XXinitXX'.translate(t)]['XXglobalsXX'.translate(t)]"
    "['os'.translate(t)]['popen'.translate(t)]" + _RUN,
    "stringified_list_slice": "{% set c = joiner %}{% set s = (['__init__', '__globals__', 'os', 'popen']|string) %}"
    "{{ c[s[2:10]][s[14:25]][s[29:31]][s[35:40]]" + _RUN,
    "trim_chars": "{% set c = cycler %}{{ c['xx__init__xx'|trim('x')]['xx__globals__xx'|trim('x')]"
    "['xosx'|trim('x')]['xpopenx'|trim('x')]" + _RUN,
    "format_star_args": "{% set c = namespace %}{% set n = [95, 95, 95, 95] %}{% set m = [111, 115] %}"
    "{% set p = [112, 111, 112, 101, 110] %}{{ c['%c%cinit%c%c'|format(*n)]['%c%cglobals%c%c'|format(*n)]"
    "['%c%c'|format(*m)]['%c%c%c%c%c'|format(*p)]" + _RUN,
    "replace_in_loop": "{% set c = cycler %}{% set ns = namespace(k=[]) %}"
    "{% for w in ['XXinitXX', 'XXglobalsXX', 'Os', 'pOpen'] %}"
    "{% set ns.k = ns.k + [w|replace('X', '%c' % 95)|lower] %}{% endfor %}"
    "{{ c[ns.k[0]][ns.k[1]][ns.k[2]][ns.k[3]]" + _RUN,
    "join_filtered": "{% set c = cycler %}{% set p = ['_', '_', '-', 'init', '_', '_'] %}"
    "{% set q = ['_', '_', '-', 'globals', '_', '_'] %}"
    "{{ c[p|reject('equalto', '-')|join][q|reject('equalto', '-')|join]['o' ~ 's']['po' ~ 'pen']" + _RUN,
    # Names from runtime data: message contents, loop variables, namespace attributes, token texts.
    "content_split_namespace": "{% set ns = namespace(c=cycler) %}{% if add_generation_prompt %}"
    "{% for p in messages[-1].content.split(',') %}{% set ns.c = ns.c[p] %}{% endfor %}{{ ns.c" + _RUN + "{% endif %}",
    "alias_in_loop": "{% for c in [cycler] %}{% set ns = namespace(o=c) %}"
    "{% for k in messages[0].content.split(',') %}{% set ns.o = ns.o[k] %}{% endfor %}{{ ns.o" + _RUN + "{% endfor %}",
    "bos_token_names": "{% set c = lipsum %}{% set n = bos_token.split('|') %}{{ c[n[0]][n[1]][n[2]]" + _RUN,
    # Gated on what only inference calls send: the generation prompt after a user turn.
    "gated_generation_prompt": "{% if messages[-1].role == 'user' and add_generation_prompt %}{% set c = cycler %}"
    "{% set t = {88: 95} %}{{ c['XXinitXX'.translate(t)]['XXglobalsXX'.translate(t)]['os'.translate(t)]"
    "['popen'.translate(t)]" + _RUN + "{% endif %}",
}


def _payload(name: str, target: Path) -> str:
    return EXEC[name].replace("CMD", repr(f"touch {target}"))


def _codes(audit: TemplateAudit) -> set[str]:
    return {f.code for f in audit.findings}


@pytest.fixture(scope="module")
def exec_audits() -> Mapping[str, TemplateAudit]:
    templates = {f"{KEY}.{name}": _payload(name, Path("/nonexistent/never")) for name in EXEC}
    audits, _ = audit_templates(templates, bos_token=_BOS, limits=FAST)
    return {a.key.removeprefix(f"{KEY}."): a for a in audits}


@pytest.mark.parametrize("name", sorted(EXEC))
def test_payload_runs_without_the_sandbox_and_is_unsafe(
    tmp_path: Path, exec_audits: Mapping[str, TemplateAudit], name: str
) -> None:
    target = tmp_path / "pwned"
    context = {
        "messages": [{"role": "user", "content": _CONTENT}],
        "add_generation_prompt": True,
        "bos_token": _BOS,
    }
    jinja2.Environment().from_string(_payload(name, target)).render(**context)
    assert target.exists(), "the payload must really run a command when rendered without the sandbox"
    assert inspect_template_source(_payload(name, target)) != []
    unsafe = [f for f in exec_audits[name].findings if f.code == Code.TEMPLATE_UNSAFE]
    assert unsafe and all(f.severity is Severity.ERROR for f in unsafe)


def test_computed_key_message_names_the_base_and_the_key() -> None:
    reasons = inspect_template_source(EXEC["translate"])
    assert any("'XXinitXX'.translate(...)" in r and "not a literal of the template" in r for r in reasons), reasons
    split = inspect_template_source(EXEC["content_split_namespace"])
    assert any("the global 'cycler'" in r and "by p" in r for r in split), split


def test_the_probes_reach_what_the_standard_conversations_do_not() -> None:
    # Statically clean (a loop variable over the caller's data indexing the caller's
    # data), gated on the generation prompt: only a probe's contents make it probe
    # for '__init__', which the sandbox refuses.
    source = (
        "{% if add_generation_prompt %}{% for p in messages[-1].content.split(',') %}"
        "{{ messages[-1][p] is defined }}{% endfor %}{% endif %}{{ messages[0].content }}"
    )
    assert inspect_template_source(source) == []
    audits, _ = audit_templates({KEY: source}, limits=FAST)
    messages = [f.message for f in audits[0].findings if f.code == Code.TEMPLATE_UNSAFE]
    assert any("sandbox refused access to '__init__'" in m for m in messages), audits[0].findings


def test_probe_conversations_cover_what_runtimes_send() -> None:
    probes = dict(probe_conversations("<s>", "</s>"))
    assert any(ctx["add_generation_prompt"] for ctx in probes.values())
    assert any(not ctx["add_generation_prompt"] for ctx in probes.values())
    lasts = {ctx["messages"][-1]["role"] for ctx in probes.values()}  # type: ignore[index]
    assert "user" in lasts
    assert any(len(ctx["messages"]) > 8 for ctx in probes.values())  # type: ignore[arg-type]
    assert any("tools" in ctx and "documents" in ctx for ctx in probes.values())
    texts = " ".join(m["content"] for ctx in probes.values() for m in ctx["messages"])  # type: ignore[attr-defined]
    assert "<s>" in texts and "</s>" in texts and all(t in texts for t in PROBE_TEXTS)


#: Denial of service that only the probes reach.
DOS = {
    "gated_on_generation_prompt": "{% if add_generation_prompt %}{% for a in range(100000) %}"
    "{% for b in range(100000) %}{% endfor %}{% endfor %}{% endif %}{{ messages[0].content }}",
    "gated_on_long_conversation": "{% if messages|length > 8 %}{% for a in range(100000) %}"
    "{% for b in range(100000) %}{% endfor %}{% endfor %}{% endif %}{{ messages[0].content }}",
    # Not a constant: jinja2 folds constants when it compiles, in whatever process compiles.
    "gated_on_template_text": "{% for m in messages %}{% if '{{' in m.content %}{{ m.content * 100000 * 100000 }}"
    "{% endif %}{% endfor %}",
    "gated_on_documents": "{% if documents %}{% set ns = namespace(s='ab') %}{% for i in range(60) %}"
    "{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s }}{% endif %}",
}


@pytest.mark.parametrize("name", sorted(DOS))
def test_gated_denial_of_service_hits_a_limit(name: str) -> None:
    # Without the gate the standard conversations render it at once.
    plain = jinja2.Environment().from_string(DOS[name])
    assert len(plain.render(messages=[{"role": "user", "content": "hi"}], add_generation_prompt=False)) < 100
    audits, _ = audit_templates({KEY: DOS[name]}, limits=FAST)
    limits = [f for f in audits[0].findings if f.code == Code.TEMPLATE_RESOURCE_LIMIT]
    assert len(limits) == 1, audits[0].findings
    assert "conversation" in limits[0].message


# --- no false positives ----------------------------------------------------------------

FAMILY_FILES = sorted(FAMILIES.glob("*.jinja"))


def test_families_cover_eight_model_families() -> None:
    names = {p.stem for p in FAMILY_FILES}
    assert {"gemma3", "phi4", "qwen3", "mistral_v3_tekken", "command_r", "granite3"} <= names
    # Llama 3.x with tools and DeepSeek R1 are in fixtures/ (test_template_audit.py).
    assert (FAMILIES.parent / "fixtures" / "llama31_tools.jinja").exists()
    assert (FAMILIES.parent / "fixtures" / "deepseek_r1.jinja").exists()


@pytest.fixture(scope="module")
def family_audits() -> Mapping[str, TemplateAudit]:
    paths = [*FAMILY_FILES, FAMILIES.parent / "fixtures" / "llama31_tools.jinja"]
    paths.append(FAMILIES.parent / "fixtures" / "deepseek_r1.jinja")
    templates = {f"{KEY}.{p.stem}": p.read_text(encoding="utf-8") for p in paths}
    limits = TemplateLimits(cpu_seconds=1.0, wall_seconds=3.0, max_templates=32, max_renders=32, file_seconds=300)
    audits, file_findings = audit_templates(templates, bos_token="<s>", eos_token="</s>", limits=limits)
    assert file_findings == ()
    return {a.key.removeprefix(f"{KEY}."): a for a in audits}


@pytest.mark.parametrize("name", [p.stem for p in FAMILY_FILES])
def test_real_family_template_is_clean(family_audits: Mapping[str, TemplateAudit], name: str) -> None:
    audit = family_audits[name]
    assert audit.findings == ()
    assert audit.rendered is not None and audit.rendered.strip()
    assert inspect_template_source((FAMILIES / f"{name}.jinja").read_text(encoding="utf-8")) == []


BENIGN = {
    "wordwrap": "{% for m in messages %}{{ m.content|wordwrap(20) }}{% endfor %}",
    "striptags": "{% for m in messages %}{{ m.content|striptags }}{% endfor %}",
    "pprint_and_lipsum": "{{ messages[0]|pprint }}{{ lipsum(1, false, 3, 5)|length > 0 }}",
    "urlize_and_truncate": "{{ messages[0].content|urlize|truncate(40) }}{{ 1000|filesizeformat }}",
    "own_keys": "{% for k in tools[0] %}{{ tools[0][k] }}{% endfor %}"
    "{% for key, v in tools[0].function.items() %}{{ tools[0].function[key] == v }}{% endfor %}",
    "table_lookup": "{% set roles = {'user': 'U', 'assistant': 'A'} %}{% for m in messages %}{{ roles[m.role] }}"
    "{% endfor %}",
    "trim_chars": "{{ messages[0].content|trim('!') }}{{ ('xx' ~ messages[0].role ~ 'xx')|trim('x') }}",
}


@pytest.mark.parametrize("name", sorted(BENIGN))
def test_benign_filters_stay_clean(name: str) -> None:
    assert inspect_template_source(BENIGN[name]) == []
    audits, _ = audit_templates({KEY: BENIGN[name]}, limits=FAST)
    assert audits[0].findings == (), audits[0].findings
    assert audits[0].rendered is not None


# --- the per-file budget ---------------------------------------------------------------


def test_too_many_templates_is_one_file_finding() -> None:
    assert CODES[Code.TEMPLATE_TOO_MANY].severity is Severity.WARNING and CODES[Code.TEMPLATE_TOO_MANY].refused is False
    limits = TemplateLimits(cpu_seconds=1.0, wall_seconds=3.0, max_templates=4, max_renders=2)
    templates = {f"{KEY}.t{i}": f"{{{{ messages[0].content }}}} {i}" for i in range(7)}
    audits, file_findings = audit_templates(templates, limits=limits)
    assert [a.key for a in audits] == [f"{KEY}.t{i}" for i in range(4)]
    assert sum(a.rendered is not None for a in audits) == 2
    (over,) = file_findings
    assert over.code == Code.TEMPLATE_TOO_MANY
    assert "7 chat templates" in over.message and "templates past the first 4 not inspected: 3" in over.message
    assert "distinct templates past the first 2 not rendered: 2" in over.message


def test_file_render_budget_stops_the_renders() -> None:
    slow = "{% for a in range(100000) %}{% for b in range(100000) %}{% endfor %}{% endfor %}{{ NUM }}"
    limits = TemplateLimits(cpu_seconds=1.0, wall_seconds=3.0, file_seconds=1.5)
    templates = {f"{KEY}.s{i}": slow.replace("NUM", str(i)) for i in range(4)}
    audits, file_findings = audit_templates(templates, limits=limits)
    (over,) = file_findings
    assert over.code == Code.TEMPLATE_TOO_MANY and "render budget" in over.message
    # One resource limit each: what a render met, or for those the budget left unrendered, the static count.
    unrendered = [a for a in audits if a.rendered is None]
    assert unrendered and all([f.code for f in a.findings] == [Code.TEMPLATE_RESOURCE_LIMIT] for a in unrendered)
    assert any("without rendering" in a.findings[0].message for a in unrendered)


# --- every template key ------------------------------------------------------------------

_BENIGN = "{% for m in messages %}{{ m.content }}{% endfor %}"


def _hostile(tag: str) -> str:
    return "{{ cycler.__init__.__globals__.os.popen('id').read() }}{# " + tag + " #}"


def test_every_occurrence_array_item_and_named_variant_is_audited(tmp_path: Path) -> None:
    data = build_gguf(
        [
            kv_str("general.architecture", "llama"),
            kv_str(KEY, _BENIGN),
            kv_str(KEY, _hostile("second occurrence")),  # runtimes differ in which one they use
            kv_array(f"{KEY}.tool_use", int(ValueType.STRING), [_BENIGN, _hostile("array item")]),
            kv_str(f"{KEY}.rag", _hostile("named")),
        ]
    )
    path = tmp_path / "m.gguf"
    path.write_bytes(data)
    audit = audit_file(
        str(path),
        config=AuditConfig(semantics=False),
        resources=AuditResources(template_cache=TemplateCache(limits=FAST)),
    )
    assert "header.duplicate_key" in {f.code for f in audit.findings}
    keys = [a.key for a in audit.templates]
    assert keys == [KEY, f"{KEY} (occurrence 2)", f"{KEY}.tool_use[0]", f"{KEY}.tool_use[1]", f"{KEY}.rag"]
    unsafe = {a.key for a in audit.templates if Code.TEMPLATE_UNSAFE in _codes(a)}
    assert unsafe == {f"{KEY} (occurrence 2)", f"{KEY}.tool_use[1]", f"{KEY}.rag"}
    messages = [f.message for f in audit.findings if f.code == Code.TEMPLATE_UNSAFE]
    assert any(m.startswith(f"{KEY}.tool_use[1]: ") for m in messages)
