"""What the night reports show, as plain values: a night's numbers, its rows, and the changes between two nights.

The pipelines read these from the audit tables (``gguf_audit.pipelines.nights.nightview``
and ``gguf_audit.pipelines.nights.diff``); the renderers (:mod:`~gguf_audit.report.html`,
the diff's text and JSON here) only format them. Every string that comes from
a file (URLs, names, messages, templates) is untrusted: the renderers escape it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from gguf_audit.codes import LLAMA_CPP_BUILD, SEVERITY_RANK, Severity
from gguf_audit.report.format import escape, fmt_bytes

__all__ = [
    "Change",
    "CompareStat",
    "DuplicateFile",
    "DuplicateGroup",
    "FileChange",
    "FileRow",
    "MirrorChange",
    "MirrorRow",
    "ModelFlip",
    "ModelRow",
    "NewAbort",
    "NightDiff",
    "NightReport",
    "NightSummary",
    "Problem",
    "Section",
    "diff_to_json",
    "render_diff_text",
    "severity_at_least",
]


@dataclass(frozen=True, slots=True)
class NightSummary:
    """One night's headline and trend numbers."""

    run_id: str
    finished_at: str
    n_files: int
    n_models: int
    n_loadable: int
    n_unloadable: int
    n_incomplete: int
    n_errors: int
    """Problems of severity error in the night's picture (file and model scope)."""
    n_warnings: int
    n_infos: int
    bytes_read: int
    collection_bytes: int
    seconds: float
    n_read: int
    n_reused: int
    statuses: dict[str, int] = field(default_factory=dict)
    n_aborts: int = 0
    """Files whose ``llama_cpp`` verdict is ``aborts`` (counted among ``n_unloadable``)."""
    llama_cpp_build: str | None = None
    """The llama.cpp build the night's verdicts describe (``runs.llama_cpp_build``; null before it was recorded)."""


@dataclass(frozen=True, slots=True)
class Problem:
    """One row of ``problems`` as a report needs it."""

    scope: str
    url: str | None
    model_id: str
    code: str
    severity: str
    message: str
    tensor: str | None = None
    offset: int | None = None

    def key(self) -> tuple[str, str, str, str]:
        """What makes two nights' problems the same problem: where it is, its code and tensor."""
        where = self.url if self.url is not None else self.model_id
        return (self.scope, where or "", self.code, self.tensor or "")

    def detail(self) -> tuple[str, str, int]:
        return (self.severity, self.message, -1 if self.offset is None else self.offset)


@dataclass(frozen=True, slots=True)
class FileRow:
    """One file of a night: its verdict and what it declares."""

    url: str
    model_id: str
    status: str
    loadable: bool | None
    size: int | None
    name: str | None = None
    architecture: str | None = None
    file_type_name: str | None = None
    n_errors: int = 0
    n_warnings: int = 0
    source_run_id: str = ""
    chat_template: str | None = None
    """The start of its chat template (from ``metadata``), for the report to show escaped."""
    llama_cpp: str | None = None
    """``loads``, ``refuses``, ``aborts``, or None (unknown)."""
    chat_template_sha256: str | None = None
    """``files.chat_template_sha256``: files that share a template share it, so the page shows it once."""
    provenance: tuple[str, ...] = ()
    """What the file says of its own making and what the night proved of it, one short phrase each."""


@dataclass(frozen=True, slots=True)
class DuplicateFile:
    """One file of a :class:`DuplicateGroup`."""

    url: str
    model_id: str
    metadata_fingerprint: str | None
    differs: tuple[str, ...]
    """The metadata groups that differ from the group's first file (empty: the same)."""


@dataclass(frozen=True, slots=True)
class DuplicateGroup:
    """Files holding the same weights (one ``weights_fingerprint``), whatever their metadata, names and stores."""

    weights_fingerprint: str
    files: tuple[DuplicateFile, ...]
    """By URL; the first is what the others are compared with."""

    @property
    def differs(self) -> tuple[str, ...]:
        """Every metadata group that differs somewhere in the group."""
        return tuple(sorted({d for f in self.files for d in f.differs}))


@dataclass(frozen=True, slots=True)
class Section:
    """A further section of the night's page: its anchor id, its heading and its body (already escaped HTML).

    Views with their own table (the mirror check, ...) add one each to
    :attr:`NightReport.sections`; the page places them after the duplicates.
    """

    id: str
    title: str
    html: str


@dataclass(frozen=True, slots=True)
class ModelRow:
    """One model (a single file or a shard set) of a night."""

    model_id: str
    status: str
    loadable: bool | None
    complete: bool
    sharded: bool
    shard_count: int
    shards_missing: tuple[int, ...]
    n_files: int
    size: int | None
    name: str | None
    file_type_name: str | None
    n_problems: int
    urls: tuple[str, ...]
    llama_cpp: str | None = None
    """The worst of its files' verdicts and the set's own: ``loads``, ``refuses``, ``aborts``, or None."""


