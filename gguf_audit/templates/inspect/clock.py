"""Control flow that depends on the date: a branch the audit's fixed clock never opens.

The render audit renders with one clock (:mod:`gguf_audit.templates.environment`
fixes ``strftime_now`` at one date, so a file always renders the same text). A
template can hide a payload behind ``{% if strftime_now('%Y')|int > 2024 %}``:
every audit render takes the other branch, and every runtime after that date
renders the payload. So any condition that *compares or computes* on the date
is named without rendering: the test of an ``{% if %}``, of a ``x if ... else
y`` or of a loop's ``if``, when a comparison, an arithmetic step, a test or a
number filter in it reads ``strftime_now(...)``, a name ``set`` from it
(``{% set y = strftime_now('%Y') %}``, ``ns.year``, a ``{% set %}`` block) or a
macro that returns it. Printing the date (Llama 3.1's ``Today Date:``) and
asking whether it is defined (``date_string is defined``) are ordinary.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Final

from jinja2 import nodes

__all__ = ["date_gate_reasons"]

_CLOCK: Final = "strftime_now"
_HARMLESS_TESTS: Final = frozenset({"defined", "undefined", "none", "string"})
"""Tests whose answer does not change with the date's value."""
_NUMBER_FILTERS: Final = frozenset({"int", "float", "length", "count", "abs", "round"})
_ARITHMETIC: Final = (nodes.Add, nodes.Sub, nodes.Mul, nodes.Div, nodes.FloorDiv, nodes.Mod, nodes.Pow)
"""Steps that compute on a value (``and``/``or`` only combine conditions)."""
_MAX_REASONS: Final = 5


def _walk(root: nodes.Node) -> Iterator[nodes.Node]:
    stack: list[nodes.Node] = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.iter_child_nodes())


class _Clock:
    """Which names, namespace attributes and macros carry the date."""

    def __init__(self, tree: nodes.Template) -> None:
        self.names: set[str] = set()
        self.macros: set[str] = set()
        # Flow-insensitive, to a fixed point: a name set from a name set from the clock carries it too.
        changed = True
        while changed:
            changed = False
            for node in _walk(tree):
                for carried in self._carried_by(node):
                    if carried not in self.names and carried not in self.macros:
                        (self.macros if isinstance(node, nodes.Macro) else self.names).add(carried)
                        changed = True

    def _carried_by(self, node: nodes.Node) -> list[str]:
        if isinstance(node, nodes.Assign) and self.reads(node.node):
            return _target_names(node.target)
        if isinstance(node, nodes.AssignBlock) and any(self.reads(b) for b in node.body):
            return _target_names(node.target)
        if isinstance(node, nodes.Macro) and any(self.reads(b) for b in node.body):
            return [node.name]
        return []

    def reads(self, e: nodes.Node) -> bool:
        """Whether ``e`` reads the date."""
        return any(self._carries(node) for node in _walk(e))

    def _carries(self, node: nodes.Node) -> bool:
        if isinstance(node, nodes.Call) and isinstance(node.node, nodes.Name):
            return node.node.name == _CLOCK or node.node.name in self.macros
        if isinstance(node, nodes.Name):
            return node.name in self.names
        if isinstance(node, nodes.Getattr) and isinstance(node.node, nodes.Name):
            return f"{node.node.name}.{node.attr}" in self.names
        return False

    def gates(self, test: nodes.Node) -> bool:
        """Whether the condition ``test`` computes on the date: a comparison, arithmetic, a test or a number
        filter over something that reads it."""
        for node in _walk(test):
            if isinstance(node, nodes.Test) and node.name in _HARMLESS_TESTS:
                continue
            if isinstance(node, nodes.Compare) and (
                self.reads(node.expr) or any(self.reads(op.expr) for op in node.ops)
            ):
                return True
            if isinstance(node, (*_ARITHMETIC, nodes.Test)) and self.reads(node):
                return True
            if isinstance(node, nodes.Filter) and node.name in _NUMBER_FILTERS and self.reads(node):
                return True
        return False


def _target_names(target: nodes.Node) -> list[str]:
    if isinstance(target, nodes.Name):
        return [target.name]
    if isinstance(target, nodes.NSRef):
        return [f"{target.name}.{target.attr}"]
    return [n.name for n in _walk(target) if isinstance(n, nodes.Name)]


def _tests(tree: nodes.Template) -> Iterator[tuple[nodes.Node, int]]:
    """Every condition of the template, with its line."""
    for node in _walk(tree):
        if isinstance(node, nodes.If | nodes.CondExpr | nodes.For) and node.test is not None:
            yield node.test, node.lineno


def date_gate_reasons(tree: nodes.Template) -> list[str]:
    """Why the template's control flow depends on the date (empty: it does not)."""
    clock = _Clock(tree)
    lines = sorted({line for test, line in _tests(tree) if clock.gates(test)})
    return [
        f"line {line}: a condition computes on the date (strftime_now): a branch that opens only at another date "
        "is never rendered by the audit, whose clock is fixed"
        for line in lines[:_MAX_REASONS]
    ]
