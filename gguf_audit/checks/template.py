"""The chat-template audit: parse, inspect statically, render in a limited child process.

A GGUF file carries its chat templates as Jinja source in
``tokenizer.chat_template`` and ``tokenizer.chat_template.<name>``. llama.cpp
renders them with its own Jinja subset, but many runtimes render them with
Python's jinja2; one that forgets the sandbox (CVE-2024-34359 in
llama-cpp-python, the same again in SGLang in 2026) runs whatever Python the
template reaches. So every template is

1. parsed with the environment transformers uses (syntax errors are
   ``template.syntax_error``);
2. inspected statically, without rendering (``template.unsafe``, the rule
   below);
3. rendered, sandboxed, in a separate process with CPU, wall-clock, memory and
   output limits, on a standard conversation (``template.resource_limit``,
   ``template.render_error``). All templates of a file share one child.

The static rule
---------------
Jinja can only reach Python internals through attribute and item lookups, so
the inspection judges every *name that is looked up* (``x.NAME``,
``x[KEY]``, ``x|attr(NAME)``, the ``attribute=`` of ``map``, ``selectattr``,
``sort``, ``groupby``, ``sum``, ``join``, ``unique``, ``min``, ``max``, and the
fields of a constant ``str.format`` string). To know what a key can be at
render time it evaluates expressions abstractly: constants fold through
``~``, ``+``, ``*``, ``%``, ``|join``, ``|reverse``, ``[::-1]``, ``|replace``,
``|format``, ``.format()``, ``.join()``, ``|lower`` and the like (with size
bounds, never by running the template), names resolve through every
``set``, ``for``, ``with``, namespace attribute and macro argument that binds
them (flow-insensitively), and whatever comes from the render context
(``messages``, ``tools``, ...) is *runtime data*.

A template is unsafe when any of these holds:

* a looked-up name can be ``_``-prefixed (``__class__``,
  ``_TemplateReference__context``) or is a known escape step (``mro``,
  ``gi_frame``, ``f_back``, ``f_globals``, ``func_globals``, ``popen``, ``os``,
  ``eval``, ``exec``, ...): whether written plainly or assembled;
* a string built at render time from pieces that contain ``__`` or start
  with ``_`` is used as a lookup name, or any string-building expression
  folds to such an identifier;
* ``attr()`` or an ``attribute=`` name is not a constant (runtime data, a loop
  variable over data, a computed string): real templates never do this;
* a subscript key is runtime data itself (``x[msg.content]``,
  ``x[messages[0]['role']]``), except on a dict literal of the template (the
  ``{'string': 'str'}[type]`` lookup-table idiom);
* an attribute or item of a Jinja or Flask global is taken directly
  (``cycler.__init__``, ``lipsum.__globals__``, ``namespace.x``,
  ``self._TemplateReference__context``, ``config.items()``; ``self.BLOCK`` of a
  block the template defines is fine), or such a name (``config``,
  ``request``, ``url_for``, ``os``, ``getattr``, ``__builtins__``...) is read
  without the template binding it;
* ``{% include %}``, ``{% import %}``, ``{% extends %}`` (no chat template
  needs another file) or ``.format()`` on a runtime string.

Keys that stay fine: constants not ``_``-prefixed, integers and integer
arithmetic (``messages[loop.index0 - 1]``, ``messages[ns.last_index]``),
names bound to either, and loop variables (``for key in ['content', 'text']``,
``for k in d`` then ``d[k]``, ``for i in range(n)``; a loop variable over
runtime data indexing another value is accepted too: its keys come from the
caller's data, not from the template). ``namespace(...)`` assigned and then
``ns.x``, ``loop.*``, ``tojson``, ``raise_exception``, ``strftime_now`` and the
string methods (``.strip()``, ``.split()``, ``.items()``) are all ordinary.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import selectors
import signal
import string
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from jinja2 import TemplateSyntaxError, nodes

from gguf_audit.checks._template_worker import make_environment
from gguf_audit.errors import GGUFAuditError
from gguf_audit.findings import Finding, finding

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_TEMPLATE_CHARS",
    "MAX_TOTAL_TEMPLATE_CHARS",
    "TAIL_CHARS",
    "TEMPLATE_MISSING",
    "TEMPLATE_RENDER_ERROR",
    "TEMPLATE_RESOURCE_LIMIT",
    "TEMPLATE_SYNTAX_ERROR",
    "TEMPLATE_UNSAFE",
    "TemplateAudit",
    "TemplateInspectionError",
    "TemplateLimits",
    "TemplateWorkerError",
    "audit_templates",
    "inspect_template_source",
    "standard_conversations",
    "template_ends_turn",
]

# refused=False for all: llama.cpp loads a file whatever its template says.
TEMPLATE_SYNTAX_ERROR: Final = "template.syntax_error"
TEMPLATE_UNSAFE: Final = "template.unsafe"
TEMPLATE_RESOURCE_LIMIT: Final = "template.resource_limit"
TEMPLATE_RENDER_ERROR: Final = "template.render_error"
TEMPLATE_MISSING: Final = "template.missing"

#: Templates longer than this are not parsed or rendered. Real chat templates
#: are a few kB (the largest known, with tool-use prose, are under 40 kB); a
#: megabyte of Jinja is an attack on the parser, which runs in this process.
MAX_TEMPLATE_CHARS: Final = 1_000_000
#: Template characters parsed per file. Parsing and inspecting a megabyte of
#: Jinja takes this process about 4 s, and a file may carry any number of
#: ``tokenizer.chat_template.<name>`` keys; past this the rest are not judged.
MAX_TOTAL_TEMPLATE_CHARS: Final = 2_000_000
#: Characters of the rendered conversation kept in ``TemplateAudit.rendered_tail``.
TAIL_CHARS: Final = 200
#: Unsafe reasons reported per template; past this the template is judged anyway.
_MAX_REASONS: Final = 20
#: How long the child may take to start (import jinja2, lock itself down)
#: before the audit gives up. Generous: slow CI hosts are not the template's fault.
_STARTUP_SECONDS: Final = 30.0
#: Time the parent allows past a template's wall limit before killing the child
#: (the child's own timer fires first; this covers writing its answer).
_WALL_GRACE_SECONDS: Final = 1.0


@dataclass(frozen=True, slots=True)
class TemplateLimits:
    """Hard limits for rendering one template in the child process."""

    cpu_seconds: float = 2.0
    wall_seconds: float = 5.0
    memory_bytes: int = 256 * 1024 * 1024
    """The child's whole address space (``RLIMIT_AS``); the interpreter and jinja2 take ~30 MB of it."""
    output_chars: int = 1_000_000

    def __post_init__(self) -> None:
        for name in ("cpu_seconds", "wall_seconds"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value <= 3600:
                raise ValueError(f"{name} must be a number of seconds in (0, 3600]. Got {value!r}.")
        if not isinstance(self.memory_bytes, int) or self.memory_bytes < 64 * 1024 * 1024:
            raise ValueError(f"memory_bytes must be an int of at least 64 MiB. Got {self.memory_bytes!r}.")
        if not isinstance(self.output_chars, int) or self.output_chars < TAIL_CHARS:
            raise ValueError(f"output_chars must be an int of at least {TAIL_CHARS}. Got {self.output_chars!r}.")


DEFAULT_LIMITS: Final = TemplateLimits()


@dataclass(frozen=True, slots=True)
class TemplateAudit:
    """The audit of one chat template."""

    key: str
    """``tokenizer.chat_template`` or ``tokenizer.chat_template.<name>``."""
    digest: str
    """sha256 hex of the template's UTF-8 bytes."""
    findings: tuple[Finding, ...]
    rendered_tail: str | None
    """The last ``TAIL_CHARS`` characters of the standard conversation as rendered
    (``add_generation_prompt=False``); None if it was not rendered."""
    rendered: str | None
    """The full render (at most ``output_chars``); None if not rendered."""
    conversation: str | None = None
    """Which standard conversation rendered (``full``, ``no_tools``, ``no_system``,
    ``single_turn``); the first ones a template rejects are skipped."""


class TemplateInspectionError(GGUFAuditError, ValueError):
    """The template's expressions are nested or interlinked past what the inspection follows."""


class TemplateWorkerError(GGUFAuditError, RuntimeError):
    """The render child could not be started or spoke nonsense (not the template's fault)."""


# --- the standard conversations ----------------------------------------------


def standard_conversations(bos_token: str = "", eos_token: str = "") -> list[tuple[str, dict[str, object]]]:
    """The render contexts, from the full conversation to the simplest, in the order tried.

    Many real templates reject a system or tool role (``raise_exception``), so
    a template only fails the audit when even ``single_turn`` does not render.
    """
    system = {"role": "system", "content": "You are a helpful assistant."}
    user1 = {"role": "user", "content": "Hello! Who are you?"}
    assistant1 = {"role": "assistant", "content": "I am an assistant. How can I help?"}
    user2 = {"role": "user", "content": "What is the weather in Paris?"}
    # A 9-character alphanumeric id: Mistral's templates raise on any other shape.
    call_id = "call0abc1"
    tool_call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": "get_weather", "arguments": {"city": "Paris"}},
            }
        ],
    }
    tool_result = {
        "role": "tool",
        "tool_call_id": call_id,
        "name": "get_weather",
        "content": '{"temperature": 18, "unit": "celsius"}',
    }
    final = {"role": "assistant", "content": "It is 18 degrees Celsius in Paris."}
    assistant2 = {"role": "assistant", "content": "Let me check: it is sunny in Paris."}
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Get the current weather in a city.",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string", "description": "The city's name."}},
                    "required": ["city"],
                },
            },
        }
    ]
    base: dict[str, object] = {"bos_token": bos_token, "eos_token": eos_token, "add_generation_prompt": False}
    return [
        (
            "full",
            {**base, "tools": tools, "messages": [system, user1, assistant1, user2, tool_call, tool_result, final]},
        ),
        ("no_tools", {**base, "messages": [system, user1, assistant1, user2, assistant2]}),
        ("no_system", {**base, "messages": [user1, assistant1, user2, assistant2]}),
        ("single_turn", {**base, "messages": [user1, assistant1]}),
    ]


