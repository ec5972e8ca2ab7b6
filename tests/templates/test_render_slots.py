"""Render children are bounded per process: threads beyond the slots wait, none is refused."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from gguf_audit.templates.limits import TemplateLimits
from gguf_audit.templates.sandbox.runner import RenderSlots, render_all


def test_threads_share_a_bounded_number_of_children() -> None:
    slots = RenderSlots(2)
    sources = [f"{{% for m in messages %}}{i}:{{{{ m.content }}}}{{% endfor %}}" for i in range(6)]

    def render(source: str) -> list[object]:
        return [
            a.get("status") for a in render_all([source], bos_token="<s>", eos_token="</s>", limits=LIMITS, slots=slots)
        ]

    with ThreadPoolExecutor(6) as pool:
        statuses = list(pool.map(render, sources))
    assert statuses == [["ok"]] * 6  # every template rendered, in turn
    assert 1 <= slots.peak <= 2
    assert slots.in_use == 0


def test_a_slot_is_released_when_rendering_fails() -> None:
    slots = RenderSlots(1)
    with pytest.raises(ValueError), slots:
        raise ValueError("boom")
    assert slots.in_use == 0
    with slots:  # would block forever had the slot leaked
        assert slots.in_use == 1
    with pytest.raises(ValueError, match="at least one slot"):
        RenderSlots(0)


LIMITS = TemplateLimits()
