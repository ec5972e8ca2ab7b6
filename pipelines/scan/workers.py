"""Before a night is submitted: can the workers of an external scheduler run it?

A worker that lacks gguf-audit (or runs another release, or misses a library
the audit imports) fails every batch it takes; distributed reschedules them
until it gives up, and the night would commit a run of ``run.worker_lost``
rows. :func:`worker_problems` asks each worker, in one round trip, for the
versions of what a batch needs, and the scan refuses to start (exit 2) with a
line that names the worker, the package and the fix.

The probe is a constant expression evaluated by the builtin :func:`eval` on
the worker: a builtin pickles by reference, so the probe itself reaches a
worker that cannot import gguf-audit, where a function of this module could
not be unpickled at all.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping, Sequence
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Final

__all__ = ["NEEDED", "PIPELINE_MODULES", "missing_pipeline_module", "worker_problems"]

NEEDED: Final = ("gguf-audit", "gguf", "numpy", "pyarrow", "fsspec", "deltalake", "jinja2")
"""Distributions a worker imports to audit a batch and write its rows (import name in :data:`_MODULES`)."""

_MODULES: Final = {"gguf-audit": "gguf_audit"}

_PROBE: Final = (
    "(lambda names, modules: {{n: ("
    "__import__('importlib.metadata').metadata.version(n) "
    "if __import__('importlib.util').util.find_spec(modules.get(n, n)) is not None else None"
    ") for n in names}})({names!r}, {modules!r})"
)


PIPELINE_MODULES: Final = ("dask", "distributed", "deltalake", "duckdb")
"""What the ``pipeline`` extra brings that a scan, the demo and the tables commands import lazily."""


def missing_pipeline_module() -> str | None:
    """The first module of the ``pipeline`` extra this Python cannot import, checked before anything is written."""
    for name in PIPELINE_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            return name
    return None


def _probe_expression(names: Sequence[str]) -> str:
    return _PROBE.format(names=tuple(names), modules=_MODULES)


def _local_version(name: str) -> str | None:
    try:
        return version(name)
    except PackageNotFoundError:
        return None


def worker_problems(client: Any, needed: Sequence[str] = NEEDED) -> list[str]:
    """One line per worker that cannot run a batch: what it lacks, or which release it has."""
    answers: Mapping[str, Any] = client.run(eval, _probe_expression(needed), on_error="return")
    ours = _local_version("gguf-audit")
    problems = []
    for address, answer in sorted(answers.items()):
        if isinstance(answer, BaseException):
            problems.append(f"worker {address} cannot check its environment: {type(answer).__name__}: {answer}")
            continue
        missing = [name for name in needed if not answer.get(name)]
        if missing:
            pin = f"=={ours}" if ours else ""
            problems.append(
                f"worker {address} lacks {', '.join(missing)}: "
                f"pip install 'gguf-audit[pipeline]{pin}' in the workers' environment"
            )
        elif ours is not None and answer.get("gguf-audit") != ours:
            problems.append(
                f"worker {address} runs gguf-audit {answer.get('gguf-audit')}, the driver {ours}: "
                "install the same release on both"
            )
    return problems
