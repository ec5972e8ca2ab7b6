"""One template's static verdict as plain data: what the render child sends back before it renders.

The render child parses and inspects each template (the parser is the part a
hostile megabyte of Jinja attacks, so it runs under the child's limits, not in
the auditing process) and answers with a :class:`StaticVerdict`, a JSON
object of one of these shapes:

* ``{"unsafe": [...], "costs": [...]}``: inspected; the reasons it is unsafe
  and the loops that may pass the render limits (both may be empty). Only a
  template with this shape is rendered.
* ``{"syntax": "line N: ..."}``: it does not parse.
* ``{"refused": "..."}``: it parses, but nests or chains past the inspection's
  bounds.
* ``{"limit": "cpu"}`` (or ``wall``, ``memory``, a signal): a limit of the
  child stopped the inspection (set by the child or, when it died, the runner).
"""

from __future__ import annotations

from typing import TypedDict

from jinja2 import TemplateSyntaxError

from gguf_audit.templates.inspect.clock import date_gate_reasons
from gguf_audit.templates.inspect.cost import template_cost_reasons
from gguf_audit.templates.inspect.inspector import (
    TemplateInspectionError,
    inspect_template_source,
    parse_template_source,
)

__all__ = ["StaticVerdict", "static_verdict"]


class StaticVerdict(TypedDict, total=False):
    """What parsing and inspecting one template found (one of the shapes in the module docstring)."""

    unsafe: list[str]
    costs: list[str]
    syntax: str
    refused: str
    limit: str


def static_verdict(source: str) -> StaticVerdict:
    """Parse and inspect ``source``, never render it. Pure; only a limit of the process interrupts it."""
    try:
        tree = parse_template_source(source)
        unsafe = inspect_template_source(source, tree) + date_gate_reasons(tree)
        costs = template_cost_reasons(tree)
    except TemplateSyntaxError as exc:
        return {"syntax": f"line {exc.lineno}: {exc.message}"}
    except TemplateInspectionError as exc:
        return {"refused": str(exc)}
    except RecursionError:
        return {"refused": "the template nests too deeply to count its loops"}
    return {"unsafe": unsafe, "costs": costs}
