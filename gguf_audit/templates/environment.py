"""The Jinja environment chat templates are parsed and rendered with: transformers' setup.

Everything here mirrors the Jinja setup of Hugging Face transformers'
``apply_chat_template`` (``ImmutableSandboxedEnvironment``, ``trim_blocks``,
``lstrip_blocks``, ``loopcontrols``, the ``{% generation %}`` tag,
``raise_exception``, ``strftime_now`` and its ``tojson``), because that is the
behaviour chat templates are written against. The static inspection parses
with it in this process; the render child renders with it. It imports only
jinja2 and the standard library, so the child starts fast.
"""

from __future__ import annotations

import datetime
import json
from collections.abc import Callable
from typing import Any, Final

import jinja2
import jinja2.ext
import jinja2.sandbox
from jinja2 import nodes
from jinja2.parser import Parser

__all__ = ["AuditingSandbox", "TemplateRaisedError", "make_environment"]

#: Fixed clock for ``strftime_now`` so the same file always renders the same
#: text (the date Llama 3.1's own template falls back to).
_FIXED_NOW: Final = datetime.datetime(2024, 7, 26, 12, 0, 0)


class TemplateRaisedError(jinja2.TemplateError):
    """The template called ``raise_exception(message)``, as transformers defines it."""


class _GenerationTag(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}``: transformers' AssistantTracker tag.

    Some templates mark the assistant's tokens with it for training masks; for
    rendering it is transparent, and without it those templates do not parse.
    """

    tags = {"generation"}  # noqa: RUF012 - jinja2 declares this a plain set attribute

    def parse(self, parser: Parser) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        call = self.call_method("_render_body")
        return nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _render_body(self, caller: Callable[[], str]) -> str:
        return caller()


class AuditingSandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
    """The immutable sandbox, remembering which private or internal attributes it refused.

    A refused access renders as an undefined value and only fails when used,
    so without this record a template probing for an escape could look fine.
    """

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.refused: list[str] = []

    def unsafe_undefined(self, obj: Any, attribute: str) -> jinja2.Undefined:
        # Mutating methods (list.append) are refused too; those are a render
        # error in transformers, not an escape attempt, so they are not recorded.
        private = attribute.startswith("_") or jinja2.sandbox.is_internal_attribute(obj, attribute)
        if private and len(self.refused) < 20:
            self.refused.append(f"{attribute!r} of {type(obj).__name__!r}")
        return super().unsafe_undefined(obj, attribute)


def _raise_exception(message: object) -> None:
    raise TemplateRaisedError(str(message))


def _strftime_now(fmt: str) -> str:
    return _FIXED_NOW.strftime(fmt)


def _tojson(
    value: object,
    ensure_ascii: bool = False,
    indent: int | str | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    # transformers replaces Jinja's tojson, which HTML-escapes '<', '>', '&'
    # and "'", with plain json.dumps; templates rely on the unescaped text.
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def make_environment() -> AuditingSandbox:
    """The Jinja environment chat templates are parsed and rendered with (transformers' setup)."""
    env = AuditingSandbox(
        trim_blocks=True,
        lstrip_blocks=True,
        extensions=[_GenerationTag, jinja2.ext.loopcontrols],
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env
