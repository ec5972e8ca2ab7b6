"""The per-file deadline of a scan: a file whose audit runs too long gets a finding instead of holding its batch.

A thread cannot be stopped from outside, so the audit of such a file keeps
running on its pool thread until its own limits end it (reads time out, the
template render child is killed at its budget); the batch does not wait for it:
the file is written with a ``run.file_deadline`` problem and the batch moves on.
:func:`wait_for_files` is the hook ``execute._audit_and_write`` waits through.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from concurrent.futures import FIRST_COMPLETED, Future, wait
from typing import TypeVar

from gguf_audit.audit import FILE_DEADLINE_SECONDS

__all__ = ["FILE_DEADLINE_SECONDS", "deadline_message", "wait_for_files"]


T = TypeVar("T")


def wait_for_files(
    pending: Mapping[Future[T], float], *, deadline_seconds: float = FILE_DEADLINE_SECONDS
) -> tuple[set[Future[T]], set[Future[T]]]:
    """Wait until a file's audit is done or one passes its deadline; return (done, expired).

    ``pending`` maps each future to the ``time.monotonic()`` of its submission.
    ``expired`` holds the futures not done whose deadline has passed (the caller
    writes their files' rows with a finding and stops waiting for them).
    """
    if not pending:
        return set(), set()
    now = time.monotonic()
    first_deadline = min(pending.values()) + deadline_seconds
    done, _ = wait(list(pending), timeout=max(0.0, first_deadline - now), return_when=FIRST_COMPLETED)
    now = time.monotonic()
    expired = {f for f, started in pending.items() if f not in done and now >= started + deadline_seconds}
    return set(done), expired


def deadline_message(deadline_seconds: float = FILE_DEADLINE_SECONDS) -> str:
    """The ``run.file_deadline`` message."""
    return (
        f"the audit of this file passed the scan's per-file deadline of {deadline_seconds:g} s and was left "
        "running; the file may be built to exhaust an auditor"
    )
