"""The driver's collecting side: stage each batch's rows once, count what they hold, summarise the run.

Results are keyed by URL on arrival and a file's second result is dropped
(:class:`Collector`), so no rerun of a batch can duplicate a row. Once every
file has rows, the models are summarised (:func:`model_summaries`, shard sets
judged from the facts collected) and the run's result (:class:`ScanResult`)
becomes its ``runs`` row (:func:`runs_row`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from gguf_audit import __version__
from gguf_audit.checks.shards import ShardFacts, judge_shard_set
from gguf_audit.findings import SEVERITY_RANK, Severity
from gguf_audit.format.shard_names import parse_shard_name
from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.store import Recovered, TableSink
from gguf_audit.tables.models import MODEL_INPUT_COLUMNS, ModelSummary, summarise_model
from gguf_audit.tables.per_file import AuditTables
from gguf_audit.tables.schema import SCHEMA_VERSION

__all__ = [
    "Collector",
    "IncompleteModel",
    "ScanResult",
    "incomplete_models",
    "model_summaries",
    "runs_row",
]


@dataclass(frozen=True, slots=True)
class IncompleteModel:
    """A sharded model some of whose shards are not in the collection."""

    model_id: str
    count: int
    missing: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class ScanResult:
    """What a committed run found and cost."""

    run_id: str
    out: str
    base_run_id: str | None
    n_files: int
    n_read: int
    n_reused: int
    n_models: int
    statuses: Mapping[str, int]
    problem_codes: Mapping[str, int]
    code_severities: Mapping[str, str]
    """The severity each code was reported with (its worst, should a finding override it)."""
    severities: Mapping[str, int]
    incomplete_models: tuple[IncompleteModel, ...]
    bytes_read: int
    requests: int
    collection_bytes: int
    listing_seconds: float
    audit_seconds: float
    seconds: float
    rows_checked: int
    duplicates_dropped: int
    """Rows of files that already had one (results of batches dask ran twice), not written."""
    reuse_note: str | None
    """Why an incremental run read everything, when it did."""
    scheduler: str
    dashboard: str | None
    n_workers: int
    recovered: tuple[Recovered, ...] = ()

    @property
    def files_per_second(self) -> float:
        """Files read per second of auditing (reused files cost nothing and are not counted)."""
        return self.n_read / self.audit_seconds if self.audit_seconds > 0 else 0.0

    def reaches(self, fail_on: str) -> bool:
        """Whether any problem, of a file or a model, is at least ``fail_on`` severe."""
        if fail_on == "warning":
            return bool(self.severities.get("error", 0) or self.severities.get("warning", 0))
        return bool(self.severities.get("error", 0))


@dataclass
class Collector:
    """The driver's running state: sinks, dedupe, counts, and what the model checks need."""

    sinks: dict[str, TableSink]
    expected: frozenset[str]
    seen: set[str] = field(default_factory=set)
    statuses: Counter[str] = field(default_factory=Counter)
    codes: Counter[str] = field(default_factory=Counter)
    severities: Counter[str] = field(default_factory=Counter)
    code_severities: dict[str, str] = field(default_factory=dict)
    bytes_read: int = 0
    requests: int = 0
    members: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    facts: dict[str, ShardFacts] = field(default_factory=dict)
    dropped: int = 0

    def add(self, tables: AuditTables, facts: Sequence[ShardFacts]) -> int:
        """Stage one batch's rows, dropping files that already have rows. Returns the files added."""
        files = tables.files
        urls = files.column("url").to_pylist()
        fresh = [u for u in dict.fromkeys(urls) if u in self.expected and u not in self.seen]
        if len(fresh) != len(urls):
            self.dropped += len(urls) - len(fresh)
            keep = pa.array(fresh, pa.string())
            # one row per URL: a file's first row wins
            first = {u: i for i, u in reversed(list(enumerate(urls)))}
            files = files.take(pa.array([first[u] for u in fresh], pa.int64()))

            def only(t: pa.Table) -> pa.Table:
                return t.filter(pc.is_in(t.column("url"), value_set=keep))

            tables = AuditTables(
                files=files,
                problems=only(tables.problems),
                tensors=only(tables.tensors),
                metadata=only(tables.metadata),
                samples=only(tables.samples),
            )
        self.seen.update(fresh)
        for name, table in tables.per_file().items():
            self.sinks[name].write(table)
        self._count(tables)
        fresh_set = set(fresh)
        for fact in facts:
            if fact.url in fresh_set:
                self.facts[fact.url] = fact
        return len(fresh)

    def _count(self, tables: AuditTables) -> None:
        """Count one batch's files, bytes, requests and problems; keep each file's row for its model."""
        files = tables.files
        self.statuses.update(files.column("status").to_pylist())
        self.bytes_read += int(pc.sum(files.column("bytes_read")).as_py() or 0)
        self.requests += int(pc.sum(files.column("requests")).as_py() or 0)
        self.count_problems(tables.problems)
        for row in files.select([*MODEL_INPUT_COLUMNS, "model_id"]).to_pylist():
            self.members.setdefault(row["model_id"], []).append(row)

    def count_problems(self, problems: pa.Table) -> None:
        """Count ``problems`` rows by code and severity (a code keeps the worst severity seen)."""
        self.codes.update(problems.column("code").to_pylist())
        severities = problems.column("severity").to_pylist()
        self.severities.update(severities)
        for code, severity in zip(problems.column("code").to_pylist(), severities, strict=True):
            known = self.code_severities.get(code)
            if known is None or SEVERITY_RANK[Severity(severity)] > SEVERITY_RANK[Severity(known)]:
                self.code_severities[code] = severity