# --- static inspection ---------------------------------------------------------

#: Attribute names that lead from ordinary objects to frames, code, globals or
#: the OS without any underscore: generator frames (``(x|map('e')).gi_frame``)
#: and the Python 2 spellings, plus the usual targets at the end of a chain.
_ESCAPE_NAMES: Final = frozenset(
    {
        "mro",
        "func_globals",
        "func_code",
        "func_closure",
        "func_defaults",
        "f_globals",
        "f_locals",
        "f_builtins",
        "f_back",
        "f_code",
        "f_trace",
        "gi_frame",
        "gi_code",
        "gi_yieldfrom",
        "cr_frame",
        "cr_code",
        "cr_await",
        "ag_frame",
        "ag_code",
        "ag_await",
        "tb_frame",
        "tb_next",
        "co_code",
        "co_consts",
        "co_names",
        "im_func",
        "im_self",
        "im_class",
        "popen",
        "subprocess",
        "os",
        "eval",
        "exec",
        "execfile",
        "import_module",
        "builtins",
        "getattr",
        "setattr",
        "delattr",
        "globals",
        "locals",
        "environ",
    }
)
#: Escape names that are unusual enough to count inside assembled strings too.
_ESCAPE_PIECES: Final = tuple(sorted(n for n in _ESCAPE_NAMES if "_" in n))
#: Jinja and Flask globals whose own attributes lead to ``__globals__``; chat
#: templates call some of them (``namespace(...)``, ``range(n)``) but never
#: look inside them.
_GADGETS: Final = frozenset(
    {
        "cycler",
        "joiner",
        "namespace",
        "lipsum",
        "range",
        "dict",
        "self",
        "raise_exception",
        "strftime_now",
        "config",
        "request",
        "session",
        "g",
        "url_for",
        "get_flashed_messages",
    }
)
#: Names no chat template reads unless it binds them itself: Flask's globals
#: (``{{ config }}`` is the classic SSTI leak) and the Python escape targets.
_FORBIDDEN_FREE: Final = frozenset(
    {
        "config",
        "request",
        "session",
        "url_for",
        "get_flashed_messages",
        "os",
        "sys",
        "subprocess",
        "builtins",
        "importlib",
        "eval",
        "exec",
        "compile",
        "getattr",
        "setattr",
        "delattr",
        "globals",
        "locals",
        "vars",
        "open",
        "popen",
        "breakpoint",
    }
)
#: Jinja globals (not context data) that the evaluator knows by name.
_JINJA_GLOBALS: Final = frozenset(
    {"range", "dict", "lipsum", "cycler", "joiner", "namespace", "raise_exception", "strftime_now"}
)
#: Filters that look up an attribute named by an argument: position of that
#: argument (None: keyword only) — ``map`` is handled on its own.
_ATTRIBUTE_FILTERS: Final[Mapping[str, int | None]] = {
    "selectattr": 0,
    "rejectattr": 0,
    "groupby": 0,
    "sum": 0,
    "sort": 2,
    "unique": 1,
    "min": 1,
    "max": 1,
    "join": 1,
}
#: Names the render context supplies (transformers' apply_chat_template and
#: its usual keyword arguments). A template that rebinds one
#: (``set messages = messages[1:]``) still starts from the caller's data.
_CONTEXT_NAMES: Final = frozenset(
    {
        "messages",
        "tools",
        "documents",
        "bos_token",
        "eos_token",
        "add_generation_prompt",
        "custom_tools",
        "tools_in_user_message",
        "builtin_tools",
        "date_string",
        "enable_thinking",
        "reasoning_effort",
        "continue_final_message",
    }
)
_LOOP_NUMBERS: Final = frozenset({"index", "index0", "revindex", "revindex0", "length", "depth", "depth0"})
_STR_METHODS: Final = frozenset(
    {"upper", "lower", "strip", "lstrip", "rstrip", "title", "capitalize", "swapcase", "casefold"}
)
_NUMERIC_FILTERS: Final = frozenset({"length", "count", "int", "float", "abs", "round", "wordcount", "filesizeformat"})
_PRIVATE_RE: Final = re.compile(r"_+[A-Za-z0-9]")
_PRIVATE_IDENT_RE: Final = re.compile(r"_+[A-Za-z][A-Za-z0-9_]*")
_PRINTF_RE: Final = re.compile(r"%(?:%|[#0\- +]*\d{0,2}(?:\.\d{0,2})?[diouxXeEfFgGcrsa])")
_FORMAT_SPEC_RE: Final = re.compile(r"(?:.?[<>=^])?[+\- ]?#?0?\d{0,2}[,_]?(?:\.\d{0,2})?[bcdeEfFgGnosxX%]?")

#: Bounds on the abstract evaluation. Folded strings longer than this are
#: treated as unknown; so are sets of more possible values. Both keep a
#: hostile template from making the inspection itself slow or large.
_MAX_FOLD_CHARS: Final = 256
_MAX_VALUES: Final = 64
_MAX_DEPTH: Final = 150
_MAX_STEPS: Final = 400_000
_MAX_SMALL_INT: Final = 2**64

# Abstract values are frozensets of atoms (tuples whose first item says the kind):
#   ("c", scalar)         a known str / int / float / bool / None
#   ("t", tuple)          a known tuple of scalars
#   ("seq", value)        a sequence whose elements are `value`
#   ("map", pairs)        a dict literal: ((key value, item value), ...)
#   ("pair", k, v)        an item of `.items()`
#   ("num",)              some number
#   ("data",)             runtime data (messages, tools, objects)
#   ("elem",)             a loop variable over runtime data
#   ("built", piece)      a string built at render time; `piece` is a
#                         suspicious constant that went into it ("" for none)
#   ("loop",)             Jinja's loop object
_Atom = tuple[object, ...]
_Value = frozenset[_Atom]

_NUM: Final[_Atom] = ("num",)
_DATA: Final[_Atom] = ("data",)
_ELEM: Final[_Atom] = ("elem",)
_BUILT: Final[_Atom] = ("built", "")
_LOOP: Final[_Atom] = ("loop",)
_DATA_V: Final[_Value] = frozenset({_DATA})
_NUM_V: Final[_Value] = frozenset({_NUM})
_BOOL_V: Final[_Value] = frozenset({("c", True), ("c", False)})
_NONE_V: Final[_Value] = frozenset({("c", None)})


class _TooComplex(Exception):
    pass


def _const(value: object) -> _Value:
    return frozenset({("c", value)})


def _is_unsafe_name(name: str) -> bool:
    """A lookup name that reaches internals: ``_``-prefixed, or a known escape step."""
    return _PRIVATE_RE.match(name) is not None or name in _ESCAPE_NAMES


def _is_unsafe_identifier(text: str) -> bool:
    return any(_PRIVATE_IDENT_RE.fullmatch(part) is not None or part in _ESCAPE_NAMES for part in text.split("."))


def _is_suspicious_piece(piece: str) -> bool:
    """A constant that, glued to others at render time, can make a private name."""
    return "__" in piece or piece.startswith("_") or any(p in piece for p in _ESCAPE_PIECES)


def _short(piece: str) -> str:
    if len(piece) <= 64:
        return piece
    at = max(piece.find("__"), 0)
    return piece[max(0, at - 8) : at + 56]


def _src(node: nodes.Node | None, depth: int = 0) -> str:
    """A compact rendering of an expression for messages."""
    if node is None:
        return "none"
    if depth > 6:
        return "..."
    text: str
    if isinstance(node, nodes.Name):
        text = node.name
    elif isinstance(node, nodes.Const):
        text = repr(node.value)
    elif isinstance(node, nodes.Getattr):
        text = f"{_src(node.node, depth + 1)}.{node.attr}"
    elif isinstance(node, nodes.Getitem):
        text = f"{_src(node.node, depth + 1)}[{_src(node.arg, depth + 1)}]"
    elif isinstance(node, nodes.Slice):
        text = ":".join("" if p is None else _src(p, depth + 1) for p in (node.start, node.stop, node.step))
    elif isinstance(node, nodes.Call):
        text = f"{_src(node.node, depth + 1)}(...)"
    elif isinstance(node, nodes.Filter):
        text = f"{_src(node.node, depth + 1)}|{node.name}"
    elif isinstance(node, nodes.Concat):
        text = " ~ ".join(_src(n, depth + 1) for n in node.nodes)
    elif isinstance(node, nodes.BinExpr):
        text = f"{_src(node.left, depth + 1)} {node.operator} {_src(node.right, depth + 1)}"
    else:
        text = f"<{type(node).__name__.lower()}>"
    return text if len(text) <= 80 else text[:77] + "..."


@dataclass(eq=False, slots=True)
class _FromExpr:
    node: nodes.Node


@dataclass(eq=False, slots=True)
class _FromElements:
    node: nodes.Node


@dataclass(eq=False, slots=True)
class _FromUnpack:
    node: nodes.Node
    index: int
    count: int
    elements: bool
    """True for a ``for`` target (unpack each element), False for ``set a, b = ...``."""


