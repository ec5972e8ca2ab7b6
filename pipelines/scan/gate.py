"""``scan --fail-on``: whether a committed night exits 1, and the summary line saying why.

A night that completed and committed exits 0 by default (``none``), whatever
the collection holds: a mirror always holds some broken file, and a nightly
job's report and diff must run after the scan (trivy's ``--exit-code``,
grype's ``--fail-on``). The other levels:

``error``
    a problem (of a file or a model) is an error, or a file llama.cpp refuses
    (even one whose findings are warnings: a big-endian file);
``warning``
    the same, with warnings too;
``new-error``
    what ``gguf-audit diff --fail-on error`` alerts on between the previous
    committed night and this one (:func:`~gguf_audit.pipelines.nights.diff.alerts`:
    a new error, a file or model going to ``aborts``, a mirror copy no longer
    faithful); the first night is compared with no night, so its errors are new;
``aborts``
    a file or a model whose llama.cpp verdict is ``aborts``, carried or not.
"""

from __future__ import annotations

from dataclasses import dataclass

from gguf_audit.codes import LLAMA_CPP_BUILD
from gguf_audit.pipelines.nights import MODEL_COLUMNS, alerts, diff_nights, previous_night, row_llama_cpp
from gguf_audit.pipelines.scan.collect import ScanResult
from gguf_audit.pipelines.store import Output
from gguf_audit.report.format import counted

__all__ = ["Gate", "judge_gate"]


@dataclass(frozen=True, slots=True)
class Gate:
    """The ``--fail-on`` level applied to a committed night, and its outcome."""

    fail_on: str
    fails: bool
    why: str
    """What the outcome rests on, counted (``2 problems are errors``, ``no new error since night X``)."""

    def line(self) -> str:
        """The summary's last line."""
        return f"the run {'fails' if self.fails else 'passes'} --fail-on {self.fail_on}: {self.why}"


def judge_gate(result: ScanResult, fail_on: str, out: Output) -> Gate:
    """Judge the committed night ``result`` (in ``out``) at ``fail_on`` (one of
    :data:`~gguf_audit.pipelines.config.FAIL_ON`)."""
    if fail_on == "none":
        return Gate(fail_on, False, "a committed night exits 0 (gate it with error, warning, new-error or aborts)")
    if fail_on in ("error", "warning"):
        return _severity_gate(result, fail_on)
    if fail_on == "new-error":
        return _new_error_gate(result, out)
    if fail_on == "aborts":
        return _aborts_gate(result, out)
    raise ValueError(f"--fail-on must be one of none, error, warning, new-error, aborts. Got {fail_on!r}.")


def _severity_gate(result: ScanResult, fail_on: str) -> Gate:
    errors = result.severities.get("error", 0)
    warnings = result.severities.get("warning", 0) if fail_on == "warning" else 0
    refused = result.n_unloadable
    parts = []
    if errors:
        parts.append(f"{counted(errors, 'problem')} {'is an error' if errors == 1 else 'are errors'}")
    if warnings:
        parts.append(f"{counted(warnings, 'problem')} {'is a warning' if warnings == 1 else 'are warnings'}")
    if refused:
        parts.append(f"llama.cpp {LLAMA_CPP_BUILD} would refuse {counted(refused, 'file')}")
    if parts:
        return Gate(fail_on, True, ", ".join(parts))
    level = "an error" if fail_on == "error" else "an error or a warning"
    return Gate(fail_on, False, f"no problem is {level} and llama.cpp {LLAMA_CPP_BUILD} would refuse no file")


def _new_error_gate(result: ScanResult, out: Output) -> Gate:
    before = previous_night(out, result.run_id)
    found = alerts(diff_nights(out, before, result.run_id), "error")
    since = f"since night {before}" if before is not None else "on the first night"
    parts = []
    if found.problems:
        parts.append(f"{counted(len(found.problems), 'error')} new {since}")
    if found.aborts:
        what = counted(len(found.aborts), "file or model", "files or models")
        parts.append(f"{what} now {'aborts' if len(found.aborts) == 1 else 'abort'} llama.cpp {LLAMA_CPP_BUILD}")
    if found.mirror:
        copies = counted(len(found.mirror), "mirror copy", "mirror copies")
        parts.append(f"{copies} stopped being faithful to the source")
    if parts:
        return Gate("new-error", True, ", ".join(parts))
    carried = result.severities.get("error", 0)
    held = f" ({counted(carried, 'error')} carried)" if carried else ""
    return Gate("new-error", False, f"no new error {since}{held}")


def _aborts_gate(result: ScanResult, out: Output) -> Gate:
    models = out.read("models", [result.run_id], columns=MODEL_COLUMNS).to_pylist()
    model_aborts = sum(1 for m in models if row_llama_cpp(m) == "aborts")
    parts = [counted(n, word) for n, word in ((result.n_aborts, "file"), (model_aborts, "model")) if n]
    if parts:
        verb = "makes" if result.n_aborts + model_aborts == 1 else "make"
        return Gate("aborts", True, f"{' and '.join(parts)} {verb} llama.cpp {LLAMA_CPP_BUILD} abort")
    return Gate("aborts", False, f"no file or model makes llama.cpp {LLAMA_CPP_BUILD} abort")
