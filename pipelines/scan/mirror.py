"""The mirror check of a night: the scan's root against the source it copies, one ``mirror`` row per path.

With ``[mirror] source`` (``--source``), a scan of one root (the mirror)
also lists the source with the listing every root gets (``hf://ORG``: one
model listing with ``expand`` and a tree per repository, giving sha256, size
and revision; ``s3://``: one LIST per 1,000 keys), maps each mirror path to
its source path (``mirror_prefix`` replaced by ``source_prefix``) and judges
every path either side lists (:func:`gguf_audit.checks.mirror.judge_pair`).

What it costs, per path:

- unchanged since the base night on both sides (the listings' size and
  sha256, version id or ETag, :meth:`ListedFile.unchanged_since`) on an
  incremental night: nothing; the base night's row is carried (``reused``);
- otherwise, an S3 mirror object: one HEAD with ``ChecksumMode=ENABLED``,
  which gives its full-object ``x-amz-checksum-sha256`` where S3 keeps one and
  its metadata (the source revision it was copied at, ``x-amz-meta-<revision_key>``);
- where the checksums cannot decide (sizes equal, no sha256 on one side): the
  weights and metadata fingerprints, the mirror's from this night's ``files``
  rows (the scan already read it), the source's from an audit of the source
  file's header and samples with the same plan.

The copied revision, when no metadata records it, is the one the base night
found the same unchanged copy faithful at: a copy that stays while its source
moves on is then ``stale``.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any, Final

import pyarrow.parquet as pq
from fsspec.core import url_to_fs

from gguf_audit.audit import AuditConfig, AuditTarget, audit_file
from gguf_audit.checks.mirror import MirrorSide, MirrorStatus, MirrorVerdict, judge_pair, map_path
from gguf_audit.decode.fingerprints import metadata_fingerprint
from gguf_audit.errors import describe_exception
from gguf_audit.io.hub import parse_hf_url
from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.listing.discover import DiscoveryError, Listing, discover, options_for
from gguf_audit.pipelines.listing.hub import KnownRepo
from gguf_audit.pipelines.store.output import Output
from gguf_audit.pipelines.store.parts import PartFile, RunParts
from gguf_audit.redact import redact_url
from gguf_audit.tables.listed import ListedFile
from gguf_audit.tables.schema import rows_to_table

__all__ = [
    "MirrorCost",
    "MirrorError",
    "MirrorHead",
    "SourceFingerprints",
    "check_mirror",
    "check_mirror_config",
    "read_head",
    "s3_checksum",
    "source_fingerprints",
]

log = logging.getLogger(__name__)

SOURCE_THREADS: Final = 8
"""Source files audited at once for their fingerprints (reads of headers and samples)."""
HEAD_THREADS: Final = 16
"""Mirror objects asked for their checksum and metadata at once."""


class MirrorError(DiscoveryError):
    """The mirror check cannot run as configured (not exactly one root); the night does not start."""


def check_mirror_config(config: ScanConfig) -> None:
    """Raise :class:`MirrorError` unless a mirror check, when asked for, has one root to check (and no manifest)."""
    if not config.mirror.source:
        return
    if len(config.scan.roots) != 1 or config.scan.manifests:
        raise MirrorError(
            f"a mirror check (--source {config.mirror.source!r}) needs exactly one root, the mirror, and no "
            f"manifest. Got {len(config.scan.roots)} roots and {len(config.scan.manifests)} manifests."
        )


@dataclass(slots=True)
class MirrorCost:
    """What the mirror check cost this night, by side."""

    source_listing_requests: int | None = None
    heads: int = 0
    source_requests: int = 0
    source_bytes: int = 0
    seconds: float = 0.0
    statuses: dict[str, int] = field(default_factory=dict)


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


def _root_prefix(root: str, options: Mapping[str, Any]) -> str:
    """What the listing's URLs under ``root`` start with."""
    if "://" in root and not root.startswith("file://"):
        return root.rstrip("/") + "/"
    fs, path = url_to_fs(root, **options)
    return str(fs.unstrip_protocol(path.rstrip("/"))) + "/"


