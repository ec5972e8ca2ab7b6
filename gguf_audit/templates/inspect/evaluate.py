"""Abstract evaluation of a parsed template: every expression to the abstract value it can have.

Constants fold (see :mod:`~gguf_audit.templates.inspect.folds`), names resolve
through their bindings (:class:`~gguf_audit.templates.inspect.bindings.Scope`),
and whatever comes from the render context is runtime data. Bounded in depth
and steps: past them :class:`TooComplex` is raised.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from jinja2 import nodes

from gguf_audit.templates.inspect.bindings import (
    FromBlock,
    FromElements,
    FromExpr,
    FromParam,
    FromUnpack,
    Scope,
    Source,
)
from gguf_audit.templates.inspect.folds import (
    arith_pair,
    call_method,
    concat_pair,
    index_all,
    index_of,
    join_of,
    list_of,
    map_strings,
    printf,
    replace_in,
    reverse_of,
    slice_of,
)
from gguf_audit.templates.inspect.names import CONTEXT_NAMES, GADGETS, LOOP_NUMBERS, NUMERIC_FILTERS
from gguf_audit.templates.inspect.tree import keyword_args, walk
from gguf_audit.templates.inspect.values import (
    BOOL_V,
    BUILT,
    DATA,
    DATA_V,
    ELEM,
    LOOP,
    MAX_VALUES,
    NONE_V,
    NUM,
    NUM_V,
    Atom,
    Value,
    const,
    elements_of,
    fold_pairs,
    items_of,
    lookup,
    numeric,
    sequence,
    str_of,
    unknown,
)

__all__ = ["Evaluator", "TooComplex"]

#: Bounds on the evaluation itself: how deep expressions and name definitions
#: may nest, and how many expressions one template may have evaluated.
_MAX_DEPTH: Final = 150
_MAX_STEPS: Final = 400_000


class TooComplex(Exception):
    """The template's expressions nest or chain past the evaluation's bounds."""


class Evaluator:
    """The abstract value of every expression of one parsed template (memoised)."""

    def __init__(self, tree: nodes.Template) -> None:
        self.tree = tree
        self.scope = Scope(tree)
        self._memo: dict[int, Value] = {}
        self._name_memo: dict[tuple[str, ...], Value] = {}
        self._active: set[tuple[str, ...]] = set()
        self._depth = 0
        self._steps = 0

    def is_free(self, name: str) -> bool:
        """Read from the render context or Jinja's globals, never bound by the template."""
        return self.scope.is_free(name)

    def value(self, node: nodes.Node | None) -> Value:
        if node is None:
            return NONE_V
        key = id(node)
        cached = self._memo.get(key)
        if cached is not None:
            return cached
        self._steps += 1
        if self._steps > _MAX_STEPS:
            raise TooComplex(f"more than {_MAX_STEPS} evaluation steps")
        self._depth += 1
        if self._depth > _MAX_DEPTH:
            raise TooComplex(f"expressions nested deeper than {_MAX_DEPTH} at line {node.lineno}")
        try:
            result = self._bound(self._evaluate(node))
        finally:
            self._depth -= 1
        self._memo[key] = result
        return result

    def _bound(self, value: Value) -> Value:
        if len(value) <= MAX_VALUES:
            return value
        return unknown(value)

    def _resolve(self, key: tuple[str, ...], sources: Sequence[Source | nodes.Node]) -> Value:
        cached = self._name_memo.get(key)
        if cached is not None:
            return cached
        if key in self._active:
            # A name defined from itself (``set ns.s = ns.s ~ p``): some string
            # built from the other pieces; those still carry their pieces.
            return frozenset({BUILT})
        self._active.add(key)
        self._depth += 1
        if self._depth > _MAX_DEPTH:
            raise TooComplex(f"names defined through more than {_MAX_DEPTH} steps ({key[-1]!r})")
        try:
            result: set[Atom] = set()
            for source in sources:
                result |= self._source_value(source) if not isinstance(source, nodes.Node) else self.value(source)
        finally:
            self._depth -= 1
            self._active.discard(key)
        value = self._bound(frozenset(result))
        self._name_memo[key] = value
        return value

    def _source_value(self, source: Source) -> Value:
        if isinstance(source, FromExpr):
            return self.value(source.node)
        if isinstance(source, FromElements):
            return self._elements(source.node)
        if isinstance(source, FromUnpack):
            return self._unpack(source)
        if isinstance(source, FromParam):
            return self._param(source)
        if isinstance(source, FromBlock):
            return self._block(source.body)
        return DATA_V

    def _name(self, name: str) -> Value:
        if name == "loop" and "loop" not in self.scope.bindings:
            return frozenset({LOOP})
        sources = self.scope.bindings.get(name)
        if sources is None:
            # A Jinja global (cycler, joiner, namespace, lipsum, range, dict, self...):
            # whatever is bound to it or taken from it still reaches its internals.
            return frozenset({("glob", name)}) if name in GADGETS and name not in self.scope.macros else DATA_V
        value = self._resolve(("name", name), sources)
        return value | DATA_V if name in CONTEXT_NAMES else value

    def _param(self, source: FromParam) -> Value:
        calls = self.scope.macro_calls.get(source.macro, [])
        if source.macro in self.scope.macro_values or not calls:
            return DATA_V
        parts: list[Value] = []
        for call in calls:
            if call.dyn_args is not None or call.dyn_kwargs is not None:
                return DATA_V
            if source.index < len(call.args):
                parts.append(self.value(call.args[source.index]))
                continue
            for kw in call.kwargs:
                if kw.key == source.name:
                    parts.append(self.value(kw.value))
                    break
            else:
                parts.append(self.value(source.default) if source.default is not None else NONE_V)
        return frozenset().union(*parts)

    def _block(self, body: Sequence[nodes.Node]) -> Value:
        """``{% set x %}...{% endset %}``: the text, when it is all constant."""
        outputs = [n for n in body if isinstance(n, nodes.Output)]
        if len(outputs) == len(body):
            return self._concat([child for out in outputs for child in out.nodes])
        strings: list[Value] = [self.value(n) for stmt in body for n in walk(stmt) if isinstance(n, nodes.Expr)]
        return unknown(*strings)

    def _macro_output(self, name: str) -> Value:
        """What a macro call returns: its text, carrying the pieces of the macro's constants."""
        parts = [
            self.value(n) for n in walk(self.scope.macros[name]) if isinstance(n, nodes.Const | nodes.TemplateData)
        ]
        return DATA_V | unknown(*parts)

    def _elements(self, node: nodes.Node) -> Value:
        callee = node.node if isinstance(node, nodes.Call) else None
        if isinstance(callee, nodes.Name) and callee.name == "range" and self.is_free("range"):
            return NUM_V
        return elements_of(self.value(node))

    def _unpack(self, source: FromUnpack) -> Value:
        node = source.node
        if not source.elements and isinstance(node, nodes.Tuple | nodes.List):
            if len(node.items) == source.count:
                return self.value(node.items[source.index])
            return DATA_V
        items = self._elements(node) if source.elements else self.value(node)
        result: set[Atom] = set()
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
                result.add(ELEM)
            else:
                result |= unknown(frozenset({atom})) | {ELEM}
        return frozenset(result)

    def _concat(self, parts: Sequence[nodes.Node]) -> Value:
        acc: Value = const("")
        for part in parts:
            acc = fold_pairs(acc, self.value(part), concat_pair)
        return acc

    def _evaluate(self, node: nodes.Node) -> Value:
        if isinstance(node, nodes.Const):
            value = node.value
            if isinstance(value, str | int | float | bool) or value is None:
                return const(value)
            return DATA_V
        if isinstance(node, nodes.TemplateData):
            return const(node.data)
        if isinstance(node, nodes.Name):
            return self._name(node.name)
        if isinstance(node, nodes.List | nodes.Tuple):
            return sequence([self.value(item) for item in node.items])
        if isinstance(node, nodes.Dict):
            return frozenset({("map", tuple((self.value(p.key), self.value(p.value)) for p in node.items))})
        if isinstance(node, nodes.Concat):
            return self._concat(node.nodes)
        if isinstance(node, nodes.CondExpr):
            return self.value(node.expr1) | self.value(node.expr2)
        if isinstance(node, nodes.And | nodes.Or):
            return self.value(node.left) | self.value(node.right)
        if isinstance(node, nodes.Compare | nodes.Not | nodes.Test):
            return BOOL_V
        if isinstance(node, nodes.MarkSafe | nodes.MarkSafeIfAutoescape):
            return self.value(node.expr)
        if isinstance(node, nodes.BinExpr):
            return self._binary(node)
        if isinstance(node, nodes.Neg | nodes.Pos):
            negate = isinstance(node, nodes.Neg)
            result: set[Atom] = set()
            for atom in self.value(node.node):
                number = atom[1] if atom[0] == "c" else None
                if isinstance(number, int | float) and not isinstance(number, bool):
                    result.add(("c", -number if negate else number))
                else:
                    result.add(NUM)
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
            return DATA_V
        return DATA_V

    def _binary(self, node: nodes.BinExpr) -> Value:
        left, right = self.value(node.left), self.value(node.right)
        op = node.operator
        if op in ("+", "*", "%"):
            return fold_pairs(left, right, lambda a, b: arith_pair(op, a, b))
        if numeric(left) and numeric(right):
            return NUM_V
        return unknown(left, right)

    def _getattr(self, node: nodes.Getattr) -> Value:
        if isinstance(node.node, nodes.Name):
            # ``ns.x`` of ``set ns = namespace(x=...)`` / ``set ns.x = ...``.
            sources = self.scope.ns_bindings.get((node.node.name, node.attr))
            if sources is not None:
                return self._resolve(("ns", node.node.name, node.attr), sources)
        result: set[Atom] = set()
        for atom in self.value(node.node):
            if atom == LOOP:
                if node.attr in LOOP_NUMBERS:
                    result.add(NUM)
                elif node.attr in ("first", "last"):
                    result |= BOOL_V
                else:
                    result.add(DATA)
            elif atom[0] == "map":
                result |= lookup(atom, const(node.attr))
            else:
                result |= unknown(frozenset({atom}))
        return frozenset(result) if result else DATA_V

    def _getitem(self, node: nodes.Getitem) -> Value:
        base = self.value(node.node)
        if isinstance(node.arg, nodes.Slice):
            bounds = [
                self.value(p) if p is not None else NONE_V for p in (node.arg.start, node.arg.stop, node.arg.step)
            ]
            return slice_of(base, bounds)
        key = self.value(node.arg)
        result: set[Atom] = set()
        for atom in base:
            if atom[0] == "map":
                result |= lookup(atom, key)
            elif atom[0] in ("c", "t"):
                result |= index_of(atom, key)
            elif atom[0] == "seq" and isinstance(atom[1], frozenset):
                result |= atom[1]
            else:
                result |= unknown(frozenset({atom}))
        return frozenset(result) if result else DATA_V

    def _args(self, node: nodes.Call | nodes.Filter) -> list[Value]:
        values = [self.value(a) for a in node.args]
        values += [self.value(value) for _key, value in keyword_args(node)]
        if node.dyn_args is not None:
            values.append(self.value(node.dyn_args))
        if node.dyn_kwargs is not None:
            values.append(self.value(node.dyn_kwargs))
        return values

    def _call(self, node: nodes.Call) -> Value:
        callee = node.node
        args = self._args(node)
        if isinstance(callee, nodes.Name):
            name = callee.name
            if name in self.scope.macros and name not in self.scope.bindings:
                return self._macro_output(name)
            if self.is_free(name):
                if name == "range":
                    return frozenset({("seq", NUM_V)})
                if name == "dict":
                    return frozenset({("map", tuple((const(kw.key), self.value(kw.value)) for kw in node.kwargs))})
                if name in GADGETS:
                    # namespace(...), cycler(...), joiner(...): objects whose class leads to globals.
                    return unknown(*args) | {("glob", name)}
            return unknown(*args) | DATA_V
        if isinstance(callee, nodes.Getattr):
            receiver = self.value(callee.node)
            method = callee.attr
            if LOOP in receiver and method == "cycle":
                return frozenset().union(*args) if args else DATA_V
            folded = call_method(receiver, method, node, [self.value(a) for a in node.args])
            if folded is not None:
                return folded
            return unknown(receiver, *args)
        return unknown(self.value(callee), *args)

    def _filter(self, node: nodes.Filter) -> Value:
        subject = self.value(node.node) if node.node is not None else DATA_V
        args = [self.value(a) for a in node.args]
        kwargs = {key: self.value(value) for key, value in keyword_args(node)}
        name = node.name
        if name in NUMERIC_FILTERS:
            return NUM_V
        if name in ("default", "d"):
            return subject | (args[0] if args else const(""))
        if name in ("string", "e", "escape", "safe", "forceescape"):
            # A list, dict or object as text is a new string (``(['__x__']|string)[2:7]``):
            # unknown, carrying the pieces that went into it.
            return frozenset().union(
                *(
                    const(str_of(a)) if a[0] == "c" and str_of(a) is not None else unknown(frozenset({a}))
                    for a in subject
                )
            )
        if name == "trim" and args:
            chars = [str_of(a) if a[0] == "c" else None for a in args[0]]
            if len(chars) != 1 or chars[0] is None or len(args) > 1:
                return unknown(subject, *args)
            strip_chars = chars[0]
            return map_strings(subject, lambda s: s.strip(strip_chars))
        if name in ("lower", "upper", "trim", "title", "capitalize"):
            method = {"trim": "strip"}.get(name, name)
            return map_strings(subject, lambda s: str(getattr(s, method)()))
        if name == "reverse":
            return reverse_of(subject)
        if name == "list":
            return list_of(subject)
        if name in ("first", "last"):
            picked = index_all(subject, 0 if name == "first" else -1)
            return picked if picked is not None else unknown(subject)
        if name == "join" and "attribute" not in kwargs and node.dyn_args is None and node.dyn_kwargs is None:
            delimiter = args[0] if args else kwargs.get("d", const(""))
            return join_of(subject, delimiter)
        if name == "replace" and 2 <= len(args) <= 3 and not kwargs:
            return replace_in(subject, args[0], args[1])
        if name == "format" and not kwargs:
            return printf(subject, sequence(args) if len(args) != 1 else args[0])
        if name in ("items", "dictsort"):
            return frozenset({("seq", frozenset(items_of(subject)))})
        return unknown(subject, *args, *kwargs.values(), reverse=name in ("sort", "unique"))