def model_summaries(groups: Mapping[str, Sequence[str]], collector: Collector) -> list[ModelSummary]:
    """Each model's summary from its files' rows, a sharded model's with the verdict on its shard set."""
    summaries = []
    for model_id, members in groups.items():
        rows = collector.members.get(model_id, [])
        verdict = None
        if parse_shard_name(members[0]) is not None:
            facts = [collector.facts[u] for u in members if u in collector.facts]
            facts += [_unknown_facts(u) for u in members if u not in collector.facts]
            verdict = judge_shard_set(model_id, facts)
        summaries.append(summarise_model(model_id, rows, verdict))
    return summaries


def _unknown_facts(url: str) -> ShardFacts:
    name = parse_shard_name(url)
    if name is None:  # pragma: no cover - callers pass shard URLs
        raise ValueError(f"not a shard name. Got {url!r}.")
    return ShardFacts(url, name.shard_index, name.shard_count, readable=False, loadable=None)


def incomplete_models(summaries: Sequence[ModelSummary]) -> tuple[IncompleteModel, ...]:
    """The sharded models of ``summaries`` with shards missing."""
    return tuple(
        IncompleteModel(str(m.row["model_id"]), int(m.row["shard_count"]), tuple(m.row["shards_missing"] or ()))
        for m in summaries
        if not m.row["complete"]
    )


def runs_row(config: ScanConfig, result: ScanResult, started: datetime) -> dict[str, Any]:
    """The run's ``runs`` row: what it scanned, with which config, what it found and cost."""
    statuses = result.statuses
    return {
        "schema_version": SCHEMA_VERSION,
        "tool_version": __version__,
        "status": "committed",
        "started_at": started,
        "finished_at": datetime.now(UTC),
        "roots": list(config.roots),
        "manifests": list(config.manifests),
        "include": list(config.include),
        "exclude": list(config.exclude),
        "incremental": config.incremental,
        "base_run_id": result.base_run_id,
        "scheduler": result.scheduler,
        "n_workers": result.n_workers,
        "n_files": result.n_files,
        "n_read": result.n_read,
        "n_reused": result.n_reused,
        "n_models": result.n_models,
        "n_incomplete_models": len(result.incomplete_models),
        "n_ok": statuses.get("ok", 0),
        "n_warning": statuses.get("warning", 0),
        "n_error": statuses.get("error", 0),
        "n_unreadable": statuses.get("unreadable", 0),
        "n_problems": sum(result.problem_codes.values()),
        "requests": result.requests,
        "bytes_read": result.bytes_read,
        "collection_bytes": result.collection_bytes,
        "listing_seconds": result.listing_seconds,
        "seconds": result.seconds,
        "files_per_second": result.files_per_second,
        "config": config.public_json(),
    }