def _rel(url: str, prefix: str) -> str | None:
    return url[len(prefix) :] if url.startswith(prefix) else None


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


@dataclass(frozen=True, slots=True)
class SourceFingerprints:
    weights: str | None
    metadata: str | None
    requests: int
    bytes_read: int
    error: str | None


def source_fingerprints(listed: ListedFile, options: Mapping[str, Any], audit: AuditConfig) -> SourceFingerprints:
    """The source file's weights and metadata fingerprints from its header and samples, with what it cost."""
    target = AuditTarget(
        listed.source_url,
        storage_options=options_for(listed.source_url, options),
        size=listed.size,
        revision=listed.revision,
        display_url=listed.url,
    )
    result = audit_file(target, config=audit)
    if result.header is None:
        failed = result.findings[0].message if result.findings else "unreadable"
        return SourceFingerprints(None, None, result.io.requests, result.io.bytes_read, failed)
    error = None if result.weights_fingerprint is not None else "a sampled block could not be read"
    return SourceFingerprints(
        result.weights_fingerprint,
        metadata_fingerprint(result.header),
        result.io.requests,
        result.io.bytes_read,
        error,
    )


def _night_fingerprints(out: Output, parts: Sequence[PartFile], urls: set[str]) -> dict[str, tuple[Any, Any]]:
    """``url -> (weights, metadata)`` fingerprints of this night's ``files`` rows (read and reused), for ``urls``."""
    found: dict[str, tuple[Any, Any]] = {}
    if not urls:
        return found
    wanted = ("weights_fingerprint", "metadata_fingerprint")
    for part in parts:
        path = out.path("files", part.path)
        # A data file leaves out the columns null on all its rows (pipelines.layout): those are None here.
        names = set(pq.read_schema(path, filesystem=out.fs).names)
        rows = pq.read_table(path, columns=["url", *(c for c in wanted if c in names)], filesystem=out.fs)
        listed = rows.column("url").to_pylist()
        columns = [rows.column(c).to_pylist() if c in names else [None] * len(listed) for c in wanted]
        for url, weights, metadata in zip(listed, *columns, strict=True):
            if url in urls:
                found[str(url)] = (weights, metadata)
    return found


def _previous(out: Output, base_run_id: str | None) -> dict[str, dict[str, Any]]:
    if base_run_id is None or out.delta.open("mirror") is None:
        return {}
    return {str(r["path"]): r for r in out.read("mirror", [base_run_id]).to_pylist()}


def _unchanged(now: ListedFile | None, url: Any, size: Any, version_id: Any, sha256: Any, etag: Any) -> bool:
    """Whether a side shows the same thing as the base night's row did (absent both times counts)."""
    if now is None:
        return url is None
    if url is None or now.url != url:
        return False
    return now.unchanged_since(ListedFile(str(url), size, etag, version_id, None, sha256))


def _carry(prev: Mapping[str, Any], mirror: ListedFile | None, source: ListedFile | None) -> bool:
    """A pair whose both sides are what the base night judged: its row is carried, nothing is asked."""
    if str(prev["status"]) == MirrorStatus.UNDECIDED:
        return False  # asked again: a read may have failed
    return _unchanged(
        mirror, prev["mirror_url"], prev["mirror_size"], prev["mirror_version_id"], None, prev["mirror_etag"]
    ) and _unchanged(
        source, prev["source_url"], prev["source_size"], prev["source_version_id"], prev["source_sha256"], None
    )


def _copied_revision(prev: Mapping[str, Any] | None, mirror: ListedFile) -> str | None:
    """The source revision the base night found this same copy faithful at (or recorded for it)."""
    if prev is None or not _unchanged(
        mirror, prev["mirror_url"], prev["mirror_size"], prev["mirror_version_id"], None, prev["mirror_etag"]
    ):
        return None
    if prev["mirror_revision"]:
        return str(prev["mirror_revision"])
    return str(prev["source_revision"]) if prev["status"] == MirrorStatus.FAITHFUL and prev["source_revision"] else None


