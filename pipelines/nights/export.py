"""A committed night as SARIF 2.1.0 (``scan --sarif FILE``) or JSON Lines (``scan --jsonl FILE``).

SARIF: one run for the scan, a result per problem of the night's picture
(:mod:`gguf_audit.report.sarif`), the files as artifacts. JSON Lines: one
object per file of the night, its verdict and its problems, a line each.
Both read only the columns they write (:mod:`~gguf_audit.pipelines.nights.nightview`).
"""

from __future__ import annotations

import os
from typing import Any, Final

from fsspec.core import url_to_fs

from gguf_audit.codes import LLAMA_CPP_BUILD
from gguf_audit.errors import UsageError
from gguf_audit.pipelines.nights.nightview import PROBLEM_COLUMNS, night_problems, row_llama_cpp
from gguf_audit.pipelines.nights.picture import night_row
from gguf_audit.pipelines.store import Output, is_local_fs
from gguf_audit.report.json import dumps
from gguf_audit.report.sarif import SarifResult, sarif_json, sarif_log, sarif_run

__all__ = ["check_writable", "export_night", "night_jsonl", "night_sarif", "write_text"]

JSONL_FILE_COLUMNS: Final = [
    "url",
    "model_id",
    "status",
    "loadable",
    "size",
    "n_errors",
    "n_warnings",
    "architecture",
    "file_type_name",
    "source_run_id",
    "codes",
    "llama_cpp",
]


def check_writable(path: str) -> None:
    """Refuse (a usage error) a local output file that cannot be written: checked before a night's work, not after.

    A directory, a parent that is a file, a parent that cannot be written. Remote
    paths are not probed (a probe would write): their failure comes at the end.
    """
    fs, target = url_to_fs(path)
    if not is_local_fs(fs):
        return
    if os.path.isdir(target):
        raise UsageError(f"{path!r} is a directory, not a file to write")
    parent = os.path.dirname(os.path.abspath(target))
    while not os.path.exists(parent):  # write_text makes the missing folders: the nearest existing one decides
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise UsageError(f"cannot write {path!r}: {parent!r} is a file, not a directory")
    if not os.access(parent, os.W_OK | os.X_OK) or (os.path.exists(target) and not os.access(target, os.W_OK)):
        raise UsageError(f"cannot write {path!r}: permission denied")


def export_night(out: Output, run_id: str, *, sarif: str | None, jsonl: str | None) -> list[str]:
    """Write night ``run_id`` as SARIF to ``sarif`` and as JSON Lines to ``jsonl`` (either may be None);
    the paths written, in that order."""
    written = []
    if sarif:
        write_text(sarif, sarif_json(night_sarif(out, run_id)) + "\n")
        written.append(sarif)
    if jsonl:
        write_text(jsonl, night_jsonl(out, run_id))
        written.append(jsonl)
    return written


def write_text(path: str, content: str) -> None:
    """Write ``content`` to a path or fsspec URL (a local parent directory is made)."""
    fs, target = url_to_fs(path)
    parent = target.rsplit("/", 1)[0] if "/" in target else ""
    if parent and is_local_fs(fs):
        fs.makedirs(parent, exist_ok=True)
    fs.pipe_file(target, content.encode("utf-8"))


def night_sarif(out: Output, run_id: str | None = None) -> dict[str, Any]:
    """The SARIF log of one night (default: the latest): one run."""
    run = night_row(out, run_id)
    night = str(run["run_id"])
    files = out.read("files", [night], columns=["url", "size"])
    problems = night_problems(out, night, list(PROBLEM_COLUMNS))
    results = [
        SarifResult(
            code=str(r["code"]),
            severity=str(r["severity"]),
            message=str(r["message"]),
            url=r["url"],
            model_id=r["model_id"],
            tensor=r["tensor"],
            offset=r["offset"],
        )
        for r in problems.to_pylist()
    ]
    artifacts = dict(zip(files["url"].to_pylist(), files["size"].to_pylist(), strict=True))
    properties = {
        "runId": night,
        "out": out.url,
        "files": int(run["n_files"]),
        "models": int(run["n_models"]),
        "llamaCppBuild": run.get("llama_cpp_build") or LLAMA_CPP_BUILD,
    }
    return sarif_log([sarif_run(results, artifacts=artifacts, properties=properties)])


def night_jsonl(out: Output, run_id: str | None = None) -> str:
    """The night's files as JSON Lines: one object per file with its problems (file scope)."""
    run = night_row(out, run_id)
    night = str(run["run_id"])
    build = run.get("llama_cpp_build") or LLAMA_CPP_BUILD
    files = out.read("files", [night], columns=JSONL_FILE_COLUMNS)
    problems = night_problems(out, night, list(PROBLEM_COLUMNS))
    by_url: dict[str, list[dict[str, Any]]] = {}
    for p in problems.to_pylist():
        if p["scope"] == "file" and p["url"] is not None:
            by_url.setdefault(p["url"], []).append(
                {k: p[k] for k in ("code", "severity", "message", "tensor", "offset")}
            )
    lines = []
    for row in sorted(files.to_pylist(), key=lambda r: r["url"]):
        row["llama_cpp"] = row_llama_cpp(row)
        row["llama_cpp_build"] = build
        del row["codes"]
        row["run_id"] = night
        row["problems"] = by_url.get(row["url"], [])
        lines.append(dumps(row))
    return "".join(line + "\n" for line in lines)
