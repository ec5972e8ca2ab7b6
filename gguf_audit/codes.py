"""The one registry of finding codes: every code gguf-audit emits, in one place.

Each code is ``area.problem`` with a default severity, whether current llama.cpp
(on a little-endian host) refuses a file that has it, and a one-line explanation.
``gguf-audit codes`` prints this table, the README's table is generated from it,
and :func:`gguf_audit.findings.finding` refuses a code that is not here. Modules
name codes by their string; nothing registers a code as a side effect of being
imported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType
from typing import Final

from gguf_audit.codes_clip import CLIP_CODES
from gguf_audit.codes_collection import COLLECTION_CODES
from gguf_audit.codes_hparams import HPARAMS_CODES
from gguf_audit.codes_mirror import MIRROR_CODES
from gguf_audit.codes_security import SECURITY_CODES

__all__ = ["CODES", "CORE_CODES", "LLAMA_CPP_BUILD", "VERDICT_RANK", "CodeInfo", "LlamaCpp", "Severity"]


class Severity(StrEnum):
    """How bad a finding is. ``error`` means the file is broken or refused."""

    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


SEVERITY_RANK: Final = {Severity.INFO: 0, Severity.WARNING: 1, Severity.ERROR: 2}

LLAMA_CPP_BUILD: Final = "b11312"
"""The llama.cpp build every verdict describes: the oracle in ``../shared/llama.cpp`` (commit 0c1e57098)."""


class LlamaCpp(StrEnum):
    """What the pinned llama.cpp does with a file that has a finding: its verdict, worst last."""

    LOADS = "loads"
    REFUSES = "refuses"
    """The loader reports an error and returns no model: the calling program goes on."""
    ABORTS = "aborts"
    """A failed ``GGML_ASSERT`` or an uncaught exception kills the process that loads the file (SIGABRT)."""


VERDICT_RANK: Final = {LlamaCpp.LOADS: 0, LlamaCpp.REFUSES: 1, LlamaCpp.ABORTS: 2}


@dataclass(frozen=True, slots=True)
class CodeInfo:
    """One registered finding code."""

    code: str
    severity: Severity
    llama_cpp: LlamaCpp | None
    """What llama.cpp :data:`LLAMA_CPP_BUILD` (little-endian host) does with a file that has this finding;
    None when the finding means gguf-audit could not tell (the verdict is then unknown)."""
    doc: str

    @property
    def refused(self) -> bool | None:
        """True when llama.cpp refuses or aborts on such a file, False when it loads it, None when unknown."""
        return None if self.llama_cpp is None else self.llama_cpp is not LlamaCpp.LOADS


_registry: dict[str, CodeInfo] = {}


def _code(code: str, severity: Severity, verdict: LlamaCpp | bool | None, doc: str) -> None:
    """Register a code; ``verdict`` True and False are shorthand for refuses and loads."""
    if code in _registry:
        raise ValueError(f"finding code registered twice: {code!r}")
    area, _, name = code.partition(".")
    if not area or not name or code != code.lower():
        raise ValueError(f"finding codes look like 'area.problem'. Got {code!r}.")
    llama_cpp = verdict if verdict is None or isinstance(verdict, LlamaCpp) else _BOOL_VERDICT[verdict]
    _registry[code] = CodeInfo(code, severity, llama_cpp, doc)


_BOOL_VERDICT: Final = {True: LlamaCpp.REFUSES, False: LlamaCpp.LOADS}


E, W, I = Severity.ERROR, Severity.WARNING, Severity.INFO  # noqa: E741 - the three severities, tersely

# --- header: the fixed fields and the key-value section (ggml/src/gguf.cpp) ---
_code("header.bad_magic", E, True, "The file does not start with the bytes 'GGUF'.")
_code(
    "header.lfs_pointer",
    E,
    True,
    "The file is a Git LFS or Xet pointer (a mirror cloned without fetching the large files): the message gives "
    "the sha256 (Xet: Merkle hash) and size of the GGUF it stands for. llama.cpp refuses it as a bad magic.",
)
_code("header.unsupported_version", E, True, "The version is 0 or newer than 3, the last llama.cpp reads.")
_code("header.obsolete_version", E, True, "GGUF v1 (32-bit counts and lengths): llama.cpp no longer reads it.")
_code(
    "header.big_endian",
    W,
    True,
    "A valid big-endian file; llama.cpp refuses it on little-endian hosts (it reads the version as huge).",
)
_code(
    "header.truncated",
    E,
    True,
    "The file ends inside its header: a count or length needs more bytes than remain.",
)
_code(
    "header.count_too_large",
    E,
    True,
    "A tensor, key or array count past gguf-audit's named limits (a forged or corrupt count; 2^63 hangs gguf-py 0.19).",
)
_code(
    "header.string_too_long",
    E,
    True,
    "A string length past llama.cpp's 1 GiB limit (a forged or corrupt length; 2^63 hangs gguf-py 0.19).",
)
_code("header.bad_value_type", E, True, "A metadata value type id outside the 13 GGUF types.")
_code("header.nested_array", W, True, "An array of arrays: valid GGUF, but llama.cpp's reader rejects the key.")
_code("header.too_deep", E, True, "Arrays nested deeper than gguf-audit's limit; parsing stops there.")
_code("header.empty_key", E, True, "A metadata key of zero length.")
_code("header.duplicate_key", E, True, "The same metadata key appears twice.")
_code("header.bad_alignment", E, True, "general.alignment is not a uint32, is zero, or is not a power of two.")
_code(
    "header.nul_in_key",
    W,
    False,
    "A key holds a NUL byte: llama.cpp matches keys with strcmp, so it sees only the bytes before it "
    "(a key can hide behind, or shadow, another).",
)
_code(
    "header.invalid_utf8",
    W,
    False,
    "A key or string value is not valid UTF-8 (llama.cpp keeps raw bytes; tokenizers may break).",
)
_code(
    "header.invalid_bool",
    W,
    False,
    "A bool stored as a byte other than 0 or 1 (llama.cpp reads any non-zero as true).",
)
_code(
    "header.noncanonical_key",
    I,
    False,
    "A key outside the spec's naming rule (lower_snake_case segments separated by dots).",
)

# --- tensor infos and the data section against the listed size ---
_code("tensor.name_too_long", E, True, "A tensor name of 64 bytes or more (GGML_MAX_NAME).")
_code("tensor.duplicate_name", E, True, "Two tensors share a name (up to the first NUL byte, as ggml keeps it).")
_code(
    "tensor.nul_in_name",
    W,
    False,
    "A tensor name holds a NUL byte: ggml keeps only the bytes before it, so other tools see another name.",
)
_code(
    "tensor.shape_aborts",
    E,
    LlamaCpp.ABORTS,
    "A shape gguf.cpp accepts but ggml_new_tensor asserts on (an element count of exactly INT64_MAX's bound, "
    "or overflowing dims behind a zero): the loading process aborts.",
)
_code(
    "tensor.unaligned_buffer",
    E,
    LlamaCpp.ABORTS,
    "general.alignment below 32 puts the data section off ggml's 32-byte tensor alignment: mapping the "
    "weights fails a GGML_ASSERT in ggml-backend.cpp and the loading process aborts.",
)
_code(
    "tensor.bad_dims",
    E,
    True,
    "More than 4 dimensions, a dimension negative as int64, or an element count that overflows int64.",
)
_code(
    "tensor.unknown_type",
    E,
    True,
    "A ggml type id llama.cpp does not know (forks such as ik_llama.cpp number their own types).",
)
_code(
    "tensor.removed_type",
    E,
    True,
    "A ggml type id whose support was removed from GGUF (4, 5, 31 to 33, 36 to 38).",
)
_code(
    "tensor.row_not_block_multiple",
    E,
    True,
    "The first dimension is not a multiple of the type's block size.",
)
_code("tensor.misaligned_offset", E, True, "A tensor's data offset is not a multiple of general.alignment.")
_code(
    "tensor.offset_not_packed",
    E,
    True,
    "A tensor's offset is not the running sum of the padded sizes before it, as llama.cpp requires.",
)
_code("tensor.overlap", E, True, "Two tensors' data regions overlap.")
_code(
    "tensor.undersized_region",
    E,
    True,
    "The gap before the next tensor's offset is smaller than the tensor's own size.",
)
_code(
    "data.truncated",
    E,
    True,
    "Tensor data extends past the end of the file: an interrupted upload (or Ollama's CVE-2026-7482 trigger).",
)
_code(
    "data.trailing_bytes",
    I,
    False,
    "Bytes after the last tensor's padded end: harmless to llama.cpp, but unusual.",
)
_code(
    "tensor.missing",
    E,
    True,
    "A tensor llama.cpp creates as required for this architecture is absent (output.weight is not: llama.cpp ties "
    "it to token_embd); llama.cpp throws 'missing tensor'. Checked per block for the curated architectures, "
    "token_embd only for the others; not on a shard of a split model.",
)
_code(
    "tensor.unexpected",
    E,
    True,
    "A tensor name the architecture never uses (a typo, a converter's leftover); llama.cpp does not create it, "
    "and its loader ends on 'wrong number of tensors'.",
)
_code(
    "tensor.wrong_shape",
    E,
    True,
    "A tensor's shape disagrees with the embedding length, head counts and dimensions or feed-forward length "
    "(curated architectures); llama.cpp throws \"tensor 'x' has wrong shape; expected ..., got ...\".",
)

# --- sampled tensor data (ggml_validate_row_data) ---
_code(
    "data.nonfinite",
    E,
    False,
    "A sampled block holds NaN or Inf, in its values or its scales "
    "(llama.cpp loads it; ggml_validate_row_data refuses it only with --check-tensors, and never NVFP4's 0x7F).",
)
_code(
    "data.zero_filled",
    W,
    False,
    "Every block sampled from a weight matrix is zero, two at least (norms, biases, adapters and the like "
    "excepted): data never written, or a broken conversion. Sampling reads a run of blocks at a few places "
    "in a file, so a tensor no window reached is not judged.",
)
_code(
    "data.bad_scale",
    E,
    False,
    "A sampled block's scale is invalid, such as an MXFP4 exponent byte 0xFF "
    "(NaN in OCP MX; llama.cpp loads it; ggml_validate_row_data refuses it only with --check-tensors).",
)
_code(
    "data.no_decoder",
    I,
    False,
    "gguf-audit cannot decode this tensor type (or this byte order), so its sampled blocks were not checked.",
)
_code(
    "data.sample_unread",
    W,
    False,
    "Some sampled blocks could not be read (I/O errors or a short file), so they were not checked.",
)

# --- metadata (llama_model::load_hparams) ---
_code(
    "meta.missing_key",
    E,
    True,
    "A key llama.cpp requires is absent: general.architecture, tokenizer.ggml.model, the token list (and "
    "merges for BPE), or, in a model file, context and embedding length and block count, and for known "
    "architectures the norm epsilon, head count and feed-forward length; llama.cpp throws 'key not found' "
    "(without the head count or feed-forward length, its first shape check fails instead).",
)
_code(
    "meta.wrong_type",
    E,
    True,
    "A key llama.cpp reads has another type than the one it reads it as (a length as a string or uint64, an id "
    "as int32), or a per-layer array is not block_count long; llama.cpp throws 'key ... has wrong type' "
    "('wrong array length'; gguf asserts for a token list that is not an array of strings).",
)
_code(
    "meta.unknown_architecture",
    E,
    LlamaCpp.REFUSES,
    "general.architecture is not one the pinned llama.cpp builds a model of (its generated tables): it throws "
    "'unknown model architecture' (or 'unsupported' for a name it knows without a model, as gptj); a newer "
    "build or a fork may load it. Its keys and tensors were not checked.",
)
_code(
    "meta.block_count_mismatch",
    E,
    True,
    "{arch}.block_count disagrees with the blk.N tensors present (blocks past it, or blocks without any tensor); "
    "llama.cpp fails on missing tensors or 'wrong number of tensors'.",
)
_code(
    "meta.file_type_mismatch",
    W,
    False,
    "general.file_type is not a llama ftype id, or no weight matrix has the type it names (K-quant mixes and "
    "llama-quantize's fallbacks allowed), or the file name's quantization label says otherwise; llama.cpp only "
    "prints the declared type.",
)
_code(
    "meta.missing_quantization_version",
    W,
    False,
    "A file with quantized tensors has no general.quantization_version (gguf-py and llama-quantize always write "
    "it): the quantization layout it was written with is unknown. llama.cpp does not read it.",
)
_code(
    "meta.control_characters",
    W,
    False,
    "A general.* string holds control characters (terminal escapes, C0/C1; newline and tab are allowed in "
    "descriptions) or invisible ones (bidi overrides and isolates, zero-width space, BOM, tag characters).",
)

# --- tokenizer (llama_vocab::load) ---
_code(
    "tokenizer.vocab_mismatch",
    E,
    True,
    "The number of tokens is not the row count of token_embd (or of output, for the curated architectures); "
    "llama.cpp's shape check for those tensors uses the token count and throws 'wrong shape'.",
)
_code(
    "tokenizer.array_length_mismatch",
    E,
    True,
    "tokenizer.ggml.scores or token_type is shorter than tokenizer.ggml.tokens; llama.cpp throws 'Index out of "
    "array bounds' since PR #27075 (src/llama-vocab.cpp); older builds read one entry per token, past the end.",
)
_code(
    "tokenizer.wrong_array_type",
    E,
    True,
    "tokenizer.ggml.scores is not an array of float32 or int32, or token_type not an array of int32 (uint32 no "
    "longer passes); llama.cpp throws 'invalid gguf type' since PR #27075 (src/llama-vocab.cpp); older builds "
    "took the array's bytes as float or int32 whatever their type. Also suppress_tokens not an array of int32, "
    "and a t5 vocabulary's precompiled_charsmap not an array of int8 or uint8 (both refused by b11312).",
)
_code(
    "tokenizer.special_id_out_of_range",
    E,
    False,
    "A special token id (bos, eos, eot, eom, unk, sep, pad, mask, fim) is not below the token count; llama.cpp "
    "warns 'bad special token' and keeps its default id. An error for bos/eos/eot/eom, a warning for the rest.",
)
_code(
    "tokenizer.bad_token_type",
    W,
    False,
    "tokenizer.ggml.token_type holds values outside 1 to 6 (normal, unknown, control, user-defined, unused, "
    "byte); llama.cpp gives such tokens the undefined attribute.",
)
_code(
    "tokenizer.unknown_model",
    E,
    LlamaCpp.REFUSES,
    "tokenizer.ggml.model names a tokenizer the pinned llama.cpp does not know (it throws 'unknown tokenizer'); "
    "a newer build may have added it.",
)
_code(
    "tokenizer.unknown_pre",
    E,
    LlamaCpp.REFUSES,
    "A BPE tokenizer's tokenizer.ggml.pre is not one the pinned llama.cpp accepts (its generated tables): it "
    "throws 'unknown pre-tokenizer type'; the list grows often, so a newer build may know it.",
)
_code(
    "tokenizer.missing_pre",
    W,
    False,
    "A BPE tokenizer (gpt2, hybriddna, whitespace) without tokenizer.ggml.pre; llama.cpp warns 'missing "
    "pre-tokenizer type, using: default' and 'GENERATION QUALITY WILL BE DEGRADED'.",
)
_code(
    "tokenizer.eos_not_in_template",
    W,
    False,
    "The chat template does not close the assistant turn with the EOS/EOT/EOM token nor any token llama.cpp "
    "stops on by its text, or closes it with a token that is not a control token (llama.cpp warns and overrides "
    "the type for the texts it knows). Info when the turn ends with such a known text that is not the EOS/EOT.",
)
_code(
    "tokenizer.double_bos",
    I,
    False,
    "add_bos_token is true (SPM's default when absent) and the rendered chat template already starts with the "
    "BOS text; tokenizing the render with special tokens added gives two BOS (llama.cpp warns; its chat code "
    "strips one).",
)

# --- chat templates, treated as untrusted code ---
_code("template.syntax_error", E, False, "A chat template is not valid Jinja; chat front-ends fail on it.")
_code(
    "template.unsafe",
    E,
    False,
    "A chat template reaches for private attributes or sandbox-escape gadgets: code execution in any "
    "runtime rendering it without jinja2's sandbox (CVE-2024-34359).",
)
_code(
    "template.resource_limit",
    E,
    False,
    "Rendering a chat template for a short conversation hit a CPU, wall-clock, memory, output, "
    "recursion or range limit: a denial of service for whoever renders it.",
)
_code(
    "template.render_error",
    W,
    False,
    "A chat template fails to render even a plain user/assistant conversation.",
)
_code(
    "template.missing",
    I,
    False,
    "The file has no tokenizer.chat_template; runtimes fall back to a built-in or guessed format.",
)

# --- collection-level codes: upstream configs, shard sets, compare, lineage (codes_collection.py) ---
for _entry in COLLECTION_CODES:
    _code(_entry[0], Severity(_entry[1]), _entry[2], _entry[3])
del _entry

# --- I/O, the run and the audit itself ---
_code(
    "io.not_found",
    E,
    None,
    "The file does not exist at the URL (the store's answer, not the file's: llama.cpp's verdict is unknown).",
)
_code("io.permission_denied", E, None, "The credentials in use may not read the file (llama.cpp's verdict is unknown).")
_code("io.timeout", E, None, "A read timed out after all retries (llama.cpp's verdict is unknown).")
_code(
    "io.error",
    E,
    None,
    "Another I/O failure after all retries (connection reset, server error, short read).",
)
_code(
    "io.range_ignored",
    W,
    False,
    "The server answers Range requests with the whole file, and the bytes asked lie past what gguf-audit "
    "reads of such an answer (max_ignored_range_bytes): they were not read, never taken from the wrong place.",
)
_code(
    "header.too_large",
    E,
    None,
    "The header is larger than the configured read limit; the file was not judged past it.",
)
_code(
    "io.rate_limited",
    W,
    None,
    "The server kept rate-limiting reads (429, RateLimit or Retry-After) past the wait allowed "
    "([io] rate_limit_wait_s): the file was not read this time, and an incremental run reads it again. "
    "A warning: the store's limit, not the file.",
)
_code(
    "io.size_mismatch",
    E,
    None,
    "The listing and the server's answers (Content-Range totals) disagree on the file's size, and kept "
    "disagreeing when asked again: the message names both sizes. The file is not judged truncated or "
    "padded on either; an incremental run reads it again.",
)
_code(
    "io.size_unknown",
    W,
    False,
    "Neither the listing nor the server told the file's size; size checks are skipped.",
)
_code(
    "run.worker_lost",
    E,
    None,
    "Every worker that took this file died before auditing it (after retries): it may crash the auditor.",
)
_code(
    "internal.unexpected",
    E,
    None,
    "gguf-audit itself failed on this file; the message names the exception. Please report it.",
)

for _clip in CLIP_CODES:  # multimodal projector files, kept as data in codes_clip.py
    _code(_clip[0], Severity(_clip[1]), LlamaCpp(_clip[2]) if _clip[2] is not None else None, _clip[3])
del _clip

for _mirror in MIRROR_CODES:  # a mirror against its source, kept as data in codes_mirror.py
    _code(_mirror[0], Severity(_mirror[1]), LlamaCpp(_mirror[2]) if _mirror[2] is not None else None, _mirror[3])
del _mirror

for _entry in SECURITY_CODES:  # issue 12's codes, kept as data in codes_security.py
    _code(_entry[0], Severity(_entry[1]), _entry[2], _entry[3])
for _hp in HPARAMS_CODES:  # load_hparams' asserts and throws, kept as data in codes_hparams.py
    _code(_hp[0], Severity(_hp[1]), LlamaCpp(_hp[2]), _hp[3])
del E, W, I, _entry, _hp

CODES: Final[Mapping[str, CodeInfo]] = MappingProxyType(_registry)
"""Every finding code, read-only."""

CORE_CODES: Final = frozenset(
    {
        "header.bad_magic",
        "header.lfs_pointer",
        "header.unsupported_version",
        "header.obsolete_version",
        "header.big_endian",
        "header.truncated",
        "header.count_too_large",
        "header.string_too_long",
        "header.bad_value_type",
        "header.nested_array",
        "header.too_deep",
        "header.empty_key",
        "header.duplicate_key",
        "header.bad_alignment",
        "header.invalid_utf8",
        "header.invalid_bool",
        "header.noncanonical_key",
        "tensor.name_too_long",
        "tensor.duplicate_name",
        "tensor.bad_dims",
        "tensor.unknown_type",
        "tensor.removed_type",
        "tensor.row_not_block_multiple",
        "tensor.misaligned_offset",
        "tensor.offset_not_packed",
        "tensor.overlap",
        "tensor.undersized_region",
        "data.truncated",
        "data.trailing_bytes",
        "io.not_found",
        "io.permission_denied",
        "io.timeout",
        "io.error",
        "io.range_ignored",
        "io.rate_limited",
        "header.too_large",
        "io.size_mismatch",
        "io.size_unknown",
        "run.worker_lost",
        "internal.unexpected",
    }
)
"""The codes of the parser, the structural checks, I/O, the run and the audit itself."""