def _pairs(
    config: ScanConfig, mirror: Listing, source: Listing
) -> tuple[dict[str, tuple[ListedFile | None, ListedFile | None]], dict[str, str]]:
    """Every path either side lists (the source's path), with each side's entry; and the source's parts
    that could not be listed (a repository: its path with a ``/``), with why."""
    mirror_prefix = _root_prefix(config.scan.roots[0], options_for(config.scan.roots[0], config.storage_options))
    source_prefix = _root_prefix(config.mirror.source, options_for(config.mirror.source, config.storage_options))
    pairs: dict[str, tuple[ListedFile | None, ListedFile | None]] = {}
    failed: dict[str, str] = {}
    for listed in source.files:
        if listed.error_code is not None:
            # A repository that could not be listed (the root itself, or one of an organisation's): its URL
            # names a folder, so every path under it is undecided, never missing or extra.
            folder = _rel(listed.url.rstrip("/") + "/", source_prefix)
            if folder is not None:
                failed[folder] = f"{listed.error_code}: {listed.error_message or 'not listed'}"
            continue
        rel = _rel(listed.url, source_prefix)
        if rel is not None and rel.startswith(config.mirror.source_prefix):
            pairs[rel] = (None, listed)
    for listed in mirror.files:
        rel = _rel(listed.url, mirror_prefix)
        path = map_path(rel, config.mirror.mirror_prefix, config.mirror.source_prefix) if rel is not None else None
        if path is not None:
            pairs[path] = (listed, pairs.get(path, (None, None))[1])
    return dict(sorted(pairs.items())), failed


def _failed(path: str, failed: Mapping[str, str]) -> str | None:
    """Why the source part holding ``path`` could not be listed, or None (it was)."""
    return next((why for prefix, why in failed.items() if path.startswith(prefix)), None)


_SAME_LISTING: Final = ("include", "exclude", "source", "source_prefix")
"""Settings the base night must share for its rows to stand for a repository's listing."""


def _known_repos(out: Output, base_run_id: str | None, config: ScanConfig, previous: Mapping[str, Any]) -> KnownRepo:
    """The source files the base night's rows name, by ``(repository, commit)``: a repository at the same
    commit has the same tree, so it is not listed again. Nothing is known when the base night listed with
    other globs or another source, or when a path of the repository was undecided (its listing may have failed).
    """
    by_repo: dict[tuple[str, str], list[ListedFile]] = {}
    if base_run_id is None or not previous:
        return lambda repo_id, sha: None
    [run] = out.read("runs", [base_run_id], columns=["config"]).to_pylist() or [{"config": "{}"}]
    recorded = json.loads(run["config"] or "{}")
    public = config.public()
    if any(recorded.get(k) != public.get(k) for k in _SAME_LISTING):
        return lambda repo_id, sha: None
    spoilt: set[tuple[str, str]] = set()
    for row in previous.values():
        url, sha = row["source_url"], row["source_revision"]
        if not url or not sha or not str(url).startswith("hf://"):
            continue
        try:
            repo_id = str(parse_hf_url(str(url)).repo_id)
        except ValueError:
            continue
        key = (repo_id, str(sha))
        if row["status"] == MirrorStatus.UNDECIDED:
            spoilt.add(key)
        listed = ListedFile(
            str(url),
            row["source_size"],
            version_id=row["source_version_id"],
            sha256=row["source_sha256"],
            revision=str(sha),
        )
        by_repo.setdefault(key, []).append(listed)
    for key in spoilt:
        by_repo.pop(key, None)
    return lambda repo_id, sha: by_repo.get((repo_id, sha))


def _listed_source(config: ScanConfig, known: KnownRepo) -> tuple[Listing | None, str | None]:
    try:
        listing = discover(
            (config.mirror.source,),
            include=config.scan.include,
            exclude=config.scan.exclude,
            storage_options=config.storage_options,
            known=known,
        )
    except DiscoveryError as exc:
        log.warning("mirror: %s", exc)
        return None, str(exc)
    root = redact_url(config.mirror.source).rstrip("/")
    if [redact_url(f.url).rstrip("/") for f in listing.files if f.error_code is None] == [root]:
        return None, "it names one file, not a folder, bucket prefix or hf:// organisation of copies"
    return listing, None