@dataclass(eq=False, slots=True)
class _FromParam:
    macro: str
    index: int
    name: str
    default: nodes.Expr | None


@dataclass(eq=False, slots=True)
class _FromBlock:
    body: list[nodes.Node]


@dataclass(eq=False, slots=True)
class _Opaque:
    pass


_Source = _FromExpr | _FromElements | _FromUnpack | _FromParam | _FromBlock | _Opaque


def _kwargs(node: nodes.Call | nodes.Filter) -> list[tuple[str, nodes.Expr]]:
    """Keyword arguments as (name, value). jinja2 types Filter.kwargs as Pairs; the parser makes Keywords."""
    pairs: list[tuple[str, nodes.Expr]] = []
    for kw in node.kwargs:
        key, value = getattr(kw, "key", None), getattr(kw, "value", None)
        if isinstance(key, str) and isinstance(value, nodes.Expr):
            pairs.append((key, value))
    return pairs


def _walk(root: nodes.Node) -> Iterator[nodes.Node]:
    """Every node under ``root``, iteratively (filter chains can be thousands deep)."""
    stack: list[nodes.Node] = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.iter_child_nodes())


class _Inspector:
    """Abstract evaluation of one parsed template, then the unsafe-lookup checks."""

    def __init__(self, tree: nodes.Template) -> None:
        self.tree = tree
        self.bindings: dict[str, list[_Source]] = {}
        self.ns_bindings: dict[tuple[str, str], list[nodes.Node]] = {}
        self.macros: dict[str, nodes.Macro] = {}
        self.macro_calls: dict[str, list[nodes.Call]] = {}
        self.macro_values: set[str] = set()
        self.blocks: set[str] = set()
        self.reasons: list[str] = []
        self._seen_reasons: set[str] = set()
        self._memo: dict[int, _Value] = {}
        self._name_memo: dict[tuple[str, ...], _Value] = {}
        self._active: set[tuple[str, ...]] = set()
        self._depth = 0
        self._steps = 0
        self._collect()

    # -- binding collection

    def _bind(self, name: str, source: _Source) -> None:
        self.bindings.setdefault(name, []).append(source)

    def _bind_target(self, target: nodes.Node, node: nodes.Node, *, elements: bool) -> None:
        if isinstance(target, nodes.Name):
            self._bind(target.name, _FromElements(node) if elements else _FromExpr(node))
        elif isinstance(target, nodes.Tuple):
            count = len(target.items)
            for index, item in enumerate(target.items):
                if isinstance(item, nodes.Name):
                    self._bind(item.name, _FromUnpack(node, index, count, elements))
                else:
                    for name in item.find_all(nodes.Name):
                        self._bind(name.name, _Opaque())
        elif isinstance(target, nodes.NSRef):
            self.ns_bindings.setdefault((target.name, target.attr), []).append(node)

    def _collect(self) -> None:
        callees: set[int] = set()
        loads: list[nodes.Name] = []
        for node in _walk(self.tree):
            if isinstance(node, nodes.Assign):
                self._bind_target(node.target, node.node, elements=False)
                if (
                    isinstance(node.target, nodes.Name)
                    and isinstance(node.node, nodes.Call)
                    and isinstance(node.node.node, nodes.Name)
                    and node.node.node.name == "namespace"
                ):
                    for kw in node.node.kwargs:
                        self.ns_bindings.setdefault((node.target.name, kw.key), []).append(kw.value)
                    for arg in node.node.args:
                        if isinstance(arg, nodes.Dict):
                            for pair in arg.items:
                                if isinstance(pair.key, nodes.Const) and isinstance(pair.key.value, str):
                                    key = (node.target.name, pair.key.value)
                                    self.ns_bindings.setdefault(key, []).append(pair.value)
            elif isinstance(node, nodes.AssignBlock):
                if isinstance(node.target, nodes.Name):
                    self._bind(node.target.name, _FromBlock(node.body) if node.filter is None else _Opaque())
                elif isinstance(node.target, nodes.NSRef):
                    self.ns_bindings.setdefault((node.target.name, node.target.attr), [])
            elif isinstance(node, nodes.For):
                self._bind_target(node.target, node.iter, elements=True)
            elif isinstance(node, nodes.Macro):
                self.macros[node.name] = node
                offset = len(node.args) - len(node.defaults)
                for index, arg in enumerate(node.args):
                    default = node.defaults[index - offset] if index >= offset else None
                    self._bind(arg.name, _FromParam(node.name, index, arg.name, default))
                for implicit in ("varargs", "kwargs", "caller"):
                    self._bind(implicit, _Opaque())
            elif isinstance(node, nodes.CallBlock):
                for arg in node.args:
                    self._bind(arg.name, _Opaque())
            elif isinstance(node, nodes.With):
                for target, value in zip(node.targets, node.values, strict=False):
                    self._bind_target(target, value, elements=False)
            elif isinstance(node, nodes.Import):
                self._bind(node.target, _Opaque())
            elif isinstance(node, nodes.FromImport):
                for entry in node.names:
                    self._bind(entry[1] if isinstance(entry, tuple) else entry, _Opaque())
            elif isinstance(node, nodes.Block):
                self.blocks.add(node.name)
            elif isinstance(node, nodes.Call) and isinstance(node.node, nodes.Name):
                self.macro_calls.setdefault(node.node.name, []).append(node)
                callees.add(id(node.node))
            elif isinstance(node, nodes.Name) and node.ctx == "load":
                loads.append(node)
        # A macro passed around as a value can be called with anything.
        self.macro_values = {n.name for n in loads if n.name in self.macros and id(n) not in callees}

    def is_free(self, name: str) -> bool:
        """Read from the render context or Jinja's globals, never bound by the template."""
        return name not in self.bindings and name not in self.macros and name != "loop"

    # -- abstract evaluation

    def value(self, node: nodes.Node | None) -> _Value:
        if node is None:
            return _NONE_V
        key = id(node)
        cached = self._memo.get(key)
        if cached is not None:
            return cached
        self._steps += 1
        if self._steps > _MAX_STEPS:
            raise _TooComplex(f"more than {_MAX_STEPS} evaluation steps")
        self._depth += 1
        if self._depth > _MAX_DEPTH:
            raise _TooComplex(f"expressions nested deeper than {_MAX_DEPTH} at line {node.lineno}")
        try:
            result = self._bound(self._evaluate(node))
        finally:
            self._depth -= 1
        self._memo[key] = result
        return result

    def _bound(self, value: _Value) -> _Value:
        if len(value) <= _MAX_VALUES:
            return value
        return _unknown(value)

    def _resolve(self, key: tuple[str, ...], sources: Sequence[_Source | nodes.Node]) -> _Value:
        cached = self._name_memo.get(key)
        if cached is not None:
            return cached
        if key in self._active:
            # A name defined from itself (``set ns.s = ns.s ~ p``): some string
            # built from the other pieces; those still carry their pieces.
            return frozenset({_BUILT})
        self._active.add(key)
        self._depth += 1
        if self._depth > _MAX_DEPTH:
            raise _TooComplex(f"names defined through more than {_MAX_DEPTH} steps ({key[-1]!r})")
        try:
            result: set[_Atom] = set()
            for source in sources:
                result |= self._source_value(source) if not isinstance(source, nodes.Node) else self.value(source)
        finally:
            self._depth -= 1
            self._active.discard(key)
        value = self._bound(frozenset(result))
        self._name_memo[key] = value
        return value

    def _source_value(self, source: _Source) -> _Value:
        if isinstance(source, _FromExpr):
            return self.value(source.node)
        if isinstance(source, _FromElements):
            return self._elements(source.node)
        if isinstance(source, _FromUnpack):
            return self._unpack(source)
        if isinstance(source, _FromParam):
            return self._param(source)
        if isinstance(source, _FromBlock):
            return self._block(source.body)
        return _DATA_V

    def _name(self, name: str) -> _Value:
        if name == "loop" and "loop" not in self.bindings:
            return frozenset({_LOOP})
        sources = self.bindings.get(name)
        if sources is None:
            return _DATA_V
        value = self._resolve(("name", name), sources)
        return value | _DATA_V if name in _CONTEXT_NAMES else value

    def _param(self, source: _FromParam) -> _Value:
        calls = self.macro_calls.get(source.macro, [])
        if source.macro in self.macro_values or not calls:
            return _DATA_V
        parts: list[_Value] = []
        for call in calls:
            if call.dyn_args is not None or call.dyn_kwargs is not None:
                return _DATA_V
            if source.index < len(call.args):
                parts.append(self.value(call.args[source.index]))
                continue
            for kw in call.kwargs:
                if kw.key == source.name:
                    parts.append(self.value(kw.value))
                    break
            else:
                parts.append(self.value(source.default) if source.default is not None else _NONE_V)
        return frozenset().union(*parts)

    def _block(self, body: Sequence[nodes.Node]) -> _Value:
        """``{% set x %}...{% endset %}``: the text, when it is all constant."""
        outputs = [n for n in body if isinstance(n, nodes.Output)]
        if len(outputs) == len(body):
            return self._concat([child for out in outputs for child in out.nodes])
        strings: list[_Value] = [self.value(n) for stmt in body for n in _walk(stmt) if isinstance(n, nodes.Expr)]
        return _unknown(*strings)

    def _macro_output(self, name: str) -> _Value:
        """What a macro call returns: its text, carrying the pieces of the macro's constants."""
        parts = [self.value(n) for n in _walk(self.macros[name]) if isinstance(n, nodes.Const | nodes.TemplateData)]
        return _DATA_V | _unknown(*parts)

    def _elements(self, node: nodes.Node) -> _Value:
        callee = node.node if isinstance(node, nodes.Call) else None
        if isinstance(callee, nodes.Name) and callee.name == "range" and self.is_free("range"):
            return _NUM_V
        return _elements_of(self.value(node))

    def _unpack(self, source: _FromUnpack) -> _Value:
        node = source.node
        if not source.elements and isinstance(node, nodes.Tuple | nodes.List):
            if len(node.items) == source.count:
                return self.value(node.items[source.index])
            return _DATA_V
        items = self._elements(node) if source.elements else self.value(node)
        result: set[_Atom] = set()
        for atom in items:
            kind = atom[0]
            if kind == "t" and isinstance(atom[1], tuple) and len(atom[1]) == source.count:
                result.add(("c", atom[1][source.index]))
            elif kind == "pair" and source.count == 2:
                part = atom[1 + source.index]
                if isinstance(part, frozenset):
                    result |= part
            elif kind == "seq" and isinstance(atom[1], frozenset):
                result |= atom[1]
            elif kind in ("c", "num"):
                result.add(_ELEM)
            else:
                result |= _unknown(frozenset({atom})) | {_ELEM}
        return frozenset(result)

    def _concat(self, parts: Sequence[nodes.Node]) -> _Value:
        acc: _Value = _const("")
        for part in parts:
            acc = _fold_pairs(acc, self.value(part), _concat_pair)
        return acc

    def _evaluate(self, node: nodes.Node) -> _Value:
        if isinstance(node, nodes.Const):
            value = node.value
            if isinstance(value, str | int | float | bool) or value is None:
                return _const(value)
            return _DATA_V
        if isinstance(node, nodes.TemplateData):
            return _const(node.data)
        if isinstance(node, nodes.Name):
            return self._name(node.name)
        if isinstance(node, nodes.List | nodes.Tuple):
            return _sequence([self.value(item) for item in node.items])
        if isinstance(node, nodes.Dict):
            return frozenset({("map", tuple((self.value(p.key), self.value(p.value)) for p in node.items))})
        if isinstance(node, nodes.Concat):
            return self._concat(node.nodes)
        if isinstance(node, nodes.CondExpr):
            return self.value(node.expr1) | self.value(node.expr2)
        if isinstance(node, nodes.And | nodes.Or):
            return self.value(node.left) | self.value(node.right)
        if isinstance(node, nodes.Compare | nodes.Not | nodes.Test):
            return _BOOL_V
        if isinstance(node, nodes.MarkSafe | nodes.MarkSafeIfAutoescape):
            return self.value(node.expr)
        if isinstance(node, nodes.BinExpr):
            return self._binary(node)
        if isinstance(node, nodes.Neg | nodes.Pos):
            negate = isinstance(node, nodes.Neg)
            result: set[_Atom] = set()
            for atom in self.value(node.node):
                number = atom[1] if atom[0] == "c" else None
                if isinstance(number, int | float) and not isinstance(number, bool):
                    result.add(("c", -number if negate else number))
                else:
                    result.add(_NUM)
            return frozenset(result)
        if isinstance(node, nodes.Getattr):
            return self._getattr(node)
        if isinstance(node, nodes.Getitem):
            return self._getitem(node)
        if isinstance(node, nodes.Filter):
            return self._filter(node)
        if isinstance(node, nodes.Call):
            return self._call(node)
        if isinstance(node, nodes.Slice):
            return _DATA_V
        return _DATA_V

    def _binary(self, node: nodes.BinExpr) -> _Value:
        left, right = self.value(node.left), self.value(node.right)
        op = node.operator
        if op in ("+", "*", "%"):
            return _fold_pairs(left, right, lambda a, b: _arith_pair(op, a, b))
        if _numeric(left) and _numeric(right):
            return _NUM_V
        return _unknown(left, right)

    def _getattr(self, node: nodes.Getattr) -> _Value:
        if isinstance(node.node, nodes.Name):
            # ``ns.x`` of ``set ns = namespace(x=...)`` / ``set ns.x = ...``.
            sources = self.ns_bindings.get((node.node.name, node.attr))
            if sources is not None:
                return self._resolve(("ns", node.node.name, node.attr), sources)
        result: set[_Atom] = set()
        for atom in self.value(node.node):
            if atom == _LOOP:
                if node.attr in _LOOP_NUMBERS:
                    result.add(_NUM)
                elif node.attr in ("first", "last"):
                    result |= _BOOL_V
                else:
                    result.add(_DATA)
            elif atom[0] == "map":
                result |= _lookup(atom, _const(node.attr))
            else:
                result |= _unknown(frozenset({atom}))
        return frozenset(result) if result else _DATA_V

    def _getitem(self, node: nodes.Getitem) -> _Value:
        base = self.value(node.node)
        if isinstance(node.arg, nodes.Slice):
            bounds = [
                self.value(p) if p is not None else _NONE_V for p in (node.arg.start, node.arg.stop, node.arg.step)
            ]
            return _slice(base, bounds)
        key = self.value(node.arg)
        result: set[_Atom] = set()
        for atom in base:
            if atom[0] == "map":
                result |= _lookup(atom, key)
            elif atom[0] in ("c", "t"):
                result |= _index(atom, key)
            elif atom[0] == "seq" and isinstance(atom[1], frozenset):
                result |= atom[1]
            else:
                result |= _unknown(frozenset({atom}))
        return frozenset(result) if result else _DATA_V

    def _args(self, node: nodes.Call | nodes.Filter) -> list[_Value]:
        values = [self.value(a) for a in node.args]
        values += [self.value(value) for _key, value in _kwargs(node)]
        if node.dyn_args is not None:
            values.append(self.value(node.dyn_args))
        if node.dyn_kwargs is not None:
            values.append(self.value(node.dyn_kwargs))
        return values

    def _call(self, node: nodes.Call) -> _Value:
        callee = node.node
        args = self._args(node)
        if isinstance(callee, nodes.Name):
            name = callee.name
            if name in self.macros and name not in self.bindings:
                return self._macro_output(name)
            if self.is_free(name):
                if name == "range":
                    return frozenset({("seq", _NUM_V)})
                if name == "dict":
                    return frozenset({("map", tuple((_const(kw.key), self.value(kw.value)) for kw in node.kwargs))})
            return _unknown(*args) | _DATA_V
        if isinstance(callee, nodes.Getattr):
            receiver = self.value(callee.node)
            method = callee.attr
            if _LOOP in receiver and method == "cycle":
                return frozenset().union(*args) if args else _DATA_V
            folded = _call_method(receiver, method, node, [self.value(a) for a in node.args])
            if folded is not None:
                return folded
            return _unknown(receiver, *args)
        return _unknown(self.value(callee), *args)

    def _filter(self, node: nodes.Filter) -> _Value:
        subject = self.value(node.node) if node.node is not None else _DATA_V
        args = [self.value(a) for a in node.args]
        kwargs = {key: self.value(value) for key, value in _kwargs(node)}
        name = node.name
        if name in _NUMERIC_FILTERS:
            return _NUM_V
        if name in ("default", "d"):
            return subject | (args[0] if args else _const(""))
        if name in ("string", "e", "escape", "safe", "forceescape"):
            return frozenset(("c", _str_of(a)) if a[0] == "c" and _str_of(a) is not None else a for a in subject)
        if name in ("lower", "upper", "trim", "title", "capitalize"):
            method = {"trim": "strip"}.get(name, name)
            return _map_strings(subject, lambda s: str(getattr(s, method)()))
        if name == "reverse":
            return _reverse(subject)
        if name == "list":
            return _listify(subject)
        if name in ("first", "last"):
            picked = _index_all(subject, 0 if name == "first" else -1)
            return picked if picked is not None else _unknown(subject)
        if name == "join" and "attribute" not in kwargs and node.dyn_args is None and node.dyn_kwargs is None:
            delimiter = args[0] if args else kwargs.get("d", _const(""))
            return _join(subject, delimiter)
        if name == "replace" and 2 <= len(args) <= 3 and not kwargs:
            return _replace(subject, args[0], args[1])
        if name == "format" and not kwargs:
            return _printf(subject, _sequence(args) if len(args) != 1 else args[0])
        if name in ("items", "dictsort"):
            return frozenset({("seq", frozenset(_items(subject)))})
        return _unknown(subject, *args, *kwargs.values(), reverse=name in ("sort", "unique"))

    # -- the checks

    def _reason(self, node: nodes.Node, text: str) -> None:
        full = f"line {node.lineno}: {text}"
        if full not in self._seen_reasons and len(self.reasons) < _MAX_REASONS:
            self._seen_reasons.add(full)
            self.reasons.append(full)

    def _check_lookup_name(
        self, node: nodes.Node, value: _Value, what: str, *, constant_only: bool, dotted: bool
    ) -> None:
        """Judge a name an attribute lookup will use (``attr()``, ``attribute=``)."""
        for atom in value:
            kind = atom[0]
            if kind == "c":
                if isinstance(atom[1], str):
                    parts = atom[1].split(".") if dotted else [atom[1]]
                    for part in parts:
                        if _is_unsafe_name(part):
                            self._reason(node, f"{what} {part!r}")
            elif kind == "built":
                piece = atom[1]
                if isinstance(piece, str) and piece and _is_suspicious_piece(piece):
                    self._reason(node, f"{what} assembled at render time from {piece!r}")
                elif constant_only and not piece:
                    self._reason(node, f"{what} computed at render time")
            elif kind in ("data", "elem") and constant_only:
                self._reason(node, f"{what} taken from runtime value {_src(node)}")

    def _check_key(self, node: nodes.Getitem) -> None:
        key = self.value(node.arg)
        data = False
        for atom in key:
            kind = atom[0]
            if kind == "c" and isinstance(atom[1], str) and _is_unsafe_name(atom[1]):
                self._reason(node, f"subscript {atom[1]!r} of {_src(node.node)}")
            elif kind == "built" and isinstance(atom[1], str) and atom[1] and _is_suspicious_piece(atom[1]):
                self._reason(node, f"subscript of {_src(node.node)} assembled at render time from {atom[1]!r}")
            elif kind == "data":
                data = True
        if data:
            base = self.value(node.node)
            table = bool(base) and all(a[0] == "map" for a in base)
            if not table:
                self._reason(node, f"subscript of {_src(node.node)} by runtime value {_src(node.arg)}")

    def _check_gadget(self, node: nodes.Getattr | nodes.Getitem) -> None:
        base = node.node
        if not isinstance(base, nodes.Name) or not self.is_free(base.name) or base.name not in _GADGETS:
            return
        if base.name == "self" and isinstance(node, nodes.Getattr) and node.attr in self.blocks:
            return
        what = node.attr if isinstance(node, nodes.Getattr) else _src(node.arg)
        self._reason(node, f"attribute {what!r} of the global {base.name!r}")

    def _check_filter(self, node: nodes.Filter) -> None:
        name = node.name
        dynamic = node.dyn_args is not None or node.dyn_kwargs is not None
        if name == "attr":
            target = node.args[0] if node.args else next((v for k, v in _kwargs(node) if k == "name"), None)
            if target is None or dynamic:
                self._reason(node, "attr() with computed arguments")
                return
            self._check_lookup_name(target, self.value(target), "attr() name", constant_only=True, dotted=False)
            return
        if name == "map":
            self._check_map(node, dynamic)
            return
        position = _ATTRIBUTE_FILTERS.get(name, -1)
        if position == -1:
            return
        if dynamic:
            self._reason(node, f"{name}() with computed arguments")
            return
        targets = [value for key, value in _kwargs(node) if key == "attribute"]
        if position is not None and len(node.args) > position:
            targets.append(node.args[position])
        for target in targets:
            what = f"{name}() attribute"
            self._check_lookup_name(target, self.value(target), what, constant_only=True, dotted=True)

    def _check_map(self, node: nodes.Filter, dynamic: bool) -> None:
        if dynamic:
            self._reason(node, "map() with computed arguments")
            return
        for key, value in _kwargs(node):
            if key == "attribute":
                self._check_lookup_name(value, self.value(value), "map() attribute", constant_only=True, dotted=True)
        if not node.args:
            return
        applied = node.args[0]
        if not (isinstance(applied, nodes.Const) and isinstance(applied.value, str)):
            self._reason(node, f"map() applies a filter named at render time ({_src(applied)})")
            return
        # map('attr', NAME) and map('selectattr', NAME) look up NAME on each item.
        position = 0 if applied.value == "attr" else _ATTRIBUTE_FILTERS.get(applied.value)
        if position is not None and len(node.args) > position + 1:
            target = node.args[position + 1]
            what = f"map({applied.value!r}) attribute"
            self._check_lookup_name(
                target, self.value(target), what, constant_only=True, dotted=applied.value != "attr"
            )

    def _check_format_call(self, node: nodes.Call) -> None:
        callee = node.node
        if not isinstance(callee, nodes.Getattr) or callee.attr not in ("format", "format_map"):
            return
        receiver = self.value(callee.node)
        for atom in receiver:
            if atom[0] == "c" and isinstance(atom[1], str):
                for field in _format_fields(atom[1]):
                    for part in re.split(r"[.\[\]]", field)[1:]:
                        if part and _is_unsafe_name(part):
                            self._reason(node, f"format field {field!r} reads {part!r}")
            elif atom[0] in ("data", "elem") and (node.args or node.kwargs or node.dyn_args or node.dyn_kwargs):
                self._reason(node, f"str.{callee.attr}() on runtime value {_src(callee.node)}")

    def _check_assembled(self, node: nodes.Node) -> None:
        for atom in self.value(node):
            if atom[0] == "c" and isinstance(atom[1], str) and _is_unsafe_identifier(atom[1]):
                self._reason(node, f"string {atom[1]!r} assembled at render time")

    def inspect(self) -> list[str]:
        for node in _walk(self.tree):
            if isinstance(node, nodes.Getattr):
                if _is_unsafe_name(node.attr):
                    self._reason(node, f"attribute {node.attr!r} of {_src(node.node)}")
                self._check_gadget(node)
            elif isinstance(node, nodes.Getitem):
                self._check_gadget(node)
                if isinstance(node.arg, nodes.Slice):
                    self._check_assembled(node)
                else:
                    self._check_key(node)
            elif isinstance(node, nodes.NSRef):
                if _is_unsafe_name(node.attr):
                    self._reason(node, f"namespace attribute {node.attr!r} of {node.name}")
            elif isinstance(node, nodes.Filter):
                self._check_filter(node)
                if node.name in ("join", "reverse", "replace", "format", "lower", "upper", "trim", "first", "last"):
                    self._check_assembled(node)
            elif isinstance(node, nodes.Call):
                self._check_format_call(node)
                if isinstance(node.node, nodes.Getattr):
                    self._check_assembled(node)
            elif isinstance(node, nodes.Concat | nodes.Add | nodes.Mul | nodes.Mod):
                self._check_assembled(node)
            elif isinstance(node, nodes.Name) and node.ctx == "load" and self.is_free(node.name):
                if _PRIVATE_RE.match(node.name) or node.name in _FORBIDDEN_FREE:
                    self._reason(node, f"reads the name {node.name!r}, which the template never sets")
            elif isinstance(node, nodes.Include | nodes.Import | nodes.FromImport | nodes.Extends):
                kind = type(node).__name__.lower()
                self._reason(node, f"{{% {kind} %}} of {_src(node.template)} loads another template")
        return self.reasons


