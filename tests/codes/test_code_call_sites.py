"""Call sites name codes as :class:`~gguf_audit.codes.Code` members, never as bare strings.

Every module of ``gguf_audit/`` and ``pipelines/`` (the registry's own package aside) is read with
:mod:`ast`. Two rules, so a misspelt or unregistered code fails here rather than on the path that emits it:

- no string literal is a registered code (``"data.truncated"`` is ``Code.DATA_TRUNCATED``);
- no string literal stands where a code is expected: the first argument of :data:`CODE_TAKERS`, a
  ``code=`` keyword, or a comparison with a ``.code`` attribute (``f.code == "data.truncatd"``).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from corpus import REPO

from gguf_audit.codes import CODES

SOURCE_ROOTS = ("gguf_audit", "pipelines")
REGISTRY = REPO / "gguf_audit" / "codes"
PIPELINES_LINK = REPO / "gguf_audit" / "pipelines"  # pipelines/ under its package name: read once, as pipelines/

CODE_TAKERS = frozenset({"finding", "FormatError", "SourceError", "_failed_audit", "lost_result"})
"""Callables whose first argument (after ``batch, options`` for ``lost_result``) is a finding code."""

_CODE_ARG_INDEX = {"lost_result": 2}

# What a code looks like: a bare string shaped so beside ``.code`` is a code spelt by hand.
_CODE_SHAPE = re.compile(r"^[a-z][a-z0-9_]*\.[a-z0-9_]+$")


@dataclass(frozen=True, slots=True)
class BareCode:
    """A string literal where a Code member belongs."""

    where: str
    text: str
    why: str

    def __str__(self) -> str:
        return f"{self.where}: {self.text!r} ({self.why})"


def _docstrings(tree: ast.AST) -> set[int]:
    found: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            for stmt in node.body:
                if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                    found.add(id(stmt.value))  # attribute docstrings too: a string statement never runs
    return found


def _strings(node: ast.expr) -> Iterator[ast.Constant]:
    """The string literals of ``node``, or of the tuple, list or set it is."""
    items = node.elts if isinstance(node, ast.Tuple | ast.List | ast.Set) else [node]
    for item in items:
        if isinstance(item, ast.Constant) and isinstance(item.value, str):
            yield item


def _callee(call: ast.Call) -> str | None:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else None


def _is_code_attribute(node: ast.expr) -> bool:
    return isinstance(node, ast.Attribute) and node.attr in ("code", "error_code")


def bare_codes(source: str, where: str) -> list[BareCode]:
    """Every string literal of ``source`` that is, or stands where there should be, a Code member."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    found: dict[tuple[int, int], BareCode] = {}

    def report(node: ast.Constant, why: str) -> None:
        found.setdefault((node.lineno, node.col_offset), BareCode(f"{where}:{node.lineno}", node.value, why))

    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if node.value in CODES:
                report(node, "a registered code: name its Code member")
        elif isinstance(node, ast.Call):
            index = _CODE_ARG_INDEX.get(_callee(node) or "", 0)
            if _callee(node) in CODE_TAKERS and len(node.args) > index:
                for s in _strings(node.args[index]):
                    report(s, f"the code argument of {_callee(node)}()")
            for kw in node.keywords:
                if kw.arg == "code":
                    for s in _strings(kw.value):
                        report(s, "a code= argument")
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(_is_code_attribute(op) for op in operands):
                for op in operands:
                    for s in _strings(op):
                        if _CODE_SHAPE.match(s.value):
                            report(s, "compared with a .code")
    return sorted(found.values(), key=lambda b: b.where)


def _modules() -> Iterator[Path]:
    for root in SOURCE_ROOTS:
        for path in sorted((REPO / root).rglob("*.py")):
            if not path.resolve().is_relative_to(REGISTRY) and not path.is_relative_to(
                REPO / "gguf_audit" / "pipelines"
            ):
                yield path


def test_no_code_is_a_bare_string() -> None:
    bare = [
        str(b) for path in _modules() for b in bare_codes(path.read_text(encoding="utf-8"), str(path.relative_to(REPO)))
    ]
    assert bare == [], "write codes as Code members (gguf_audit/codes/code.py):\n" + "\n".join(bare)


def test_the_scan_sees_what_it_must() -> None:
    """The reading itself: a typo where a code belongs and a registered code anywhere are found; docstrings,
    metadata keys and other comparisons are not."""
    source = '''
"""Mentions data.truncated in a docstring."""
X = "data.truncated"
def f(g):
    """data.truncated"""
    finding("data.truncatd", "m")
    FormatError(code="header.bad_magik", message="m")
    lost_result(batch, options, "run.worker_lots", "m")
    if g.code == "io.not_fuond" or g.code in ("io.timeout", "NoSuchBucket"):
        return g.get("tokenizer.chat_template")
    return g.status == "ok.fine"
'''
    found = {(b.where, b.text) for b in bare_codes(source, "m.py")}
    assert found == {
        ("m.py:3", "data.truncated"),
        ("m.py:6", "data.truncatd"),
        ("m.py:7", "header.bad_magik"),
        ("m.py:8", "run.worker_lots"),
        ("m.py:9", "io.not_fuond"),
        ("m.py:9", "io.timeout"),
    }
