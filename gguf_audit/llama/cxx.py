"""A reader for the few C++ statements llama.cpp's ``load_arch_tensors`` functions are written in.

:func:`parse_body` turns a function body into the statement lists
:mod:`gguf_audit.llama.loader_sim` runs; a statement or expression outside that
small language raises :class:`Untranslatable` naming it, and the generator marks
the architecture unmodelled instead of guessing.
"""

from __future__ import annotations

import re
from typing import Any, Final

__all__ = ["Untranslatable", "parse_body", "strip_comments"]


class Untranslatable(Exception):
    """A construct the translation does not cover."""


_TOKEN: Final = re.compile(
    r"\s*(?:(\"(?:\\.|[^\"\\])*\")|(\d+(?:\.\d+)?[fuUlL]*)|([A-Za-z_]\w*(?:(?:\.|::|->)[A-Za-z_]\w*)*)"
    r"|(==|!=|<=|>=|&&|\|\||<<|>>|\+\+|--|\+=|-=|\*=|/=|\|=|&=|[-+*/%<>=!?:&|^~(){}\[\],;]))"
)
_TYPES: Final = frozenset(
    {
        "int",
        "int64_t",
        "uint32_t",
        "int32_t",
        "uint64_t",
        "bool",
        "auto",
        "size_t",
        "const",
        "long",
        "unsigned",
        "std::string",
    }
)
_BINARY: Final = (
    ("||",),
    ("&&",),
    ("|",),
    ("^",),
    ("&",),
    ("==", "!="),
    ("<", "<=", ">", ">="),
    ("<<", ">>"),
    ("+", "-"),
    ("*", "/", "%"),
)


def strip_comments(text: str) -> str:
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r"^\s*#[^\n]*", "", text, flags=re.M)


def _said(tokens: list[str]) -> str:
    """What a ``throw``'s message says: its string literals joined, ``arch_name()`` as ``{arch}``."""
    parts = []
    for tok in tokens:
        if tok.startswith('"'):
            parts.append(tok[1:-1].replace('\\"', '"'))
        elif tok == "arch_name":
            parts.append("{arch}")
    return "".join(parts).strip() or "an error"


def _tokens(text: str) -> list[str]:
    out: list[str] = []
    pos = 0
    text = text.rstrip()
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            raise Untranslatable(f"unreadable text {text[pos : pos + 20]!r}")
        out.append(m.group(m.lastindex or 0))
        pos = m.end()
    return out