def _row(
    verdict: MirrorVerdict,
    mirror: ListedFile | None,
    source: ListedFile | None,
    sides: tuple[MirrorSide | None, MirrorSide | None],
    cost: tuple[int, int],
    run_id: str,
) -> dict[str, Any]:
    m, s = sides
    return {
        "path": verdict.path,
        "status": verdict.status.value,
        "evidence": verdict.evidence.value,
        "code": verdict.code,
        "severity": None if verdict.severity is None else verdict.severity.value,
        "message": verdict.message,
        "mirror_url": None if mirror is None else mirror.url,
        "source_url": None if source is None else source.url,
        "mirror_size": None if mirror is None else mirror.size,
        "source_size": None if source is None else source.size,
        "mirror_etag": None if mirror is None else mirror.etag,
        "mirror_version_id": None if mirror is None else mirror.version_id,
        "mirror_sha256": None if m is None else m.sha256,
        "mirror_revision": None if m is None else m.revision,
        "source_sha256": None if source is None else source.sha256,
        "source_version_id": None if source is None else source.version_id,
        "source_revision": None if source is None else source.revision,
        "mirror_weights_fingerprint": None if m is None else m.weights_fingerprint,
        "source_weights_fingerprint": None if s is None else s.weights_fingerprint,
        "requests": cost[0],
        "bytes_read": cost[1],
        "reused": False,
        "judged_run_id": run_id,
    }


def check_mirror(
    config: ScanConfig,
    out: Output,
    run_id: str,
    mirror: Listing,
    files_parts: Sequence[PartFile],
    base_run_id: str | None,
) -> tuple[tuple[PartFile, ...], MirrorCost]:
    """Judge every path of the mirror and its source; this night's ``mirror`` data files and the cost."""
    begun = time.perf_counter()
    cost = MirrorCost()
    previous = _previous(out, base_run_id)
    source, source_error = _listed_source(config, _known_repos(out, base_run_id, config, previous))
    cost.source_listing_requests = None if source is None else source.requests
    pairs, failed = _pairs(config, mirror, source or Listing((), 0.0))
    if source_error is not None:
        failed[""] = f"the source could not be listed ({source_error})"
    elif source is not None and not source.files and mirror.files:
        # Nothing to hold the copies against: a wrong --source or a store that lists nothing, never "all extra".
        failed[""] = f"the source lists no file under {redact_url(config.mirror.source)!r}"
    rows: list[dict[str, Any]] = []
    to_judge: list[str] = []
    for path, (m, s) in pairs.items():
        prev = previous.get(path)
        if not _failed(path, failed) and prev is not None and _carry(prev, m, s):
            # The same bytes on both sides; the source's commit may have moved (another file changed).
            revision = prev["source_revision"] if s is None else s.revision
            rows.append({**prev, "source_revision": revision, "requests": 0, "bytes_read": 0, "reused": True})
        else:
            to_judge.append(path)
    rows.extend(_judge(config, out, run_id, {p: pairs[p] for p in to_judge}, previous, files_parts, failed, cost))
    rows.sort(key=lambda r: str(r["path"]))
    for row in rows:
        row.pop("run_id", None)
        cost.statuses[str(row["status"])] = cost.statuses.get(str(row["status"]), 0) + 1
    writer = RunParts(out.url, out.fsspec_options, run_id, "driver-mirror", ("mirror",))
    try:
        if rows:
            writer.write("mirror", rows_to_table("mirror", rows))
        parts = writer.close()
    except BaseException:
        writer.abort()
        raise
    cost.seconds = time.perf_counter() - begun
    return parts, cost