@dataclass(frozen=True, slots=True)
class CompareStat:
    """The quantization error (relative RMSE) of one tensor type across the night's ``compare`` rows."""

    type: str
    n: int
    minimum: float
    q1: float
    median: float
    q3: float
    maximum: float
    n_suspect: int


@dataclass(frozen=True, slots=True)
class Change:
    """A problem that changed between two nights: the same place, code and tensor, another message or severity."""

    before: Problem
    after: Problem


@dataclass(frozen=True, slots=True)
class FileChange:
    """A file present in both nights that was read again and judged otherwise."""

    url: str
    status_before: str
    status_after: str
    loadable_before: bool | None
    loadable_after: bool | None
    size_before: int | None
    size_after: int | None
    llama_cpp_before: str | None = None
    llama_cpp_after: str | None = None


@dataclass(frozen=True, slots=True)
class ModelFlip:
    """A model whose loadable verdict, llama.cpp verdict or completeness differs between the nights."""

    model_id: str
    loadable_before: bool | None
    loadable_after: bool | None
    complete_before: bool
    complete_after: bool
    llama_cpp_before: str | None = None
    llama_cpp_after: str | None = None


@dataclass(frozen=True, slots=True)
class NewAbort:
    """A file or model llama.cpp aborts on in the later night and did not (or was not there) in the earlier."""

    scope: str
    """``file`` (``where`` a URL) or ``model`` (``where`` a model id)."""
    where: str
    llama_cpp_before: str | None
    """The earlier night's verdict; None when unknown or not there."""


@dataclass(frozen=True, slots=True)
class MirrorRow:
    """One path of a mirror against its source, as the night's ``mirror`` row has it."""

    path: str
    status: str
    evidence: str
    code: str | None
    severity: str | None
    message: str


@dataclass(frozen=True, slots=True)
class MirrorChange:
    """A mirror path whose status changed between two nights (``absent`` when a night has no row for it)."""

    path: str
    status_before: str
    status_after: str
    message: str

    @property
    def alert(self) -> bool:
        """A copy that stopped matching its source: faithful or a sampled match before, neither now (a faithful
        copy judged on samples only, ``sampled_match``, changed its evidence, not its bytes)."""
        matched = ("faithful", "sampled_match")
        return self.status_before in matched and self.status_after not in matched


@dataclass
class NightDiff:
    """What changed from night ``before`` to night ``after``."""

    before: str
    after: str
    new_problems: list[Problem] = field(default_factory=list)
    resolved_problems: list[Problem] = field(default_factory=list)
    changed_problems: list[Change] = field(default_factory=list)
    new_files: list[str] = field(default_factory=list)
    removed_files: list[str] = field(default_factory=list)
    changed_files: list[FileChange] = field(default_factory=list)
    model_flips: list[ModelFlip] = field(default_factory=list)
    new_aborts: list[NewAbort] = field(default_factory=list)
    """Files and models going to ``aborts``: always an alert, whatever ``--fail-on`` says."""
    mirror_changes: list[MirrorChange] = field(default_factory=list)
    """Mirror paths whose status changed; those that stopped being faithful are alerts, like new aborts."""

    @property
    def mirror_alerts(self) -> list[MirrorChange]:
        return [c for c in self.mirror_changes if c.alert]

    def new_at_least(self, severity: str) -> list[Problem]:
        """The new problems (and changed ones that became this severe) at or above ``severity``."""
        found = [p for p in self.new_problems if severity_at_least(p.severity, severity)]
        found += [
            c.after
            for c in self.changed_problems
            if severity_at_least(c.after.severity, severity) and not severity_at_least(c.before.severity, severity)
        ]
        return found

    @property
    def empty(self) -> bool:
        return not (
            self.new_problems
            or self.resolved_problems
            or self.changed_problems
            or self.new_files
            or self.removed_files
            or self.changed_files
            or self.model_flips
            or self.new_aborts
            or self.mirror_changes
        )


@dataclass
class NightReport:
    """Everything the HTML report of one night shows."""

    out: str
    night: NightSummary
    trend: list[NightSummary]
    """The last nights, oldest first, this one last."""
    problems: list[Problem]
    files: list[FileRow]
    models: list[ModelRow]
    diff: NightDiff | None
    """Against the previous night; None for the first."""
    compare: list[CompareStat] | None
    """Per tensor type; None when the output has no ``compare`` table."""
    mirror: list[MirrorRow] | None = None
    """The night's mirror check, a row per path; None when the night checked no mirror."""
    tool_version: str = ""
    templates: dict[str, str] = field(default_factory=dict)
    """Chat template text by ``chat_template_sha256``, one per distinct template of the night."""
    duplicates: list[DuplicateGroup] | None = None
    """Groups of files with the same weights; None when the night has no weights fingerprints to group by."""
    sections: list[Section] = field(default_factory=list)
    """Further sections, in order (see :class:`Section`)."""