# -- operations on abstract values (pure, bounded) ------------------------------


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _numeric(value: _Value) -> bool:
    return all(a[0] == "num" or (a[0] == "c" and isinstance(a[1], int | float)) for a in value)


def _pieces(value: _Value, into: set[str], depth: int = 0) -> bool:
    """Collect the suspicious constant strings in ``value``; return whether it holds runtime data."""
    data = False
    for atom in value:
        kind = atom[0]
        if kind == "c":
            if isinstance(atom[1], str) and _is_suspicious_piece(atom[1]):
                into.add(_short(atom[1]))
        elif kind == "t" and isinstance(atom[1], tuple):
            into.update(_short(s) for s in atom[1] if isinstance(s, str) and _is_suspicious_piece(s))
        elif kind == "built":
            if isinstance(atom[1], str) and atom[1]:
                into.add(atom[1])
        elif kind in ("data", "elem", "loop", "num"):
            # An unknown number counts as data: '%c' % n can spell anything.
            data = True
        elif depth < 8:
            for part in atom[1:]:
                if isinstance(part, frozenset):
                    data |= _pieces(part, into, depth + 1)
                elif isinstance(part, tuple):
                    for pair in part:
                        for sub in pair if isinstance(pair, tuple) else ():
                            if isinstance(sub, frozenset):
                                data |= _pieces(sub, into, depth + 1)
        else:
            data = True
    return data


