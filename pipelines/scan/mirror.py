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
- a side whose file is unchanged since a night that hashed it (or HEADed its
  checksum): that hash, from the base night's row, with nothing read;
- where the checksums cannot decide (sizes equal, no sha256 on one side), with
  ``verify = "full"`` (``--verify full``): each side without a hash read whole
  and hashed (:mod:`~gguf_audit.pipelines.scan.mirror_verify`), the bytes it
  will read logged first; otherwise the weights and metadata fingerprints, the
  mirror's from this night's ``files`` rows (the scan already read it), the
  source's from an audit of the source file's header and samples with the same
  plan: equal ones make a ``sampled_match``, never ``faithful``.

The copied revision, when no metadata records it, is the one the base night
found the same unchanged copy faithful at: a copy that stays while its source
moves on is then ``stale``.
"""

from __future__ import annotations

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
from gguf_audit.checks.mirror import Evidence, MirrorSide, MirrorStatus, MirrorVerdict, judge_pair, map_path
from gguf_audit.decode.fingerprints import metadata_fingerprint
from gguf_audit.io.hub import parse_hf_url
from gguf_audit.io.options import options_for
from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.listing import DiscoveryError, KnownRepo, Listing, discover
from gguf_audit.pipelines.scan.mirror_verify import (
    Hashed,
    MirrorHead,
    hash_whole,
    read_head,
    s3_checksum,
    stored_sha256,
    unchanged,
)
from gguf_audit.pipelines.store import Output, PartFile, RunParts
from gguf_audit.redact import redact_url
from gguf_audit.tables.listed import ListedFile, ListedFiles
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
    hashed_files: int = 0
    hashed_bytes: int = 0
    """Bytes read whole to hash files (``--verify full``), both sides."""
    seconds: float = 0.0
    statuses: dict[str, int] = field(default_factory=dict)


def _root_prefix(root: str, options: Mapping[str, Any]) -> str:
    """What the listing's URLs under ``root`` start with."""
    if "://" in root and not root.startswith("file://"):
        return root.rstrip("/") + "/"
    fs, path = url_to_fs(root, **options)
    return str(fs.unstrip_protocol(path.rstrip("/"))) + "/"


def _rel(url: str, prefix: str) -> str | None:
    return url[len(prefix) :] if url.startswith(prefix) else None


