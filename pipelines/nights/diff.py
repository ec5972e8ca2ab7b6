"""What changed between two nights: problems, files and model verdicts matched on their places.

    gguf-audit diff OUT [--from RUN] [--to RUN] [--json] [--fail-on error|warning|info]

Default: the last two committed nights. A diff of two nights is a diff of their
``files`` and ``models`` rows on ``url`` and ``model_id``
(``docs/tables.md``): a file whose ``source_run_id`` is the same in both nights
has the same problems in both, so only the problems of files new, removed or
read again (and of models judged again) are read, and only the columns a
problem needs. A problem is the same problem in both nights when its place
(the file, or the model for a model-scope problem), code and tensor are; it
*changed* when its severity or message did. The first night is compared with
no night: everything in it is new.

Exit status: 1 when the later night has a new problem (or one that became this
severe) at or above ``--fail-on`` (default ``error``), or a file or model that
now makes llama.cpp abort (whatever ``--fail-on`` says: it crashes a server that
loads it), or a mirror copy that stopped being faithful to its source (the
``mirror`` table, :mod:`~gguf_audit.pipelines.nights.mirror`), 0 otherwise,
2 on a usage error (an unknown night, an output that cannot be read).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import pyarrow as pa

from gguf_audit.pipelines.nights.mirror import mirror_changes
from gguf_audit.pipelines.nights.nightview import PROBLEM_COLUMNS, night_problems, problems_of, row_llama_cpp
from gguf_audit.pipelines.store import Output
from gguf_audit.report.nightly import (
    Change,
    FileChange,
    MirrorChange,
    ModelFlip,
    NewAbort,
    NightDiff,
    Problem,
)

__all__ = ["Alerts", "alerts", "diff_nights", "match_problems"]

FILE_COLUMNS: Final = ["url", "source_run_id", "status", "loadable", "size", "codes", "llama_cpp"]
MODEL_COLUMNS: Final = ["model_id", "source_run_id", "loadable", "complete", "codes", "llama_cpp"]
NO_NIGHT: Final = "(none)"
"""The earlier night's name in a diff of the first night (with no night before it)."""


def _by_key(problems: list[Problem]) -> dict[tuple[str, str, str, str], list[Problem]]:
    grouped: dict[tuple[str, str, str, str], list[Problem]] = {}
    for p in problems:
        grouped.setdefault(p.key(), []).append(p)
    return grouped


def match_problems(before: list[Problem], after: list[Problem]) -> tuple[list[Problem], list[Problem], list[Change]]:
    """New, resolved and changed problems between two nights' problems of the same places.

    Problems of one key (place, code, tensor) pair up equal ones first (same
    severity, message, offset: unchanged), then the rest in order (changed);
    what is left over is new or resolved.
    """
    new: list[Problem] = []
    resolved: list[Problem] = []
    changed: list[Change] = []
    old_groups, new_groups = _by_key(before), _by_key(after)
    for key in sorted(set(old_groups) | set(new_groups)):
        olds = sorted(old_groups.get(key, []), key=Problem.detail)
        news = sorted(new_groups.get(key, []), key=Problem.detail)
        remaining_new = []
        for p in news:
            twin = next((i for i, o in enumerate(olds) if o.detail() == p.detail()), None)
            if twin is None:
                remaining_new.append(p)
            else:
                olds.pop(twin)
        pairs = min(len(olds), len(remaining_new))
        changed += [Change(o, n) for o, n in zip(olds[:pairs], remaining_new[:pairs], strict=True)]
        resolved += olds[pairs:]
        new += remaining_new[pairs:]
    return new, resolved, changed


def _rows(table: pa.Table, key: str) -> dict[str, dict[str, Any]]:
    """Rows by ``key``, each with its ``llama_cpp`` verdict (derived from its codes where it was not stored)."""
    rows = {str(r[key]): r for r in table.to_pylist()}
    for r in rows.values():
        r["llama_cpp"] = row_llama_cpp(r)
    return rows


def _new_aborts(scope: str, old: dict[str, dict[str, Any]], new: dict[str, dict[str, Any]]) -> list[NewAbort]:
    """What aborts llama.cpp in ``new`` and did not in ``old`` (or was not there)."""
    found = []
    for key in sorted(new):
        before = old[key]["llama_cpp"] if key in old else None
        if new[key]["llama_cpp"] == "aborts" and before != "aborts":
            found.append(NewAbort(scope, key, before))
    return found


