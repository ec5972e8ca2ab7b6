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

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = ["FLAGS", "Outcome", "Unmodelled", "render", "simulate"]

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


@dataclass(slots=True)
class _Run:
    env: Env
    helpers: Mapping[str, Any]
    present: Mapping[str, tuple[int, ...]]
    out: Outcome
    scopes: list[dict[str, int]]
    steps: int = 0
    returned: bool = False
    make: dict[str, tuple[int, ...]] | None = None
    labels: list[dict[str, Any]] = field(default_factory=lambda: [{}])

    def name(self, n: str) -> int:
        for scope in reversed(self.scopes):
            if n in scope:
                return scope[n]
        if n in _CONSTANTS:
            return _CONSTANTS[n]
        return self.env(n, ())

    def expr(self, e: Any) -> int:
        if isinstance(e, bool):
            return int(e)
        if isinstance(e, int):
            return e
        if isinstance(e, str):
            return self.name(e)
        op = e[0]
        if op == "?":
            return self.expr(e[2]) if self.expr(e[1]) else self.expr(e[3])
        if op == "&&":
            return int(bool(self.expr(e[1])) and bool(self.expr(e[2])))
        if op == "||":
            return int(bool(self.expr(e[1])) or bool(self.expr(e[2])))
        if op == "fn":
            return self.env(e[1], tuple(self.expr(a) for a in e[2]))
        args = [self.expr(a) for a in e[1:]]
        return _apply(op, args)

    def block(self, stmts: Sequence[Any]) -> None:
        for s in stmts:
            if self.out.stopped is not None or self.returned:
                return
            self.statement(s)

    def statement(self, s: Any) -> None:
        self.steps += 1
        if self.steps > _MAX_STEPS:
            raise Unmodelled("the program runs too long")
        kind = s[0]
        if kind == "t":
            self.create(s)
        elif kind == "let":
            self.scopes[-1][s[1]] = self.expr(s[2])
        elif kind == "if":
            self.block(s[2] if self.expr(s[1]) else s[3])
        elif kind == "for":
            self.loop(s)
        elif kind == "call":
            self.call(s[1], [self.expr(a) for a in s[2]], s[2])
        elif kind == "ret":
            self.returned = True
        elif kind == "stop":
            self.out.stopped = str(s[1])
        else:
            raise Unmodelled(f"statement {kind!r}")

    def loop(self, s: Any) -> None:
        var, start, end, body = s[1], self.expr(s[2]), self.expr(s[3]), s[4]
        for i in range(start, end):
            self.scopes[-1][var] = i
            self.block(body)
            if self.out.stopped is not None or self.returned:
                return

    def call(self, helper: str, args: list[int], exprs: Sequence[Any]) -> None:
        spec = self.helpers.get(helper)
        if spec is None:
            raise Unmodelled(f"helper {helper!r}")
        outer = self.labels[-1]
        self.labels.append({p: _substituted(e, outer) for p, e in zip(spec["params"], exprs, strict=True)})
        # A helper's tensor variables (layer.wqkv) are the caller's: one flat frame below its parameters.
        self.scopes.append(dict(zip(spec["params"], args, strict=True)))
        try:
            self.block(spec["body"])
        finally:
            self.labels.pop()
            self.returned = False
            params = self.scopes.pop()
            self.scopes[-1].update({k: v for k, v in params.items() if "." in k})

    def create(self, s: Any) -> None:
        _, base, suffix, bid, xid, dims, flags_e, var = s
        name = base.format(bid=self.expr(bid) if bid is not None else "", xid=self.expr(xid) if xid is not None else "")
        if suffix:
            name += "." + suffix
        flags = self.expr(flags_e)
        ne = tuple(self.expr(d) for d in dims)
        got = self.present.get(name)
        if got is None and self.make is not None and not flags & (_NOT_REQUIRED | _DUPLICATED):
            got = self.make[name] = ne
        found = got is not None
        if got is None:
            if not flags & _NOT_REQUIRED:
                self.out.missing.append(name)
        elif not _same_shape(ne, got, reshape=bool(flags & _ALLOW_RESHAPE)):
            shown = [_substituted(d, self.labels[-1]) for d in dims]
            why = ", ".join(
                f"{render(d)} {v}" if isinstance(d, str) else f"{render(d)} = {v}"
                for d, v in zip(shown, ne, strict=True)
            )
            self.out.wrong_shape.append((name, ne, why))
        if found and not flags & _DUPLICATED:
            self.out.created.add(name)
        if var is not None:
            self.scopes[-1][var] = int(found)


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


def _apply(op: str, a: list[int]) -> int:
    if op == "!":
        return int(not a[0])
    if op == "neg":
        return -a[0]
    x, y = a
    if op in ("/", "%") and y == 0:
        raise Unmodelled("a division by zero")
    ops: dict[str, Callable[[int, int], int]] = {
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
    if op not in ops:
        raise Unmodelled(f"operator {op!r}")
    return ops[op](x, y)


def _same_shape(expected: tuple[int, ...], got: tuple[int, ...], *, reshape: bool) -> bool:
    if reshape:
        n_exp = n_got = 1
        for d in expected:
            n_exp *= d
        for d in got:
            n_got *= d
        return n_exp == n_got
    padded_exp = expected + (1,) * (4 - len(expected))
    padded_got = got + (1,) * (4 - len(got))
    return padded_exp == padded_got


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
    run = _Run(env=env, helpers=helpers, present=present, out=Outcome(), scopes=[{}], make=make)
    run.block(program)
    return run.out
