"""The chat-template audit: static inspection, the sandboxed render child, and no false positives."""

from __future__ import annotations

import hashlib
from pathlib import Path

import gguf
import pytest
from corpus import truth, truth_files
from template_helpers import FAST, KEY, TEMPLATES, by_key, named_key, template_findings

from gguf_audit.codes import Code
from gguf_audit.findings import CODES, Severity
from gguf_audit.templates.audit import TemplateAudit, audit_templates, template_ends_turn
from gguf_audit.templates.inspect.inspector import inspect_template_source
from gguf_audit.templates.limits import TAIL_CHARS

# --- the registry ------------------------------------------------------------


def test_codes_are_registered_with_their_severities() -> None:
    expected = {
        Code.TEMPLATE_SYNTAX_ERROR: Severity.ERROR,
        Code.TEMPLATE_UNSAFE: Severity.ERROR,
        Code.TEMPLATE_RESOURCE_LIMIT: Severity.ERROR,
        Code.TEMPLATE_RENDER_ERROR: Severity.WARNING,
        Code.TEMPLATE_MISSING: Severity.INFO,
    }
    for code, severity in expected.items():
        info = CODES[code]
        assert info.severity == severity
        # llama.cpp loads files whatever their template says.
        assert info.refused is False
        assert info.doc


def test_no_template_is_a_file_level_finding() -> None:
    audits, file_findings = audit_templates({})
    assert audits == ()
    assert [f.code for f in file_findings] == [Code.TEMPLATE_MISSING]
    assert file_findings[0].severity == Severity.INFO


# --- realistic templates: no finding at all ------------------------------------

FIXTURES = sorted(p.stem for p in TEMPLATES.glob("*.jinja"))
#: The conversation each fixture renders: the ones that reject tool or system
#: turns fall back to the simpler conversations without any finding.
EXPECTED_CONVERSATION = {"llama2": "no_tools", "mistral": "no_system"}
EOS = {"chatml": "<|im_end|>", "llama3": "<|eot_id|>", "llama31_tools": "<|eot_id|>", "qwen_tools": "<|im_end|>"}


