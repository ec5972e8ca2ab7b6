"""The ``run.*`` codes: a scan's workers and deadlines; the file was not judged."""

from __future__ import annotations

from typing import Final

from gguf_audit.codes.code import Code
from gguf_audit.codes.model import CodeInfo, Severity

__all__ = ["ENTRIES"]

ENTRIES: Final[tuple[CodeInfo, ...]] = (
    CodeInfo(
        Code.RUN_WORKER_LOST,
        Severity.ERROR,
        None,
        "Every worker that took this file died before auditing it (after retries): it may crash the auditor.",
    ),
    CodeInfo(
        Code.RUN_FILE_DEADLINE,
        Severity.ERROR,
        None,
        (
            "The file's audit passed its deadline (15 minutes of wall clock from its start in a scan; inspect's "
            "--deadline) and was left running: the file got this row instead of holding its batch or the command. "
            "A file or its server may be built to exhaust an auditor."
        ),
    ),
)
