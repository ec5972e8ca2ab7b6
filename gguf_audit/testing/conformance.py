"""gguf-audit's verdict set beside llama.cpp's, file by file: agreement and disagreement classes.

:func:`compare` audits files (header only, as ``inspect`` does without
sampling) and asks the oracle (:mod:`gguf_audit.testing.oracle`) about the
same files in few batched calls, then pairs the answers as :class:`Outcome`
rows. An outcome agrees when gguf-audit's ``loadable`` is true exactly when
llama.cpp loaded the file and its three-way verdict
(:func:`gguf_audit.findings.llama_cpp_verdict`) names what llama.cpp did:
``loads`` for ``loaded``, ``refuses`` for ``refused``, ``aborts`` for
``aborted``. A disagreement gets a class: what llama.cpp said with its
numbers and names blanked out, or the codes gguf-audit refused with, so that
many files broken the same way count as one class.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from gguf_audit.audit import AuditConfig, FileAudit, audit_file
from gguf_audit.codes import CODES, LlamaCpp
from gguf_audit.findings import llama_cpp_verdict
from gguf_audit.testing.oracle import Oracle, OracleVerdict, Stage

__all__ = [
    "CONFORMANCE_AUDIT",
    "ORACLE_BATCH",
    "Outcome",
    "compare",
    "confusion",
    "disagreement_class",
    "ours",
]

CONFORMANCE_AUDIT: Final = AuditConfig(templates=False)
"""Header checks only: chat templates never change what llama.cpp's loader does."""

ORACLE_BATCH: Final = 500
"""Files per llama-verdict call (it forks one child per file)."""

_EXPECTED: Final = {"loaded": "loads", "refused": "refuses", "aborted": "aborts"}


def ours(audit: FileAudit) -> str:
    """gguf-audit's verdict as a word: ``loads``, ``refuses``, ``aborts`` or ``unknown``."""
    verdict = llama_cpp_verdict(audit.findings)
    return "unknown" if verdict is None else str(verdict)


@dataclass(frozen=True, slots=True)
class Outcome:
    """One file judged by both sides."""

    path: str
    ours: str
    loadable: bool | None
    theirs: str
    """llama.cpp's ``loaded``, ``refused``, ``aborted`` or ``timeout``."""
    message: str
    codes: tuple[str, ...]
    """gguf-audit's finding codes, in order."""

    @property
    def agrees(self) -> bool:
        expected = _EXPECTED.get(self.theirs)
        return expected == self.ours and self.loadable == (self.theirs == "loaded")

    @property
    def klass(self) -> str:
        """The disagreement class (empty when both sides agree)."""
        return "" if self.agrees else disagreement_class(self)


_NOISE: Final = (
    (re.compile(r"'[^']*'|\"[^\"]*\"|`[^`]*`"), "'_'"),
    (re.compile(r"\(file: [^)]*\)|/\S+\.gguf"), "FILE"),
    (re.compile(r"-?\b(0x[0-9a-f]+|\d+)\b"), "N"),
)


def disagreement_class(outcome: Outcome) -> str:
    """``<llama.cpp>/<gguf-audit>: <why>``: llama.cpp's message with values blanked when it did not load,
    else the codes gguf-audit judged with."""
    head = f"{outcome.theirs}/{outcome.ours}"
    if outcome.theirs != "loaded" and outcome.ours in ("loads", "unknown"):
        why = outcome.message.split("error loading model: ")[-1]
        for pattern, blank in _NOISE:
            why = pattern.sub(blank, why)
        return f"{head}: {why[:160]}"
    judged = sorted({c for c in outcome.codes if CODES[c].llama_cpp is not LlamaCpp.LOADS})
    return f"{head}: {' '.join(judged) or '-'}"


def compare(
    oracle: Oracle,
    paths: Sequence[str | os.PathLike[str]],
    *,
    stage: Stage = Stage.MODEL,
    config: AuditConfig = CONFORMANCE_AUDIT,
    batch: int = ORACLE_BATCH,
    timeout_s: float = 60.0,
) -> list[Outcome]:
    """Audit every file and ask the oracle about it; one :class:`Outcome` per path, in order."""
    verdicts: list[OracleVerdict] = []
    for start in range(0, len(paths), batch):
        verdicts.extend(oracle.ask(paths[start : start + batch], stage=stage, timeout_s=timeout_s))
    outcomes = []
    for path, verdict in zip(paths, verdicts, strict=True):
        audit = audit_file(os.fspath(path), config=config)
        outcomes.append(
            Outcome(
                os.fspath(path),
                ours(audit),
                audit.loadable,
                verdict.verdict,
                verdict.message,
                tuple(f.code for f in audit.findings),
            )
        )
    return outcomes


def confusion(outcomes: Iterable[Outcome]) -> Counter[tuple[str, str]]:
    """Counts of (gguf-audit verdict, llama.cpp verdict)."""
    return Counter((o.ours, o.theirs) for o in outcomes)


def stage_for(path: Path) -> Stage:
    """How far to ask llama.cpp about a corpus file: vocab files load only their vocabulary; every
    other file is loaded as a model, a later split shard too (alone it is refused, and gguf-audit says so:
    ``shard.later_shard``)."""
    if path.parent.name == "vocab":
        return Stage.VOCAB
    return Stage.MODEL
