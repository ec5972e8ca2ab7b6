"""Helpers over a parsed Jinja tree: walking it, keyword arguments, and expressions as text for messages."""

from __future__ import annotations

from collections.abc import Iterator

from jinja2 import nodes

__all__ = ["expr_text", "keyword_args", "walk"]


def expr_text(node: nodes.Node | None, depth: int = 0) -> str:
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
        text = f"{expr_text(node.node, depth + 1)}.{node.attr}"
    elif isinstance(node, nodes.Getitem):
        text = f"{expr_text(node.node, depth + 1)}[{expr_text(node.arg, depth + 1)}]"
    elif isinstance(node, nodes.Slice):
        text = ":".join("" if p is None else expr_text(p, depth + 1) for p in (node.start, node.stop, node.step))
    elif isinstance(node, nodes.Call):
        text = f"{expr_text(node.node, depth + 1)}(...)"
    elif isinstance(node, nodes.Filter):
        text = f"{expr_text(node.node, depth + 1)}|{node.name}"
    elif isinstance(node, nodes.Concat):
        text = " ~ ".join(expr_text(n, depth + 1) for n in node.nodes)
    elif isinstance(node, nodes.BinExpr):
        text = f"{expr_text(node.left, depth + 1)} {node.operator} {expr_text(node.right, depth + 1)}"
    else:
        text = f"<{type(node).__name__.lower()}>"
    return text if len(text) <= 80 else text[:77] + "..."


def keyword_args(node: nodes.Call | nodes.Filter) -> list[tuple[str, nodes.Expr]]:
    """Keyword arguments as (name, value). jinja2 types Filter.kwargs as Pairs; the parser makes Keywords."""
    pairs: list[tuple[str, nodes.Expr]] = []
    for kw in node.kwargs:
        key, value = getattr(kw, "key", None), getattr(kw, "value", None)
        if isinstance(key, str) and isinstance(value, nodes.Expr):
            pairs.append((key, value))
    return pairs


def walk(root: nodes.Node) -> Iterator[nodes.Node]:
    """Every node under ``root``, iteratively (filter chains can be thousands deep)."""
    stack: list[nodes.Node] = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(node.iter_child_nodes())
