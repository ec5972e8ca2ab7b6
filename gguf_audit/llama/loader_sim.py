"""Run an architecture's ``load_tensors``, as the pinned llama.cpp wrote it, against a file's tensors.

:mod:`gguf_audit.llama.gen_tensors` translates each model class's ``load_arch_tensors``
(``src/models/*.cpp``) into a small program of JSON lists, shipped in
``<build>-tensors.json``. :func:`simulate` runs one: every ``create_tensor`` is looked
up among the file's tensors, as ``llama_model_loader::create_tensor`` does it:

- absent and required (no ``TENSOR_NOT_REQUIRED``): "tensor 'X' not found";
- present with another shape (``check_tensor_dims``, required or not): "wrong shape";
- present: created, counted unless ``TENSOR_DUPLICATED``; a tensor no call creates makes
  ``done_getting_tensors`` fail on "wrong number of tensors".

A program is lists: ``["t", name, suffix, bid, xid, [dims], flags, var]`` creates a
tensor; ``["if", cond, then, else]``, ``["for", var, start, end, body]``,
``["let", var, expr]``, ``["call", helper, [args]]``, ``["ret"]``, ``["stop", why]`` (a ``throw``
or a failed assert: llama.cpp stops there). An expression is an int, a name, or
``[op, operand...]``. The hyperparameters come from ``env`` (a callable naming a value
or a per-layer function); a name it cannot give raises :class:`Unmodelled`, and the
caller then judges nothing of the file from the program.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["BINARY_OPS", "FLAGS", "Outcome", "Unmodelled", "render", "set_names", "simulate"]

FLAGS: Final = {
    "TENSOR_NOT_REQUIRED": 1,
    "TENSOR_DUPLICATED": 2,
    "TENSOR_SKIP": 4,
    "TENSOR_SKIP_IF_VIRTUAL": 8,
    "TENSOR_ALLOW_RESHAPE": 16,
    "TENSOR_READ_LAZY": 32,
}
"""``llama_model_loader``'s create flags (``src/llama-model-loader.h``)."""

_NOT_REQUIRED: Final = FLAGS["TENSOR_NOT_REQUIRED"]
_DUPLICATED: Final = FLAGS["TENSOR_DUPLICATED"]
_ALLOW_RESHAPE: Final = FLAGS["TENSOR_ALLOW_RESHAPE"]
_SKIP: Final = FLAGS["TENSOR_SKIP"]
_MAX_STEPS: Final = 200_000
_CONSTANTS: Final = {"nullptr": 0, "NULL": 0, "true": 1, "false": 0, **FLAGS}


class Unmodelled(Exception):
    """The program needs a value the file does not give (or a construct the simulator does not run)."""


@dataclass(slots=True)
class Outcome:
    """What llama.cpp's loader would make of the file's tensors."""

    created: set[str] = field(default_factory=set)
    """The file's tensors some call created (and counted)."""
    missing: list[str] = field(default_factory=list)
    """Required tensors absent, in the order llama.cpp asks for them."""
    wrong_shape: list[tuple[str, tuple[int, ...], str]] = field(default_factory=list)
    """Tensors present with another shape, each with the shape llama.cpp expects and how it follows from
    the hyperparameters (``n_embd 32, n_embd_head_k * n_head = 64``)."""
    stopped: str | None = None
    """The loader stops before its end (a ``throw`` or an assert): nothing after is judged."""


Env = Callable[[str, Sequence[int]], int]
"""The value of a hyperparameter (``n_embd``) or of a per-layer function (``hparams.n_head``) at its arguments."""


class _Return(Exception):
    """``return;`` in a helper."""


class _Stop(Exception):
    """A ``throw`` or a failed assert: the loader stops."""


@dataclass(slots=True)
class _Frame:
    env: Env
    present: Mapping[str, tuple[int, ...]]
    out: Outcome
    make: dict[str, tuple[int, ...]] | None
    vars: dict[str, int] = field(default_factory=dict)
    labels: list[Callable[[], Mapping[str, Any]]] = field(default_factory=lambda: [dict])
    """Per helper call, what its parameters stand for in the caller's words (for messages): made only
    when a message needs them."""
    steps: int = 0
    known: dict[str, int] = field(default_factory=dict)

    def value(self, n: str) -> int:
        """The environment's value of ``n``, asked once per run."""
        got = self.known.get(n)
        if got is None:
            got = self.known[n] = self.env(n, ())
        return got


