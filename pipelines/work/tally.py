"""What the driver counts of a run without holding its rows: :class:`Tally`, and the per-file facts it keeps.

A worker tallies the rows it writes (:meth:`Tally.of_rows`) and returns the
tally with its files' :data:`FACT_COLUMNS` (one small row per file, what the
models and the summary need); the driver adds the tallies up.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Final

import pyarrow as pa
import pyarrow.compute as pc

from gguf_audit.findings import SEVERITY_RANK, Severity
from gguf_audit.tables.models import MODEL_INPUT_COLUMNS
from gguf_audit.tables.provenance import LINEAGE_FACT_COLUMNS

__all__ = ["FACT_COLUMNS", "Tally", "facts_of"]

FACT_COLUMNS: Final = (*MODEL_INPUT_COLUMNS, "model_id", *LINEAGE_FACT_COLUMNS)
"""The ``files`` columns the driver keeps per file: what :func:`~gguf_audit.tables.models.summarise_model`
and the lineage of :mod:`~gguf_audit.pipelines.scan.lineage` read."""


def facts_of(files: pa.Table) -> pa.Table:
    """The :data:`FACT_COLUMNS` of some ``files`` rows."""
    return files.select(list(FACT_COLUMNS))


@dataclass
class Tally:
    """Files by status, problems by code and severity, and what reading cost."""

    statuses: Counter[str] = field(default_factory=Counter)
    codes: Counter[str] = field(default_factory=Counter)
    severities: Counter[str] = field(default_factory=Counter)
    code_severities: dict[str, str] = field(default_factory=dict)
    bytes_read: int = 0
    requests: int = 0
    unloadable: int = 0
    """Files llama.cpp would refuse (``loadable`` false), whatever their findings' severities."""
    aborts: int = 0
    """Files whose ``llama_cpp`` verdict is ``aborts`` (they crash the process that loads them)."""
    size_bytes: int = 0
    """The files' sizes as listed or learnt from the first read (manifests of plain URLs list none)."""

    @classmethod
    def of_files(cls, files: pa.Table) -> Tally:
        """The tally of some ``files`` rows (their problems are added with :meth:`add_problems`)."""
        tally = cls()
        tally.statuses.update(files.column("status").to_pylist())
        tally.bytes_read = int(pc.sum(files.column("bytes_read")).as_py() or 0)
        tally.requests = int(pc.sum(files.column("requests")).as_py() or 0)
        if "size" in files.column_names:
            tally.size_bytes = int(pc.sum(files.column("size")).as_py() or 0)
        if "loadable" in files.column_names:
            tally.unloadable = int(pc.sum(pc.equal(files.column("loadable"), False)).as_py() or 0)
        if "llama_cpp" in files.column_names:
            tally.aborts = int(pc.sum(pc.equal(files.column("llama_cpp"), "aborts")).as_py() or 0)
        return tally

    @classmethod
    def of_rows(cls, files: pa.Table, problems: pa.Table) -> Tally:
        """The tally of some ``files`` rows and their ``problems`` rows."""
        tally = cls.of_files(files)
        tally.add_problems(problems)
        return tally

    def add_problems(self, problems: pa.Table) -> None:
        """Count ``problems`` rows by code and severity (a code keeps the worst severity seen)."""
        codes = problems.column("code").to_pylist()
        severities = problems.column("severity").to_pylist()
        self.codes.update(codes)
        self.severities.update(severities)
        for code, severity in zip(codes, severities, strict=True):
            self._note(code, severity)

    def _note(self, code: str, severity: str) -> None:
        known = self.code_severities.get(code)
        if known is None or SEVERITY_RANK[Severity(severity)] > SEVERITY_RANK[Severity(known)]:
            self.code_severities[code] = severity

    def merge(self, other: Tally) -> None:
        self.statuses.update(other.statuses)
        self.codes.update(other.codes)
        self.severities.update(other.severities)
        for code, severity in other.code_severities.items():
            self._note(code, severity)
        self.bytes_read += other.bytes_read
        self.requests += other.requests
        self.unloadable += other.unloadable
        self.aborts += other.aborts
        self.size_bytes += other.size_bytes
