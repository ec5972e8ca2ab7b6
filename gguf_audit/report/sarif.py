"""SARIF 2.1.0 logs: ``inspect --format sarif`` (one file) and ``scan --sarif FILE`` (one run per scan).

The rules are the code registry (:data:`gguf_audit.codes.CODES`): ``id`` the
code, ``shortDescription`` its explanation's first sentence, ``fullDescription``
and ``help`` the whole explanation, ``defaultConfiguration.level`` from its
severity (error, warning, info as ``note``), and a ``llamaCpp`` property saying
what llama.cpp ``llamaCppBuild`` does with a file that has it (``loads``, ``refuses``,
``aborts``, ``unknown``); each result carries its code's ``llamaCpp`` too.
Each problem is a result whose artifact location is the file's URI (a local
path as an absolute ``file://`` URI; every character a URI cannot hold, ``#``
and spaces included, percent-encoded) and whose region is its byte offset
(``byteOffset``), with the tensor as a logical location; a problem of a whole
model (a shard set) names the model. ``partialFingerprints`` identify a result
across nights (code, file or model, tensor), so a dashboard tracks one problem
instead of a new one each night.

The log is JSON-safe; :func:`sarif_json` writes it indented, as ASCII (every other
character, controls and bidi marks included, a ``\\u`` escape).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Final
from urllib.parse import quote

from gguf_audit import __version__
from gguf_audit.codes import CODES, LLAMA_CPP_BUILD, CodeInfo, Severity
from gguf_audit.findings import Finding, llama_cpp_label

__all__ = [
    "SARIF_SCHEMA",
    "SARIF_VERSION",
    "SarifResult",
    "results_of_findings",
    "sarif_json",
    "sarif_log",
    "sarif_run",
]

SARIF_VERSION: Final = "2.1.0"
SARIF_SCHEMA: Final = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
INFORMATION_URI: Final = "https://github.com/ggml-org/llama.cpp/blob/master/docs/gguf.md"
LEVELS: Final = {Severity.ERROR: "error", Severity.WARNING: "warning", Severity.INFO: "note"}
_SENTENCE: Final = re.compile(r"^(.+?[.:;!?])(\s|$)")


@dataclass(frozen=True, slots=True)
class SarifResult:
    """One problem where SARIF wants it: the file (or the model), the code, the place in bytes."""

    code: str
    severity: str
    message: str
    url: str | None
    model_id: str | None = None
    tensor: str | None = None
    offset: int | None = None


FINGERPRINT_KEY: Final = "ggufAudit/v1"


def _uri(url: str) -> str:
    """A URL as a SARIF URI: a local path as an absolute ``file://`` URI, and every character a URI cannot hold
    (spaces, ``<``, non-ASCII, a ``#`` that is part of a name) percent-encoded."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        path = url if url.startswith("/") else f"{os.getcwd()}/{url}"
        return "file://" + quote(str(PurePosixPath(path)), safe="/")
    if scheme == "file":
        return "file://" + quote(rest, safe="/")
    return quote(url, safe=":/?[]@!$&'()*+,;=%~")


def _fingerprint(r: SarifResult) -> str:
    """The same problem of the same file (or model) and tensor, night after night: not its message or offset,
    which may carry values that move."""
    key = "\x1f".join((r.code, r.url or "", r.model_id or "", r.tensor or ""))
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def _short(doc: str) -> str:
    match = _SENTENCE.match(doc)
    return match.group(1) if match else doc


def _level(severity: str) -> str:
    try:
        return LEVELS[Severity(severity)]
    except ValueError:
        return "warning"


def _rule(info: CodeInfo) -> dict[str, Any]:
    verdict = llama_cpp_label(info.llama_cpp)
    return {
        "id": info.code,
        "name": "".join(part.capitalize() for part in re.split(r"[._]", info.code)),
        "shortDescription": {"text": _short(info.doc)},
        "fullDescription": {"text": info.doc},
        "help": {
            "text": f"{info.doc} (llama.cpp {LLAMA_CPP_BUILD} {verdict} on a file with this finding; "
            "`gguf-audit codes` lists all.)"
        },
        "defaultConfiguration": {"level": LEVELS[info.severity]},
        "properties": {
            "llamaCpp": verdict,
            "llamaCppBuild": LLAMA_CPP_BUILD,
            "llamaCppRefuses": info.refused,
            "tags": [info.code.area],
        },
    }


def results_of_findings(url: str, findings: Iterable[Finding]) -> list[SarifResult]:
    """A file's findings as results."""
    return [SarifResult(f.code, str(f.severity), f.message, url, None, f.tensor, f.offset) for f in findings]


def _result(r: SarifResult, rule_index: Mapping[str, int]) -> dict[str, Any]:
    location: dict[str, Any] = {}
    if r.url is not None:
        physical: dict[str, Any] = {"artifactLocation": {"uri": _uri(r.url)}}
        if r.offset is not None and r.offset >= 0:
            physical["region"] = {"byteOffset": int(r.offset)}
        location["physicalLocation"] = physical
    logical = []
    if r.tensor:
        logical.append({"name": r.tensor, "kind": "member"})
    if r.url is None and r.model_id:
        logical.append({"fullyQualifiedName": r.model_id, "kind": "module"})
    if logical:
        location["logicalLocations"] = logical
    result: dict[str, Any] = {
        "ruleId": r.code,
        "level": _level(r.severity),
        "message": {"text": r.message},
        "locations": [location] if location else [],
        "partialFingerprints": {FINGERPRINT_KEY: _fingerprint(r)},
    }
    if r.code in rule_index:
        result["ruleIndex"] = rule_index[r.code]
    info = CODES.get(r.code)
    properties: dict[str, Any] = {
        "llamaCpp": llama_cpp_label(info.llama_cpp if info is not None else None),
        "llamaCppBuild": LLAMA_CPP_BUILD,
    }
    if r.url is None and r.model_id:
        properties["model"] = r.model_id
    result["properties"] = properties
    return result


def sarif_run(
    results: Sequence[SarifResult],
    *,
    artifacts: Mapping[str, int | None] | None = None,
    successful: bool = True,
    properties: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """One SARIF run: every registered code as a rule, ``results``, and the files read as artifacts."""
    infos = sorted(CODES.values(), key=lambda c: c.code)
    rule_index = {str(info.code): i for i, info in enumerate(infos)}
    run: dict[str, Any] = {
        "tool": {
            "driver": {
                "name": "gguf-audit",
                "version": __version__,
                "semanticVersion": __version__,
                "informationUri": INFORMATION_URI,
                "rules": [_rule(info) for info in infos],
                "properties": {"llamaCppBuild": LLAMA_CPP_BUILD},
            }
        },
        "invocations": [{"executionSuccessful": successful}],
        "results": [_result(r, rule_index) for r in results],
    }
    if artifacts:
        run["artifacts"] = [
            {"location": {"uri": _uri(url)}, **({"length": int(size)} if size is not None and size >= 0 else {})}
            for url, size in artifacts.items()
        ]
    if properties:
        run["properties"] = dict(properties)
    return run


def sarif_json(log: Mapping[str, Any]) -> str:
    """The log as indented JSON text, every non-ASCII character a ``\\u`` escape (controls and bidi marks too)."""
    return json.dumps(log, indent=2, ensure_ascii=True, allow_nan=False)


def sarif_log(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The log object around ``runs``."""
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION, "runs": [dict(r) for r in runs]}
