"""The abstract value algebra of the inspection: what an expression can be at render time.

An abstract value is a frozenset of atoms, each a tuple whose first item says
its kind (the table below). The operations here combine them without ever
running the template, within bounds that keep a hostile template from making
the inspection itself slow or large. The constant folds are in
:mod:`gguf_audit.templates.inspect.folds`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from gguf_audit.templates.inspect.names import is_suspicious_piece, short_piece

__all__ = [
    "BOOL_V",
    "BUILT",
    "DATA",
    "DATA_V",
    "ELEM",
    "LOOP",
    "MAX_FOLD_CHARS",
    "MAX_SMALL_INT",
    "MAX_VALUES",
    "NONE_V",
    "NUM",
    "NUM_V",
    "Atom",
    "Value",
    "collect_pieces",
    "const",
    "elements_of",
    "fold_pairs",
    "is_number",
    "items_of",
    "lookup",
    "numeric",
    "payload",
    "sequence",
    "str_of",
    "unknown",
]

#: Bounds on the abstract evaluation. Folded strings longer than this are
#: treated as unknown; so are sets of more possible values. Both keep a
#: hostile template from making the inspection itself slow or large.
MAX_FOLD_CHARS: Final = 256
MAX_VALUES: Final = 64
MAX_SMALL_INT: Final = 2**64

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
Atom = tuple[object, ...]
Value = frozenset[Atom]

NUM: Final[Atom] = ("num",)
DATA: Final[Atom] = ("data",)
ELEM: Final[Atom] = ("elem",)
BUILT: Final[Atom] = ("built", "")
LOOP: Final[Atom] = ("loop",)
DATA_V: Final[Value] = frozenset({DATA})
NUM_V: Final[Value] = frozenset({NUM})
BOOL_V: Final[Value] = frozenset({("c", True), ("c", False)})
NONE_V: Final[Value] = frozenset({("c", None)})


def const(value: object) -> Value:
    return frozenset({("c", value)})


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def numeric(value: Value) -> bool:
    return all(a[0] == "num" or (a[0] == "c" and isinstance(a[1], int | float)) for a in value)


def collect_pieces(value: Value, into: set[str], depth: int = 0) -> bool:
    """Collect the suspicious constant strings in ``value``; return whether it holds runtime data."""
    data = False
    for atom in value:
        kind = atom[0]
        if kind == "c":
            if isinstance(atom[1], str) and is_suspicious_piece(atom[1]):
                into.add(short_piece(atom[1]))
        elif kind == "t" and isinstance(atom[1], tuple):
            into.update(short_piece(s) for s in atom[1] if isinstance(s, str) and is_suspicious_piece(s))
        elif kind == "built":
            if isinstance(atom[1], str) and atom[1]:
                into.add(atom[1])
        elif kind in ("data", "elem", "loop", "num"):
            # An unknown number counts as data: '%c' % n can spell anything.
            data = True
        elif depth < 8:
            for part in atom[1:]:
                if isinstance(part, frozenset):
                    data |= collect_pieces(part, into, depth + 1)
                elif isinstance(part, tuple):
                    for pair in part:
                        for sub in pair if isinstance(pair, tuple) else ():
                            if isinstance(sub, frozenset):
                                data |= collect_pieces(sub, into, depth + 1)
        else:
            data = True
    return data


def unknown(*values: Value, reverse: bool = False) -> Value:
    """The result of an operation the evaluator does not model: carries the inputs' pieces."""
    pieces: set[str] = set()
    data = False
    for value in values:
        data |= collect_pieces(value, pieces)
    if reverse:
        pieces |= {p[::-1] for p in pieces}
    atoms: set[Atom] = {("built", p) for p in sorted(pieces)[:MAX_VALUES]}
    atoms.add(DATA if data else BUILT)
    return frozenset(atoms)


def sequence(items: Sequence[Value]) -> Value:
    if all(len(v) == 1 and next(iter(v))[0] == "c" for v in items) and len(items) <= MAX_FOLD_CHARS:
        return frozenset({("t", tuple(next(iter(v))[1] for v in items))})
    return frozenset({("seq", frozenset().union(*items) if items else frozenset())})


def elements_of(value: Value) -> Value:
    result: set[Atom] = set()
    for atom in value:
        kind = atom[0]
        if kind == "t" and isinstance(atom[1], tuple):
            result |= {("c", item) for item in atom[1]}
        elif kind == "c" and isinstance(atom[1], str):
            if len(atom[1]) <= MAX_VALUES:
                result |= {("c", ch) for ch in atom[1]}
            else:
                result |= unknown(frozenset({atom}))
        elif kind == "seq" and isinstance(atom[1], frozenset):
            result |= atom[1]
        elif kind == "map" and isinstance(atom[1], tuple):
            for pair in atom[1]:
                if isinstance(pair, tuple) and isinstance(pair[0], frozenset):
                    result |= pair[0]
        elif kind in ("data", "elem", "loop"):
            result.add(ELEM)
        elif kind == "built":
            result |= {atom, ELEM}
        elif kind == "num":
            result.add(NUM)
    return frozenset(result) if result else frozenset({ELEM})


def items_of(value: Value) -> set[Atom]:
    result: set[Atom] = set()
    for atom in value:
        if atom[0] == "map" and isinstance(atom[1], tuple):
            for pair in atom[1]:
                if isinstance(pair, tuple):
                    result.add(("pair", pair[0], pair[1]))
        else:
            result |= {("pair", frozenset({ELEM}) | unknown(frozenset({atom})), DATA_V)}
    return result


def lookup(atom: Atom, key: Value) -> Value:
    """``d[key]`` / ``d.key`` on a dict literal."""
    pairs = atom[1]
    if not isinstance(pairs, tuple):
        return DATA_V
    known = {a[1] for a in key if a[0] == "c"}
    exact = len(known) == len(key)
    result: set[Atom] = set()
    for pair in pairs:
        if not (isinstance(pair, tuple) and isinstance(pair[0], frozenset) and isinstance(pair[1], frozenset)):
            continue
        pair_keys = {a[1] for a in pair[0] if a[0] == "c"}
        if not exact or len(pair_keys) != len(pair[0]) or pair_keys & known:
            result |= pair[1]
    # A missing key is Undefined (or, in a careless runtime, an attribute).
    return frozenset(result) | NONE_V


def payload(atom: Atom) -> object:
    """The value of a ``("c", value)`` atom (None for atoms without one)."""
    return atom[1] if len(atom) > 1 else None


def str_of(atom: Atom) -> str | None:
    value = atom[1]
    if isinstance(value, str):
        return value
    if isinstance(value, bool) or value is None:
        return str(value)
    if isinstance(value, int) and abs(value) < MAX_SMALL_INT:
        return str(value)
    if isinstance(value, float):
        return repr(value)
    return None


def fold_pairs(left: Value, right: Value, op: Callable[[Atom, Atom], Value | None]) -> Value:
    """Apply a binary operation to every pair of possible values (bounded)."""
    if len(left) * len(right) > MAX_VALUES * 4:
        return unknown(left, right)
    result: set[Atom] = set()
    for a in left:
        for b in right:
            folded = op(a, b)
            result |= folded if folded is not None else unknown(frozenset({a}), frozenset({b}))
    return frozenset(result)
