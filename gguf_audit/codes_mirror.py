"""The finding codes of a mirror checked against its source, as data: :mod:`gguf_audit.codes` registers them.

Each entry is ``(code, severity, verdict, doc)``. The verdict is None for
every one: these codes say whether a copy is the same bytes as its source, not
whether llama.cpp loads it (that is the copy's own ``files`` row). A faithful
pair gets no code. ``gguf_audit.checks.mirror`` gives them; the ``mirror``
table holds one row per path and night.
"""

from __future__ import annotations

from typing import Final

__all__ = ["MIRROR_CODES"]

MirrorCode = tuple[str, str, str | None, str]

MIRROR_CODES: Final[tuple[MirrorCode, ...]] = (
    (
        "mirror.missing",
        "warning",
        None,
        "A file the source lists (under the mapped path) is absent from the mirror.",
    ),
    (
        "mirror.extra",
        "info",
        None,
        "The mirror holds a file the source does not list at the mapped path: deleted upstream, renamed, or "
        "never a copy.",
    ),
    (
        "mirror.size_differs",
        "error",
        None,
        "The mirror's copy and the source file differ in size (a truncated or padded copy) and the mirror "
        "records no older source revision it was copied at; the message names both sizes.",
    ),
    (
        "mirror.content_differs",
        "error",
        None,
        "Same size, different content, at the source revision the mirror records (or none recorded). The "
        "message says which evidence decided: the Hub's LFS sha256 against the object's full-object "
        "x-amz-checksum-sha256, or the sampled-block fingerprints both sides computed from the same plan.",
    ),
    (
        "mirror.stale",
        "warning",
        None,
        "The copy differs from the source and the mirror records that it was copied at an older source "
        "revision (object metadata, or the revision the previous night found it faithful at): the source "
        "moved on and the mirror did not follow.",
    ),
    (
        "mirror.undecided",
        "info",
        None,
        "Same size, but no evidence could decide the content: the object keeps no full-object SHA-256 "
        "(an ETag is an MD5 or a multipart digest, never comparable with a sha256), the source no LFS sha256, "
        "and no fingerprint could be computed on both sides (sampling off, a read failed); the message says why.",
    ),
)
