"""The driver's collecting side: take each batch's data files once, count what they hold, summarise the run.

Results are keyed by URL on arrival and a batch with a file that already has
rows is left out (:class:`Collector`), so no rerun of a batch can duplicate a
row. Once every file has rows, the models are summarised
(:func:`model_summaries`, shard sets judged from the facts collected) and the
run's result (:class:`ScanResult`) becomes its ``runs`` row (:func:`runs_row`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from gguf_audit import VERDICTS_VERSION, __version__
from gguf_audit.checks.shards import ShardFacts, judge_shard_set
from gguf_audit.codes import LLAMA_CPP_BUILD
from gguf_audit.format.shard_names import parse_shard_name
from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.scan.groups import ModelGroups
from gguf_audit.pipelines.spill import TableSpill, UrlLedger
from gguf_audit.pipelines.store import PartFile, Recovered
from gguf_audit.pipelines.work import BatchResult, Tally
from gguf_audit.redact import redact_url
from gguf_audit.tables.models import ModelSummary, summarise_model
from gguf_audit.tables.schema import SCHEMA_VERSION

__all__ = [
    "Collector",
    "IncompleteModel",
    "ScanResult",
    "incomplete_models",
    "model_summaries",
    "runs_row",
]

SKIPPED_NAMED: Final = 1000
"""Skipped entries a ``runs`` row names (``n_skipped`` counts them all): one row stays small whatever a tree holds."""

_OWN_COLUMNS: Final = frozenset({"compare", "mirror"})
"""Tables that came after the runs table's struct columns: their version and rows have columns of their own."""


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
    rows_written: Mapping[str, int] = field(default_factory=dict)
    """Rows this run added to each table (``runs`` not counted)."""
    n_models_judged: int = 0
    """Models judged in this run (the others kept the base run's rows)."""
    n_unloadable: int = 0
    """Files llama.cpp would refuse, whatever their findings' severities (a big-endian file's is a warning)."""
    n_aborts: int = 0
    """Of those, files that make llama.cpp abort the process that loads them."""
    listing_requests: int | None = None
    """Requests the listing sent; None when a listed store's requests are not counted."""
    listing_wait_s: float = 0.0
    """Seconds the listing waited out the Hugging Face Hub's rate limit (429 answers, each waited out)."""
    skipped: tuple[str, ...] = ()
    """Listed entries that got no row, each ``URL: why`` (:attr:`~gguf_audit.pipelines.listing.Listing.skipped`)."""
    mirror: Mapping[str, int] = field(default_factory=dict)
    """With a mirror check: paths by status (``faithful``, ``missing``, ...), as in the ``mirror`` table."""

    @property
    def files_per_second(self) -> float:
        """Files read per second of auditing (reused files cost nothing and are not counted)."""
        return self.n_read / self.audit_seconds if self.audit_seconds > 0 else 0.0

    def reaches(self, fail_on: str) -> bool:
        """Whether any problem, of a file or a model, is at least ``fail_on`` severe, or a file will not load.

        A file llama.cpp refuses fails the run at either level, even when its
        findings are warnings: "the night passed" must not hide a file that
        cannot be loaded.
        """
        if self.n_unloadable:
            return True
        if fail_on == "warning":
            return bool(self.severities.get("error", 0) or self.severities.get("warning", 0))
        return bool(self.severities.get("error", 0))


