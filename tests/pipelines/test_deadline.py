"""The scan's per-file deadline: a file whose audit never ends is answered instead of waited for."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

from gguf_audit.codes import Code
from gguf_audit.findings import CODES, finding
from gguf_audit.pipelines.work.deadline import deadline_message, wait_for_files


def test_a_file_past_its_deadline_is_expired_and_a_done_one_is_not() -> None:
    release = threading.Event()
    with ThreadPoolExecutor(2) as pool:
        stuck = pool.submit(release.wait)
        quick = pool.submit(lambda: True)
        quick.result()
        # The stuck file was submitted long ago: its deadline has passed.
        started = {stuck: time.monotonic() - 10.0, quick: time.monotonic()}
        done, expired = wait_for_files(started, deadline_seconds=5.0)
        assert quick in done and stuck not in done
        assert expired == {stuck}
        # A running file is waited for until its deadline, then expired.
        done, expired = wait_for_files({stuck: time.monotonic()}, deadline_seconds=0.05)
        assert done == set() and expired == {stuck}
        release.set()
    assert wait_for_files({}) == (set(), set())


def test_the_deadline_finding_is_registered() -> None:
    f = finding(Code.RUN_FILE_DEADLINE, deadline_message(900))
    assert "900 s" in f.message and CODES[Code.RUN_FILE_DEADLINE].refused is None