def _unknown(*values: _Value, reverse: bool = False) -> _Value:
    """The result of an operation the evaluator does not model: carries the inputs' pieces."""
    pieces: set[str] = set()
    data = False
    for value in values:
        data |= _pieces(value, pieces)
    if reverse:
        pieces |= {p[::-1] for p in pieces}
    atoms: set[_Atom] = {("built", p) for p in sorted(pieces)[:_MAX_VALUES]}
    atoms.add(_DATA if data else _BUILT)
    return frozenset(atoms)


def _sequence(items: Sequence[_Value]) -> _Value:
    if all(len(v) == 1 and next(iter(v))[0] == "c" for v in items) and len(items) <= _MAX_FOLD_CHARS:
        return frozenset({("t", tuple(next(iter(v))[1] for v in items))})
    return frozenset({("seq", frozenset().union(*items) if items else frozenset())})


def _elements_of(value: _Value) -> _Value:
    result: set[_Atom] = set()
    for atom in value:
        kind = atom[0]
        if kind == "t" and isinstance(atom[1], tuple):
            result |= {("c", item) for item in atom[1]}
        elif kind == "c" and isinstance(atom[1], str):
            if len(atom[1]) <= _MAX_VALUES:
                result |= {("c", ch) for ch in atom[1]}
            else:
                result |= _unknown(frozenset({atom}))
        elif kind == "seq" and isinstance(atom[1], frozenset):
            result |= atom[1]
        elif kind == "map" and isinstance(atom[1], tuple):
            for pair in atom[1]:
                if isinstance(pair, tuple) and isinstance(pair[0], frozenset):
                    result |= pair[0]
        elif kind in ("data", "elem", "loop"):
            result.add(_ELEM)
        elif kind == "built":
            result |= {atom, _ELEM}
        elif kind == "num":
            result.add(_NUM)
    return frozenset(result) if result else frozenset({_ELEM})


def _items(value: _Value) -> set[_Atom]:
    result: set[_Atom] = set()
    for atom in value:
        if atom[0] == "map" and isinstance(atom[1], tuple):
            for pair in atom[1]:
                if isinstance(pair, tuple):
                    result.add(("pair", pair[0], pair[1]))
        else:
            result |= {("pair", frozenset({_ELEM}) | _unknown(frozenset({atom})), _DATA_V)}
    return result


