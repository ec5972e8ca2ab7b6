"""The CPU gate: at most ``slots`` threads doing CPU work, slots given back around reads and on exceptions."""

from __future__ import annotations

import threading

import pytest

from gguf_audit.io.gate import CpuGate

# Generous bounds on waits, so that a deadlock fails the test instead of hanging it (never timing asserts).
JOIN_S = 60.0


def _run(threads: list[threading.Thread]) -> None:
    for t in threads:
        t.start()
    for t in threads:
        t.join(JOIN_S)
    assert not any(t.is_alive() for t in threads), "a thread never finished: the gate deadlocked"


def test_at_most_slots_threads_hold_the_gate() -> None:
    gate = CpuGate(2)
    inside = 0
    most = 0
    lock = threading.Lock()

    def work() -> None:
        nonlocal inside, most
        for _ in range(50):
            with gate.held():
                with lock:
                    inside += 1
                    most = max(most, inside)
                sum(range(2000))
                with lock:
                    inside -= 1

    _run([threading.Thread(target=work) for _ in range(8)])
    assert most <= 2 and gate.stats.peak <= 2
    assert gate.stats.acquired == 8 * 50 and gate.holding == 0


def test_a_read_gives_the_slot_back() -> None:
    # One slot: the first thread waits in a "read" for the second thread, which needs the slot.
    gate = CpuGate(1)
    answered = threading.Event()
    order: list[str] = []

    def reader() -> None:
        with gate.held():
            order.append("reader holds")
            with gate.released():
                assert answered.wait(JOIN_S)
            order.append("reader back")
            assert gate.is_held

    def answerer() -> None:
        while not order:
            threading.Event().wait(0.001)
        with gate.held():
            order.append("answerer holds")
            answered.set()

    _run([threading.Thread(target=reader), threading.Thread(target=answerer)])
    assert order == ["reader holds", "answerer holds", "reader back"]
    assert gate.holding == 0


def test_slots_come_back_on_exceptions() -> None:
    gate = CpuGate(1)
    with pytest.raises(RuntimeError), gate.held():
        raise RuntimeError("a check broke")
    assert gate.holding == 0 and not gate.is_held
    with pytest.raises(OSError), gate.held(), gate.released():
        raise OSError("a read failed")
    assert gate.holding == 0 and not gate.is_held
    # Another thread gets the slot: nothing leaked.
    got: list[bool] = []
    _run([threading.Thread(target=lambda: got.append(gate._sem.acquire(timeout=JOIN_S)))])
    assert got == [True]


def test_held_is_reentrant_and_released_without_a_slot_is_a_no_op() -> None:
    gate = CpuGate(1)
    with gate.released():
        assert gate.holding == 0
    with gate.held():
        with gate.held():  # one slot: a second acquire would deadlock
            assert gate.holding == 1 and gate.is_held
        assert gate.is_held
        with gate.released(), gate.released():
            assert gate.holding == 0 and not gate.is_held
        assert gate.holding == 1
    assert gate.holding == 0 and gate.stats.acquired == 2
    with pytest.raises(ValueError, match="at least one slot"):
        CpuGate(0)
