"""The mirror check's whole-content evidence: an S3 object's checksum (HEAD), a whole file hashed
(``--verify full``), and the hashes earlier nights stored.

A sampled match proves the sampled blocks agree, not the bytes between them;
where neither side's store keeps a whole-content checksum (a local file, an
S3 object uploaded without ``ChecksumAlgorithm=SHA256`` or in parts), only
reading the whole file proves it. That costs the file's size in bytes read,
so the check says what it will read before it reads, and keeps every hash in
the ``mirror`` row (``mirror_sha256``, ``source_sha256``) with what keys it:
the file's size and its modification time, ETag or version id. A later night
takes the hash of a file its listing shows unchanged instead of reading it
again.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from fsspec.core import url_to_fs

from gguf_audit.errors import describe_exception
from gguf_audit.io.options import options_for
from gguf_audit.tables.listed import ListedFile

__all__ = [
    "HASH_CHUNK_BYTES",
    "Hashed",
    "MirrorHead",
    "hash_whole",
    "read_head",
    "s3_checksum",
    "stored_sha256",
    "unchanged",
]

HASH_CHUNK_BYTES: Final = 8 << 20
"""Bytes asked for at once while hashing (one ranged GET each on a remote store)."""
_LOCAL: Final = frozenset({"file", "local"})


@dataclass(frozen=True, slots=True)
class Hashed:
    """A whole file's SHA-256 (None with :attr:`error` when it could not be read) and what reading it cost."""

    sha256: str | None
    bytes_read: int
    requests: int
    seconds: float
    error: str | None = None


def hash_whole(listed: ListedFile, storage_options: Mapping[str, Any]) -> Hashed:
    """Read ``listed`` from its first byte to its last and hash it; a failure is a value, never raised."""
    begun = time.perf_counter()
    url = listed.source_url
    digest = hashlib.sha256()
    n_bytes = requests = 0
    try:
        fs, path = url_to_fs(url, **options_for(url, storage_options))
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        remote = protocol not in _LOCAL
        # Remote: no read-ahead cache, so each read is one ranged GET of exactly the chunk.
        kwargs: dict[str, Any] = {"block_size": HASH_CHUNK_BYTES, "cache_type": "none"} if remote else {}
        # s3fs HEADs the object first and pins its reads to that answer (its ETag): one request more.
        requests = int(protocol in ("s3", "s3a"))
        with fs.open(path, "rb", **kwargs) as f:
            while chunk := f.read(HASH_CHUNK_BYTES):
                digest.update(chunk)
                n_bytes += len(chunk)
                requests += int(remote)
    except Exception as exc:  # noqa: BLE001 - one file's failure is its row's, never the night's
        return Hashed(None, n_bytes, requests, time.perf_counter() - begun, describe_exception(exc))
    if listed.size is not None and n_bytes != listed.size:
        why = f"read {n_bytes} bytes where the listing said {listed.size}: it changed while hashed"
        return Hashed(None, n_bytes, requests, time.perf_counter() - begun, why)
    return Hashed(digest.hexdigest(), n_bytes, requests, time.perf_counter() - begun)


def unchanged(now: ListedFile | None, prev: Mapping[str, Any], side: str) -> bool:
    """Whether ``side`` (``mirror`` or ``source``) of a base night's row shows the same file as ``now``.

    Absent both times counts as unchanged. The size must match and so must the
    strongest identity both listings have (sha256, version id, ETag, mtime):
    :meth:`ListedFile.unchanged_since`.
    """
    url = prev.get(f"{side}_url")
    if now is None:
        return url is None
    if url is None or now.url != url:
        return False
    before = ListedFile(
        str(url),
        prev.get(f"{side}_size"),
        etag=prev.get(f"{side}_etag"),
        version_id=prev.get(f"{side}_version_id"),
        mtime=prev.get(f"{side}_mtime"),
        # The mirror's sha256 is the checksum its HEAD (or a hash) gave, never the listing's: not an identity.
        sha256=prev.get("source_sha256") if side == "source" else None,
    )
    return now.unchanged_since(before)


def stored_sha256(now: ListedFile | None, prev: Mapping[str, Any] | None, side: str) -> str | None:
    """The whole-file SHA-256 a base night kept for ``side`` when the file is unchanged since; else None."""
    if now is None or prev is None or not prev.get(f"{side}_sha256"):
        return None
    return str(prev[f"{side}_sha256"]) if unchanged(now, prev, side) else None


@dataclass(frozen=True, slots=True)
class MirrorHead:
    sha256: str | None
    no_sha256: str | None
    revision: str | None
    error: str | None = None


def s3_checksum(head: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """The hex full-object SHA-256 a HeadObject answer carries, or None and why it has none.

    A multipart upload's SHA-256 is composite (a digest of the parts' digests:
    ``...-N``, ``ChecksumType: COMPOSITE``; S3 computes SHA-256 full-object
    only for single-part uploads), so a checksum is taken only when S3 says
    ``FULL_OBJECT``, or says nothing and neither it nor the ETag has a part count.
    """
    value = head.get("ChecksumSHA256")
    if not value:
        others = sorted(k.removeprefix("Checksum") for k in head if k.startswith("Checksum") and k != "ChecksumType")
        kept = f"it keeps {', '.join(others)}" if others else "it keeps no checksum"
        return None, f"{kept}; its ETag is an MD5 or a multipart digest, not comparable with a sha256"
    kind = head.get("ChecksumType")
    etag = str(head.get("ETag") or "").strip('"')
    if kind == "COMPOSITE" or (kind != "FULL_OBJECT" and ("-" in str(value) or "-" in etag)):
        return None, "its SHA-256 checksum is a multipart upload's composite one, not the object's digest"
    try:
        return base64.b64decode(str(value), validate=True).hex(), None
    except (binascii.Error, ValueError):
        return None, f"its x-amz-checksum-sha256 is not base64. Got {str(value)[:60]!r}."


def read_head(url: str, options: Mapping[str, Any], revision_key: str) -> MirrorHead:
    """One HEAD of an S3 object asking for its checksums; other stores: nothing to ask (no request)."""
    if not url.startswith(("s3://", "s3a://")):
        return MirrorHead(None, "the mirror's store keeps no sha256 checksum", None)
    try:
        fs, path = url_to_fs(url, **options)
        bucket, key, version = fs.split_path(path)
        extra = {"VersionId": version} if version else {}
        head = fs.call_s3("head_object", Bucket=bucket, Key=key, ChecksumMode="ENABLED", **extra)
    except Exception as exc:  # noqa: BLE001 - one object's failure is its row's, never the night's
        return MirrorHead(None, None, None, error=f"HEAD failed: {describe_exception(exc)}")
    sha256, why = s3_checksum(head)
    metadata = {str(k).lower(): str(v) for k, v in (head.get("Metadata") or {}).items()}
    return MirrorHead(sha256, why, metadata.get(revision_key.lower()) or None)