_Expr = Callable[[_Frame], Any]
"""An int, or a string where the loader builds a tensor name (``"blk." + std::to_string(n_layer)``)."""
_Stmt = Callable[[_Frame], None]


@dataclass(slots=True)
class _Compiler:
    """Turns a program into closures once, so that a file costs one call per statement, not a dispatch."""

    helpers: Mapping[str, Any]
    local: set[str]
    compiled_helpers: dict[str, tuple[list[str], _Stmt]] = field(default_factory=dict)

    def expr(self, e: Any) -> _Expr:
        if isinstance(e, bool | int):
            value = int(e)
            return lambda fr: value
        if isinstance(e, str):
            return self.name(e)
        op = e[0]
        if op == "s":
            text = str(e[1])
            return lambda fr: text
        if op == "?":
            c, x, y = self.expr(e[1]), self.expr(e[2]), self.expr(e[3])
            return lambda fr: x(fr) if c(fr) else y(fr)
        if op in ("&&", "||"):
            p, q = self.expr(e[1]), self.expr(e[2])
            if op == "&&":
                return lambda fr: int(bool(p(fr)) and bool(q(fr)))
            return lambda fr: int(bool(p(fr)) or bool(q(fr)))
        if op == "fn":
            return self.call_expr(e[1], [self.expr(a) for a in e[2]])
        operands = [self.expr(a) for a in e[1:]]
        binary = BINARY_OPS.get(op)
        if binary is not None and op not in ("/", "%") and len(operands) == 2:
            # The common case bound at compile time; anything else goes through _apply, which also raises.
            x, y = operands
            return lambda fr: binary(x(fr), y(fr))
        return lambda fr: _apply(op, [a(fr) for a in operands])

    def call_expr(self, fname: str, args: list[_Expr]) -> _Expr:
        if fname.endswith(".c_str") and not args:
            return self.name(fname.removesuffix(".c_str"))
        if fname == "std::to_string" and len(args) == 1:
            arg = args[0]
            return lambda fr: str(arg(fr))
        if fname == "ml.get_weight" and len(args) == 1:
            # The loader asks whether the file holds a tensor of that name.
            arg = args[0]
            return lambda fr: int(str(arg(fr)) in fr.present)
        return lambda fr: fr.env(fname, tuple(a(fr) for a in args))

    def name(self, n: str) -> _Expr:
        if n in self.local:

            def local(fr: _Frame) -> int:
                got = fr.vars.get(n)
                return fr.value(n) if got is None else got

            return local
        if n in _CONSTANTS:
            value = _CONSTANTS[n]
            return lambda fr: value
        return lambda fr: fr.value(n)

    def block(self, stmts: Sequence[Any]) -> _Stmt:
        parts = [self.statement(st) for st in stmts]

        def run(fr: _Frame) -> None:
            fr.steps += len(parts)
            if fr.steps > _MAX_STEPS:
                raise Unmodelled("the program runs too long")
            for part in parts:
                part(fr)

        return run

    def statement(self, st: Any) -> _Stmt:
        kind = st[0]
        if kind == "t":
            return self.create(st)
        if kind == "let":
            var, value = st[1], self.expr(st[2])
            return lambda fr: fr.vars.__setitem__(var, value(fr))
        if kind == "if":
            cond, then, other = self.expr(st[1]), self.block(st[2]), self.block(st[3])
            return lambda fr: then(fr) if cond(fr) else other(fr)
        if kind == "for":
            return self.loop(st)
        if kind == "call":
            return self.call(st)
        if kind == "ret":

            def ret(fr: _Frame) -> None:
                raise _Return

            return ret
        if kind == "stop":
            why = str(st[1])

            def stop(fr: _Frame) -> None:
                fr.out.stopped = why
                raise _Stop

            return stop
        raise Unmodelled(f"statement {kind!r}")

    def loop(self, st: Any) -> _Stmt:
        var, start, end, body = st[1], self.expr(st[2]), self.expr(st[3]), self.block(st[4])

        def run(fr: _Frame) -> None:
            for i in range(start(fr), end(fr)):
                fr.vars[var] = i
                body(fr)

        return run

    def call(self, st: Any) -> _Stmt:
        helper, exprs = st[1], st[2]
        spec = self.helpers.get(helper)
        if spec is None:
            raise Unmodelled(f"helper {helper!r}")
        if helper not in self.compiled_helpers:
            self.compiled_helpers[helper] = (list(spec["params"]), self.block(spec["body"]))
        params, body = self.compiled_helpers[helper]
        args = [self.expr(a) for a in exprs]

        def run(fr: _Frame) -> None:
            values = [a(fr) for a in args]
            saved = {p: fr.vars[p] for p in params if p in fr.vars}
            fr.vars.update(zip(params, values, strict=True))
            fr.labels.append(_labels(params, exprs, fr.labels[-1]))
            try:
                body(fr)
            except _Return:
                pass
            finally:
                fr.labels.pop()
                for p in params:
                    fr.vars.pop(p, None)
                fr.vars.update(saved)

        return run

    def create(self, st: Any) -> _Stmt:
        _, base, suffix, bid_e, xid_e, dims_e, flags_e, var = st
        bid = self.expr(bid_e) if bid_e is not None else None
        xid = self.expr(xid_e) if xid_e is not None else None
        dims = [self.expr(d) for d in dims_e]
        flags_of = self.expr(flags_e)
        # Most calls give constant flags: taken once here rather than asked per call.
        fixed_flags: int | None = None
        if isinstance(flags_e, bool | int):
            fixed_flags = int(flags_e)
        elif isinstance(flags_e, str) and flags_e not in self.local:
            fixed_flags = _CONSTANTS.get(flags_e)
        tail = "." + suffix if suffix else ""
        plain = base + tail
        # The usual name has one block id and no expert id: joined from its two sides, not searched for.
        sides = plain.split("{bid}") if xid is None else []

        def run(fr: _Frame) -> None:
            if bid is None:
                name = plain
            elif len(sides) == 2:
                name = sides[0] + str(bid(fr)) + sides[1]
            else:
                name = plain.replace("{bid}", str(bid(fr)))
            if xid is not None:
                name = name.replace("{xid}", str(xid(fr)))
            flags = fixed_flags if fixed_flags is not None else flags_of(fr)
            got = fr.present.get(name)
            if got is None:
                if fr.make is not None and not flags & (_NOT_REQUIRED | _DUPLICATED):
                    got = fr.make[name] = tuple([d(fr) for d in dims])
                elif not flags & _NOT_REQUIRED:
                    fr.out.missing.append(name)
            if got is not None:
                ne = tuple([d(fr) for d in dims])
                if not _same_shape(ne, got, reshape=bool(flags & _ALLOW_RESHAPE)):
                    fr.out.wrong_shape.append((name, ne, _why(dims_e, ne, fr.labels[-1]())))
                if not flags & _DUPLICATED:
                    fr.out.created.add(name)
            if var is not None:
                # A skipped tensor is counted but not kept: the loader hands back nullptr.
                fr.vars[var] = int(got is not None and not flags & _SKIP)

        return run


