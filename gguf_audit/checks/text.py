"""Control and invisible characters in the ``general.*`` strings: what a reader of the model's name sees.

Terminal escapes (C0 and C1 controls) and invisible characters (bidi overrides and
isolates, zero-width space, BOM, tag characters) in a name, author or tag hide or
change what a listing shows. Descriptions may hold tabs and line breaks; the other
``general.*`` strings may not. Of a string array, the first :data:`_MAX_ARRAY_ITEMS`
items are checked.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from typing import Final

from gguf_audit.codes import Code
from gguf_audit.findings import Finding, finding
from gguf_audit.format.model import Header, StringArray, ValueType

__all__ = ["check_control_characters"]

# C0 (but tab, newline, carriage return), DEL and C1; checked apart so descriptions may hold them.
_LINE_BREAKS: Final = "\t\n\r"
_HIDDEN: Final = re.compile(
    "[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f"
    "\u061c\u200b\u200e\u200f\u2028\u2029\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff"
    "\U000e0000-\U000e007f]"
)
_HIDDEN_RUNS: Final = re.compile(_HIDDEN.pattern + "+")
"""Runs of hidden characters: a value that swallowed binary bytes is a few long runs, not one match a byte."""
_MAX_ARRAY_ITEMS: Final = 1000


def _char_name(ch: str) -> str:
    name = unicodedata.name(ch, "")
    return f"U+{ord(ch):04X}" + (f" {name}" if name else "")


def _hidden_in(text: str, allow_breaks: bool) -> tuple[int, int] | None:
    """(count, index of the first) of control or invisible characters in ``text``."""
    # Counted and found with C-speed string methods: a corrupt length can make a value megabytes of NULs.
    runs = [(m.start(), m.end()) for m in _HIDDEN_RUNS.finditer(text)]
    firsts = [runs[0][0]] if runs else []
    count = sum(end - start for start, end in runs)
    if not allow_breaks:
        for ch in _LINE_BREAKS:
            n = text.count(ch)
            if n:
                count += n
                firsts.append(text.index(ch))
    if not count:
        return None
    return count, min(firsts)


def check_control_characters(header: Header) -> Iterator[Finding]:
    """Yield a finding for every ``general.*`` string (or array item) holding hidden characters."""
    for kv in header.kvs:
        if not kv.key.startswith("general."):
            continue
        allow_breaks = kv.key.endswith("description")
        items: list[tuple[str, str]] = []
        if kv.type is ValueType.STRING and isinstance(kv.value, str):
            items.append((kv.key, kv.value))
        elif isinstance(kv.value, StringArray):
            items.extend((f"{kv.key}[{i}]", kv.value[i]) for i in range(min(len(kv.value), _MAX_ARRAY_ITEMS)))
        for where, text in items:
            hit = _hidden_in(text, allow_breaks)
            if hit is None:
                continue
            count, first = hit
            yield finding(
                Code.META_CONTROL_CHARACTERS,
                f"{where} holds {count} control or invisible characters, the first {_char_name(text[first])} "
                f"at index {first}",
                offset=kv.offset,
            )
