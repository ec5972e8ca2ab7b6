"""The names the static rule knows: escape steps, gadget globals, context names, and their predicates.

Pure tables. A name is judged by where it is looked up (see
:mod:`gguf_audit.templates.inspect.inspector`); these say which names reach
Python internals, which globals lead to them, and what the render context holds.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

__all__ = [
    "ATTRIBUTE_FILTERS",
    "CONTEXT_NAMES",
    "ESCAPE_NAMES",
    "ESCAPE_PIECES",
    "FORBIDDEN_FREE",
    "GADGETS",
    "LOOP_NUMBERS",
    "NUMERIC_FILTERS",
    "PRIVATE_RE",
    "STR_METHODS",
    "is_suspicious_piece",
    "is_unsafe_identifier",
    "is_unsafe_name",
    "short_piece",
]

#: Attribute names that lead from ordinary objects to frames, code, globals or
#: the OS without any underscore: generator frames (``(x|map('e')).gi_frame``)
#: and the Python 2 spellings, plus the usual targets at the end of a chain.
ESCAPE_NAMES: Final = frozenset(
    {
        "mro",
        "func_globals",
        "func_code",
        "func_closure",
        "func_defaults",
        "f_globals",
        "f_locals",
        "f_builtins",
        "f_back",
        "f_code",
        "f_trace",
        "gi_frame",
        "gi_code",
        "gi_yieldfrom",
        "cr_frame",
        "cr_code",
        "cr_await",
        "ag_frame",
        "ag_code",
        "ag_await",
        "tb_frame",
        "tb_next",
        "co_code",
        "co_consts",
        "co_names",
        "im_func",
        "im_self",
        "im_class",
        "popen",
        "subprocess",
        "os",
        "eval",
        "exec",
        "execfile",
        "import_module",
        "builtins",
        "getattr",
        "setattr",
        "delattr",
        "globals",
        "locals",
        "environ",
    }
)
#: Escape names that are unusual enough to count inside assembled strings too.
ESCAPE_PIECES: Final = tuple(sorted(n for n in ESCAPE_NAMES if "_" in n))
#: Jinja and Flask globals whose own attributes lead to ``__globals__``; chat
#: templates call some of them (``namespace(...)``, ``range(n)``) but never
#: look inside them.
GADGETS: Final = frozenset(
    {
        "cycler",
        "joiner",
        "namespace",
        "lipsum",
        "range",
        "dict",
        "self",
        "raise_exception",
        "strftime_now",
        "config",
        "request",
        "session",
        "g",
        "url_for",
        "get_flashed_messages",
    }
)
#: Names no chat template reads unless it binds them itself: Flask's globals
#: (``{{ config }}`` is the classic SSTI leak) and the Python escape targets.
FORBIDDEN_FREE: Final = frozenset(
    {
        "config",
        "request",
        "session",
        "url_for",
        "get_flashed_messages",
        "os",
        "sys",
        "subprocess",
        "builtins",
        "importlib",
        "eval",
        "exec",
        "compile",
        "getattr",
        "setattr",
        "delattr",
        "globals",
        "locals",
        "vars",
        "open",
        "popen",
        "breakpoint",
    }
)
#: Filters that look up an attribute named by an argument: position of that
#: argument (None: keyword only) — ``map`` is handled on its own.
ATTRIBUTE_FILTERS: Final[Mapping[str, int | None]] = {
    "selectattr": 0,
    "rejectattr": 0,
    "groupby": 0,
    "sum": 0,
    "sort": 2,
    "unique": 1,
    "min": 1,
    "max": 1,
    "join": 1,
}
#: Names the render context supplies (transformers' apply_chat_template and
#: its usual keyword arguments). A template that rebinds one
#: (``set messages = messages[1:]``) still starts from the caller's data.
CONTEXT_NAMES: Final = frozenset(
    {
        "messages",
        "tools",
        "documents",
        "bos_token",
        "eos_token",
        "add_generation_prompt",
        "custom_tools",
        "tools_in_user_message",
        "builtin_tools",
        "date_string",
        "enable_thinking",
        "reasoning_effort",
        "continue_final_message",
    }
)
LOOP_NUMBERS: Final = frozenset({"index", "index0", "revindex", "revindex0", "length", "depth", "depth0"})
STR_METHODS: Final = frozenset(
    {"upper", "lower", "strip", "lstrip", "rstrip", "title", "capitalize", "swapcase", "casefold"}
)
NUMERIC_FILTERS: Final = frozenset({"length", "count", "int", "float", "abs", "round", "wordcount", "filesizeformat"})
PRIVATE_RE: Final = re.compile(r"_+[A-Za-z0-9]")
_PRIVATE_IDENT_RE: Final = re.compile(r"_+[A-Za-z][A-Za-z0-9_]*")


def is_unsafe_name(name: str) -> bool:
    """A lookup name that reaches internals: ``_``-prefixed, or a known escape step."""
    return PRIVATE_RE.match(name) is not None or name in ESCAPE_NAMES


def is_unsafe_identifier(text: str) -> bool:
    """A dotted string any part of which is a private identifier or a known escape step."""
    return any(_PRIVATE_IDENT_RE.fullmatch(part) is not None or part in ESCAPE_NAMES for part in text.split("."))


def is_suspicious_piece(piece: str) -> bool:
    """A constant that, glued to others at render time, can make a private name."""
    return "__" in piece or piece.startswith("_") or any(p in piece for p in ESCAPE_PIECES)


def short_piece(piece: str) -> str:
    """At most 64 characters of ``piece`` for a message, around its first ``__``."""
    if len(piece) <= 64:
        return piece
    at = max(piece.find("__"), 0)
    return piece[max(0, at - 8) : at + 56]