def severity_at_least(severity: str, threshold: str) -> bool:
    """Whether ``severity`` is ``threshold`` or worse (unknown severities never are)."""
    try:
        return SEVERITY_RANK[Severity(severity)] >= SEVERITY_RANK[Severity(threshold)]
    except ValueError:
        return False


def _verdict(loadable: bool | None, llama_cpp: str | None = None) -> str:
    said = {True: "loadable", False: "NOT loadable", None: "unknown"}[loadable]
    return said if llama_cpp is None else f"{said} ({llama_cpp})"


def _problem_line(p: Problem) -> str:
    where = escape(p.url, 200) if p.url is not None else f"model {escape(p.model_id, 200)}"
    tensor = f" [tensor {escape(p.tensor, 80)}]" if p.tensor else ""
    return f"  {p.severity.upper():7} {p.code:32} {where}{tensor}: {escape(p.message, 300)}"


def render_diff_text(diff: NightDiff) -> str:
    """The diff for a person: each section with its count, every file string escaped."""
    lines = [f"night {diff.before} -> {diff.after}"]
    if diff.empty:
        lines.append("no changes")
        return "\n".join(lines)
    sections: list[tuple[str, list[str]]] = [
        (
            f"now aborting llama.cpp {LLAMA_CPP_BUILD}",
            [
                f"  {a.scope} {escape(a.where, 300)}: {a.llama_cpp_before or 'unknown'} -> aborts"
                for a in diff.new_aborts
            ],
        ),
        ("new problems", [_problem_line(p) for p in diff.new_problems]),
        ("resolved problems", [_problem_line(p) for p in diff.resolved_problems]),
        (
            "changed problems",
            [
                f"{_problem_line(c.after)}\n      was {c.before.severity}: {escape(c.before.message, 300)}"
                for c in diff.changed_problems
            ],
        ),
        ("new files", [f"  {escape(u, 300)}" for u in diff.new_files]),
        ("removed files", [f"  {escape(u, 300)}" for u in diff.removed_files]),
        (
            "changed files",
            [
                f"  {escape(c.url, 300)}: {c.status_before} -> {c.status_after}, "
                f"{_verdict(c.loadable_before, c.llama_cpp_before)} -> "
                f"{_verdict(c.loadable_after, c.llama_cpp_after)}, "
                f"size {fmt_bytes(c.size_before)} -> {fmt_bytes(c.size_after)}"
                for c in diff.changed_files
            ],
        ),
        (
            "models flipped",
            [
                f"  {escape(m.model_id, 300)}: {_verdict(m.loadable_before, m.llama_cpp_before)} -> "
                f"{_verdict(m.loadable_after, m.llama_cpp_after)}, "
                f"{'complete' if m.complete_before else 'incomplete'} -> "
                f"{'complete' if m.complete_after else 'incomplete'}"
                for m in diff.model_flips
            ],
        ),
        (
            "mirror changes",
            [
                f"  {'ALERT ' if c.alert else ''}{escape(c.path, 300)}: {c.status_before} -> {c.status_after}: "
                f"{escape(c.message, 300)}"
                for c in diff.mirror_changes
            ],
        ),
    ]
    for title, rows in sections:
        lines.append(f"{title} ({len(rows)}):" if rows else f"{title}: none")
        lines.extend(rows)
    return "\n".join(lines)


def diff_to_json(diff: NightDiff) -> dict[str, Any]:
    """The diff as one JSON object (``dumps`` escapes what the text report escapes)."""
    return {
        "from": diff.before,
        "to": diff.after,
        "new_problems": [asdict(p) for p in diff.new_problems],
        "resolved_problems": [asdict(p) for p in diff.resolved_problems],
        "changed_problems": [{"before": asdict(c.before), "after": asdict(c.after)} for c in diff.changed_problems],
        "new_files": list(diff.new_files),
        "removed_files": list(diff.removed_files),
        "changed_files": [asdict(c) for c in diff.changed_files],
        "model_flips": [asdict(m) for m in diff.model_flips],
        "new_aborts": [asdict(a) for a in diff.new_aborts],
        "mirror_changes": [{**asdict(c), "alert": c.alert} for c in diff.mirror_changes],
        "llama_cpp_build": LLAMA_CPP_BUILD,
    }
