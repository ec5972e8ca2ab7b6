"""A mirror against its source: is each copied file the same bytes, and on what evidence.

Pure: both sides arrive as :class:`MirrorSide` values (what their listings,
an object's HEAD and, where needed, a sampled audit said), one path at a time,
and :func:`judge_pair` gives a :class:`MirrorVerdict`.

The evidence, strongest first:

1. **sha256**: a SHA-256 of each whole file: the source's LFS sha256 (the
   Hub gives it in its tree listing), a mirror object's full-object
   ``x-amz-checksum-sha256``, or one the scan computed by reading the whole
   file (``--verify full``). Only a full-object checksum is a digest of the
   bytes; a multipart upload's composite checksum (``...-N``, ``ChecksumType:
   COMPOSITE``) is a digest of the parts' digests, and an ETag is an MD5 (or a
   multipart digest): neither is comparable with a sha256, so neither is ever
   compared with one. Equal hashes are the only evidence that makes a copy
   ``faithful``.
2. **fingerprint**: the weights and metadata fingerprints
   (:mod:`gguf_audit.decode.fingerprints`) both sides computed from the same
   sampling plan. Equal proves the tensor table, the inference metadata and the
   sampled blocks agree, not every byte: the copy is ``sampled_match``, with the
   share of the data section the samples covered. Different proves the content
   differs.
3. **size**: different sizes are different content, whatever else is known.

A copy that differs while the mirror records an older source revision (object
metadata, or the revision a previous night found it faithful at) is
``stale``; one that differs at the recorded revision (or none) is
``size_differs`` or ``content_differs``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gguf_audit.codes import CODES, Code, Severity

__all__ = ["Evidence", "MirrorSide", "MirrorStatus", "MirrorVerdict", "judge_pair", "map_path"]


class MirrorStatus(StrEnum):
    """What a mirror's path is, against its source."""

    FAITHFUL = "faithful"
    """A whole-content SHA-256 on both sides, equal."""
    SAMPLED_MATCH = "sampled_match"
    """The sampled blocks, tensor table and metadata agree; the bytes outside the samples are not compared."""
    MISSING = "missing"
    EXTRA = "extra"
    SIZE_DIFFERS = "size_differs"
    CONTENT_DIFFERS = "content_differs"
    STALE = "stale"
    UNDECIDED = "undecided"


class Evidence(StrEnum):
    """What decided a verdict."""

    SHA256 = "sha256"
    """A whole-file SHA-256 on both sides: the Hub's LFS sha256, a full-object x-amz-checksum-sha256, or hashed."""
    FINGERPRINT = "fingerprint"
    """The weights and metadata fingerprints, from the same sampling plan on both sides."""
    SIZE = "size"
    LISTING = "listing"
    """Present on one side only."""
    NONE = "none"


@dataclass(frozen=True, slots=True)
class MirrorSide:
    """One side's facts about a path. Every field may be unknown (None)."""

    url: str
    size: int | None = None
    sha256: str | None = None
    """Hex SHA-256 of the whole file: the Hub's LFS sha256, an object's full-object checksum, or hashed here."""
    revision: str | None = None
    """Source: the commit the listing saw. Mirror: the source revision the copy was made at, where recorded."""
    weights_fingerprint: str | None = None
    metadata_fingerprint: str | None = None
    no_sha256: str | None = None
    """Why :attr:`sha256` is None, when known (``an ETag is an MD5, not a sha256``)."""
    error: str | None = None
    """This side could not be listed or read for the path: the reason."""
    sampled_bytes: int | None = None
    """Bytes of the data section the weights fingerprint hashed: each tensor's first block the plan read."""
    data_bytes: int | None = None
    """The data section's size: what the samples' coverage is a share of."""
    sha256_from: str | None = None
    """Where :attr:`sha256` came from, for the message (``the Hub's LFS sha256``, ``hashed: 7340032 bytes read``)."""


@dataclass(frozen=True, slots=True)
class MirrorVerdict:
    """One path's verdict: a status, its evidence and, unless faithful, a ``mirror.*`` code with a message."""

    path: str
    status: MirrorStatus
    evidence: Evidence
    message: str
    code: str | None = None

    @property
    def severity(self) -> Severity | None:
        return CODES[self.code].severity if self.code is not None else None


def map_path(rel: str, mirror_prefix: str, source_prefix: str) -> str | None:
    """The source path of the mirror's relative path ``rel``: ``mirror_prefix`` replaced by ``source_prefix``.

    None when ``rel`` does not start with ``mirror_prefix`` (it is no copy of the source).
    """
    if not rel.startswith(mirror_prefix):
        return None
    return source_prefix + rel[len(mirror_prefix) :]


def _short(value: str | None) -> str:
    return "unknown" if value is None else value[:12]


def _origin(side: MirrorSide, default: str) -> str:
    return side.sha256_from or default


