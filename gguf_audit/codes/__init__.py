"""Finding codes: the :class:`Code` names call sites use, and the one registry of what each means.

``from gguf_audit.codes import Code, CODES, Severity, LlamaCpp`` is the public face; the parts are
:mod:`~gguf_audit.codes.code` (the enum), :mod:`~gguf_audit.codes.model` (severity, verdict, one entry),
one module per area holding that area's entries (``header``, ``tensor``, ``data``, ``meta``, ``hparams``,
``tokenizer``, ``template``, ``clip``, ``hub``, ``upstream``, ``shard``, ``compare``, ``lineage``, ``io``,
``run``, ``internal``), :mod:`~gguf_audit.codes.registry` (gathers them) and
:mod:`~gguf_audit.codes.advisories` (the security advisories messages quote).
"""

from __future__ import annotations

from gguf_audit.codes.advisories import ADVISORIES, endangers
from gguf_audit.codes.code import Code
from gguf_audit.codes.model import LLAMA_CPP_BUILD, SEVERITY_RANK, VERDICT_RANK, CodeInfo, LlamaCpp, Severity
from gguf_audit.codes.registry import AREAS, CODES, CORE_CODES

__all__ = [
    "ADVISORIES",
    "AREAS",
    "CODES",
    "CORE_CODES",
    "LLAMA_CPP_BUILD",
    "SEVERITY_RANK",
    "VERDICT_RANK",
    "Code",
    "CodeInfo",
    "LlamaCpp",
    "Severity",
    "endangers",
]