def _labels(
    params: Sequence[str], exprs: Sequence[Any], outer: Callable[[], Mapping[str, Any]]
) -> Callable[[], Mapping[str, Any]]:
    """A helper call's parameters as the caller's expressions, worked out on first use and kept."""
    made: list[Mapping[str, Any]] = []

    def labels() -> Mapping[str, Any]:
        if not made:
            base = outer()
            made.append({p: _substituted(e, base) for p, e in zip(params, exprs, strict=True)})
        return made[0]

    return labels


def _why(dims: Sequence[Any], ne: tuple[int, ...], labels: Mapping[str, Any]) -> str:
    shown = [_substituted(d, labels) for d in dims]
    return ", ".join(
        f"{render(d)} {v}" if isinstance(d, str) else f"{render(d)} = {v}" for d, v in zip(shown, ne, strict=True)
    )


_PRECEDENCE: Final = {"?": 0, "||": 1, "&&": 2, "|": 3, "&": 4, "==": 5, "!=": 5, "<": 6, "<=": 6, ">": 6}
_PRECEDENCE_MORE: Final = {">=": 6, "<<": 7, ">>": 7, "+": 8, "-": 8, "*": 9, "/": 9, "%": 9}


def render(e: Any, outer: int = 0, names: Mapping[str, Any] | None = None) -> str:
    """An expression of a program written back as C (``n_embd_head_k * n_head``); ``names`` maps a
    helper's parameters to the caller's expressions, written in their place."""
    if isinstance(e, str) and names and e in names:
        return render(names[e], outer)
    if isinstance(e, bool | int | str):
        return str(int(e) if isinstance(e, bool) else e)
    op = e[0]
    if op == "fn":
        return f"{e[1]}({', '.join(render(a, 0, names) for a in e[2])})"
    if op in ("!", "neg"):
        return ("!" if op == "!" else "-") + render(e[1], 10, names)
    if op == "?":
        text = f"{render(e[1], 1, names)} ? {render(e[2], 0, names)} : {render(e[3], 0, names)}"
        return f"({text})" if outer > 0 else text
    level = {**_PRECEDENCE, **_PRECEDENCE_MORE}.get(op, 10)
    text = f"{render(e[1], level, names)} {op} {render(e[2], level + 1, names)}"
    return f"({text})" if level < outer else text


