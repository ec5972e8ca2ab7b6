"""How much work a template's loops can ask of a render, judged from the tree, whatever gates them.

A render is only as long as the conversation it is given: a loop of 10**8
behind ``{% if 'xyzzy' in messages[-1].content %}`` or ``messages|length == 7``
never runs for the conversations the audit renders, and runs for the one
conversation an attacker sends. So the loops are counted without rendering:

- ``{% for %}`` over ``range(...)`` of constants (folded through ``+ - * // % **``,
  negation and names ``set`` to constants) or over a literal list runs that many
  times; over the conversation itself (``messages``, ``tools``, ``documents``, a
  name ``set`` from them, ``range(messages|length)``) :data:`CONVERSATION_ITEMS`
  times, since the caller chooses its length; over a part of an enclosing loop's
  item (``message.tool_calls``) or anything else once: its length is already paid
  for by the loop that holds it;
- nested loops multiply; of the branches of an ``{% if %}`` the costliest counts
  (the gate is ignored: it may open); a macro costs its body at each call;
- a string or list repeated by a constant (``x * 100000 * 100000``) costs the
  repetition; ``range(N)`` outside a loop costs ``N``;
- a macro that calls itself, directly or through others, with its own arguments, constants or arithmetic
  on them has no bound (passing a part of its data, ``x.items`` or a loop variable over it, ends with
  the data, as the JSON-schema macros of tool-calling templates do).

:func:`template_cost_reasons` says why a template is past :data:`MAX_ITERATIONS`
(empty when it is not). Counts are capped at :data:`_CAP`, so no folding ever
builds a huge integer.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Final

from jinja2 import nodes

__all__ = ["CONVERSATION_ITEMS", "MAX_ITERATIONS", "template_cost_reasons"]

MAX_ITERATIONS: Final = 10_000_000
"""Loop iterations (or repeated items) a template may ask for. The render child runs a few million simple
Jinja iterations per second, so this is past its 2-second CPU budget; real chat templates loop over the
messages and tools they are given, a few hundred iterations."""
CONVERSATION_ITEMS: Final = 1_000
"""Items a loop over the whole conversation is counted as: a long chat holds hundreds of turns, and the
caller sends as many as it likes. One loop or two nested (10^6) pass; three nested over the conversation
(10^9: cubic in what an attacker sends) do not."""
ROOTS: Final = frozenset({"messages", "tools", "documents"})
"""The render context's collections whose length the caller chooses."""
_CAP: Final = 10**30
_MAX_EXPONENT: Final = 128


def _cap(n: int) -> int:
    return max(-_CAP, min(_CAP, n))