def _lookup(atom: _Atom, key: _Value) -> _Value:
    """``d[key]`` / ``d.key`` on a dict literal."""
    pairs = atom[1]
    if not isinstance(pairs, tuple):
        return _DATA_V
    known = {a[1] for a in key if a[0] == "c"}
    exact = len(known) == len(key)
    result: set[_Atom] = set()
    for pair in pairs:
        if not (isinstance(pair, tuple) and isinstance(pair[0], frozenset) and isinstance(pair[1], frozenset)):
            continue
        pair_keys = {a[1] for a in pair[0] if a[0] == "c"}
        if not exact or len(pair_keys) != len(pair[0]) or pair_keys & known:
            result |= pair[1]
    # A missing key is Undefined (or, in a careless runtime, an attribute).
    return frozenset(result) | _NONE_V


def _payload(atom: _Atom) -> object:
    """The value of a ``("c", value)`` atom (None for atoms without one)."""
    return atom[1] if len(atom) > 1 else None


def _str_of(atom: _Atom) -> str | None:
    value = atom[1]
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int) and abs(value) < _MAX_SMALL_INT:
        return str(value)
    if isinstance(value, float):
        return repr(value)
    return None


def _fold_pairs(left: _Value, right: _Value, op: Callable[[_Atom, _Atom], _Value | None]) -> _Value:
    """Apply a binary operation to every pair of possible values (bounded)."""
    if len(left) * len(right) > _MAX_VALUES * 4:
        return _unknown(left, right)
    result: set[_Atom] = set()
    for a in left:
        for b in right:
            folded = op(a, b)
            result |= folded if folded is not None else _unknown(frozenset({a}), frozenset({b}))
    return frozenset(result)


def _concat_pair(a: _Atom, b: _Atom) -> _Value | None:
    if a[0] == "c" and b[0] == "c":
        left, right = _str_of(a), _str_of(b)
        if left is not None and right is not None and len(left) + len(right) <= _MAX_FOLD_CHARS:
            return _const(left + right)
        if left is not None and right is not None and not left:
            return _const(right)
        if left is not None and right is not None and not right:
            return _const(left)
    return None


def _arith_pair(op: str, a: _Atom, b: _Atom) -> _Value | None:
    if a[0] == "num" or b[0] == "num":
        other = b if a[0] == "num" else a
        if other[0] == "num" or (other[0] == "c" and _is_number(other[1])):
            return _NUM_V
        return None
    if op == "%" and a[0] == "c" and isinstance(a[1], str):
        return _printf(frozenset({a}), frozenset({b}))
    if a[0] != "c" or b[0] != "c":
        left, right = a[1] if a[0] == "t" else None, b[1] if b[0] == "t" else None
        if (
            op == "+"
            and isinstance(left, tuple)
            and isinstance(right, tuple)
            and len(left) + len(right) <= _MAX_FOLD_CHARS
        ):
            return frozenset({("t", left + right)})
        return None
    x, y = a[1], b[1]
    if op == "+":
        if isinstance(x, str) and isinstance(y, str):
            return _const(x + y) if len(x) + len(y) <= _MAX_FOLD_CHARS else None
        if _is_number(x) and _is_number(y):
            return _small_number(x, y, "+")
        return None
    if op == "*":
        if isinstance(x, str) and isinstance(y, int) and not isinstance(y, bool):
            return _const(x * y) if y >= 0 and len(x) * y <= _MAX_FOLD_CHARS else None
        if isinstance(y, str) and isinstance(x, int) and not isinstance(x, bool):
            return _const(y * x) if x >= 0 and len(y) * x <= _MAX_FOLD_CHARS else None
        if _is_number(x) and _is_number(y):
            return _small_number(x, y, "*")
        return None
    if op == "%" and _is_number(x) and _is_number(y):
        return _NUM_V
    return None


def _small_number(x: object, y: object, op: str) -> _Value:
    if (
        isinstance(x, int | float)
        and isinstance(y, int | float)
        and abs(x) < _MAX_SMALL_INT
        and abs(y) < _MAX_SMALL_INT
    ):
        return _const(x + y if op == "+" else x * y)
    return _NUM_V


def _map_strings(value: _Value, fn: Callable[[str], str]) -> _Value:
    result: set[_Atom] = set()
    for atom in value:
        if atom[0] == "c" and isinstance(atom[1], str):
            out = fn(atom[1])
            result.add(("c", out) if len(out) <= _MAX_FOLD_CHARS * 3 else _BUILT)
        else:
            result |= _unknown(frozenset({atom}))
    return frozenset(result)


def _reverse(value: _Value) -> _Value:
    result: set[_Atom] = set()
    for atom in value:
        if atom[0] == "c" and isinstance(atom[1], str):
            result.add(("c", atom[1][::-1]))
        elif atom[0] == "t" and isinstance(atom[1], tuple):
            result.add(("t", atom[1][::-1]))
        else:
            result |= _unknown(frozenset({atom}), reverse=True)
    return frozenset(result)


def _listify(value: _Value) -> _Value:
    result: set[_Atom] = set()
    for atom in value:
        if atom[0] == "c" and isinstance(atom[1], str) and len(atom[1]) <= _MAX_FOLD_CHARS:
            result.add(("t", tuple(atom[1])))
        elif atom[0] in ("t", "seq"):
            result.add(atom)
        else:
            result |= _unknown(frozenset({atom}))
    return frozenset(result)


def _index(atom: _Atom, key: _Value) -> _Value:
    result: set[_Atom] = set()
    for k in key:
        if k[0] == "c" and isinstance(k[1], int) and not isinstance(k[1], bool):
            picked = _index_all(frozenset({atom}), k[1])
            result |= picked if picked is not None else _NONE_V
        else:
            result |= _unknown(frozenset({atom}))
    return frozenset(result)


def _index_all(value: _Value, position: int) -> _Value | None:
    result: set[_Atom] = set()
    for atom in value:
        seq = atom[1] if atom[0] in ("c", "t") else None
        if isinstance(seq, str | tuple):
            if -len(seq) <= position < len(seq):
                result.add(("c", seq[position]))
            else:
                result |= _NONE_V
        else:
            return None
    return frozenset(result)


def _slice(value: _Value, bounds: Sequence[_Value]) -> _Value:
    ints: list[int | None] = []
    for bound in bounds:
        if len(bound) != 1:
            return _unknown(value, reverse=True)
        atom = next(iter(bound))
        if atom[0] == "c" and (atom[1] is None or (isinstance(atom[1], int) and not isinstance(atom[1], bool))):
            item = atom[1]
            ints.append(item if isinstance(item, int) else None)
        else:
            return _unknown(value, reverse=True)
    if ints[2] == 0:
        return _NONE_V
    cut = slice(ints[0], ints[1], ints[2])
    result: set[_Atom] = set()
    for atom in value:
        if atom[0] == "c" and isinstance(atom[1], str):
            result.add(("c", atom[1][cut]))
        elif atom[0] == "t" and isinstance(atom[1], tuple):
            result.add(("t", atom[1][cut]))
        elif atom[0] == "seq":
            result.add(atom)
        else:
            result |= _unknown(frozenset({atom}), reverse=True)
    return frozenset(result)


def _join(value: _Value, delimiter: _Value) -> _Value:
    result: set[_Atom] = set()
    delimiters = [_str_of(d) if d[0] == "c" else None for d in delimiter]
    for atom in value:
        items: tuple[object, ...] | None = None
        if atom[0] == "t" and isinstance(atom[1], tuple):
            items = atom[1]
        elif atom[0] == "c" and isinstance(atom[1], str):
            items = tuple(atom[1])
        if items is None or None in delimiters:
            result |= _unknown(frozenset({atom}), delimiter)
            continue
        strings = [_str_of(("c", item)) for item in items]
        for d in delimiters:
            if d is None or None in strings:
                result |= _unknown(frozenset({atom}), delimiter)
                continue
            joined = d.join(s for s in strings if s is not None)
            result.add(("c", joined) if len(joined) <= _MAX_FOLD_CHARS else _BUILT)
    return frozenset(result)


def _replace(value: _Value, old: _Value, new: _Value) -> _Value:
    result: set[_Atom] = set()
    for atom in value:
        for o in old:
            for n in new:
                s, a, b = _payload(atom), _payload(o), _payload(n)
                if atom[0] == o[0] == n[0] == "c" and isinstance(s, str) and isinstance(a, str) and isinstance(b, str):
                    # Bound before replacing: 'a'*256 with 'a' -> 'b'*256 is 64 kB.
                    count = s.count(a) if a else len(s) + 1
                    if len(s) + count * len(b) <= _MAX_FOLD_CHARS:
                        result.add(("c", s.replace(a, b)))
                        continue
                result |= _unknown(frozenset({atom}), frozenset({o}), frozenset({n}))
    return frozenset(result)


def _printf(fmt: _Value, args: _Value) -> _Value:
    """``fmt % args`` / ``fmt|format(args)`` for short formats of plain conversions."""
    result: set[_Atom] = set()
    for f in fmt:
        for a in args:
            text = _payload(f)
            # Every '%' must start a plain conversion with a width of at most two
            # digits: '%999999999s' or '%*d' would make the fold itself huge.
            plain = isinstance(text, str) and len(text) <= _MAX_FOLD_CHARS and "%" not in _PRINTF_RE.sub("", text)
            if f[0] == "c" and isinstance(text, str) and plain and a[0] in ("c", "t"):
                operand = a[1] if a[0] == "t" else (a[1],)
                try:
                    out = text % operand
                except (TypeError, ValueError, OverflowError):
                    result.add(_BUILT)
                    continue
                result.add(("c", out) if len(out) <= _MAX_FOLD_CHARS else _BUILT)
                continue
            result |= _unknown(frozenset({f}), frozenset({a}))
    return frozenset(result)


