"""The hard limits of the template audit: template sizes, and what one render may use in the child.

Shared by the runner (which enforces the wall clock and passes the rest to
the child) and the audit (which names them in its findings).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_TEMPLATE_CHARS",
    "MAX_TOTAL_TEMPLATE_CHARS",
    "TAIL_CHARS",
    "TemplateLimits",
    "inspect_seconds",
]

#: Templates longer than this are not parsed or rendered. Real chat templates
#: are a few kB (the largest known, with tool-use prose, are under 40 kB); a
#: megabyte of Jinja is an attack on the parser (which runs in the render child).
MAX_TEMPLATE_CHARS: Final = 1_000_000
#: Template characters parsed per file. Parsing and inspecting a megabyte of
#: Jinja takes 2 to 4 s, and a file may carry any number of
#: ``tokenizer.chat_template.<name>`` keys; past this the rest are not judged
#: (``template.resource_limit`` for each).
MAX_TOTAL_TEMPLATE_CHARS: Final = 1_000_000
#: Characters of the rendered conversation kept in ``TemplateAudit.rendered_tail``.
TAIL_CHARS: Final = 200


@dataclass(frozen=True, slots=True)
class TemplateLimits:
    """Hard limits for rendering one template in the child process."""

    cpu_seconds: float = 2.0
    wall_seconds: float = 5.0
    memory_bytes: int = 256 * 1024 * 1024
    """The child's whole address space (``RLIMIT_AS``); the interpreter and jinja2 take ~30 MB of it."""
    output_chars: int = 1_000_000
    max_templates: int = 16
    """Templates (keys, occurrences, array items) judged per file; past it ``template.too_many``."""
    max_renders: int = 8
    """Distinct templates rendered per file (each may use ``cpu_seconds``); past it ``template.too_many``."""
    file_seconds: float = 30.0
    """Wall-clock budget for all renders of one file; templates not reached are ``template.too_many``."""

    def __post_init__(self) -> None:
        for count in ("max_templates", "max_renders"):
            value = getattr(self, count)
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 10_000:
                raise ValueError(f"{count} must be an int in [1, 10000]. Got {value!r}.")
        for name in ("cpu_seconds", "wall_seconds", "file_seconds"):
            value = getattr(self, name)
            if not isinstance(value, int | float) or isinstance(value, bool) or not 0 < value <= 3600:
                raise ValueError(f"{name} must be a number of seconds in (0, 3600]. Got {value!r}.")
        if not isinstance(self.memory_bytes, int) or self.memory_bytes < 64 * 1024 * 1024:
            raise ValueError(f"memory_bytes must be an int of at least 64 MiB. Got {self.memory_bytes!r}.")
        if not isinstance(self.output_chars, int) or self.output_chars < TAIL_CHARS:
            raise ValueError(f"output_chars must be an int of at least {TAIL_CHARS}. Got {self.output_chars!r}.")


DEFAULT_LIMITS: Final = TemplateLimits()


def inspect_seconds(chars: int) -> float:
    """CPU and wall seconds the child may spend parsing and inspecting a template of ``chars`` characters.

    Not the render's limit: the parse of a large honest template (2 to 4 s a
    megabyte) must not be taken for a hostile one, so the allowance grows with
    the size, 2 s plus 8 s a megabyte.
    """
    return 2.0 + 8.0 * chars / 1_000_000