@dataclass(frozen=True, slots=True)
class Alerts:
    """What a diff alerts on at a severity: ``gguf-audit diff`` exits 1 on them, and so does
    ``gguf-audit scan --fail-on new-error`` (the one rule of what is new)."""

    problems: tuple[Problem, ...]
    """New problems, and changed ones that became this severe."""
    aborts: tuple[NewAbort, ...]
    """Files and models going to ``aborts``, whatever the severity."""
    mirror: tuple[MirrorChange, ...]
    """Mirror copies that stopped being faithful to their source."""

    def __bool__(self) -> bool:
        return bool(self.problems or self.aborts or self.mirror)


def alerts(diff: NightDiff, severity: str) -> Alerts:
    """The alerts of ``diff`` at ``severity`` (``error``, ``warning`` or ``info``)."""
    return Alerts(tuple(diff.new_at_least(severity)), tuple(diff.new_aborts), tuple(diff.mirror_alerts))


def diff_nights(out: Output, before: str | None, after: str) -> NightDiff:
    """What changed from night ``before`` to night ``after`` (both committed); ``before`` None is no night
    (``after`` is the first): every file, model and problem of ``after`` is new."""
    if before is None:
        return _diff_with_nothing(out, after)
    old_files = _rows(out.read("files", [before], columns=FILE_COLUMNS), "url")
    new_files = _rows(out.read("files", [after], columns=FILE_COLUMNS), "url")
    added = sorted(set(new_files) - set(old_files))
    removed = sorted(set(old_files) - set(new_files))
    reread = sorted(
        u for u in set(old_files) & set(new_files) if old_files[u]["source_run_id"] != new_files[u]["source_run_id"]
    )
    diff = NightDiff(before, after, new_files=added, removed_files=removed)
    diff.changed_files.extend(_file_changes(old_files, new_files, reread))
    old_models = _rows(out.read("models", [before], columns=MODEL_COLUMNS), "model_id")
    new_models = _rows(out.read("models", [after], columns=MODEL_COLUMNS), "model_id")
    judged = sorted(
        m
        for m in set(old_models) | set(new_models)
        if m not in old_models
        or m not in new_models
        or (old_models[m]["source_run_id"] or before) != (new_models[m]["source_run_id"] or after)
    )
    diff.model_flips.extend(_model_flips(old_models, new_models))
    diff.new_aborts = _new_aborts("file", old_files, new_files) + _new_aborts("model", old_models, new_models)
    columns = list(PROBLEM_COLUMNS)
    old_problems = problems_of(night_problems(out, before, columns, urls=[*removed, *reread], model_ids=judged))
    new_problems = problems_of(night_problems(out, after, columns, urls=[*added, *reread], model_ids=judged))
    diff.new_problems, diff.resolved_problems, diff.changed_problems = match_problems(old_problems, new_problems)
    diff.mirror_changes = mirror_changes(out, before, after)
    return diff


def _file_changes(old: Mapping[str, Any], new: Mapping[str, Any], reread: Iterable[str]) -> Iterator[FileChange]:
    """The files read again whose status, loadability, size or llama.cpp verdict changed."""
    for url in reread:
        o, n = old[url], new[url]
        if (o["status"], o["loadable"], o["size"], o["llama_cpp"]) != (
            n["status"],
            n["loadable"],
            n["size"],
            n["llama_cpp"],
        ):
            yield FileChange(
                url,
                o["status"],
                n["status"],
                o["loadable"],
                n["loadable"],
                o["size"],
                n["size"],
                o["llama_cpp"],
                n["llama_cpp"],
            )


def _model_flips(old: Mapping[str, Any], new: Mapping[str, Any]) -> Iterator[ModelFlip]:
    """The models of both nights whose loadability, completeness or llama.cpp verdict changed."""
    for m in sorted(set(old) & set(new)):
        o, n = old[m], new[m]
        if (o["loadable"], o["complete"], o["llama_cpp"]) != (n["loadable"], n["complete"], n["llama_cpp"]):
            yield ModelFlip(
                m, o["loadable"], n["loadable"], bool(o["complete"]), n["complete"], o["llama_cpp"], n["llama_cpp"]
            )


def _diff_with_nothing(out: Output, after: str) -> NightDiff:
    """The first night against no night: its files and problems are new, and so are its aborts."""
    files = _rows(out.read("files", [after], columns=FILE_COLUMNS), "url")
    models = _rows(out.read("models", [after], columns=MODEL_COLUMNS), "model_id")
    diff = NightDiff(NO_NIGHT, after, new_files=sorted(files))
    diff.new_aborts = _new_aborts("file", {}, files) + _new_aborts("model", {}, models)
    diff.new_problems = match_problems([], problems_of(night_problems(out, after, list(PROBLEM_COLUMNS))))[0]
    return diff
