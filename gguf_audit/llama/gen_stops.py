"""The stops of each architecture's ``load_arch_hparams``, translated for :mod:`gguf_audit.llama.arch_stops`.

Part of :mod:`gguf_audit.llama.gen_tensors` (run only to re-pin). A model class's
``load_arch_hparams`` (``src/models/*.cpp``) may end the load on a key's value: a
``GGML_ASSERT`` on a field (the process aborts) or an ``if (...) throw`` (the file is
refused). :func:`hparams_stops` takes the statements of the function's outermost block in
order; each one holding a ``throw``, ``GGML_ASSERT`` or ``GGML_ABORT`` becomes a stop:

- ``program``: the locals declared before it (``const uint32_t n_slot = ...``) and the
  statement itself, translated by :mod:`gguf_audit.llama.cxx`;
- ``after``: the keys the function requires before it (a missing one throws first);
- ``said``: what llama.cpp says.

A stop the translation does not cover (or that reads a name no key gives) is kept with
``why`` instead of ``program``: the runner stops judging there, since it cannot tell
whether llama.cpp stopped first.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any, Final

from gguf_audit.llama.arch_stops import FLOAT, PRESENT
from gguf_audit.llama.cxx import Untranslatable, parse_body, strip_comments
from gguf_audit.llama.hparams_env import KNOWN_NAMES

__all__ = ["field_defaults", "hparams_stops"]

_STOPPING: Final = re.compile(r"\bthrow\b|\bGGML_ASSERT\b|\bGGML_ABORT\b")
_DECLARATION: Final = re.compile(r"^(?:const\s+)?(?:uint32_t|int32_t|int64_t|int|bool|float|auto)\s+\w+\s*=")
_FIELD_TYPES: Final = {"uint32_t": "uint32", "int32_t": "int32", "float": "float32", "bool": "bool"}


def _statements(body: str) -> list[tuple[int, str]]:
    """The statements of the block ``body`` opens (comments gone), each with where it starts."""
    out: list[tuple[int, str]] = []
    i, end = 1, len(body) - 1
    while i < end:
        while i < end and body[i] in " \t\r\n;":
            i += 1
        if i >= end:
            break
        j = _statement_end(body, i)
        out.append((i, body[i:j]))
        i = j
    return out


def _statement_end(text: str, i: int) -> int:
    """Where the statement starting at ``i`` ends: its ``;`` at depth 0, or its last block's ``}``
    (an ``if``/``for``/``switch`` with its ``else`` branches)."""
    depth = 0
    compound = re.match(r"(if|for|switch|while)\b", text[i:]) is not None
    j = i
    while j < len(text):
        ch = text[j]
        if ch in "({[":
            depth += 1
        elif ch in ")}]":
            depth -= 1
            if depth == 0 and ch == "}" and compound and not re.match(r"\s*else\b", text[j + 1 :]):
                return j + 1
        elif ch == ";" and depth == 0:
            return j + 1
        j += 1
    return j


def _read_names(node: Any, into: set[str]) -> set[str]:
    """The names a translated statement reads (calls by their function name)."""
    if isinstance(node, str):
        into.add(node)
    elif isinstance(node, list) and node:
        if node[0] == "fn":
            into.add(node[1])
            for a in node[2]:
                _read_names(a, into)
        elif node[0] == "let":
            _read_names(node[2], into)
        elif node[0] not in ("s", "stop"):
            for part in node[1:] if isinstance(node[0], str) else node:
                _read_names(part, into)
    return into


def _said(text: str) -> str:
    """What a stop says: its ``throw``'s first string, or the assert as written."""
    m = re.search(r"throw\b[^;]*?\"((?:\\.|[^\"\\])*)\"", text)
    if m:
        return m.group(1)
    return " ".join(text.split())[:200]


def _named_floats(node: Any) -> Any:
    """``node`` with each float literal the name ``float:<value>`` (:data:`~gguf_audit.llama.arch_stops.FLOAT`)."""
    if isinstance(node, float):
        return f"{FLOAT}{node!r}"
    if isinstance(node, list):
        return [_named_floats(part) for part in node]
    return node


_OPTIONAL_READ: Final = re.compile(r"ml\.get_key\(\s*(LLM_KV_\w+)\s*,\s*hparams\.(\w+)\s*,\s*false\s*\)")


