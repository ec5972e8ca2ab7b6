"""The registry of finding codes, and the finding value every check yields.

Every problem gguf-audit reports is a :class:`Finding` whose ``code`` is
registered here with a default severity, whether current llama.cpp refuses a
file that has it, and a one-line explanation. ``gguf-audit codes`` prints this
registry and a test fails when code emits an unregistered code.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "CODES",
    "CodeInfo",
    "Finding",
    "Severity",
    "finding",
    "is_loadable",
    "register",
]


class Severity(StrEnum):
    """How bad a finding is. ``error`` means the file is broken or refused."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


SEVERITY_RANK = {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2}


@dataclass(frozen=True, slots=True)
class CodeInfo:
    """One registered finding code."""

    code: str
    severity: Severity
    refused: bool | None
    """True when current llama.cpp (little-endian host) refuses a file with this finding;
    None when the finding means gguf-audit could not tell (the verdict is then unknown)."""
    doc: str


@dataclass(frozen=True, slots=True)
class Finding:
    """One problem found in a file or a model."""

    code: str
    severity: Severity
    message: str
    tensor: str | None = None
    offset: int | None = None

    @property
    def refused(self) -> bool | None:
        return CODES[self.code].refused

    def as_dict(self) -> dict[str, object]:
        return {
            "code": self.code,
            "severity": str(self.severity),
            "message": self.message,
            "tensor": self.tensor,
            "offset": self.offset,
        }


CODES: dict[str, CodeInfo] = {}


def register(code: str, severity: Severity, refused: bool | None, doc: str) -> str:
    """Add a code to the registry and return it (so modules can keep it as a constant)."""
    if code in CODES:
        raise ValueError(f"finding code registered twice: {code!r}")
    area, _, name = code.partition(".")
    if not area or not name or code != code.lower():
        raise ValueError(f"finding codes look like 'area.problem'. Got {code!r}.")
    CODES[code] = CodeInfo(code, severity, refused, doc)
    return code


def finding(
    code: str,
    message: str,
    *,
    tensor: str | None = None,
    offset: int | None = None,
    severity: Severity | None = None,
) -> Finding:
    """Build a finding with the code's registered severity unless one is given."""
    info = CODES.get(code)
    if info is None:
        raise KeyError(f"unregistered finding code {code!r}")
    return Finding(code, severity or info.severity, _one_line(message), tensor, offset)


def is_loadable(findings: Iterable[Finding]) -> bool | None:
    """Whether current llama.cpp on a little-endian host would load a file with these findings.

    False when any finding is one llama.cpp refuses; None when none is but one
    means the audit could not reach a verdict; True otherwise.
    """
    verdict: bool | None = True
    for f in findings:
        refused = CODES[f.code].refused
        if refused:
            return False
        if refused is None:
            verdict = None
    return verdict


def _one_line(message: str) -> str:
    return " ".join(message.split()) if "\n" in message or "\r" in message else message


E, W, I = Severity.ERROR, Severity.WARNING, Severity.INFO  # noqa: E741 - the three severities, tersely