def _substituted(e: Any, names: Mapping[str, Any]) -> Any:
    """``e`` with the names in ``names`` replaced by their expressions."""
    if isinstance(e, str):
        return names.get(e, e)
    if isinstance(e, list):
        return (
            [e[0], *(_substituted(a, names) for a in e[1:])]
            if e[0] != "fn"
            else ["fn", e[1], [_substituted(a, names) for a in e[2]]]
        )
    return e


BINARY_OPS: Final[dict[str, Callable[[int, int], int]]] = {
    "+": lambda p, q: p + q,
    "-": lambda p, q: p - q,
    "*": lambda p, q: p * q,
    "/": lambda p, q: int(p / q),
    "%": lambda p, q: p - q * int(p / q),
    "==": lambda p, q: int(p == q),
    "!=": lambda p, q: int(p != q),
    "<": lambda p, q: int(p < q),
    "<=": lambda p, q: int(p <= q),
    ">": lambda p, q: int(p > q),
    ">=": lambda p, q: int(p >= q),
    "|": lambda p, q: p | q,
    "&": lambda p, q: p & q,
    "<<": lambda p, q: p << q,
    ">>": lambda p, q: p >> q,
}


def _apply(op: str, a: list[int]) -> int:
    if op == "!":
        return int(not a[0])
    if op == "neg":
        return -a[0]
    x, y = a
    if op in ("/", "%") and y == 0:
        raise Unmodelled("a division by zero")
    if op not in BINARY_OPS:
        raise Unmodelled(f"operator {op!r}")
    return BINARY_OPS[op](x, y)


def _same_shape(expected: tuple[int, ...], got: tuple[int, ...], *, reshape: bool) -> bool:
    if reshape:
        n_exp = n_got = 1
        for d in expected:
            n_exp *= d
        for d in got:
            n_got *= d
        return n_exp == n_got
    if expected == got:
        return True
    return expected + (1,) * (4 - len(expected)) == got + (1,) * (4 - len(got))


def set_names(node: Any, into: set[str]) -> set[str]:
    """Every name a program sets: its locals, loop variables and tensor variables."""
    if isinstance(node, list) and node:
        if node[0] == "t" and node[7]:
            into.add(node[7])
        elif node[0] in ("let", "for"):
            into.add(node[1])
        for part in node:
            if isinstance(part, list):
                set_names(part, into)
    return into


_COMPILED: dict[int, tuple[object, _Stmt]] = {}


def _compiled(program: Sequence[Any], helpers: Mapping[str, Any]) -> _Stmt:
    """``program`` as closures, compiled once per program object (the shipped ones live as long as the process)."""
    key = id(program)
    hit = _COMPILED.get(key)
    if hit is not None and hit[0] is program:
        return hit[1]
    local = set_names(list(program), set())
    for spec in helpers.values():
        local |= set(spec["params"]) | set_names(spec["body"], set())
    compiled = _Compiler(helpers, local).block(program)
    _COMPILED[key] = (program, compiled)
    return compiled


def simulate(
    program: Sequence[Any],
    helpers: Mapping[str, Any],
    env: Env,
    present: Mapping[str, tuple[int, ...]],
    *,
    make: dict[str, tuple[int, ...]] | None = None,
) -> Outcome:
    """What the loader ``program`` makes of the tensors ``present`` (name to shape), given ``env``.

    With ``make``, a required tensor that is absent is added to it (name to shape) and taken as
    present: the tensors of the smallest complete file. Raises :class:`Unmodelled` when a value
    it needs is not to be had.
    """
    frame = _Frame(env=env, present=present, out=Outcome(), make=make)
    with contextlib.suppress(_Stop, _Return):
        _compiled(program, helpers)(frame)
    return frame.out