def _translated(statement: str, presence: Callable[[str, str], str | None]) -> list[Any] | str:
    """``statement`` translated, or why it is not. An optional read used as a value
    (``const bool found = ml.get_key(KEY, hparams.x, false)``) is whether the key is there: the name
    ``presence(kv id, field)`` gives (:data:`~gguf_audit.llama.arch_stops.PRESENT`), when it gives one."""
    names: dict[str, str] = {}

    def placeholder(m: re.Match[str]) -> str:
        name = presence(m.group(1), m.group(2))
        if name is None:
            return m.group(0)
        names[f"PRESENT_{len(names)}"] = name
        return f"PRESENT_{len(names) - 1}"

    try:
        program: list[Any] = _named_floats(parse_body("{" + _OPTIONAL_READ.sub(placeholder, statement) + "}", {}))
    except Untranslatable as e:
        return str(e)
    renamed: list[Any] = _renamed(program, names)
    return renamed


def _renamed(node: Any, names: dict[str, str]) -> Any:
    if isinstance(node, str):
        return names.get(node, node)
    if isinstance(node, list):
        return [_renamed(part, names) for part in node]
    return node


def hparams_stops(
    body: str,
    fields: dict[str, str],
    computed: list[str],
    required_before: Callable[[str], Iterable[str]],
    optional_before: Callable[[str], Iterable[str]],
    presence: Callable[[str, str], str | None],
) -> tuple[list[dict[str, Any]], set[str]]:
    """The stops of the ``load_arch_hparams`` ``body`` (from its opening brace), in order, and the
    hparams fields they read. ``fields``/``computed`` are the function's (:func:`gen_tensors._fields`);
    ``required_before(prefix)`` gives the keys a body prefix always requires, ``optional_before(prefix)``
    those it always reads without requiring them; ``presence`` names an
    optional read's key and type (see :func:`_translated`)."""
    text = strip_comments(body)
    known = KNOWN_NAMES | {f"hparams.{f}" for f in fields}
    lets: list[Any] = []
    stops: list[dict[str, Any]] = []
    reads: set[str] = set()
    for start, statement in _statements(text):
        stopping = _STOPPING.search(statement) is not None
        program = _translated(statement, presence) if stopping or _DECLARATION.match(statement) else None
        if program is None or not stopping:
            # A local that another statement touches (ml.get_key(KEY, local)) is not its declared value.
            lets = [s for s in lets if not re.search(rf"\b{s[1]}\b", statement)]
            lets += program if program is not None and not isinstance(program, str) else []
        if not stopping:
            continue
        if isinstance(program, str) or program is None:
            stops.append({"said": _said(statement), "why": program or "?"})
            continue
        own = _read_names(program, set())
        for let in lets:
            own |= _read_names(let[2], set())
        names = {n for n in own if not n.startswith((FLOAT, PRESENT))} - {s[1] for s in lets} - known
        names |= {n for n in own if n.removeprefix("hparams.") in computed}
        prefix = text[:start] + "}"
        entry: dict[str, Any] = {
            "said": _said(statement),
            "after": sorted(required_before(prefix)),
            "after_optional": sorted(optional_before(prefix)),
        }
        if names:
            entry["why"] = f"needs {', '.join(sorted(names)[:4])}"
        else:
            entry["program"] = [*lets, *program]
            reads |= {n for n in _read_names(program, set()) if n.startswith("hparams.")}
        stops.append(entry)
    return stops, reads


def field_defaults(hparams_h: str) -> dict[str, list[str | float | int | None]]:
    """Each scalar ``llama_hparams`` field of a key's type, its GGUF type and initial value (None: none
    readable, ``-INFINITY`` as -inf)."""
    out: dict[str, list[str | float | int | None]] = {}
    for ctype, name, init in re.findall(
        r"^\s*(uint32_t|int32_t|float|bool)\s+(\w+)\s*(?:=\s*([^;]+))?;", hparams_h, re.M
    ):
        value: float | int | None = None
        init = init.strip()
        if init in ("true", "false"):
            value = int(init == "true")
        elif init in ("-INFINITY", "INFINITY"):
            value = float(init.replace("INFINITY", "inf"))
        elif re.fullmatch(r"-?\d+(?:\.\d*)?(?:e-?\d+)?f?", init):
            number = init.removesuffix("f")
            value = float(number) if ctype == "float" else int(float(number))
        out[name] = [_FIELD_TYPES[ctype], value]  # as JSON gives it back
    return out