# --- header: the fixed fields and the key-value section (ggml/src/gguf.cpp) ---
register("header.bad_magic", E, True, "The file does not start with the bytes 'GGUF'.")
register("header.unsupported_version", E, True, "The version is 0 or newer than 3, the last llama.cpp reads.")
register("header.obsolete_version", E, True, "GGUF v1 (32-bit counts and lengths): llama.cpp no longer reads it.")
register(
    "header.big_endian",
    W,
    True,
    "A valid big-endian file; llama.cpp refuses it on little-endian hosts (it reads the version as huge).",
)
register(
    "header.truncated",
    E,
    True,
    "The file ends inside its header: a count or length needs more bytes than remain.",
)
register(
    "header.count_too_large",
    E,
    True,
    "A tensor, key or array count past gguf-audit's named limits (a forged or corrupt count).",
)
register(
    "header.string_too_long",
    E,
    True,
    "A string length past llama.cpp's 1 GiB limit (a forged or corrupt length).",
)
register("header.bad_value_type", E, True, "A metadata value type id outside the 13 GGUF types.")
register(
    "header.nested_array",
    W,
    True,
    "An array of arrays: valid GGUF, but llama.cpp's reader rejects the key.",
)
register("header.too_deep", E, True, "Arrays nested deeper than gguf-audit's limit; parsing stops there.")
register("header.empty_key", E, True, "A metadata key of zero length.")
register("header.duplicate_key", E, True, "The same metadata key appears twice.")
register(
    "header.bad_alignment",
    E,
    True,
    "general.alignment is not a uint32, is zero, or is not a power of two.",
)
register(
    "header.invalid_utf8",
    W,
    False,
    "A key or string value is not valid UTF-8 (llama.cpp keeps raw bytes; tokenizers may break).",
)
register(
    "header.invalid_bool",
    W,
    False,
    "A bool stored as a byte other than 0 or 1 (llama.cpp reads any non-zero as true).",
)
register(
    "header.noncanonical_key",
    I,
    False,
    "A key outside the spec's naming rule (lower_snake_case segments separated by dots).",
)

# --- tensor infos ---
register("tensor.name_too_long", E, True, "A tensor name of 64 bytes or more (GGML_MAX_NAME).")
register("tensor.duplicate_name", E, True, "Two tensors share a name.")
register(
    "tensor.bad_dims",
    E,
    True,
    "More than 4 dimensions, a dimension negative as int64, or an element count that overflows int64.",
)
register(
    "tensor.unknown_type",
    E,
    True,
    "A ggml type id llama.cpp does not know (forks such as ik_llama.cpp number their own types).",
)
register(
    "tensor.removed_type",
    E,
    True,
    "A ggml type id whose support was removed from GGUF (4, 5, 31 to 33, 36 to 38).",
)
register(
    "tensor.row_not_block_multiple",
    E,
    True,
    "The first dimension is not a multiple of the type's block size.",
)
register("tensor.misaligned_offset", E, True, "A tensor's data offset is not a multiple of general.alignment.")
register(
    "tensor.offset_not_packed",
    E,
    True,
    "A tensor's offset is not the running sum of the padded sizes before it, as llama.cpp requires.",
)
register("tensor.overlap", E, True, "Two tensors' data regions overlap.")
register(
    "tensor.undersized_region",
    E,
    True,
    "The gap before the next tensor's offset is smaller than the tensor's own size.",
)

# --- the data section against the listed file size ---
register(
    "data.truncated",
    E,
    True,
    "Tensor data extends past the end of the file: an interrupted download or upload.",
)
register(
    "data.trailing_bytes",
    I,
    False,
    "Bytes after the last tensor's padded end: harmless to llama.cpp, but unusual.",
)

# --- I/O and the audit itself ---
register("io.not_found", E, True, "The file does not exist at the URL.")
register("io.permission_denied", E, True, "The credentials in use may not read the file.")
register("io.timeout", E, True, "A read timed out after all retries.")
register("io.error", E, True, "Another I/O failure after all retries (connection reset, server error, short read).")
register(
    "header.too_large",
    E,
    None,
    "The header is larger than the configured read limit; the file was not judged past it.",
)
register(
    "io.size_unknown", W, False, "Neither the listing nor the server told the file's size; size checks are skipped."
)
register(
    "run.worker_lost",
    E,
    None,
    "Every worker that took this file died before auditing it (after retries): it may crash the auditor.",
)
register(
    "internal.unexpected",
    E,
    None,
    "gguf-audit itself failed on this file; the message names the exception. Please report it.",
)

del E, W, I

CORE_CODES: frozenset[str] = frozenset(CODES)
"""The codes registered here: header, tensor-info, data-size, I/O and internal ones."""