def _heads(
    config: ScanConfig, pairs: Mapping[str, tuple[ListedFile | None, ListedFile | None]]
) -> dict[str, MirrorHead]:
    """A HEAD per mirror object judged (S3 only; other stores keep no checksum to ask for)."""
    present = [(p, m) for p, (m, _) in pairs.items() if m is not None]

    def one(item: tuple[str, ListedFile]) -> MirrorHead:
        url = item[1].source_url
        return read_head(url, options_for(url, config.storage_options), config.mirror.revision_key)

    with ThreadPoolExecutor(HEAD_THREADS, thread_name_prefix="gguf-audit-mirror-head") as pool:
        return dict(zip([p for p, _ in present], pool.map(one, present), strict=True))


def _is_s3(listed: ListedFile | None) -> bool:
    return listed is not None and listed.url.startswith(("s3://", "s3a://"))


def _judge(
    config: ScanConfig,
    out: Output,
    run_id: str,
    pairs: Mapping[str, tuple[ListedFile | None, ListedFile | None]],
    previous: Mapping[str, Mapping[str, Any]],
    files_parts: Sequence[PartFile],
    failed: Mapping[str, str],
    cost: MirrorCost,
) -> list[dict[str, Any]]:
    """The rows of the pairs judged this night: a HEAD per mirror object, fingerprints where checksums fall short."""
    heads = _heads(config, pairs)
    cost.heads = sum(1 for m, _ in pairs.values() if _is_s3(m))
    sides: dict[str, tuple[MirrorSide | None, MirrorSide | None]] = {}
    verdicts: dict[str, MirrorVerdict] = {}
    # Sizes equal and no checksum decided: the fingerprints, the source's read from its header and samples.
    undecided: dict[str, tuple[ListedFile, ListedFile, MirrorSide, MirrorSide]] = {}
    for path, (m, s) in pairs.items():
        head = heads.get(path)
        mside = None
        if m is not None and head is not None:
            revision = head.revision or _copied_revision(previous.get(path), m)
            mside = MirrorSide(m.url, m.size, head.sha256, revision, no_sha256=head.no_sha256, error=head.error)
        sside = None if s is None else MirrorSide(s.url, s.size, s.sha256, s.revision)
        reason = _failed(path, failed)
        if sside is None and m is not None and reason is not None:
            sside = MirrorSide(url=path, error=reason)
        sides[path] = (mside, sside)
        verdicts[path] = judge_pair(path, mside, sside)
        if (
            verdicts[path].status is MirrorStatus.UNDECIDED
            and config.checks.samples
            and m is not None
            and s is not None
            and mside is not None
            and sside is not None
            and mside.error is None
        ):
            undecided[path] = (m, s, mside, sside)
    mirror_fps = _night_fingerprints(out, files_parts, {m.url for m, _, _, _ in undecided.values()})
    audit = AuditConfig(read=config.io.read, samples=config.audit_config.samples, semantics=False, templates=False)

    def fingerprints(item: tuple[ListedFile, ListedFile, MirrorSide, MirrorSide]) -> SourceFingerprints:
        return source_fingerprints(item[1], config.storage_options, audit)

    with ThreadPoolExecutor(SOURCE_THREADS, thread_name_prefix="gguf-audit-mirror-source") as pool:
        computed = dict(zip(undecided, pool.map(fingerprints, undecided.values()), strict=True))
    spent: dict[str, tuple[int, int]] = {}
    for path, (m, _, mside, sside) in undecided.items():
        found = computed[path]
        spent[path] = (found.requests, found.bytes_read)
        cost.source_requests += found.requests
        cost.source_bytes += found.bytes_read
        weights, metadata = mirror_fps.get(m.url, (None, None))
        mside = replace(mside, weights_fingerprint=weights, metadata_fingerprint=metadata)
        sside = replace(sside, weights_fingerprint=found.weights, metadata_fingerprint=found.metadata)
        if found.error is not None:
            sside = replace(sside, error=f"reading its header and samples failed: {found.error}")
        sides[path] = (mside, sside)
        verdicts[path] = judge_pair(path, mside, sside)
    rows = []
    for path, (m, s) in pairs.items():
        requests, nbytes = spent.get(path, (0, 0))
        rows.append(_row(verdicts[path], m, s, sides[path], (int(_is_s3(m)) + requests, nbytes), run_id))
    return rows
