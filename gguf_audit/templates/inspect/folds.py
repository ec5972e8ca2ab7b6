"""Constant folding on abstract values: the string, number and sequence operations templates use.

Each fold computes the result when its inputs are known constants (within
size bounds, never by running the template) and otherwise returns an
:func:`~gguf_audit.templates.inspect.values.unknown` value that still carries
the suspicious pieces that went into it.
"""

from __future__ import annotations

import re
import string
from collections.abc import Callable, Mapping, Sequence
from typing import Final

from jinja2 import nodes

from gguf_audit.templates.inspect.names import STR_METHODS
from gguf_audit.templates.inspect.values import (
    BOOL_V,
    BUILT,
    DATA_V,
    MAX_FOLD_CHARS,
    MAX_SMALL_INT,
    NONE_V,
    NUM_V,
    Atom,
    Value,
    const,
    elements_of,
    is_number,
    items_of,
    lookup,
    payload,
    str_of,
    unknown,
)

__all__ = [
    "arith_pair",
    "call_method",
    "concat_pair",
    "format_fields",
    "index_all",
    "index_of",
    "join_of",
    "list_of",
    "map_strings",
    "printf",
    "replace_in",
    "reverse_of",
    "slice_of",
]

_PRINTF_RE: Final = re.compile(r"%(?:%|[#0\- +]*\d{0,2}(?:\.\d{0,2})?[diouxXeEfFgGcrsa])")
_FORMAT_SPEC_RE: Final = re.compile(r"(?:.?[<>=^])?[+\- ]?#?0?\d{0,2}[,_]?(?:\.\d{0,2})?[bcdeEfFgGnosxX%]?")


def concat_pair(a: Atom, b: Atom) -> Value | None:
    if a[0] == "c" and b[0] == "c":
        left, right = str_of(a), str_of(b)
        if left is not None and right is not None and len(left) + len(right) <= MAX_FOLD_CHARS:
            return const(left + right)
        if left is not None and right is not None and not left:
            return const(right)
        if left is not None and right is not None and not right:
            return const(left)
    return None


def arith_pair(op: str, a: Atom, b: Atom) -> Value | None:
    if a[0] == "num" or b[0] == "num":
        other = b if a[0] == "num" else a
        if other[0] == "num" or (other[0] == "c" and is_number(other[1])):
            return NUM_V
        return None
    if op == "%" and a[0] == "c" and isinstance(a[1], str):
        return printf(frozenset({a}), frozenset({b}))
    if a[0] != "c" or b[0] != "c":
        left, right = a[1] if a[0] == "t" else None, b[1] if b[0] == "t" else None
        if (
            op == "+"
            and isinstance(left, tuple)
            and isinstance(right, tuple)
            and len(left) + len(right) <= MAX_FOLD_CHARS
        ):
            return frozenset({("t", left + right)})
        return None
    x, y = a[1], b[1]
    if op == "+":
        if isinstance(x, str) and isinstance(y, str):
            return const(x + y) if len(x) + len(y) <= MAX_FOLD_CHARS else None
        if is_number(x) and is_number(y):
            return _small_number(x, y, "+")
        return None
    if op == "*":
        if isinstance(x, str) and isinstance(y, int) and not isinstance(y, bool):
            return const(x * y) if y >= 0 and len(x) * y <= MAX_FOLD_CHARS else None
        if isinstance(y, str) and isinstance(x, int) and not isinstance(x, bool):
            return const(y * x) if x >= 0 and len(y) * x <= MAX_FOLD_CHARS else None
        if is_number(x) and is_number(y):
            return _small_number(x, y, "*")
        return None
    if op == "%" and is_number(x) and is_number(y):
        return NUM_V
    return None


def _small_number(x: object, y: object, op: str) -> Value:
    if isinstance(x, int | float) and isinstance(y, int | float) and abs(x) < MAX_SMALL_INT and abs(y) < MAX_SMALL_INT:
        return const(x + y if op == "+" else x * y)
    return NUM_V


def map_strings(value: Value, fn: Callable[[str], str]) -> Value:
    result: set[Atom] = set()
    for atom in value:
        if atom[0] == "c" and isinstance(atom[1], str):
            out = fn(atom[1])
            result.add(("c", out) if len(out) <= MAX_FOLD_CHARS * 3 else BUILT)
        else:
            result |= unknown(frozenset({atom}))
    return frozenset(result)


