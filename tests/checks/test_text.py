"""Control and invisible characters in the general.* strings."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from tiny_model import V, codes, tiny

from gguf_audit.findings import Finding


@pytest.mark.parametrize(
    ("key", "value", "says"),
    [
        ("general.name", "tiny\x1b[31mred", "U+001B"),
        ("general.author", "evil\u202eresu", "U+202E RIGHT-TO-LEFT OVERRIDE"),
        ("general.name", "two\nlines", "U+000A"),
        ("general.basename", "zero\u200bwidth", "U+200B ZERO WIDTH SPACE"),
        ("general.description", "tag\U000e0041smuggled", "U+E0041"),
    ],
)
def test_control_characters(key: str, value: str, says: str, audit: Callable[..., list[Finding]]) -> None:
    found = audit(tiny().set(key, value, V.STRING))
    assert codes(found) == ["meta.control_characters"]
    assert found[0].message.startswith(key) and says in found[0].message


def test_description_may_hold_newlines_and_tags_are_checked(audit: Callable[..., list[Finding]]) -> None:
    m = tiny().set("general.description", "line one\n\tline two\r\n", V.STRING)
    assert audit(m) == []
    m.set("general.tags", ["ok", "bad\x07bell"], V.ARRAY, V.STRING)
    found = audit(m)
    assert codes(found) == ["meta.control_characters"] and found[0].message.startswith("general.tags[1]")
