"""Where each name of a template gets its value: every ``set``, ``for``, ``with``, macro and namespace binding.

Collected once per template and flow-insensitively: a name can be any of the
values its bindings give it, wherever it is read.
"""

from __future__ import annotations

from dataclasses import dataclass

from jinja2 import nodes

from gguf_audit.templates.inspect.tree import walk

__all__ = ["FromBlock", "FromElements", "FromExpr", "FromParam", "FromUnpack", "Opaque", "Scope", "Source"]


@dataclass(eq=False, slots=True)
class FromExpr:
    """Bound to an expression's value (``set x = ...``, ``with x = ...``)."""

    node: nodes.Node


@dataclass(eq=False, slots=True)
class FromElements:
    """A ``for`` variable: bound to each element of an expression."""

    node: nodes.Node


@dataclass(eq=False, slots=True)
class FromUnpack:
    """One name of a tuple target, unpacked from an expression or from its elements."""

    node: nodes.Node
    index: int
    count: int
    elements: bool
    """True for a ``for`` target (unpack each element), False for ``set a, b = ...``."""


@dataclass(eq=False, slots=True)
class FromParam:
    """A macro argument: whatever the macro's calls pass, or the default."""

    macro: str
    index: int
    name: str
    default: nodes.Expr | None


@dataclass(eq=False, slots=True)
class FromBlock:
    """``{% set x %}...{% endset %}``: bound to the block's text."""

    body: list[nodes.Node]


@dataclass(eq=False, slots=True)
class Opaque:
    """Bound to something the inspection does not follow: runtime data."""


Source = FromExpr | FromElements | FromUnpack | FromParam | FromBlock | Opaque


class Scope:
    """Every binding of one parsed template, by name, namespace attribute, macro and block."""

    def __init__(self, tree: nodes.Template) -> None:
        self.bindings: dict[str, list[Source]] = {}
        self.ns_bindings: dict[tuple[str, str], list[nodes.Node]] = {}
        self.macros: dict[str, nodes.Macro] = {}
        self.macro_calls: dict[str, list[nodes.Call]] = {}
        self.macro_values: set[str] = set()
        self.blocks: set[str] = set()
        self._collect(tree)

    def _bind(self, name: str, source: Source) -> None:
        self.bindings.setdefault(name, []).append(source)

    def _bind_target(self, target: nodes.Node, node: nodes.Node, *, elements: bool) -> None:
        if isinstance(target, nodes.Name):
            self._bind(target.name, FromElements(node) if elements else FromExpr(node))
        elif isinstance(target, nodes.Tuple):
            count = len(target.items)
            for index, item in enumerate(target.items):
                if isinstance(item, nodes.Name):
                    self._bind(item.name, FromUnpack(node, index, count, elements))
                else:
                    for name in item.find_all(nodes.Name):
                        self._bind(name.name, Opaque())
        elif isinstance(target, nodes.NSRef):
            self.ns_bindings.setdefault((target.name, target.attr), []).append(node)

    def _collect(self, tree: nodes.Template) -> None:
        callees: set[int] = set()
        loads: list[nodes.Name] = []
        for node in walk(tree):
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
                    self._bind(node.target.name, FromBlock(node.body) if node.filter is None else Opaque())
                elif isinstance(node.target, nodes.NSRef):
                    self.ns_bindings.setdefault((node.target.name, node.target.attr), [])
            elif isinstance(node, nodes.For):
                self._bind_target(node.target, node.iter, elements=True)
            elif isinstance(node, nodes.Macro):
                self.macros[node.name] = node
                offset = len(node.args) - len(node.defaults)
                for index, arg in enumerate(node.args):
                    default = node.defaults[index - offset] if index >= offset else None
                    self._bind(arg.name, FromParam(node.name, index, arg.name, default))
                for implicit in ("varargs", "kwargs", "caller"):
                    self._bind(implicit, Opaque())
            elif isinstance(node, nodes.CallBlock):
                for arg in node.args:
                    self._bind(arg.name, Opaque())
            elif isinstance(node, nodes.With):
                for target, value in zip(node.targets, node.values, strict=False):
                    self._bind_target(target, value, elements=False)
            elif isinstance(node, nodes.Import):
                self._bind(node.target, Opaque())
            elif isinstance(node, nodes.FromImport):
                for entry in node.names:
                    self._bind(entry[1] if isinstance(entry, tuple) else entry, Opaque())
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