@dataclass
class Collector:
    """The driver's running state: the data files to commit, dedupe, counts, and what the model checks need.

    It holds no table rows, and no Python object per file: which listed files
    have rows is kept in a ledger on the driver's disk, and so are the small
    facts row of each file the workers return
    (:data:`~gguf_audit.pipelines.work.tally.FACT_COLUMNS`) and where each one's
    tensor infos lie (:mod:`~gguf_audit.pipelines.spill`). Only the
    shards' :class:`ShardFacts` stay in memory (a shard set is judged from them).
    """

    expected: InitVar[Iterable[str]]
    """The listed URLs: the only files whose rows are taken."""
    ledger: UrlLedger = field(init=False)
    parts: dict[str, list[PartFile]] = field(default_factory=dict)
    rows: Counter[str] = field(default_factory=Counter)
    tally: Tally = field(default_factory=Tally)
    facts: TableSpill = field(default_factory=TableSpill)
    shard_facts: dict[str, ShardFacts] = field(default_factory=dict)
    dropped: int = 0
    _facts_runs: list[tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]] = field(default_factory=list, repr=False)
    """Each facts table's model positions as runs (first, last): a few pairs a table, never a value a file."""

    def __post_init__(self, expected: Iterable[str]) -> None:
        self.ledger = UrlLedger(expected)

    @property
    def n_seen(self) -> int:
        """Listed files with rows so far."""
        return self.ledger.n_seen

    def seen_urls(self) -> set[str]:
        """The listed files with rows so far (a Python set: for tests and small nights)."""
        return self.ledger.seen_urls()

    def add(self, result: BatchResult) -> list[str]:
        """Take one batch's data files and facts, unless a file of it already has rows.

        Returns the files of a refused batch that still need rows (to be read
        again as a new batch); its data files are left out of the commit. A
        batch's files are all taken or none, since its data files hold them all.
        """
        urls = result.urls
        fresh = self.ledger.unseen(urls)
        if len(fresh) != len(urls):
            self.dropped += len(urls) - len(fresh)
            return fresh
        self.ledger.mark_seen(fresh)
        self.add_parts(result.parts)
        self.facts.append(result.facts)
        self.tally.merge(result.tally)
        for fact in result.shard_facts:
            self.shard_facts[fact.url] = fact
        # where each GGUF read keeps its tensor infos (62 bytes, TensorTableAt.packed), for the compare phase
        self.ledger.put_tables(result.tensor_tables)
        return []

    def add_parts(self, parts: Sequence[PartFile]) -> None:
        for part in parts:
            self.parts.setdefault(part.table, []).append(part)
            self.rows[part.table] += part.rows

    def add_reused(
        self, urls: Iterable[str], facts: Sequence[pa.Table], tally: Tally, shard_facts: Sequence[ShardFacts]
    ) -> None:
        """Count the reused files (their files rows are written by the driver, see :meth:`add_parts`).

        ``facts`` are the facts rows of those of them whose model is judged again.
        """
        self.ledger.mark_seen(urls)
        self.facts.extend(f for f in facts if f.num_rows)
        self.tally.merge(tally)
        for fact in shard_facts:
            self.shard_facts[fact.url] = fact

    def add_facts(self, facts: pa.Table) -> None:
        """Facts rows of files already counted (reused files of a carried model judged again after all)."""
        self.facts.append(facts)

    def tensor_tables(self, urls: Iterable[str]) -> dict[str, bytes]:
        """The packed tensor tables of those of ``urls`` read this night (a compare task's worth at a time)."""
        return self.ledger.tables_of(urls)

    def drop_tensor_tables(self) -> None:
        """Let go of every tensor table kept (the compare phase is done)."""
        self.ledger.drop_tables()

    def members(
        self, model_ids: Iterable[str], positions: Callable[[Sequence[str]], npt.NDArray[np.int64]] | None = None
    ) -> dict[str, list[dict[str, Any]]]:
        """The facts rows of the files of ``model_ids``, by model.

        ``positions(ids)`` says where models are in the night's order (-1: not
        listed): then only the facts tables holding a model in the range of
        ``model_ids``' are read. Models judged a chunk at a time, in order, read
        each table about once in all (a batch's files are a run or two of the
        order), not once a chunk.
        """
        ids = sorted(set(model_ids))
        wanted = pa.array(ids, pa.string())
        out: dict[str, list[dict[str, Any]]] = {}
        tables: Iterable[int] = range(len(self.facts))
        if positions is not None and ids:
            at = positions(ids)
            if (at >= 0).all():
                tables = self._facts_holding(positions, int(at.min()), int(at.max()))
        for index in tables:
            facts = self.facts.table(index)
            for row in facts.filter(pc.is_in(facts.column("model_id"), value_set=wanted)).to_pylist():
                out.setdefault(row["model_id"], []).append(row)
        return out

    def _facts_holding(
        self, positions: Callable[[Sequence[str]], npt.NDArray[np.int64]], lowest: int, highest: int
    ) -> list[int]:
        """The facts tables holding a model whose position is in ``[lowest, highest]`` (or one not listed)."""
        for index in range(len(self._facts_runs), len(self.facts)):  # the tables appended since the last call
            at = np.unique(positions([str(m) for m in self.facts.table(index).column("model_id").to_pylist()]))
            if len(at) and at[0] < 0:
                self._facts_runs.append((np.array([-1]), np.array([np.iinfo(np.int64).max])))  # read always
                continue
            breaks = np.flatnonzero(np.diff(at) != 1) + 1
            self._facts_runs.append((at[np.concatenate([[0], breaks])], at[np.append(breaks - 1, len(at) - 1)]))
        return [
            index
            for index, (starts, ends) in enumerate(self._facts_runs)
            if bool(((starts <= highest) & (ends >= lowest)).any())
        ]

    def close(self) -> None:
        """Let go of the driver's files (the ledger and the spills)."""
        self.ledger.close()
        self.facts.close()


