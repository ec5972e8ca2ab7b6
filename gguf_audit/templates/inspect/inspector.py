"""The static rule for chat templates: inspect the parsed tree, never render it, and say why it is unsafe.

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

import re
from typing import Final

from jinja2 import nodes

from gguf_audit.errors import GGUFAuditError
from gguf_audit.templates.environment import make_environment
from gguf_audit.templates.inspect.bindings import FromElements, FromUnpack
from gguf_audit.templates.inspect.evaluate import Evaluator, TooComplex
from gguf_audit.templates.inspect.folds import format_fields
from gguf_audit.templates.inspect.names import (
    ATTRIBUTE_FILTERS,
    FORBIDDEN_FREE,
    GADGETS,
    PRIVATE_RE,
    is_suspicious_piece,
    is_unsafe_identifier,
    is_unsafe_name,
)
from gguf_audit.templates.inspect.tree import expr_text, keyword_args, walk
from gguf_audit.templates.inspect.values import Atom, Value

__all__ = ["TemplateInspectionError", "inspect_template_source", "parse_template_source"]

#: Unsafe reasons reported per template; past this the template is judged anyway.
_MAX_REASONS: Final = 20


class TemplateInspectionError(GGUFAuditError, ValueError):
    """The template's expressions are nested or interlinked past what the inspection follows."""


class _Inspector(Evaluator):
    """The unsafe-lookup checks over one parsed template, judged on its abstract values."""

    def __init__(self, tree: nodes.Template) -> None:
        super().__init__(tree)
        self.reasons: list[str] = []
        self._seen_reasons: set[str] = set()

    def _reason(self, node: nodes.Node, text: str) -> None:
        full = f"line {node.lineno}: {text}"
        if full not in self._seen_reasons and len(self.reasons) < _MAX_REASONS:
            self._seen_reasons.add(full)
            self.reasons.append(full)

    def _check_lookup_name(
        self, node: nodes.Node, value: Value, what: str, *, constant_only: bool, dotted: bool
    ) -> None:
        """Judge a name an attribute lookup will use (``attr()``, ``attribute=``)."""
        for atom in value:
            kind = atom[0]
            if kind == "c":
                if isinstance(atom[1], str):
                    parts = atom[1].split(".") if dotted else [atom[1]]
                    for part in parts:
                        if is_unsafe_name(part):
                            self._reason(node, f"{what} {part!r}")
            elif kind == "built":
                piece = atom[1]
                if isinstance(piece, str) and piece and is_suspicious_piece(piece):
                    self._reason(node, f"{what} assembled at render time from {piece!r}")
                elif constant_only and not piece:
                    self._reason(node, f"{what} computed at render time")
            elif kind in ("data", "elem") and constant_only:
                self._reason(node, f"{what} taken from runtime value {expr_text(node)}")

    def _check_key(self, node: nodes.Getitem) -> None:
        key = self.value(node.arg)
        data = False
        for atom in key:
            kind = atom[0]
            if kind == "c" and isinstance(atom[1], str) and is_unsafe_name(atom[1]):
                self._reason(node, f"subscript {atom[1]!r} of {expr_text(node.node)}")
            elif kind == "built" and isinstance(atom[1], str) and atom[1] and is_suspicious_piece(atom[1]):
                self._reason(node, f"subscript of {expr_text(node.node)} assembled at render time from {atom[1]!r}")
            elif kind == "data":
                data = True
        if self._own_key(node):
            return
        base = self.value(node.node)
        table = bool(base) and all(a[0] == "map" for a in base)
        if data:
            if not table:
                self._reason(node, f"subscript of {expr_text(node.node)} by runtime value {expr_text(node.arg)}")
            return
        computed = [a for a in key if not _literal_key(a)]
        if not computed or table:
            return
        reach = sorted({_reach_name(a) for a in base if _reaches(a)})
        if reach:
            self._reason(
                node,
                f"subscript of {expr_text(node.node)} ({', '.join(reach[:3])}) by {expr_text(node.arg)}, "
                "a key that is not a literal of the template",
            )

    def _own_key(self, node: nodes.Getitem) -> bool:
        """``for k in d`` (or ``d.items()``, ``d.keys()``, ``d|items``, ``d|dictsort``) then ``d[k]``: d's own key."""
        if not isinstance(node.arg, nodes.Name):
            return False
        sources = self.scope.bindings.get(node.arg.name, [])
        if not sources:
            return False
        for source in sources:
            keys_of = isinstance(source, FromUnpack) and source.elements and (source.index, source.count) == (0, 2)
            if not (keys_of or isinstance(source, FromElements)) or not isinstance(source, FromUnpack | FromElements):
                return False
            iterable = source.node
            if not any(candidate == node.node for candidate in _iterated_dicts(iterable)):
                return False
        return True

    def _check_gadget(self, node: nodes.Getattr | nodes.Getitem) -> None:
        base = node.node
        if not isinstance(base, nodes.Name) or not self.is_free(base.name) or base.name not in GADGETS:
            return
        if base.name == "self" and isinstance(node, nodes.Getattr) and node.attr in self.scope.blocks:
            return
        what = node.attr if isinstance(node, nodes.Getattr) else expr_text(node.arg)
        self._reason(node, f"attribute {what!r} of the global {base.name!r}")

    def _check_filter(self, node: nodes.Filter) -> None:
        name = node.name
        dynamic = node.dyn_args is not None or node.dyn_kwargs is not None
        if name == "attr":
            target = node.args[0] if node.args else next((v for k, v in keyword_args(node) if k == "name"), None)
            if target is None or dynamic:
                self._reason(node, "attr() with computed arguments")
                return
            self._check_lookup_name(target, self.value(target), "attr() name", constant_only=True, dotted=False)
            return
        if name == "map":
            self._check_map(node, dynamic)
            return
        position = ATTRIBUTE_FILTERS.get(name, -1)
        if position == -1:
            return
        if dynamic:
            self._reason(node, f"{name}() with computed arguments")
            return
        targets = [value for key, value in keyword_args(node) if key == "attribute"]
        if position is not None and len(node.args) > position:
            targets.append(node.args[position])
        for target in targets:
            what = f"{name}() attribute"
            self._check_lookup_name(target, self.value(target), what, constant_only=True, dotted=True)

    def _check_map(self, node: nodes.Filter, dynamic: bool) -> None:
        if dynamic:
            self._reason(node, "map() with computed arguments")
            return
        for key, value in keyword_args(node):
            if key == "attribute":
                self._check_lookup_name(value, self.value(value), "map() attribute", constant_only=True, dotted=True)
        if not node.args:
            return
        applied = node.args[0]
        if not (isinstance(applied, nodes.Const) and isinstance(applied.value, str)):
            self._reason(node, f"map() applies a filter named at render time ({expr_text(applied)})")
            return
        # map('attr', NAME) and map('selectattr', NAME) look up NAME on each item.
        position = 0 if applied.value == "attr" else ATTRIBUTE_FILTERS.get(applied.value)
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
                for field in format_fields(atom[1]):
                    for part in re.split(r"[.\[\]]", field)[1:]:
                        if part and is_unsafe_name(part):
                            self._reason(node, f"format field {field!r} reads {part!r}")
            elif atom[0] in ("data", "elem") and (node.args or node.kwargs or node.dyn_args or node.dyn_kwargs):
                self._reason(node, f"str.{callee.attr}() on runtime value {expr_text(callee.node)}")

    def _check_assembled(self, node: nodes.Node) -> None:
        for atom in self.value(node):
            if atom[0] == "c" and isinstance(atom[1], str) and is_unsafe_identifier(atom[1]):
                self._reason(node, f"string {atom[1]!r} assembled at render time")

    def inspect(self) -> list[str]:
        for node in walk(self.tree):
            if isinstance(node, nodes.Getattr):
                if is_unsafe_name(node.attr):
                    self._reason(node, f"attribute {node.attr!r} of {expr_text(node.node)}")
                self._check_gadget(node)
            elif isinstance(node, nodes.Getitem):
                self._check_gadget(node)
                if isinstance(node.arg, nodes.Slice):
                    self._check_assembled(node)
                else:
                    self._check_key(node)
            elif isinstance(node, nodes.NSRef):
                if is_unsafe_name(node.attr):
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
                if PRIVATE_RE.match(node.name) or node.name in FORBIDDEN_FREE:
                    self._reason(node, f"reads the name {node.name!r}, which the template never sets")
            elif isinstance(node, nodes.Include | nodes.Import | nodes.FromImport | nodes.Extends):
                kind = type(node).__name__.lower()
                self._reason(node, f"{{% {kind} %}} of {expr_text(node.template)} loads another template")
        return self.reasons