@pytest.fixture(scope="module")
def fixture_audits() -> dict[str, TemplateAudit]:
    templates = {named_key(name): (TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8") for name in FIXTURES}
    audits, file_findings = audit_templates(templates, bos_token="<s>", eos_token="</s>", limits=FAST)
    assert file_findings == ()
    return by_key(audits)


def test_fixtures_exist() -> None:
    expected = {"chatml", "llama2", "llama3", "llama31_tools", "mistral", "qwen_tools", "hermes_tools", "deepseek_r1"}
    assert expected <= set(FIXTURES)


@pytest.mark.parametrize("name", FIXTURES)
def test_realistic_template_has_no_finding(fixture_audits: dict[str, TemplateAudit], name: str) -> None:
    audit = fixture_audits[named_key(name)]
    assert template_findings(audit) == []
    assert inspect_template_source((TEMPLATES / f"{name}.jinja").read_text(encoding="utf-8")) == []
    assert audit.rendered is not None
    assert audit.conversation == EXPECTED_CONVERSATION.get(name, "full")
    assert audit.rendered_tail == audit.rendered[-TAIL_CHARS:]


def test_tool_templates_render_the_tool_call(fixture_audits: dict[str, TemplateAudit]) -> None:
    for name in ("llama31_tools", "qwen_tools", "hermes_tools", "deepseek_r1"):
        rendered = fixture_audits[named_key(name)].rendered
        assert rendered is not None
        assert "get_weather" in rendered
        assert '"city": "Paris"' in rendered


def test_strftime_now_is_deterministic(fixture_audits: dict[str, TemplateAudit]) -> None:
    rendered = fixture_audits[named_key("llama31_tools")].rendered
    assert rendered is not None and "Today Date: 26 Jul 2024" in rendered


@pytest.mark.parametrize(
    ("name", "end_text", "expected"),
    [
        ("chatml", "<|im_end|>", True),
        ("llama2", "</s>", True),
        ("mistral", "</s>", True),
        ("llama3", "<|eot_id|>", True),
        ("deepseek_r1", "<｜end▁of▁sentence｜>", True),
        ("chatml", "</s>", False),
    ],
)
def test_template_ends_turn(fixture_audits: dict[str, TemplateAudit], name: str, end_text: str, expected: bool) -> None:
    assert template_ends_turn(fixture_audits[named_key(name)], end_text) is expected


def test_template_ends_turn_unknown_without_render() -> None:
    audit = TemplateAudit(KEY, "0" * 64, (), None, None)
    assert template_ends_turn(audit, "</s>") is None


#: Idioms of real chat templates, each of which must pass the static rule.
LEGIT_SNIPPETS = [
    "{{ messages[0]['content'] }}",
    "{% for message in messages %}{{ message['role'] }}{{ loop.index0 }}{% endfor %}",
    "{% set ns = namespace(found=false) %}{% for m in messages %}{% if m.role == 'system' %}"
    "{% set ns.found = true %}{% endif %}{% endfor %}{{ ns.found }}",
    "{{ tools|tojson }}{{ tools|tojson(indent=2) }}",
    "{{ raise_exception('Conversation roles must alternate') }}",
    "{{ strftime_now('%d %b %Y') }}",
    "{{ messages[0].content|trim }}",
    "{{ messages[-1].content.split('</think>')[-1].strip() }}",
    "{% if messages[0].content.startswith('x') %}{% endif %}",
    "{% for k, v in tools[0].items() %}{{ k }}{{ v }}{% endfor %}{{ tools[0].keys()|list }}",
    "{{ messages|selectattr('role', 'equalto', 'user')|list|length }}",
    "{{ messages|map(attribute='content')|join('\\n') }}",
    "{{ tools|map(attribute='function.name')|join(', ') }}",
    "{% for k, v in tools[0]|dictsort %}{{ k }}{% endfor %}",
    "{% for i in range(messages|length) %}{{ messages[i].content }}{% endfor %}",
    "{% for key in ['content', 'reasoning_content'] %}{{ messages[0][key] }}{% endfor %}",
    "{% set roles = {'user': 'Human', 'assistant': 'AI'} %}{% for m in messages %}{{ roles[m.role] }}{% endfor %}",
    "{% for k in tools[0] %}{{ tools[0][k] }}{% endfor %}",
    "{% set ns = namespace(idx=0) %}{% for m in messages %}{% set ns.idx = ns.idx + 1 %}{% endfor %}"
    "{{ messages[ns.idx - 1] }}",
    "{% set key = 'reasoning_content' if messages[0].reasoning_content is defined else 'content' %}"
    "{{ messages[0][key] }}",
    "{% macro render(m) %}{{ m['content'] }}{% endmacro %}{% for m in messages %}{{ render(m) }}{% endfor %}",
    "{{ '-' * 40 }}{{ '_' * 40 }}{{ '=' * 3 ~ ' system ' ~ '=' * 3 }}",
    "{% for m in messages %}{{ loop.cycle('odd', 'even') }}{% if loop.previtem %}{{ loop.previtem.role }}"
    "{% endif %}{% endfor %}",
    "{{ (messages|last).content }}{{ (messages|first)['role'] }}",
    "{% set x = cycler('a', 'b') %}{{ x.next() }}{% set j = joiner(', ') %}{{ j() }}",
    "{% generation %}{{ messages[0].content }}{% endgeneration %}",
    "{% for m in messages %}{% if loop.index > 3 %}{% break %}{% endif %}{% continue %}{% endfor %}",
    "{{ '%s: %s' % (messages[0].role, messages[0].content) }}{{ '%s'|format(messages[0].role) }}",
    "{{ messages[0].content|replace('\\n', ' ')|upper }}",
    "{% for c in messages[0].content %}{% if c.type == 'text' %}{{ c.text }}{% elif c['type'] == 'image' %}"
    "<image>{% endif %}{% endfor %}",
    "{{ messages|sort(attribute='role')|map(attribute='content')|first }}{{ messages|groupby('role')|list }}",
    "{% set d = dict(a=1, b=2) %}{{ d['a'] }}{% for k, v in d.items() %}{{ k }}{% endfor %}",
    "{% set messages = messages[1:] %}{% for m in messages %}{{ m['content'] }}{% endfor %}",
    "{% for name, fields in tools[0].function.parameters.properties|items %}{{ name }}: {{ fields.type }}{% endfor %}",
]


@pytest.mark.parametrize("source", LEGIT_SNIPPETS)
def test_legit_idioms_pass_the_static_rule(source: str) -> None:
    assert inspect_template_source(source) == []


# --- the corpus: every chat template in it -------------------------------------


def _corpus_templates() -> list[tuple[Path, str]]:
    found: list[tuple[Path, str]] = []
    for truth_path in truth_files():
        gguf_path = truth_path.with_name(truth_path.name.removesuffix(".truth.json"))
        for kv in truth(gguf_path)["kv"]:
            if kv["key"] == KEY or kv["key"].startswith(KEY + "."):
                found.append((gguf_path, kv["key"]))
    return found


CORPUS_TEMPLATES = _corpus_templates()


def test_corpus_has_chat_templates() -> None:
    # The models carry Llama 2's template, the phi-3 vocab file its own.
    assert len(CORPUS_TEMPLATES) >= 2


@pytest.fixture(scope="module")
def corpus_audits() -> dict[tuple[Path, str], tuple[TemplateAudit, str]]:
    """Each corpus template audited with the file's own BOS and EOS texts (distinct ones once)."""
    by_digest: dict[str, tuple[TemplateAudit, str]] = {}
    found: dict[tuple[Path, str], tuple[TemplateAudit, str]] = {}
    for path, key in CORPUS_TEMPLATES:
        reader = gguf.GGUFReader(path)
        # truth.json may shorten long strings; the file holds the whole template.
        source = str(reader.fields[key].contents())
        stored = next(kv["value"] for kv in truth(path)["kv"] if kv["key"] == key)
        assert source.startswith(stored[:200])
        digest = hashlib.sha256(source.encode("utf-8")).hexdigest()
        if digest not in by_digest:
            tokens = reader.fields["tokenizer.ggml.tokens"].contents()
            bos = tokens[int(reader.fields["tokenizer.ggml.bos_token_id"].contents())]
            eos = tokens[int(reader.fields["tokenizer.ggml.eos_token_id"].contents())]
            audits, _ = audit_templates({key: source}, bos_token=bos, eos_token=eos, limits=FAST)
            by_digest[digest] = (audits[0], eos)
        found[(path, key)] = by_digest[digest]
    return found


@pytest.mark.parametrize(("path", "key"), CORPUS_TEMPLATES, ids=[f"{p.name}:{k}" for p, k in CORPUS_TEMPLATES])
def test_corpus_template_is_clean(
    corpus_audits: dict[tuple[Path, str], tuple[TemplateAudit, str]], path: Path, key: str
) -> None:
    audit, eos = corpus_audits[(path, key)]
    assert [f for f in template_findings(audit) if f.severity == Severity.ERROR] == []
    assert template_findings(audit) == []
    assert audit.rendered is not None
    if "[INST]" in audit.rendered:
        # Llama 2 closes assistant turns with the EOS text. (phi-3's vocab file
        # does not: its template ends turns with <|end|>, its EOS is <|endoftext|>.)
        assert template_ends_turn(audit, eos) is True


# --- hostile templates: unsafe -----------------------------------------------

UNSAFE = {
    "direct": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "subscript_concat": "{{ ''['__cla' ~ 'ss__'] }}",
    "attr_plus": "{{ ''|attr('__cla' + 'ss__') }}",
    "reverse_filter": "{{ ''['__ssalc__'|reverse] }}",
    "reverse_slice": "{{ ''|attr('__ssalc__'[::-1]) }}",
    "str_format": "{{ ''|attr('{}class{}'.format('__', '__')) }}",
    "join": "{{ ''|attr(['__', 'class', '__']|join) }}",
    "replace": "{{ ''['XXclassXX'|replace('X', '_')] }}",
    "printf": "{{ ''['%c%cclass%c%c' % (95, 95, 95, 95)] }}",
    "format_filter": "{{ ''['%sclass%s'|format('__', '__')] }}",
    "repeat": "{{ ''['_' * 2 ~ 'class' ~ '_' * 2] }}",
    "set_then_use": "{% set n = '__cla' ~ 'ss__' %}{{ ''[n] }}",
    "set_block": "{% set n %}__class__{% endset %}{{ ''|attr(n) }}",
    "namespace_accumulator": "{% set ns = namespace(s='') %}{% for p in ['__', 'class', '__'] %}"
    "{% set ns.s = ns.s ~ p %}{% endfor %}{{ ''[ns.s] }}",
    "macro_argument": "{% macro get(o, n) %}{{ o[n] }}{% endmacro %}{{ get('', '__cla' ~ 'ss__') }}",
    "macro_output": "{% macro n() %}__class__{% endmacro %}{{ ''[n()] }}",
    "sorted_pieces": "{{ ''[('__', 'class', '__')|sort|join] }}",
    "message_attr": "{{ x|attr(messages[0].content) }}",
    "message_subscript": "{{ x[messages[0].content] }}",
    "loop_var_attr": "{% for m in messages %}{{ x|attr(m.content) }}{% endfor %}",
    "map_attribute": "{{ messages|map(attribute='__class__')|list }}",
    "map_attr_filter": "{{ messages|map('attr', '__class__')|list }}",
    "selectattr_computed": "{{ messages|selectattr(messages[0].content)|list }}",
    "format_field": "{{ '{0.__class__.__mro__}'.format(messages) }}",
    "generator_frame": "{{ (messages|map('string')).gi_frame.f_back.f_globals }}",
    "cycler_chain": "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "lipsum_globals": "{{ lipsum.__globals__ }}",
    "joiner_init": "{{ joiner.__init__ }}",
    "namespace_init": "{{ namespace.__init__.__globals__ }}",
    "self_context": "{{ self._TemplateReference__context }}",
    "range_class": "{{ range.__class__ }}",
    "builtins": "{{ __builtins__ }}",
    "config": "{{ config.items() }}",
    "request": "{{ request.application.__globals__ }}",
    "url_for": "{{ url_for.__globals__['os'] }}",
    "include": "{% include '/etc/passwd' %}",
    "import": "{% import 'x' as x %}",
    "cycle_gadget": "{% for i in range(2) %}"
    "{{ ''[loop.cycle('__cla', 'ss__') ~ loop.cycle('__cla', 'ss__')] }}{% endfor %}",
    "private": "{{ messages._private }}",
}


@pytest.fixture(scope="module")
def unsafe_audits() -> dict[str, TemplateAudit]:
    audits, _ = audit_templates({named_key(k): v for k, v in UNSAFE.items()}, limits=FAST)
    return by_key(audits)


@pytest.mark.parametrize("name", sorted(UNSAFE))
def test_hostile_template_is_unsafe(unsafe_audits: dict[str, TemplateAudit], name: str) -> None:
    assert inspect_template_source(UNSAFE[name]) != []
    audit = unsafe_audits[named_key(name)]
    unsafe = [f for f in audit.findings if f.code == Code.TEMPLATE_UNSAFE]
    assert unsafe
    for f in unsafe:
        assert f.severity == Severity.ERROR
        assert f.message.startswith(f"{named_key(name)}: ")
        assert "\n" not in f.message
    # The sandbox refusing the escape is the unsafe finding, not a second one.
    assert not any(f.code == Code.TEMPLATE_RENDER_ERROR and "SecurityError" in f.message for f in audit.findings)


@pytest.mark.parametrize(
    ("name", "named"),
    [
        ("direct", "'__class__'"),
        ("subscript_concat", "'__class__'"),
        ("reverse_filter", "'__class__'"),
        ("message_attr", "messages[0].content"),
        ("cycler_chain", "'__init__'"),
        ("generator_frame", "'gi_frame'"),
        ("self_context", "'_TemplateReference__context'"),
        ("namespace_accumulator", "'__'"),
    ],
)
def test_unsafe_message_names_the_value(unsafe_audits: dict[str, TemplateAudit], name: str, named: str) -> None:
    messages = [f.message for f in unsafe_audits[named_key(name)].findings if f.code == Code.TEMPLATE_UNSAFE]
    assert any(named in m and "line 1" in m for m in messages), messages


# --- hostile templates: denial of service --------------------------------------

#: Template and the limits that may stop it (on a loaded host the wall clock
#: can beat the CPU limit).