def _coverage(mirror: MirrorSide, source: MirrorSide) -> str:
    """How much of the data section the fingerprinted blocks cover, as a clause."""
    sampled = source.sampled_bytes if source.sampled_bytes is not None else mirror.sampled_bytes
    data = source.data_bytes if source.data_bytes is not None else mirror.data_bytes
    if sampled is None or not data:
        return "the fingerprinted blocks' share of the data section is unknown"
    return f"the fingerprinted blocks cover {sampled} of the data section's {data} bytes ({100 * sampled / data:.1f}%)"


def _differs(path: str, mirror: MirrorSide, source: MirrorSide, evidence: Evidence, what: str) -> MirrorVerdict:
    """A copy whose bytes differ: stale when the mirror records an older source revision, else ``code``."""
    if mirror.revision is not None and source.revision is not None and mirror.revision != source.revision:
        return MirrorVerdict(
            path,
            MirrorStatus.STALE,
            evidence,
            f"{path}: copied at revision {_short(mirror.revision)}, the source is at {_short(source.revision)} "
            f"and {what}",
            Code.MIRROR_STALE,
        )
    if evidence is Evidence.SIZE:
        return MirrorVerdict(path, MirrorStatus.SIZE_DIFFERS, evidence, f"{path}: {what}", Code.MIRROR_SIZE_DIFFERS)
    return MirrorVerdict(path, MirrorStatus.CONTENT_DIFFERS, evidence, f"{path}: {what}", Code.MIRROR_CONTENT_DIFFERS)


def _by_content(path: str, mirror: MirrorSide, source: MirrorSide) -> MirrorVerdict | None:
    """Same size (or unknown): the whole-file hashes decide, else the fingerprints; None when neither can."""
    if mirror.sha256 is not None and source.sha256 is not None:
        origins = f"{_origin(mirror, 'the copy')}; {_origin(source, 'the source')}"
        if mirror.sha256.lower() == source.sha256.lower():
            return MirrorVerdict(
                path,
                MirrorStatus.FAITHFUL,
                Evidence.SHA256,
                f"{path}: sha256 {_short(source.sha256)} of the whole file on both sides ({origins})",
            )
        what = f"sha256 {_short(mirror.sha256)} against the source's {_short(source.sha256)} ({origins})"
        return _differs(path, mirror, source, Evidence.SHA256, what)
    fingerprints = (mirror.weights_fingerprint, mirror.metadata_fingerprint)
    theirs = (source.weights_fingerprint, source.metadata_fingerprint)
    if None not in fingerprints and None not in theirs:
        if fingerprints == theirs:
            return MirrorVerdict(
                path,
                MirrorStatus.SAMPLED_MATCH,
                Evidence.FINGERPRINT,
                f"{path}: the tensor table, inference metadata and sampled blocks agree (weights fingerprint "
                f"{_short(mirror.weights_fingerprint)}); {_coverage(mirror, source)}, the rest is not compared "
                "(--verify full hashes whole files)",
            )
        part = "weights" if fingerprints[0] != theirs[0] else "metadata"
        what = f"the {part} fingerprints differ ({_short(fingerprints[0])} against {_short(theirs[0])})"
        return _differs(path, mirror, source, Evidence.FINGERPRINT, what)
    return None


def judge_pair(path: str, mirror: MirrorSide | None, source: MirrorSide | None) -> MirrorVerdict:
    """The verdict on ``path`` (the source's path) from what each side said of it."""
    if mirror is None:
        if source is None:
            raise ValueError(f"a pair needs at least one side. Got {path!r}.")
        return MirrorVerdict(
            path,
            MirrorStatus.MISSING,
            Evidence.LISTING,
            f"{source.url} (at {_short(source.revision)}) has no copy in the mirror",
            Code.MIRROR_MISSING,
        )
    if source is None:
        return MirrorVerdict(
            path,
            MirrorStatus.EXTRA,
            Evidence.LISTING,
            f"{mirror.url} is in the mirror; the source lists no {path}",
            Code.MIRROR_EXTRA,
        )
    for side, name in ((source, "source"), (mirror, "mirror")):
        if side.error is not None:
            return MirrorVerdict(
                path,
                MirrorStatus.UNDECIDED,
                Evidence.NONE,
                f"{path}: the {name} side failed: {side.error}",
                Code.MIRROR_UNDECIDED,
            )
    if mirror.size is not None and source.size is not None and mirror.size != source.size:
        return _differs(
            path, mirror, source, Evidence.SIZE, f"the copy has {mirror.size} bytes, the source {source.size}"
        )
    decided = _by_content(path, mirror, source)
    if decided is not None:
        return decided
    reasons = []
    if mirror.sha256 is None:
        reasons.append(f"the mirror keeps no full-object sha256 ({mirror.no_sha256 or 'none given'})")
    if source.sha256 is None:
        reasons.append(f"the source gives no sha256 ({source.no_sha256 or 'not an LFS file'})")
    reasons.append("no fingerprint on both sides (sampling off, or a read failed) and no whole-file hash")
    return MirrorVerdict(
        path, MirrorStatus.UNDECIDED, Evidence.NONE, f"{path}: same size; " + "; ".join(reasons), Code.MIRROR_UNDECIDED
    )
