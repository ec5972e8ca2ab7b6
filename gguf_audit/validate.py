"""Field validators for the frozen config dataclasses: each raises ``ValueError`` naming the field and the value.

A config validates itself in its ``__post_init__`` with these, so a value is
checked once, next to the field, whoever builds the config: a TOML file, a
command-line flag or a caller of the library. ``name`` is how the message
names the field (``ReadConfig.retries``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

__all__ = ["check_bool", "check_choice", "check_int", "check_number", "check_optional_str", "check_strs"]


def check_int(name: str, value: object, minimum: int) -> None:
    """``value`` is an int (not a bool) of at least ``minimum``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < minimum:
        raise ValueError(f"{name} must be an int >= {minimum}. Got {value!r}.")


def check_number(name: str, value: object, minimum: float, *, above: bool = False) -> None:
    """``value`` is a finite int or float of at least ``minimum`` (more than it, with ``above``)."""
    ok = isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    if not ok or (value <= minimum if above else value < minimum):  # type: ignore[operator]
        bound = f"> {minimum}" if above else f">= {minimum}"
        raise ValueError(f"{name} must be a number {bound}. Got {value!r}.")


def check_bool(name: str, value: object) -> None:
    """``value`` is true or false (not 0 or 1)."""
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be true or false. Got {value!r}.")


def check_strs(name: str, value: object) -> None:
    """``value`` is a tuple of strings."""
    if not isinstance(value, tuple) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"{name} must be a list of strings. Got {value!r}.")


def check_optional_str(name: str, value: object, *, empty: bool = False) -> None:
    """``value`` is None or a string (a non-empty one unless ``empty``)."""
    if value is not None and (not isinstance(value, str) or (not empty and not value.strip())):
        raise ValueError(f"{name} must be a non-empty string or unset. Got {value!r}.")


def check_choice(name: str, value: object, choices: Sequence[str]) -> None:
    """``value`` is one of ``choices``."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {', '.join(choices)}. Got {value!r}.")
