"""A render child started ahead of need (``inspect`` starts one beside its imports and read) renders as a fresh one."""

from __future__ import annotations

import os
import signal

from gguf_audit.templates.limits import TemplateLimits
from gguf_audit.templates.sandbox import runner
from gguf_audit.templates.sandbox.runner import prestart, render_all

SOURCE = "{% for m in messages %}<{{ m.role }}>{{ m.content }}{% endfor %}"
LIMITS = TemplateLimits()


def _render() -> list[object]:
    return [a.get("status") for a in render_all([SOURCE], bos_token="<s>", eos_token="</s>", limits=LIMITS)]


def _spare_pid() -> int | None:
    proc = runner._SPARE._proc
    return None if proc is None else proc.pid


def test_the_next_render_takes_the_prestarted_child_and_a_dead_one_is_replaced() -> None:
    prestart()
    first = _spare_pid()
    assert first is not None
    prestart()  # one spare at most
    assert _spare_pid() == first
    assert _render() == ["ok"] and _spare_pid() is None
    prestart()
    spare = runner._SPARE._proc
    assert spare is not None
    os.kill(spare.pid, signal.SIGKILL)
    spare.wait()
    assert _render() == ["ok"]  # a new child, not the killed one


def test_a_spare_nothing_took_is_stopped() -> None:
    prestart()
    proc = runner._SPARE._proc
    assert proc is not None
    runner._SPARE.stop()
    assert proc.returncode is not None and proc.stdout is not None and proc.stdout.closed
    assert _spare_pid() is None
