"""Kept threads: an audit's template run and HTTP read-ahead reuse threads instead of starting one per call."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from corpus import corpus_dir

from gguf_audit import audit as audit_module
from gguf_audit.audit import AuditConfig, audit_file
from gguf_audit.io.kept import KeptThreads


def test_calls_one_after_another_run_on_one_kept_thread() -> None:
    kept = KeptThreads("test-kept")
    seen: list[int] = []
    for _ in range(50):
        kept.start(lambda: seen.append(threading.get_ident())).wait(10)
    assert len(seen) == 50 and len(set(seen)) == 1 and kept.started == 1


def test_a_thread_starts_only_when_every_kept_one_is_busy() -> None:
    kept = KeptThreads("test-kept")
    release = threading.Event()
    running = threading.Semaphore(0)

    def hold() -> None:
        running.release()
        release.wait(10)

    held = [kept.start(hold) for _ in range(4)]
    for _ in range(4):
        assert running.acquire(timeout=10)  # all four run at once: none waits for another
    assert kept.started == 4
    release.set()
    assert all(done.wait(10) for done in held)
    kept.start(lambda: None).wait(10)
    assert kept.started == 4  # an idle one took it


def test_a_call_that_raises_leaves_its_thread_to_the_next_call() -> None:
    kept = KeptThreads("test-kept")

    def fail() -> None:
        raise RuntimeError("boom")

    assert kept.start(fail).wait(10)
    seen: list[int] = []
    assert kept.start(lambda: seen.append(1)).wait(10)
    assert seen == [1] and kept.started == 1


def test_the_files_template_audits_run_on_a_kept_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    """A dask worker's profiler and GC callback deadlocked a worker on Python 3.11 while a template thread
    started (a 100,000-file night hung): the audits of a collection's files start no thread of their own."""
    path = Path(corpus_dir()) / "models" / "tiny-llama-Q4_K_M.gguf"
    ran_on: list[int] = []
    real = audit_module.audit_header_templates

    def recording(*args: object, **kwargs: object) -> object:
        ran_on.append(threading.get_ident())
        return real(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(audit_module, "audit_header_templates", recording)
    started = threading.Thread.start
    starts: list[str] = []

    def counting_start(thread: threading.Thread) -> None:
        starts.append(thread.name)
        started(thread)

    audit_file(str(path), config=AuditConfig())  # the first may start the kept thread
    monkeypatch.setattr(threading.Thread, "start", counting_start)
    audits = [audit_file(str(path), config=AuditConfig()) for _ in range(5)]
    assert len(ran_on) == 6 and len(set(ran_on[1:])) == 1 and threading.get_ident() not in ran_on
    assert all(a.templates for a in audits)
    assert starts == []