@dataclass(slots=True)
class _Counter:
    macros: dict[str, nodes.Macro]
    constants: dict[str, int] = field(default_factory=dict)
    calling: list[str] = field(default_factory=list)
    recursive: list[tuple[str, int]] = field(default_factory=list)
    worst: tuple[int, int] = (0, 0)
    """(trip count, line) of the largest single loop or repetition seen."""
    roots: set[str] = field(default_factory=lambda: set(ROOTS))
    """Names bound to the conversation: the context's own and those ``set`` from them."""
    enclosing: list[frozenset[str]] = field(default_factory=list)
    """The names each enclosing loop binds (its targets and ``loop``)."""
    over_conversation: bool = False
    """Whether a loop was counted as the conversation's length."""

    # --- constants

    def fold(self, e: nodes.Node) -> int | None:
        """An integer constant ``e`` surely is (None: not a constant the template fixes)."""
        if isinstance(e, nodes.Const):
            value = e.value
            return _cap(value) if isinstance(value, int) and not isinstance(value, bool) else None
        if isinstance(e, nodes.Neg):
            inner = self.fold(e.node)
            return None if inner is None else -inner
        if isinstance(e, nodes.Pos):
            return self.fold(e.node)
        if isinstance(e, nodes.Name):
            return self.constants.get(e.name)
        if isinstance(e, nodes.BinExpr):
            return self._fold_binary(e)
        if isinstance(e, nodes.Filter) and e.name == "int" and e.node is not None:
            return self.fold(e.node)
        return None

    def _fold_binary(self, e: nodes.BinExpr) -> int | None:
        left, right = self.fold(e.left), self.fold(e.right)
        if left is None or right is None:
            return None
        if isinstance(e, nodes.Add):
            return _cap(left + right)
        if isinstance(e, nodes.Sub):
            return _cap(left - right)
        if isinstance(e, nodes.Mul):
            return _cap(left * right)
        if isinstance(e, nodes.Pow):
            if right < 0 or right > _MAX_EXPONENT or abs(left) > _CAP:
                return _CAP if right > 0 and abs(left) > 1 else None
            return _cap(left**right)
        if isinstance(e, nodes.FloorDiv) and right != 0:
            return left // right
        if isinstance(e, nodes.Mod) and right != 0:
            return left % right
        return None

    def repeat(self, e: nodes.Node) -> int:
        """How many items ``e`` surely repeats to: ``x * N`` with ``x`` runtime data counts ``N``."""
        if isinstance(e, nodes.Mul):
            left, right = self.repeat(e.left), self.repeat(e.right)
            return _cap(max(left, 1) * max(right, 1)) if (left > 1 or right > 1) else 0
        n = self.fold(e)
        return n if n is not None and n > 1 else 0

    def trips(self, iterable: nodes.Node) -> int:
        """Times a loop over ``iterable`` surely runs (1 for runtime data)."""
        if isinstance(iterable, nodes.Call) and isinstance(iterable.node, nodes.Name) and iterable.node.name == "range":
            return self._range_length(iterable)
        if isinstance(iterable, nodes.List | nodes.Tuple):
            return max(1, len(iterable.items))
        if isinstance(iterable, nodes.Filter) and iterable.node is not None:
            return self.trips(iterable.node)  # |batch, |list, |reverse keep (or shrink) the count
        if isinstance(iterable, nodes.Mul):
            return max(1, self.repeat(iterable))
        return self._data_trips(iterable)

    def _data_trips(self, e: nodes.Node) -> int:
        """:data:`CONVERSATION_ITEMS` for the conversation itself, 1 for a part of an enclosing loop's item."""
        if not self._from_conversation(e):
            return 1
        self.over_conversation = True
        return CONVERSATION_ITEMS

    def _from_conversation(self, e: nodes.Node) -> bool:
        """Whether ``e`` reads the conversation, not through an enclosing loop's item."""
        names = {n.name for n in _walk(e) if isinstance(n, nodes.Name)}
        return bool(names & self.roots) and not any(names & bound for bound in self.enclosing)

    def _range_length(self, call: nodes.Call) -> int:
        bounds = [self.fold(a) for a in call.args]
        if not bounds or any(b is None for b in bounds) or len(bounds) > 3:
            # range(messages|length * 100000): the conversation's length counts as CONVERSATION_ITEMS
            return max([1, *(self.repeat(a) for a in call.args), *(self._data_trips(a) for a in call.args)])
        ints = [b for b in bounds if b is not None]
        start, stop, step = (0, ints[0], 1) if len(ints) == 1 else (ints[0], ints[1], ints[2] if len(ints) > 2 else 1)
        if step == 0:
            return 1
        return max(0, _cap((stop - start + step - (1 if step > 0 else -1)) // step))

    # --- costs

    def note(self, n: int, node: nodes.Node) -> None:
        if n > self.worst[0]:
            self.worst = (n, node.lineno)

    def expr_cost(self, e: nodes.Node) -> int:
        """Work an expression asks for: macro calls, ``range(N)``, constant repetitions."""
        total = 0
        for node in _walk(e):
            if isinstance(node, nodes.Call) and isinstance(node.node, nodes.Name):
                if node.node.name in self.macros:
                    total += self.macro_cost(node.node.name, node)
                elif node.node.name == "range":
                    n = self._range_length(node)
                    self.note(n, node)
                    total += n
            elif isinstance(node, nodes.Mul) and self.fold(node) is None:  # constant arithmetic repeats nothing
                n = self.repeat(node)
                self.note(n, node)
                total += n
        return _cap(total)

    def macro_cost(self, name: str, at: nodes.Call) -> int:
        if name in self.calling:
            if not _descends(at, self.macros[self.calling[-1]]):
                self.recursive.append((name, at.lineno))
            return 0
        self.calling.append(name)
        try:
            return self.body_cost(self.macros[name].body)
        finally:
            self.calling.pop()

    def body_cost(self, body: list[nodes.Node]) -> int:
        return _cap(sum(self.stmt_cost(s) for s in body))

    def stmt_cost(self, s: nodes.Node) -> int:
        if isinstance(s, nodes.Macro):
            return 0  # counted where it is called
        if isinstance(s, nodes.For):
            n = self.trips(s.iter)
            self.note(n, s)
            bound = frozenset({"loop", *(t.name for t in _walk(s.target) if isinstance(t, nodes.Name))})
            self.enclosing.append(bound)
            try:
                inner = self.body_cost(s.body)
            finally:
                self.enclosing.pop()
            extra = self.expr_cost(s.iter) if not _is_range_call(s.iter) else 0
            return _cap(n * max(1, inner) + self.body_cost(s.else_) + extra)
        if isinstance(s, nodes.If):
            branches = [self.body_cost(s.body), self.body_cost(s.else_)]
            branches += [self.stmt_cost(branch) for branch in s.elif_]
            return _cap(self.expr_cost(s.test) + max(branches))
        if isinstance(s, nodes.Assign) and isinstance(s.target, nodes.Name):
            if self._from_conversation(s.node):
                self.roots.add(s.target.name)  # {% set loop_messages = messages[1:] %}
            value = self.fold(s.node)
            if value is not None:
                self.constants[s.target.name] = max(value, self.constants.get(s.target.name, value))
        if isinstance(s, nodes.CallBlock) and isinstance(s.call.node, nodes.Name) and s.call.node.name in self.macros:
            return _cap(self.macro_cost(s.call.node.name, s.call) + self.body_cost(s.body))
        total = 0
        for child in s.iter_child_nodes():
            total += self.expr_cost(child) if isinstance(child, nodes.Expr) else self.stmt_cost(child)
        return _cap(total)


def _descends(call: nodes.Call, caller: nodes.Macro) -> bool:
    """Whether a recursive call passes a part of its data (``x.items``, ``x[k]``, a loop variable over it).

    Such recursion ends where the data does, as the JSON-schema macros of tool-calling templates do;
    a call passing its own arguments again, or constants, or arithmetic on them, never ends.
    """
    loop_names = {
        n.name for loop in _walk(caller) if isinstance(loop, nodes.For) for n in _walk(loop.target)
        if isinstance(n, nodes.Name)
    }  # fmt: skip
    args: list[nodes.Node] = [*call.args, *(kw.value for kw in call.kwargs if isinstance(kw, nodes.Keyword))]
    for arg in args:
        for node in _walk(arg):
            if isinstance(node, nodes.Getattr | nodes.Getitem):
                return True
            if isinstance(node, nodes.Name) and node.name in loop_names:
                return True
    return False


def _is_range_call(e: nodes.Node) -> bool:
    return isinstance(e, nodes.Call) and isinstance(e.node, nodes.Name) and e.node.name == "range"


def _walk(root: nodes.Node) -> Iterator[nodes.Node]:
    stack: list[nodes.Node] = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.iter_child_nodes())


def template_cost_reasons(tree: nodes.Template) -> list[str]:
    """Why the template's loops can ask a render for more than :data:`MAX_ITERATIONS` (empty: they cannot).

    Raises ``RecursionError`` for a tree nested past Python's stack (the caller judges that).
    """
    macros = {m.name: m for m in _walk(tree) if isinstance(m, nodes.Macro)}
    counter = _Counter(macros)
    total = counter.body_cost(tree.body)
    reasons = []
    if counter.recursive:
        name, line = counter.recursive[0]
        reasons.append(f"line {line}: macro {name!r} calls itself: its renders have no bound")
    if total > MAX_ITERATIONS:
        shown = f"{total:.1e}" if total < _CAP else f"more than {_CAP:.0e}"
        largest, line = counter.worst
        assumed = (
            f", a loop over the conversation counted as {CONVERSATION_ITEMS:,} items"
            if counter.over_conversation
            else ""
        )
        reasons.append(
            f"its loops can run {shown} iterations (the largest {largest:.1e}, line {line}{assumed}), past the "
            f"{MAX_ITERATIONS:.0e} a render may: found without rendering, whatever condition gates them"
        )
    return reasons