def _format_fields(text: str, depth: int = 0) -> list[str]:
    """Field names of a ``str.format`` string, nested ones included; [] if malformed."""
    fields: list[str] = []
    try:
        for _literal, field, spec, _conversion in string.Formatter().parse(text):
            if field is not None:
                fields.append(field)
            if spec and depth < 2:
                fields += _format_fields(spec, depth + 1)
    except ValueError:
        return fields
    return fields


def _str_format(text: str, args: Sequence[_Value], kwargs: Mapping[str, _Value]) -> _Value | None:
    """``text.format(...)`` with constant arguments and plain fields only."""
    if len(text) > _MAX_FOLD_CHARS:
        return None
    scalars: list[object] = []
    for value in args:
        if len(value) != 1 or next(iter(value))[0] != "c":
            return None
        scalars.append(next(iter(value))[1])
    named: dict[str, object] = {}
    for key, value in kwargs.items():
        if len(value) != 1 or next(iter(value))[0] != "c":
            return None
        named[key] = next(iter(value))[1]
    try:
        parsed = list(string.Formatter().parse(text))
    except ValueError:
        return None
    for _literal, field, spec, conversion in parsed:
        if field is None:
            continue
        if re.fullmatch(r"\d{0,2}|[A-Za-z_][A-Za-z0-9_]*", field) is None:
            return None  # attribute or index fields: judged by the format check
        if spec and _FORMAT_SPEC_RE.fullmatch(spec) is None:
            return None
        if conversion not in (None, "s", "r", "a"):
            return None
    try:
        out = text.format(*scalars, **named)
    except (IndexError, KeyError, ValueError, TypeError, OverflowError):
        return frozenset({_BUILT})
    return _const(out) if len(out) <= _MAX_FOLD_CHARS else frozenset({_BUILT})


def _call_method(receiver: _Value, method: str, node: nodes.Call, args: Sequence[_Value]) -> _Value | None:
    """Fold the str and dict methods templates use on known receivers; None if not modelled."""
    if node.dyn_args is not None or node.dyn_kwargs is not None:
        return None
    result: set[_Atom] = set()
    for atom in receiver:
        text = atom[1] if atom[0] == "c" and isinstance(atom[1], str) else None
        if atom[0] == "map" and method in ("items", "keys", "values", "get"):
            if method == "items":
                result.add(("seq", frozenset(_items(frozenset({atom})))))
            elif method == "keys":
                result.add(("seq", _elements_of(frozenset({atom}))))
            elif method == "values":
                result.add(("seq", _lookup(atom, _DATA_V)))
            else:
                result |= _lookup(atom, args[0] if args else _DATA_V) | (args[1] if len(args) > 1 else _NONE_V)
            continue
        if text is None:
            return None
        folded: _Value | None = None
        if method in _STR_METHODS and not args:
            out = getattr(text, method)()
            folded = _const(out) if isinstance(out, str) and len(out) <= _MAX_FOLD_CHARS * 3 else None
        elif method == "format" and not node.kwargs:
            folded = _str_format(text, args, {})
        elif method == "format":
            kwargs = {kw.key: _DATA_V for kw in node.kwargs}
            folded = _str_format(text, args, kwargs)
        elif method == "join" and len(args) == 1:
            folded = _join(args[0], frozenset({atom}))
        elif method == "replace" and len(args) in (2, 3):
            folded = _replace(frozenset({atom}), args[0], args[1])
        elif method in ("split", "rsplit") and len(args) <= 2:
            seps = args[0] if args else _NONE_V
            parts: set[_Atom] = set()
            for sep in seps:
                if sep[0] == "c" and (sep[1] is None or (isinstance(sep[1], str) and sep[1])):
                    pieces = text.split(sep[1] if isinstance(sep[1], str) else None)
                    parts.add(("t", tuple(pieces)) if len(pieces) <= _MAX_FOLD_CHARS else _BUILT)
                else:
                    parts |= _unknown(frozenset({atom}), seps)
            folded = frozenset(parts)
        elif method in ("startswith", "endswith", "isdigit", "isalpha", "isspace", "islower", "isupper"):
            folded = _BOOL_V
        elif method in ("find", "rfind", "index", "rindex", "count"):
            folded = _NUM_V
        if folded is None:
            return None
        result |= folded
    return frozenset(result) if result else None


def inspect_template_source(source: str) -> list[str]:
    """Statically inspect a chat template; return why it is unsafe (empty: no reason found).

    Pure: the template is parsed, never rendered. The rule is in this module's
    docstring. Raises ``jinja2.TemplateSyntaxError`` when the source does not
    parse, and :class:`TemplateInspectionError` when its expressions nest or
    chain past the inspection's bounds.
    """
    try:
        tree = make_environment().parse(source)
    except RecursionError as exc:
        raise TemplateInspectionError("the template nests too deeply for the Jinja parser") from exc
    try:
        return _Inspector(tree).inspect()
    except _TooComplex as exc:
        raise TemplateInspectionError(f"the template is too complex to inspect: {exc}") from exc
    except RecursionError as exc:
        raise TemplateInspectionError("the template nests too deeply to inspect") from exc


def template_ends_turn(audit: TemplateAudit, end_text: str) -> bool | None:
    """Whether the rendered standard conversation ends with ``end_text`` (e.g. the EOS token's text).

    The conversation ends with an assistant turn, so this tells whether the
    template closes assistant turns with that text. Trailing whitespace is
    ignored. None when the template was not rendered or ``end_text`` is empty.
    """
    if audit.rendered_tail is None or not end_text:
        return None
    return audit.rendered_tail.rstrip().endswith(end_text.strip() or end_text)


# --- the render child ----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _RenderResult:
    findings: tuple[Finding, ...]
    rendered: str | None
    conversation: str | None


_LIMIT_NAMES: Final[Mapping[str, str]] = {
    "cpu": "CPU time",
    "wall": "wall-clock",
    "memory": "memory",
    "output": "output size",
    "recursion": "recursion depth",
    "range": "range() size (the sandbox's MAX_RANGE)",
}


def _limit_message(key: str, limit: str, limits: TemplateLimits, conversation: str | None) -> str:
    amount = {
        "cpu": f" of {limits.cpu_seconds:g} s",
        "wall": f" of {limits.wall_seconds:g} s",
        "memory": f" of {limits.memory_bytes} bytes",
        "output": f" of {limits.output_chars} characters",
    }.get(limit, "")
    where = f" on the {conversation!r} conversation" if conversation else ""
    name = _LIMIT_NAMES.get(limit)
    if name is None:
        return f"{key}: the render child died ({limit}) while rendering it{where}"
    return f"{key}: rendering hit the {name} limit{amount}{where}"


def _package_root() -> Path:
    # gguf_audit/checks/template.py -> the directory holding gguf_audit/.
    return Path(__file__).resolve().parents[2]


def _child_command() -> list[str]:
    # -S: no site module; _child_env passes this process's sys.path instead (saves ~20 ms).
    return [sys.executable, "-S", "-m", "gguf_audit.checks._template_worker"]


def _child_env() -> dict[str, str]:
    # Only what Python needs to find jinja2 and this package; nothing of the
    # auditor's environment (credentials included) reaches the child.
    path = [str(_package_root()), *(p for p in sys.path if p and isinstance(p, str))]
    return {"PYTHONPATH": os.pathsep.join(dict.fromkeys(path)), "PYTHONDONTWRITEBYTECODE": "1"}


@dataclass(slots=True)
class _ChildRun:
    """What one child process said before it finished or was stopped."""

    results: list[dict[str, object]]
    ready: bool
    stopped: str | None
    """None when the child answered every job; else which limit stopped it."""
    stderr: str


def _death_cause(returncode: int, stderr: str) -> str:
    """Which limit most likely ended a child that died without answering."""
    if "MemoryError" in stderr:
        return "memory"
    if returncode in (-signal.SIGKILL, -signal.SIGXCPU):
        return "cpu"  # RLIMIT_CPU's hard limit kills with SIGKILL (so does the OOM killer)
    if returncode == -signal.SIGSEGV:
        return "recursion"  # the C stack ran out
    if returncode < 0:
        try:
            return f"signal {signal.Signals(-returncode).name}"
        except ValueError:
            return f"signal {-returncode}"
    return f"exit status {returncode}"