def _literal_key(atom: Atom) -> bool:
    """A key the template wrote itself: a constant (judged by name elsewhere) or a number."""
    return atom[0] == "num" or (atom[0] == "c" and (atom[1] is None or isinstance(atom[1], str | int | float)))


def _reaches(atom: Atom) -> bool:
    """A value from which lookups lead to callables or Jinja globals: anything but the caller's plain data."""
    if atom[0] in ("data", "elem", "map", "pair"):
        return False
    return not (atom[0] == "c" and not isinstance(atom[1], str))


def _reach_name(atom: Atom) -> str:
    if atom[0] == "glob":
        return f"the global {atom[1]!r}"
    if atom[0] == "loop":
        return "the loop object"
    if atom[0] == "c":
        return "a string"
    return "a value built at render time"


def _iterated_dicts(iterable: nodes.Node) -> list[nodes.Node]:
    """The dict a ``for`` iterates the keys of: ``d``, ``d.items()``, ``d.keys()``, ``d|items``, ``d|dictsort``."""
    found = [iterable]
    if isinstance(iterable, nodes.Call) and isinstance(iterable.node, nodes.Getattr) and not iterable.args:
        if iterable.node.attr in ("items", "keys"):
            found.append(iterable.node.node)
    elif isinstance(iterable, nodes.Filter) and iterable.name in ("items", "dictsort", "list") and iterable.node:
        found.append(iterable.node)
    return found


def parse_template_source(source: str) -> nodes.Template:
    """The template's tree, as the environment transformers uses parses it.

    Raises ``jinja2.TemplateSyntaxError`` when the source does not parse, and
    :class:`TemplateInspectionError` when it nests past the parser's stack.
    """
    try:
        return make_environment().parse(source)
    except RecursionError as exc:
        raise TemplateInspectionError("the template nests too deeply for the Jinja parser") from exc


def inspect_template_source(source: str, tree: nodes.Template | None = None) -> list[str]:
    """Statically inspect a chat template; return why it is unsafe (empty: no reason found).

    Pure: the template is parsed (unless its ``tree`` is given), never rendered.
    The rule is in this module's docstring. Raises ``jinja2.TemplateSyntaxError``
    when the source does not parse, and :class:`TemplateInspectionError` when its
    expressions nest or chain past the inspection's bounds.
    """
    if tree is None:
        tree = parse_template_source(source)
    try:
        return _Inspector(tree).inspect()
    except TooComplex as exc:
        raise TemplateInspectionError(f"the template is too complex to inspect: {exc}") from exc
    except RecursionError as exc:
        raise TemplateInspectionError("the template nests too deeply to inspect") from exc