def reverse_of(value: Value) -> Value:
    result: set[Atom] = set()
    for atom in value:
        if atom[0] == "c" and isinstance(atom[1], str):
            result.add(("c", atom[1][::-1]))
        elif atom[0] == "t" and isinstance(atom[1], tuple):
            result.add(("t", atom[1][::-1]))
        else:
            result |= unknown(frozenset({atom}), reverse=True)
    return frozenset(result)


def list_of(value: Value) -> Value:
    result: set[Atom] = set()
    for atom in value:
        if atom[0] == "c" and isinstance(atom[1], str) and len(atom[1]) <= MAX_FOLD_CHARS:
            result.add(("t", tuple(atom[1])))
        elif atom[0] in ("t", "seq"):
            result.add(atom)
        else:
            result |= unknown(frozenset({atom}))
    return frozenset(result)


def index_of(atom: Atom, key: Value) -> Value:
    result: set[Atom] = set()
    for k in key:
        if k[0] == "c" and isinstance(k[1], int) and not isinstance(k[1], bool):
            picked = index_all(frozenset({atom}), k[1])
            result |= picked if picked is not None else NONE_V
        else:
            result |= unknown(frozenset({atom}))
    return frozenset(result)


def index_all(value: Value, position: int) -> Value | None:
    result: set[Atom] = set()
    for atom in value:
        seq = atom[1] if atom[0] in ("c", "t") else None
        if isinstance(seq, str | tuple):
            if -len(seq) <= position < len(seq):
                result.add(("c", seq[position]))
            else:
                result |= NONE_V
        else:
            return None
    return frozenset(result)


def slice_of(value: Value, bounds: Sequence[Value]) -> Value:
    ints: list[int | None] = []
    for bound in bounds:
        if len(bound) != 1:
            return unknown(value, reverse=True)
        atom = next(iter(bound))
        if atom[0] == "c" and (atom[1] is None or (isinstance(atom[1], int) and not isinstance(atom[1], bool))):
            item = atom[1]
            ints.append(item if isinstance(item, int) else None)
        else:
            return unknown(value, reverse=True)
    if ints[2] == 0:
        return NONE_V
    cut = slice(ints[0], ints[1], ints[2])
    result: set[Atom] = set()
    for atom in value:
        if atom[0] == "c" and isinstance(atom[1], str):
            result.add(("c", atom[1][cut]))
        elif atom[0] == "t" and isinstance(atom[1], tuple):
            result.add(("t", atom[1][cut]))
        elif atom[0] == "seq":
            result.add(atom)
        else:
            result |= unknown(frozenset({atom}), reverse=True)
    return frozenset(result)


def join_of(value: Value, delimiter: Value) -> Value:
    result: set[Atom] = set()
    delimiters = [str_of(d) if d[0] == "c" else None for d in delimiter]
    for atom in value:
        items: tuple[object, ...] | None = None
        if atom[0] == "t" and isinstance(atom[1], tuple):
            items = atom[1]
        elif atom[0] == "c" and isinstance(atom[1], str):
            items = tuple(atom[1])
        if items is None or None in delimiters:
            result |= unknown(frozenset({atom}), delimiter)
            continue
        strings = [str_of(("c", item)) for item in items]
        for d in delimiters:
            if d is None or None in strings:
                result |= unknown(frozenset({atom}), delimiter)
                continue
            joined = d.join(s for s in strings if s is not None)
            result.add(("c", joined) if len(joined) <= MAX_FOLD_CHARS else BUILT)
    return frozenset(result)


def replace_in(value: Value, old: Value, new: Value) -> Value:
    result: set[Atom] = set()
    for atom in value:
        for o in old:
            for n in new:
                s, a, b = payload(atom), payload(o), payload(n)
                if atom[0] == o[0] == n[0] == "c" and isinstance(s, str) and isinstance(a, str) and isinstance(b, str):
                    # Bound before replacing: 'a'*256 with 'a' -> 'b'*256 is 64 kB.
                    count = s.count(a) if a else len(s) + 1
                    if len(s) + count * len(b) <= MAX_FOLD_CHARS:
                        result.add(("c", s.replace(a, b)))
                        continue
                result |= unknown(frozenset({atom}), frozenset({o}), frozenset({n}))
    return frozenset(result)