def _run_child(request: bytes, jobs: int, limits: TemplateLimits) -> _ChildRun:
    """Run one child on ``request``; stop it when a job overstays its wall limit."""
    proc = subprocess.Popen(
        _child_command(),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=str(_package_root()),
        env=_child_env(),
        close_fds=True,
    )
    results: list[dict[str, object]] = []
    ready = False
    stopped: str | None = None
    out_buffer = bytearray()
    err_tail = bytearray()
    # One answer line holds at most output_chars characters, each at most 12
    # bytes as JSON escapes; more without a newline means the child is broken.
    max_line = 12 * limits.output_chars + 1_000_000
    pending = memoryview(request)
    deadline = time.monotonic() + _STARTUP_SECONDS
    selector = selectors.DefaultSelector()
    try:
        if proc.stdin is None or proc.stdout is None or proc.stderr is None:
            raise TemplateWorkerError("the render child has no pipes")
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            os.set_blocking(pipe.fileno(), False)
        selector.register(proc.stdin, selectors.EVENT_WRITE)
        selector.register(proc.stdout, selectors.EVENT_READ)
        selector.register(proc.stderr, selectors.EVENT_READ)
        open_reads = 2
        while open_reads and len(results) < jobs:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                stopped = "wall"
                break
            for key, _events in selector.select(remaining):
                source_file = key.fileobj
                if source_file is proc.stdin:
                    try:
                        written = os.write(proc.stdin.fileno(), pending[:65536])
                    except BlockingIOError:
                        written = 0
                    except BrokenPipeError:
                        written = len(pending)  # the child died; its exit status tells why
                    pending = pending[written:]
                    if not pending:
                        selector.unregister(proc.stdin)
                        proc.stdin.close()
                    continue
                chunk = os.read(key.fd, 1 << 20)
                if not chunk:
                    selector.unregister(source_file)
                    open_reads -= 1
                    continue
                if source_file is proc.stderr:
                    err_tail = (err_tail + chunk)[-4000:]
                    continue
                out_buffer += chunk
                while b"\n" in out_buffer:
                    line, _, rest = bytes(out_buffer).partition(b"\n")
                    out_buffer = bytearray(rest)
                    message = _parse_line(line)
                    if not ready:
                        if message.get("ready") is not True:
                            raise TemplateWorkerError(f"the render child's first line was {line[:120]!r}")
                        ready = True
                    else:
                        results.append(message)
                    deadline = time.monotonic() + limits.wall_seconds + _WALL_GRACE_SECONDS
                if len(out_buffer) > max_line:
                    stopped = "output"
                    break
            if stopped:
                break
    finally:
        selector.close()
        if stopped is not None or len(results) < jobs:
            proc.kill()
        try:
            returncode = proc.wait(timeout=_WALL_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            # Every answer is in; a child that does not exit promptly is not waited for.
            proc.kill()
            returncode = proc.wait()
        finally:
            for handle in (proc.stdin, proc.stdout, proc.stderr):
                if handle is not None and not handle.closed:
                    handle.close()
    stderr = err_tail.decode("utf-8", "replace")
    if stopped is None and len(results) < jobs:
        stopped = _death_cause(returncode, stderr)
    return _ChildRun(results, ready, stopped, stderr)


def _parse_line(line: bytes) -> dict[str, object]:
    try:
        message = json.loads(line)
    except ValueError as exc:
        raise TemplateWorkerError(f"the render child wrote a line that is not JSON: {line[:120]!r}") from exc
    if not isinstance(message, dict):
        raise TemplateWorkerError(f"the render child wrote {type(message).__name__}, not an object")
    return message


def _render_all(
    sources: Sequence[str], *, bos_token: str, eos_token: str, limits: TemplateLimits
) -> list[dict[str, object]]:
    """Render each source in one child; restart it only after a limit killed it."""
    conversations = [{"name": name, "context": ctx} for name, ctx in standard_conversations(bos_token, eos_token)]
    limit_fields = {
        "cpu_seconds": limits.cpu_seconds,
        "wall_seconds": limits.wall_seconds,
        "memory_bytes": limits.memory_bytes,
        "output_chars": limits.output_chars,
    }
    results: list[dict[str, object]] = []
    while len(results) < len(sources):
        todo = sources[len(results) :]
        request = json.dumps(
            {"limits": limit_fields, "conversations": conversations, "jobs": [{"source": s} for s in todo]},
            ensure_ascii=True,
        ).encode("ascii")
        run = _run_child(request, len(todo), limits)
        if not run.ready:
            detail = run.stderr.strip().splitlines()[-1:] or [run.stopped or "no output"]
            raise TemplateWorkerError(f"the render child did not start: {detail[0][:300]}")
        results += run.results
        if run.stopped is not None and len(results) < len(sources):
            # The job the child was on when it died is the one to blame.
            results.append({"status": "limit", "limit": run.stopped, "conversation": None, "killed": True})
    return results


def _interpret(key: str, result: Mapping[str, object], limits: TemplateLimits, unsafe_known: bool) -> _RenderResult:
    found: list[Finding] = []
    status = result.get("status")
    conversation = result.get("conversation")
    conv = conversation if isinstance(conversation, str) and conversation else None
    refused = result.get("refused")
    blocked = result.get("blocked_events")
    sandbox_refused = isinstance(refused, list) and bool(refused)
    if not unsafe_known and isinstance(refused, list) and refused:
        # The static rule missed it but the sandbox caught it: still an escape attempt.
        names = ", ".join(str(r) for r in refused[:3])
        found.append(finding(TEMPLATE_UNSAFE, f"{key}: the sandbox refused access to {names} during the render"))
    if isinstance(blocked, list) and blocked:
        events = ", ".join(str(e) for e in blocked[:3])
        found.append(finding(TEMPLATE_UNSAFE, f"{key}: the render attempted {events}, which the child refuses"))
    rendered: str | None = None
    if status == "ok":
        text = result.get("rendered")
        rendered = text if isinstance(text, str) else None
    elif status == "limit":
        limit = result.get("limit")
        found.append(finding(TEMPLATE_RESOURCE_LIMIT, _limit_message(key, str(limit), limits, conv)))
        conv = None
    elif status == "error":
        attempts = result.get("attempts")
        last = attempts[-1] if isinstance(attempts, list) and attempts else {}
        error = str(last.get("error", "unknown error")) if isinstance(last, dict) else "unknown error"
        # A render stopped by the sandbox refusing a private attribute is the
        # unsafe finding already made, not a second problem. (A refused
        # list.append is a SecurityError too, but a plain render error.)
        if not (error.startswith("SecurityError") and (unsafe_known or sandbox_refused)):
            message = f"{key}: fails to render even a single user/assistant turn: {error}"
            found.append(finding(TEMPLATE_RENDER_ERROR, message))
        conv = None
    elif status == "compile_error":
        found.append(finding(TEMPLATE_RENDER_ERROR, f"{key}: does not compile: {result.get('error')}"))
        conv = None
    elif status != "blocked":
        raise TemplateWorkerError(f"the render child answered status {status!r}")
    else:
        conv = None
    return _RenderResult(tuple(found), rendered, conv)


def _digest(source: str) -> str:
    try:
        raw = source.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raw = source.encode("utf-8", "surrogatepass")
    return hashlib.sha256(raw).hexdigest()


def _static(key: str, source: str, budget: int) -> tuple[list[Finding], bool]:
    """Parse and inspect; return the findings and whether the template may be rendered."""
    if len(source) > MAX_TEMPLATE_CHARS:
        message = f"{key}: the template is {len(source)} characters, over the {MAX_TEMPLATE_CHARS}-character limit"
        return [finding(TEMPLATE_RESOURCE_LIMIT, message)], False
    if len(source) > budget:
        message = f"{key}: not inspected: the file's chat templates pass {MAX_TOTAL_TEMPLATE_CHARS} characters in all"
        return [finding(TEMPLATE_RESOURCE_LIMIT, message)], False
    try:
        reasons = inspect_template_source(source)
    except TemplateSyntaxError as exc:
        return [finding(TEMPLATE_SYNTAX_ERROR, f"{key}: line {exc.lineno}: {exc.message}")], False
    except TemplateInspectionError as exc:
        return [finding(TEMPLATE_RESOURCE_LIMIT, f"{key}: {exc}")], False
    return [finding(TEMPLATE_UNSAFE, f"{key}: {reason}") for reason in reasons], True


def audit_templates(
    templates: Mapping[str, str],
    *,
    bos_token: str = "",
    eos_token: str = "",
    limits: TemplateLimits = DEFAULT_LIMITS,
) -> tuple[tuple[TemplateAudit, ...], tuple[Finding, ...]]:
    """Audit every chat template of one file.

    ``templates`` maps the metadata key (``tokenizer.chat_template`` or
    ``tokenizer.chat_template.<name>``) to the template source; ``bos_token``
    and ``eos_token`` are the texts of the file's BOS and EOS tokens, passed to
    the render as transformers does. Returns one :class:`TemplateAudit` per
    template, in the mapping's order, and the file-level findings
    (``template.missing`` when there is no template).

    All renders run in one child process (restarted only when a limit killed
    it). Raises :class:`TemplateWorkerError` when that process cannot run.
    """
    if not templates:
        return (), (finding(TEMPLATE_MISSING, "the file has no tokenizer.chat_template"),)
    static: dict[str, tuple[list[Finding], bool]] = {}
    budget = MAX_TOTAL_TEMPLATE_CHARS
    for key, src in templates.items():
        static[key] = _static(key, src, budget)
        budget -= min(len(src), MAX_TEMPLATE_CHARS)
    # Identical sources (a default copied under a name) are rendered once.
    to_render = list(dict.fromkeys(src for key, src in templates.items() if static[key][1]))
    rendered: dict[str, Mapping[str, object]] = {}
    if to_render:
        answers = _render_all(to_render, bos_token=bos_token, eos_token=eos_token, limits=limits)
        rendered = dict(zip(to_render, answers, strict=True))
    audits: list[TemplateAudit] = []
    for key, source in templates.items():
        found, renderable = static[key]
        text: str | None = None
        conversation: str | None = None
        if renderable:
            unsafe_known = any(f.code == TEMPLATE_UNSAFE for f in found)
            result = _interpret(key, rendered[source], limits, unsafe_known)
            found = found + list(result.findings)
            text, conversation = result.rendered, result.conversation
        audits.append(
            TemplateAudit(
                key=key,
                digest=_digest(source),
                findings=tuple(found),
                rendered_tail=text[-TAIL_CHARS:] if text is not None else None,
                rendered=text,
                conversation=conversation if text is not None else None,
            )
        )
    return tuple(audits), ()
