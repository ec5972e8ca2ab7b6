"""The one registry of finding codes: every area's table gathered, checked, and looked up by code.

Each code is ``area.problem`` with a default severity, what llama.cpp :data:`LLAMA_CPP_BUILD` does with a
file that has it, and a one-line doc. ``gguf-audit codes`` prints it, ``docs/codes.md`` is generated from it,
and :func:`gguf_audit.findings.finding` refuses a code that is not here. An area's codes live in the module of
that name (:mod:`gguf_audit.codes.header`, ``tensor``, ...); nothing registers a code as a side effect of
being imported.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from types import MappingProxyType
from typing import Final

from gguf_audit.codes import (
    clip,
    compare,
    data,
    header,
    hparams,
    hub,
    internal,
    io,
    lineage,
    meta,
    mirror,
    run,
    shard,
    template,
    tensor,
    tokenizer,
    upstream,
)
from gguf_audit.codes.code import Code
from gguf_audit.codes.model import CodeInfo

__all__ = ["AREAS", "CODES", "CORE_CODES", "build_registry"]

AREAS: Final[Mapping[str, tuple[CodeInfo, ...]]] = MappingProxyType(
    {
        "header": header.ENTRIES,
        "tensor": tensor.ENTRIES,
        "data": data.ENTRIES,
        "meta": meta.ENTRIES,
        "hparams": hparams.ENTRIES,
        "tokenizer": tokenizer.ENTRIES,
        "template": template.ENTRIES,
        "clip": clip.ENTRIES,
        "hub": hub.ENTRIES,
        "upstream": upstream.ENTRIES,
        "shard": shard.ENTRIES,
        "compare": compare.ENTRIES,
        "lineage": lineage.ENTRIES,
        "io": io.ENTRIES,
        "run": run.ENTRIES,
        "internal": internal.ENTRIES,
        "mirror": mirror.ENTRIES,
    }
)
"""Each area's codes, in its module's order."""


def build_registry(areas: Mapping[str, Iterable[CodeInfo]]) -> Mapping[str, CodeInfo]:
    """Every area's entries by code, read-only.

    Raises:
        ValueError: a code registered twice, not ``area.problem`` in lower case, or in another area's table.
    """
    registry: dict[str, CodeInfo] = {}
    for area, entries in areas.items():
        for info in entries:
            code = str(info.code)
            name = code.partition(".")[2]
            if not name or code != code.lower():
                raise ValueError(f"finding codes look like 'area.problem'. Got {code!r}.")
            if code.partition(".")[0] != area:
                raise ValueError(f"finding code {code!r} is in the table of area {area!r}")
            if code in registry:
                raise ValueError(f"finding code registered twice: {code!r}")
            registry[code] = info
    return MappingProxyType(registry)


CODES: Final = build_registry(AREAS)
"""Every finding code, read-only: a :class:`Code` member or its text looks up the same entry."""

CORE_CODES: Final = frozenset(
    {
        Code.HEADER_BAD_MAGIC,
        Code.HEADER_LFS_POINTER,
        Code.HEADER_UNSUPPORTED_VERSION,
        Code.HEADER_OBSOLETE_VERSION,
        Code.HEADER_BIG_ENDIAN,
        Code.HEADER_TRUNCATED,
        Code.HEADER_COUNT_TOO_LARGE,
        Code.HEADER_STRING_TOO_LONG,
        Code.HEADER_BAD_VALUE_TYPE,
        Code.HEADER_NESTED_ARRAY,
        Code.HEADER_TOO_DEEP,
        Code.HEADER_EMPTY_KEY,
        Code.HEADER_DUPLICATE_KEY,
        Code.HEADER_BAD_ALIGNMENT,
        Code.HEADER_INVALID_UTF8,
        Code.HEADER_INVALID_BOOL,
        Code.HEADER_NONCANONICAL_KEY,
        Code.TENSOR_NAME_TOO_LONG,
        Code.TENSOR_DUPLICATE_NAME,
        Code.TENSOR_BAD_DIMS,
        Code.TENSOR_UNKNOWN_TYPE,
        Code.TENSOR_REMOVED_TYPE,
        Code.TENSOR_ROW_NOT_BLOCK_MULTIPLE,
        Code.TENSOR_MISALIGNED_OFFSET,
        Code.TENSOR_OFFSET_NOT_PACKED,
        Code.TENSOR_OVERLAP,
        Code.TENSOR_UNDERSIZED_REGION,
        Code.DATA_TRUNCATED,
        Code.DATA_TRAILING_BYTES,
        Code.IO_NOT_FOUND,
        Code.IO_PERMISSION_DENIED,
        Code.IO_TIMEOUT,
        Code.IO_ERROR,
        Code.IO_RANGE_IGNORED,
        Code.IO_RATE_LIMITED,
        Code.HEADER_TOO_LARGE,
        Code.IO_SIZE_MISMATCH,
        Code.IO_SIZE_UNKNOWN,
        Code.RUN_WORKER_LOST,
        Code.INTERNAL_UNEXPECTED,
    }
)
"""The codes of the parser, the structural checks, I/O, the run and the audit itself."""