def printf(fmt: Value, args: Value) -> Value:
    """``fmt % args`` / ``fmt|format(args)`` for short formats of plain conversions."""
    result: set[Atom] = set()
    for f in fmt:
        for a in args:
            text = payload(f)
            # Every '%' must start a plain conversion with a width of at most two
            # digits: '%999999999s' or '%*d' would make the fold itself huge.
            plain = isinstance(text, str) and len(text) <= MAX_FOLD_CHARS and "%" not in _PRINTF_RE.sub("", text)
            if f[0] == "c" and isinstance(text, str) and plain and a[0] in ("c", "t"):
                operand = a[1] if a[0] == "t" else (a[1],)
                try:
                    out = text % operand
                except (TypeError, ValueError, OverflowError):
                    result.add(BUILT)
                    continue
                result.add(("c", out) if len(out) <= MAX_FOLD_CHARS else BUILT)
                continue
            result |= unknown(frozenset({f}), frozenset({a}))
    return frozenset(result)


def format_fields(text: str, depth: int = 0) -> list[str]:
    """Field names of a ``str.format`` string, nested ones included; [] if malformed."""
    fields: list[str] = []
    try:
        for _literal, field, spec, _conversion in string.Formatter().parse(text):
            if field is not None:
                fields.append(field)
            if spec and depth < 2:
                fields += format_fields(spec, depth + 1)
    except ValueError:
        return fields
    return fields


def _str_format(text: str, args: Sequence[Value], kwargs: Mapping[str, Value]) -> Value | None:
    """``text.format(...)`` with constant arguments and plain fields only."""
    if len(text) > MAX_FOLD_CHARS:
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
        return frozenset({BUILT})
    return const(out) if len(out) <= MAX_FOLD_CHARS else frozenset({BUILT})


def call_method(receiver: Value, method: str, node: nodes.Call, args: Sequence[Value]) -> Value | None:
    """Fold the str and dict methods templates use on known receivers; None if not modelled."""
    if node.dyn_args is not None or node.dyn_kwargs is not None:
        return None
    result: set[Atom] = set()
    for atom in receiver:
        text = atom[1] if atom[0] == "c" and isinstance(atom[1], str) else None
        if atom[0] == "map" and method in ("items", "keys", "values", "get"):
            if method == "items":
                result.add(("seq", frozenset(items_of(frozenset({atom})))))
            elif method == "keys":
                result.add(("seq", elements_of(frozenset({atom}))))
            elif method == "values":
                result.add(("seq", lookup(atom, DATA_V)))
            else:
                result |= lookup(atom, args[0] if args else DATA_V) | (args[1] if len(args) > 1 else NONE_V)
            continue
        if text is None:
            return None
        folded: Value | None = None
        if method in STR_METHODS and not args:
            out = getattr(text, method)()
            folded = const(out) if isinstance(out, str) and len(out) <= MAX_FOLD_CHARS * 3 else None
        elif method == "format" and not node.kwargs:
            folded = _str_format(text, args, {})
        elif method == "format":
            kwargs = {kw.key: DATA_V for kw in node.kwargs}
            folded = _str_format(text, args, kwargs)
        elif method == "join" and len(args) == 1:
            folded = join_of(args[0], frozenset({atom}))
        elif method == "replace" and len(args) in (2, 3):
            folded = replace_in(frozenset({atom}), args[0], args[1])
        elif method in ("split", "rsplit") and len(args) <= 2:
            seps = args[0] if args else NONE_V
            parts: set[Atom] = set()
            for sep in seps:
                if sep[0] == "c" and (sep[1] is None or (isinstance(sep[1], str) and sep[1])):
                    pieces = text.split(sep[1] if isinstance(sep[1], str) else None)
                    parts.add(("t", tuple(pieces)) if len(pieces) <= MAX_FOLD_CHARS else BUILT)
                else:
                    parts |= unknown(frozenset({atom}), seps)
            folded = frozenset(parts)
        elif method in ("startswith", "endswith", "isdigit", "isalpha", "isspace", "islower", "isupper"):
            folded = BOOL_V
        elif method in ("find", "rfind", "index", "rindex", "count"):
            folded = NUM_V
        if folded is None:
            return None
        result |= folded
    return frozenset(result) if result else None