@dataclass(frozen=True, slots=True)
class SourceFingerprints:
    weights: str | None
    metadata: str | None
    requests: int
    bytes_read: int
    error: str | None
    sampled_bytes: int | None = None
    data_bytes: int | None = None


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
    size = result.size if result.size is not None else listed.size
    return SourceFingerprints(
        result.weights_fingerprint,
        metadata_fingerprint(result.header),
        result.io.requests,
        result.io.bytes_read,
        error,
        # The weights fingerprint hashes each tensor's first block the plan read, no other sampled block.
        sum(r.n_bytes for r in result.samples if r.block_index == 0),
        None if size is None else max(0, size - result.header.data_offset),
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
    """The base night's rows by path; a row an earlier version called faithful on sampled blocks is what it
    proved, ``sampled_match``."""
    if base_run_id is None or out.delta.open("mirror") is None:
        return {}
    rows = {str(r["path"]): r for r in out.read("mirror", [base_run_id]).to_pylist()}
    for row in rows.values():
        if row["status"] == MirrorStatus.FAITHFUL and row["evidence"] == Evidence.FINGERPRINT:
            row["status"] = MirrorStatus.SAMPLED_MATCH.value
    return rows


def _carry(prev: Mapping[str, Any], mirror: ListedFile | None, source: ListedFile | None, verify: str) -> bool:
    """A pair whose both sides are what the base night judged: its row is carried, nothing is asked."""
    if str(prev["status"]) == MirrorStatus.UNDECIDED:
        return False  # asked again: a read may have failed
    if verify == "full" and str(prev["status"]) == MirrorStatus.SAMPLED_MATCH:
        return False  # hashed this night: a sampled match is not what --verify full asks for
    return unchanged(mirror, prev, "mirror") and unchanged(source, prev, "source")


_MATCHED: Final = (MirrorStatus.FAITHFUL, MirrorStatus.SAMPLED_MATCH)


def _copied_revision(prev: Mapping[str, Any] | None, mirror: ListedFile) -> str | None:
    """The source revision the base night found this same copy matching at (or recorded for it)."""
    if prev is None or not unchanged(mirror, prev, "mirror"):
        return None
    if prev["mirror_revision"]:
        return str(prev["mirror_revision"])
    return str(prev["source_revision"]) if prev["status"] in _MATCHED and prev["source_revision"] else None


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
        "source_version_id": None if source is None else source.version_id,
        "source_revision": None if source is None else source.revision,
        "mirror_weights_fingerprint": None if m is None else m.weights_fingerprint,
        "source_weights_fingerprint": None if s is None else s.weights_fingerprint,
        "requests": cost[0],
        "bytes_read": cost[1],
        "reused": False,
        "judged_run_id": run_id,
        "mirror_mtime": None if mirror is None else mirror.mtime,
        "source_mtime": None if source is None else source.mtime,
        "source_etag": None if source is None else source.etag,
        "source_sha256": None if s is None else s.sha256,
        "sampled_bytes": None if s is None else s.sampled_bytes,
        "data_bytes": None if s is None else s.data_bytes,
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
    pairs, failed = _pairs(config, mirror, source or Listing(ListedFiles(), 0.0))
    if source_error is not None:
        failed[""] = f"the source could not be listed ({source_error})"
    elif source is not None and not source.files and mirror.files:
        # Nothing to hold the copies against: a wrong --source or a store that lists nothing, never "all extra".
        failed[""] = f"the source lists no file under {redact_url(config.mirror.source)!r}"
    rows: list[dict[str, Any]] = []
    to_judge: list[str] = []
    for path, (m, s) in pairs.items():
        prev = previous.get(path)
        if not _failed(path, failed) and prev is not None and _carry(prev, m, s, config.mirror.verify):
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


_Open = tuple[ListedFile, ListedFile, MirrorSide, MirrorSide]
"""A pair the checksums left open: its two listed files and their sides so far."""


def _sides(
    path: str,
    pair: tuple[ListedFile | None, ListedFile | None],
    head: MirrorHead | None,
    prev: Mapping[str, Any] | None,
    failed: Mapping[str, str],
) -> tuple[MirrorSide | None, MirrorSide | None]:
    """What the listings, the HEAD and the base night's stored hashes say of each side."""
    m, s = pair
    mside = None
    if m is not None and head is not None:
        revision = head.revision or _copied_revision(prev, m)
        sha256, origin = head.sha256, "x-amz-checksum-sha256"
        if sha256 is None and (sha256 := stored_sha256(m, prev, "mirror")) is not None:
            origin = "hashed on an earlier night, unchanged since"
        mside = MirrorSide(
            m.url, m.size, sha256, revision, no_sha256=head.no_sha256, error=head.error, sha256_from=origin
        )
    sside = None
    if s is not None:
        listed_as = "the Hub's LFS sha256" if s.url.startswith("hf://") else "the source listing's sha256"
        sha256, origin = s.sha256, listed_as
        if sha256 is None and (sha256 := stored_sha256(s, prev, "source")) is not None:
            origin = "hashed on an earlier night, unchanged since"
        sside = MirrorSide(s.url, s.size, sha256, s.revision, sha256_from=origin)
    reason = _failed(path, failed)
    if sside is None and m is not None and reason is not None:
        sside = MirrorSide(url=path, error=reason)
    return mside, sside


def _hash_open(
    config: ScanConfig, open_: Mapping[str, _Open], cost: MirrorCost, spent: dict[str, tuple[int, int]]
) -> dict[str, tuple[MirrorSide, MirrorSide]]:
    """``--verify full``: each open pair's sides without a hash, read whole and hashed; the sides now."""
    todo = [
        (path, side, listed)
        for path, (m, s, ms, ss) in open_.items()
        for side, listed, known in (("mirror", m, ms), ("source", s, ss))
        if known.sha256 is None
    ]
    planned = sum(listed.size or 0 for _, _, listed in todo)
    if todo:
        log.warning(
            "mirror: --verify full reads %d whole files to hash them, %d bytes (no checksum proves them)",
            len(todo),
            planned,
        )

    def one(item: tuple[str, str, ListedFile]) -> Hashed:
        return hash_whole(item[2], config.storage_options)

    with ThreadPoolExecutor(SOURCE_THREADS, thread_name_prefix="gguf-audit-mirror-hash") as pool:
        hashed = list(pool.map(one, todo))
    sides = {path: (ms, ss) for path, (_, _, ms, ss) in open_.items()}
    for (path, side, _), done in zip(todo, hashed, strict=True):
        requests, nbytes = spent.get(path, (0, 0))
        spent[path] = (requests + done.requests, nbytes + done.bytes_read)
        cost.hashed_files += 1
        cost.hashed_bytes += done.bytes_read
        ms, ss = sides[path]
        which = ms if side == "mirror" else ss
        if done.sha256 is not None:
            which = replace(which, sha256=done.sha256, sha256_from=f"hashed: {done.bytes_read} bytes read")
        else:
            which = replace(which, error=f"hashing it failed: {done.error}")
        sides[path] = (which, ss) if side == "mirror" else (ms, which)
    return sides


def _fingerprint_open(
    config: ScanConfig,
    out: Output,
    open_: Mapping[str, _Open],
    files_parts: Sequence[PartFile],
    cost: MirrorCost,
    spent: dict[str, tuple[int, int]],
) -> dict[str, tuple[MirrorSide, MirrorSide]]:
    """Each open pair's weights and metadata fingerprints: the mirror's from this night's rows, the source's
    read from its header and samples."""
    mirror_fps = _night_fingerprints(out, files_parts, {m.url for m, _, _, _ in open_.values()})
    audit = AuditConfig(read=config.io.read, samples=config.audit_config.samples, semantics=False, templates=False)

    def fingerprints(item: _Open) -> SourceFingerprints:
        return source_fingerprints(item[1], config.storage_options, audit)

    with ThreadPoolExecutor(SOURCE_THREADS, thread_name_prefix="gguf-audit-mirror-source") as pool:
        computed = dict(zip(open_, pool.map(fingerprints, open_.values()), strict=True))
    sides = {}
    for path, (m, _, mside, sside) in open_.items():
        found = computed[path]
        spent[path] = (found.requests, found.bytes_read)
        cost.source_requests += found.requests
        cost.source_bytes += found.bytes_read
        weights, metadata = mirror_fps.get(m.url, (None, None))
        mside = replace(mside, weights_fingerprint=weights, metadata_fingerprint=metadata)
        sside = replace(
            sside,
            weights_fingerprint=found.weights,
            metadata_fingerprint=found.metadata,
            sampled_bytes=found.sampled_bytes,
            data_bytes=found.data_bytes,
        )
        if found.error is not None:
            sside = replace(sside, error=f"reading its header and samples failed: {found.error}")
        sides[path] = (mside, sside)
    return sides


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
    """The rows of the pairs judged this night: a HEAD per mirror object, then hashes (``--verify full``) or
    fingerprints where the checksums fall short."""
    heads = _heads(config, pairs)
    cost.heads = sum(1 for m, _ in pairs.values() if _is_s3(m))
    sides = {p: _sides(p, pairs[p], heads.get(p), previous.get(p), failed) for p in pairs}
    verdicts = {p: judge_pair(p, *sides[p]) for p in pairs}
    # Sizes equal and no checksum decided: whole-file hashes, or the fingerprints.
    open_: dict[str, _Open] = {}
    for path, (m, s) in pairs.items():
        mside, sside = sides[path]
        if verdicts[path].status is not MirrorStatus.UNDECIDED or m is None or s is None:
            continue
        if mside is not None and sside is not None and mside.error is None and sside.error is None:
            open_[path] = (m, s, mside, sside)
    spent: dict[str, tuple[int, int]] = {}
    if config.mirror.verify == "full":
        sides.update(_hash_open(config, open_, cost, spent))
    elif config.checks.samples:
        sides.update(_fingerprint_open(config, out, open_, files_parts, cost, spent))
    for path in open_:
        verdicts[path] = judge_pair(path, *sides[path])
    rows = []
    for path, (m, s) in pairs.items():
        requests, nbytes = spent.get(path, (0, 0))
        rows.append(_row(verdicts[path], m, s, sides[path], (int(_is_s3(m)) + requests, nbytes), run_id))
    return rows
