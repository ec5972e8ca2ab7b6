"""The ``mirror.*`` codes: a mirror's copy against its source (``gguf-audit scan --source``).

The verdict is None for every one: these codes say whether a copy is the same bytes as its source, not
whether llama.cpp loads it (that is the copy's own ``files`` row). A faithful pair gets no code, nor does a
``sampled_match`` (the sampled blocks agree; the status itself says the evidence is partial).
:mod:`gguf_audit.checks.mirror` gives them; the ``mirror`` table holds one row per path and night.
"""

from __future__ import annotations

from typing import Final

from gguf_audit.codes.code import Code
from gguf_audit.codes.model import CodeInfo, Severity

__all__ = ["ENTRIES"]

ENTRIES: Final[tuple[CodeInfo, ...]] = (
    CodeInfo(
        Code.MIRROR_MISSING,
        Severity.WARNING,
        None,
        ("A file the source lists (under the mapped path) is absent from the mirror."),
    ),
    CodeInfo(
        Code.MIRROR_EXTRA,
        Severity.INFO,
        None,
        (
            "The mirror holds a file the source does not list at the mapped path: deleted upstream, renamed, or "
            "never a copy."
        ),
    ),
    CodeInfo(
        Code.MIRROR_SIZE_DIFFERS,
        Severity.ERROR,
        None,
        (
            "The mirror's copy and the source file differ in size (a truncated or padded copy) and the mirror "
            "records no older source revision it was copied at; the message names both sizes."
        ),
    ),
    CodeInfo(
        Code.MIRROR_CONTENT_DIFFERS,
        Severity.ERROR,
        None,
        (
            "Same size, different content, at the source revision the mirror records (or none recorded). The "
            "message says which evidence decided: whole-file SHA-256s (the Hub's LFS sha256, an object's full-"
            "object x-amz-checksum-sha256, or a hash of the whole file with scan --verify full), or the "
            "sampled-block fingerprints both sides computed from the same plan."
        ),
    ),
    CodeInfo(
        Code.MIRROR_STALE,
        Severity.WARNING,
        None,
        (
            "The copy differs from the source and the mirror records that it was copied at an older source "
            "revision (object metadata, or the revision the previous night found it faithful at): the source "
            "moved on and the mirror did not follow."
        ),
    ),
    CodeInfo(
        Code.MIRROR_UNDECIDED,
        Severity.INFO,
        None,
        (
            "Same size, but no evidence could decide the content: the object keeps no full-object SHA-256 (an "
            "ETag is an MD5 or a multipart digest, never comparable with a sha256), the source no LFS sha256, and"
            " no fingerprint could be computed on both sides (sampling off, a read failed) nor whole-file hash"
            " (scan --verify full); the message says why."
        ),
    ),
)