class _Parser:
    def __init__(self, tokens: list[str], tensor_ids: dict[str, str]) -> None:
        self.t = tokens
        self.i = 0
        self.ids = tensor_ids

    def peek(self, k: int = 0) -> str:
        return self.t[self.i + k] if self.i + k < len(self.t) else ""

    def take(self, want: str | None = None) -> str:
        tok = self.peek()
        if want is not None and tok != want:
            raise Untranslatable(f"expected {want!r}, found {tok!r} near {' '.join(self.t[self.i : self.i + 8])!r}")
        self.i += 1
        return tok

    # statements
    def block(self) -> list[Any]:
        self.take("{")
        out: list[Any] = []
        while self.peek() != "}":
            if not self.peek():
                raise Untranslatable("unterminated block")
            out.extend(self.statement())
        self.take("}")
        return out

    def body(self) -> list[Any]:
        return self.block() if self.peek() == "{" else self.statement()

    def statement(self) -> list[Any]:
        tok = self.peek()
        if tok == ";":
            self.take()
            return []
        if tok == "{":
            return self.block()
        if tok == "LLAMA_LOAD_LOCALS":
            self.take()
            self.take(";")
            return []
        if tok == "if":
            return [self.if_statement()]
        if tok == "for":
            return [self.for_statement()]
        if tok == "return" and self.peek(1) == ";":
            self.take()
            self.take()
            return [["ret"]]
        if tok == "throw":
            start = self.i
            while self.take() != ";":
                pass
            return [["stop", "throw: " + _said(self.t[start + 1 : self.i - 1])]]
        if tok == "GGML_UNUSED":
            self.take()
            self.arguments()
            self.take(";")
            return []
        if self.peek(1) in ("|=", "&=", "+=", "-=", "*=") and re.fullmatch(r"[A-Za-z_]\w*", tok):
            var, op = self.take(), self.take()[0]
            value = self.expr()
            self.take(";")
            return [["let", var, [op, var, value]]]
        if tok in ("GGML_ASSERT", "GGML_ABORT"):
            self.take()
            self.take("(")
            start = self.i
            cond = self.expr() if tok == "GGML_ASSERT" else 0
            said = f"{tok}({' '.join(self.t[start : self.i])}) failed"
            self.take(")")
            self.take(";")
            return [["if", ["!", cond], [["stop", said]], []]]
        if tok in _TYPES:
            return self.declaration()
        return [self.simple()]

    def if_statement(self) -> list[Any]:
        self.take("if")
        self.take("(")
        cond = self.expr()
        self.take(")")
        then = self.body()
        other: list[Any] = []
        if self.peek() == "else":
            self.take()
            other = self.body()
        return ["if", cond, then, other]

    def for_statement(self) -> list[Any]:
        self.take("for")
        self.take("(")
        while self.peek() in _TYPES:
            self.take()
        var = self.take()
        self.take("=")
        start = self.expr()
        self.take(";")
        if self.take() != var or self.take() != "<":
            raise Untranslatable("a loop other than 'for (i = a; i < b; ++i)'")
        end = self.expr()
        self.take(";")
        step = [self.take(), self.take()]
        if step not in (["++", var], [var, "++"]):
            raise Untranslatable("a loop step other than ++")
        self.take(")")
        return ["for", var, start, end, self.body()]

    def declaration(self) -> list[Any]:
        while self.peek() in _TYPES:
            self.take()
        if self.peek() == "&":
            # auto & layer = layers[i]; names the layer the tensors land in, nothing to run
            self.take()
            var = self.take()
            while self.take() != ";":
                pass
            if var != "layer":
                raise Untranslatable(f"a reference {var!r}")
            return []
        var = self.take()
        if not re.fullmatch(r"[A-Za-z_]\w*", var):
            raise Untranslatable(f"a declaration of {var!r}")
        self.take("=")
        value = self.expr()
        self.take(";")
        return [["let", var, value]]

    def simple(self) -> list[Any]:
        target = None
        if self.peek(1) == "=":
            target = self.take()
            self.take("=")
        tok = self.peek()
        if tok == "create_tensor":
            stmt = self.create(target)
        elif tok.startswith("create_tensor_") and target is None:
            self.take()
            args = self.arguments()
            if args[:1] != ["layer"]:
                raise Untranslatable(f"{tok} on another layer")
            stmt = ["call", tok, args[1:]]
        elif target is not None and re.fullmatch(r"[A-Za-z_]\w*", target):
            stmt = ["let", target, self.expr()]
        else:
            raise Untranslatable(f"a statement starting {tok!r}")
        self.take(";")
        return stmt

    def create(self, target: str | None) -> list[Any]:
        self.take("create_tensor")
        self.take("(")
        self.take("tn")
        self.take("(")
        tid = self.take()
        if tid not in self.ids:
            raise Untranslatable(f"tensor id {tid!r}")
        suffix = None
        if self.peek() == "," and self.peek(1).startswith('"'):
            self.take(",")
            suffix = self.take()[1:-1]
        extra: list[Any] = []
        while self.peek() == ",":
            self.take(",")
            extra.append(self.expr())
        self.take(")")
        if len(extra) > 2:
            raise Untranslatable("tn() with more than two indices")
        bid, xid = [*extra, None, None][:2]
        self.take(",")
        self.take("{")
        dims = [self.expr()]
        while self.peek() == ",":
            self.take(",")
            dims.append(self.expr())
        self.take("}")
        self.take(",")
        flags = self.expr()
        self.take(")")
        return ["t", self.ids[tid], suffix, bid, xid, dims, flags, target]

    def arguments(self) -> list[Any]:
        self.take("(")
        args: list[Any] = []
        while self.peek() != ")":
            args.append(self.expr())
            if self.peek() == ",":
                self.take(",")
        self.take(")")
        return args

    # expressions
    def expr(self) -> Any:
        cond = self.binary(0)
        if self.peek() == "?":
            self.take()
            a = self.expr()
            self.take(":")
            b = self.expr()
            return ["?", cond, a, b]
        return cond

    def binary(self, level: int) -> Any:
        if level == len(_BINARY):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek() in _BINARY[level]:
            op = self.take()
            left = [op, left, self.binary(level + 1)]
        return left

    def unary(self) -> Any:
        tok = self.peek()
        if tok == "!":
            self.take()
            return ["!", self.unary()]
        if tok == "-":
            self.take()
            return ["neg", self.unary()]
        if tok == "(":
            self.take()
            if self.peek() in _TYPES and self.peek(1) == ")":  # a C cast
                self.take()
                self.take(")")
                return self.unary()
            inner = self.expr()
            self.take(")")
            return inner
        return self.primary()

    def primary(self) -> Any:
        tok = self.take()
        if tok.startswith('"'):
            return ["s", tok[1:-1]]  # a tensor name being built, or an assert's message (true)
        if re.fullmatch(r"\d+[uUlL]*", tok):
            return int(re.sub(r"[uUlL]+$", "", tok))
        if re.fullmatch(r"\d+\.\d+[fF]?", tok):
            return float(tok.rstrip("fF"))
        if not re.fullmatch(r"[A-Za-z_][\w.:>-]*", tok) or "->" in tok:
            raise Untranslatable(f"an expression {tok!r}")
        if tok in ("static_cast", "std::max", "std::min") and self.peek() == "<":
            self.take("<")
            while self.take() != ">":
                pass
        if self.peek() == "(":
            args = self.arguments()
            if tok == "static_cast":
                return args[0]
            return ["fn", tok, args]
        if self.peek() == "[":
            raise Untranslatable(f"an index into {tok!r}")
        return tok


def parse_body(body: str, tensor_ids: dict[str, str]) -> list[Any]:
    """The statements of ``body`` (from its opening brace), tensor ids mapped to name templates by ``tensor_ids``."""
    parser = _Parser(_tokens(strip_comments(body)), tensor_ids)
    out = parser.block()
    return out
