"""Reading one night for the reports: its numbers, files, models and problems, with only the columns they need.

The joins are :mod:`~gguf_audit.pipelines.nights.picture`'s (a file's detail rows live
in the partition of the night that read it, ``files.source_run_id``; a model's
problems in that of the night that judged it, ``models.source_run_id``), but
every read here names its columns, so the driver holds a few small columns per
file, never the detail tables whole. The ``compare`` table (quantization error
per tensor, written by newer scans) is read when it exists.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as ds

from gguf_audit.checks.provenance import Provenance
from gguf_audit.findings import llama_cpp_of_codes
from gguf_audit.pipelines.store import Output, scan_table, source_pairs
from gguf_audit.report.nightly import CompareStat, FileRow, ModelRow, NightSummary, Problem
from gguf_audit.tables.provenance import PROVENANCE_COLUMNS
from gguf_audit.tables.schema import PARTITION_COLUMN

__all__ = [
    "PROBLEM_COLUMNS",
    "compare_stats",
    "file_derivations",
    "file_rows",
    "model_rows",
    "night_problems",
    "night_summary",
    "night_templates",
    "nights",
    "previous_night",
    "row_llama_cpp",
]

PROBLEM_COLUMNS: Final = ("url", "model_id", "scope", "code", "severity", "message", "tensor", "offset")
FILE_COLUMNS: Final = (
    "url",
    "model_id",
    "status",
    "loadable",
    "size",
    "name",
    "architecture",
    "file_type_name",
    "n_errors",
    "n_warnings",
    "source_run_id",
    "codes",
    "llama_cpp",
    "chat_template_sha256",
    *PROVENANCE_COLUMNS,
)
MODEL_COLUMNS: Final = (
    "model_id",
    "status",
    "loadable",
    "complete",
    "sharded",
    "shard_count",
    "shards_missing",
    "n_files",
    "size",
    "name",
    "file_type_name",
    "n_problems",
    "urls",
    "source_run_id",
    "codes",
    "llama_cpp",
)
TEMPLATE_KEY: Final = "tokenizer.chat_template"
TEMPLATE_EXCERPT: Final = 400


def row_llama_cpp(row: Mapping[str, Any]) -> str | None:
    """A ``files`` or ``models`` row's llama.cpp verdict: as stored, or from its ``codes`` and ``loadable``
    for a row written before the column was (the verdict of those codes in this release's registry)."""
    stored = row.get("llama_cpp")
    if stored is not None:
        return str(stored)
    verdict = llama_cpp_of_codes(row.get("codes") or (), row.get("loadable"))
    return None if verdict is None else str(verdict)


def nights(out: Output) -> list[dict[str, Any]]:
    """Every committed night's ``runs`` row, oldest first."""
    rows: list[dict[str, Any]] = out.committed_runs().to_pylist()
    return sorted(rows, key=lambda r: (r["finished_at"], r["run_id"]))


def previous_night(out: Output, run_id: str) -> str | None:
    """The night committed just before ``run_id``, or None."""
    ordered = [str(r["run_id"]) for r in nights(out)]
    at = ordered.index(run_id)
    return ordered[at - 1] if at > 0 else None


def _models_sources(out: Output, night: str) -> dict[str, list[str]]:
    models = out.read("models", [night], columns=["model_id", "source_run_id"])
    sources = pc.fill_null(models["source_run_id"], night).to_pylist()
    by_source: dict[str, list[str]] = {}
    for model_id, source in zip(models["model_id"].to_pylist(), sources, strict=True):
        by_source.setdefault(str(source), []).append(str(model_id))
    return by_source


def night_problems(
    out: Output,
    night: str,
    columns: Sequence[str] = PROBLEM_COLUMNS,
    *,
    urls: Sequence[str] | None = None,
    model_ids: Sequence[str] | None = None,
) -> pa.Table:
    """The ``problems`` of night ``night`` (file and model scope), only ``columns``.

    ``urls`` and ``model_ids`` narrow it to those files' problems and those
    models' (model-scope) problems; None means all of them.
    """
    wanted = list(dict.fromkeys([*columns, "scope"]))
    files = out.read("files", [night], columns=["url", "source_run_id"], urls=urls)
    parts: list[pa.Table] = []
    file_scope = ds.field("scope") == "file"
    for source, in_source in source_pairs(files).items():
        parts.append(out.read("problems", [source], urls=in_source, columns=wanted, where=file_scope))
    keep = None if model_ids is None else set(model_ids)
    for source, ids in _models_sources(out, night).items():
        chosen = ids if keep is None else [m for m in ids if m in keep]
        if not chosen:
            continue
        where = (ds.field("scope") == "model") & ds.field("model_id").isin(pa.array(chosen, pa.string()))
        parts.append(out.read("problems", [source], columns=wanted, where=where))
    if not parts:
        return out.read("problems", [], columns=wanted)
    return pa.concat_tables(parts).select(list(columns))


def problems_of(table: pa.Table) -> list[Problem]:
    """``problems`` rows as :class:`Problem` values."""
    return [
        Problem(
            scope=str(r["scope"]),
            url=r.get("url"),
            model_id=str(r["model_id"]),
            code=str(r["code"]),
            severity=str(r["severity"]),
            message=str(r["message"]),
            tensor=r.get("tensor"),
            offset=r.get("offset"),
        )
        for r in table.to_pylist()
    ]


def night_summary(out: Output, run: dict[str, Any]) -> NightSummary:
    """A night's numbers: its ``runs`` row, the loadable and complete counts, its problems by severity."""
    night = str(run["run_id"])
    files = out.read("files", [night], columns=["loadable", "status", "codes", "llama_cpp"])
    models = out.read("models", [night], columns=["complete"])
    severities = night_problems(out, night, ["severity"])["severity"].to_pylist()
    loadable = files["loadable"].to_pylist()
    statuses: dict[str, int] = {}
    for s in files["status"].to_pylist():
        statuses[str(s)] = statuses.get(str(s), 0) + 1
    finished = run["finished_at"]
    return NightSummary(
        run_id=night,
        finished_at=finished.strftime("%Y-%m-%d %H:%M:%S UTC") if hasattr(finished, "strftime") else str(finished),
        n_files=int(run["n_files"]),
        n_models=int(run["n_models"]),
        n_loadable=sum(1 for v in loadable if v is True),
        n_unloadable=sum(1 for v in loadable if v is False),
        n_incomplete=sum(1 for v in models["complete"].to_pylist() if v is False),
        n_errors=severities.count("error"),
        n_warnings=severities.count("warning"),
        n_infos=severities.count("info"),
        bytes_read=int(run["bytes_read"]),
        collection_bytes=int(run["collection_bytes"]),
        seconds=float(run["seconds"]),
        n_read=int(run["n_read"]),
        n_reused=int(run["n_reused"]),
        statuses=statuses,
        n_aborts=sum(1 for r in files.to_pylist() if row_llama_cpp(r) == "aborts"),
        llama_cpp_build=run.get("llama_cpp_build"),
    )


def _templates(out: Output, files: pa.Table, *, limit: int | None = TEMPLATE_EXCERPT) -> dict[str, str]:
    """The start (``limit`` characters; None: all) of each file's chat template, from ``metadata``
    where the reading night wrote it."""
    found: dict[str, str] = {}
    key = ds.field("key") == TEMPLATE_KEY
    for source, urls in source_pairs(files).items():
        rows = out.read("metadata", [source], urls=urls, columns=["url", "value_text"], where=key)
        for url, text in zip(rows["url"].to_pylist(), rows["value_text"].to_pylist(), strict=True):
            if text is not None:
                found[str(url)] = str(text)[:limit]
    return found


def file_rows(out: Output, night: str, derivations: Mapping[str, tuple[str, str]] | None = None) -> list[FileRow]:
    """The night's files, ordered by URL (without their chat templates: :func:`night_templates` reads them).

    ``derivations`` (:func:`file_derivations`) puts what the night proved next to what each file claims.
    """
    files = out.read("files", [night], columns=list(FILE_COLUMNS))
    proven = derivations or {}
    rows = []
    for r in files.to_pylist():
        url = str(r["url"])
        claims = Provenance(**{c: r[c] for c in PROVENANCE_COLUMNS})
        rows.append(
            FileRow(
                url=url,
                model_id=str(r["model_id"]),
                status=str(r["status"]),
                loadable=r["loadable"],
                size=r["size"],
                name=r["name"],
                architecture=r["architecture"],
                file_type_name=r["file_type_name"],
                n_errors=int(r["n_errors"] or 0),
                n_warnings=int(r["n_warnings"] or 0),
                source_run_id=str(r["source_run_id"]),
                llama_cpp=row_llama_cpp(r),
                chat_template_sha256=r["chat_template_sha256"],
                provenance=claims.phrases(*proven.get(url, (None, None))),
            )
        )
    return sorted(rows, key=lambda f: f.url)


def night_templates(out: Output, files: Sequence[FileRow]) -> dict[str, str]:
    """Each distinct chat template of ``files`` by its digest, read from one file that carries it."""
    one: dict[str, FileRow] = {}
    for f in files:
        if f.chat_template_sha256 and f.chat_template_sha256 not in one:
            one[f.chat_template_sha256] = f
    if not one:
        return {}
    carriers = list(one.values())
    pairs = pa.table({"url": [f.url for f in carriers], "source_run_id": [f.source_run_id for f in carriers]})
    texts = _templates(out, pairs, limit=None)
    return {digest: texts[f.url] for digest, f in one.items() if f.url in texts}


def model_rows(out: Output, night: str) -> list[ModelRow]:
    """The night's models, ordered by id."""
    models = out.read("models", [night], columns=list(MODEL_COLUMNS))
    rows = [
        ModelRow(
            model_id=str(r["model_id"]),
            status=str(r["status"]),
            loadable=r["loadable"],
            complete=bool(r["complete"]),
            sharded=bool(r["sharded"]),
            shard_count=int(r["shard_count"]),
            shards_missing=tuple(r["shards_missing"] or ()),
            n_files=int(r["n_files"]),
            size=r["size"],
            name=r["name"],
            file_type_name=r["file_type_name"],
            n_problems=int(r["n_problems"]),
            urls=tuple(r["urls"] or ()),
            llama_cpp=row_llama_cpp(r),
        )
        for r in models.to_pylist()
    ]
    return sorted(rows, key=lambda m: m.model_id)


def _quantiles(values: list[float]) -> tuple[float, float, float, float, float]:
    ordered = sorted(values)

    def at(q: float) -> float:
        pos = q * (len(ordered) - 1)
        low = int(pos)
        high = min(low + 1, len(ordered) - 1)
        return ordered[low] + (ordered[high] - ordered[low]) * (pos - low)

    return ordered[0], at(0.25), at(0.5), at(0.75), ordered[-1]


def compare_stats(out: Output, night: str) -> list[CompareStat] | None:
    """Relative RMSE per quantized type over the night's ``compare`` rows; None when there is no such table."""
    dt = out.delta.open("compare")
    if dt is None:
        return None
    by_type: dict[str, list[float]] = {}
    suspect: dict[str, int] = {}
    for source, ids in _models_sources(out, night).items():
        dataset = dt.to_pyarrow_dataset(file_pruning_predicate=[(PARTITION_COLUMN, "in", [source])])
        where = (ds.field(PARTITION_COLUMN) == source) & ds.field("model_id").isin(pa.array(ids, pa.string()))
        rows = scan_table(dataset, columns=["type", "relative_rmse", "verdict"], filter=where)
        for t, err, verdict in zip(
            rows["type"].to_pylist(), rows["relative_rmse"].to_pylist(), rows["verdict"].to_pylist(), strict=True
        ):
            name = str(t or "?")
            if err is not None and err == err:  # NaN is no measurement
                by_type.setdefault(name, []).append(float(err))
            if verdict == "layout_suspect":
                suspect[name] = suspect.get(name, 0) + 1
    stats = []
    for name in sorted(set(by_type) | set(suspect)):
        values = by_type.get(name, [])
        q = _quantiles(values) if values else (0.0, 0.0, 0.0, 0.0, 0.0)
        stats.append(CompareStat(name, len(values), *q, n_suspect=suspect.get(name, 0)))
    return stats


def file_derivations(out: Output, night: str) -> dict[str, tuple[str, str]]:
    """``url -> (file_derivation, reference_url)`` from the ``compare`` rows of the night's models, where judged."""
    dt = out.delta.open("compare")
    if dt is None:
        return {}
    found: dict[str, tuple[str, str]] = {}
    for source, ids in _models_sources(out, night).items():
        dataset = dt.to_pyarrow_dataset(file_pruning_predicate=[(PARTITION_COLUMN, "in", [source])])
        if "file_derivation" not in dataset.schema.names:
            continue
        where = (ds.field(PARTITION_COLUMN) == source) & ds.field("model_id").isin(pa.array(ids, pa.string()))
        rows = scan_table(dataset, columns=["url", "reference_url", "file_derivation"], filter=where)
        for url, reference, derivation in zip(
            rows["url"].to_pylist(), rows["reference_url"].to_pylist(), rows["file_derivation"].to_pylist(), strict=True
        ):
            if derivation is not None:
                found[str(url)] = (str(derivation), str(reference))
    return found