def model_summaries(
    groups: Mapping[str, Sequence[str]], collector: Collector, only: Iterable[str] | None = None
) -> list[ModelSummary]:
    """Each model's summary from its files' facts, a sharded model's with the verdict on its shard set.

    ``only`` limits it to some models (the others keep an earlier run's rows).
    """
    chosen = list(groups) if only is None else [m for m in dict.fromkeys(only) if m in groups]
    members_of = collector.members(chosen, groups.positions if isinstance(groups, ModelGroups) else None)
    summaries = []
    for model_id in chosen:
        members = groups[model_id]
        rows = members_of.get(model_id, [])
        verdict = None
        if parse_shard_name(members[0]) is not None:
            facts = [collector.shard_facts[u] for u in members if u in collector.shard_facts]
            facts += [_unknown_facts(u) for u in members if u not in collector.shard_facts]
            verdict = judge_shard_set(model_id, facts)
        summaries.append(summarise_model(model_id, rows, verdict))
    return summaries


def _unknown_facts(url: str) -> ShardFacts:
    name = parse_shard_name(url)
    if name is None:  # pragma: no cover - callers pass shard URLs
        raise ValueError(f"not a shard name. Got {url!r}.")
    return ShardFacts(url, name.shard_index, name.shard_count, readable=False, loadable=None)


def incomplete_models(models: pa.Table) -> tuple[IncompleteModel, ...]:
    """The sharded models of some ``models`` rows with shards missing."""
    rows = models.filter(pc.invert(models.column("complete"))).select(["model_id", "shard_count", "shards_missing"])
    return tuple(
        IncompleteModel(str(r["model_id"]), int(r["shard_count"]), tuple(r["shards_missing"] or ()))
        for r in sorted(rows.to_pylist(), key=lambda r: str(r["model_id"]))
    )


def runs_row(config: ScanConfig, result: ScanResult, started: datetime, versions: Mapping[str, int]) -> dict[str, Any]:
    """The run's ``runs`` row: what it scanned, with which config, what it found and cost, and the
    version of every table after this run's commit (``versions``)."""
    statuses = result.statuses
    return {
        "schema_version": SCHEMA_VERSION,
        "tool_version": __version__,
        "status": "committed",
        "started_at": started,
        "finished_at": datetime.now(UTC),
        "roots": [redact_url(r) for r in config.scan.roots],
        "manifests": [redact_url(m) for m in config.scan.manifests],
        "include": list(config.scan.include),
        "exclude": list(config.scan.exclude),
        "incremental": config.scan.incremental,
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
        "verdicts_version": VERDICTS_VERSION,
        "table_versions": {t: v for t, v in versions.items() if t not in _OWN_COLUMNS},
        "rows_written": {t: int(result.rows_written.get(t, 0)) for t in versions if t not in _OWN_COLUMNS},
        # the compare table came after the struct columns above: its own columns (adding a struct field is
        # no plain column addition for every Delta reader)
        "compare_version": versions.get("compare"),
        "compare_rows": int(result.rows_written.get("compare", 0)),
        "listing_requests": result.listing_requests,
        "listing_wait_s": result.listing_wait_s,
        "llama_cpp_build": LLAMA_CPP_BUILD,
        "n_skipped": len(result.skipped),
        "skipped": list(result.skipped[:SKIPPED_NAMED]),
        "mirror_version": versions.get("mirror"),
        "mirror_rows": int(result.rows_written.get("mirror", 0)),
    }
