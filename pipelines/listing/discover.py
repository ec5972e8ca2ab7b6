"""Discovery: which files a scan audits, and what the listing says about each.

Roots are fsspec URLs that can list (``s3://``, ``gs://``, ``hf://``,
``memory://``, ``file://`` and plain paths), filtered by include and exclude
globs; or manifests (text, CSV or Parquet lists of URLs) for HTTP servers that
cannot list. Every listed file keeps what its listing tells for free: size,
ETag or version id, modification time, and the LFS sha256 where the filesystem
gives it (``hf://`` does). The audit then needs no ``info`` call per file, and
an incremental run compares these facts with the last run's. ``hf://`` roots
(organisations, repositories at a revision) are listed through the Hub's API
and pinned to commit shas (:mod:`~gguf_audit.pipelines.listing.hub`).

An object store root is listed as one stream of keys: a flat, paginated
listing with no delimiter (S3 gives 1,000 keys a request), so the common
layout of one folder per model costs one request per 1,000 files, not one per
folder. An S3 root's keys are made into the listing's columns a page at a time
(:mod:`~gguf_audit.pipelines.listing.objects`), never all held as info dicts.
Only when that finds nothing is the root asked whether it is a file.
"""

from __future__ import annotations

import csv
import fnmatch
import io
import logging
import os
import posixpath
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from itertools import chain
from typing import Any, Final

import fsspec
import pyarrow.compute as pc
import pyarrow.parquet as pq
from fsspec.core import url_to_fs

from gguf_audit.errors import GGUFAuditError
from gguf_audit.format.shard_names import parse_shard_name
from gguf_audit.io.hub import hub_endpoint
from gguf_audit.io.options import options_for, url_protocol
from gguf_audit.pipelines.listing.counting import ListingRequests, counting
from gguf_audit.pipelines.listing.dirs import DirectoryDigests, DirectorySet
from gguf_audit.pipelines.listing.hub import KnownRepo, list_hub_root
from gguf_audit.pipelines.listing.local import Skipped, unaudited_files, walk_local
from gguf_audit.pipelines.listing.objects import KeyStream, StreamedFiles, s3_keys, streams_keys
from gguf_audit.redact import redact_text
from gguf_audit.tables.listed import ListedFile, ListedFiles, redaction_collisions

SAFETENSORS_SUFFIX: Final = ".safetensors"

log = logging.getLogger(__name__)

__all__ = [
    "DEFAULT_INCLUDE",
    "SAFETENSORS_SUFFIX",
    "DiscoveryError",
    "Listing",
    "Skipped",
    "discover",
    "listed_from_info",
    "read_manifest",
]

DEFAULT_INCLUDE: Final = ("*.gguf",)

_LOCAL_PROTOCOLS: Final = frozenset({"file", "local"})

_MANIFEST_SUFFIXES: Final = {".txt": "text", ".list": "text", ".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}


class DiscoveryError(GGUFAuditError, OSError):
    """A root or manifest cannot be listed or read; the run cannot start. Its message shows URLs redacted."""

    def __init__(self, message: str) -> None:
        super().__init__(redact_text(message))


@dataclass(frozen=True, slots=True)
class Listing:
    """Every file a scan covers, in a stable order, and what listing them cost."""

    files: ListedFiles
    """The files, as Arrow columns, in the listing's order."""
    seconds: float
    safetensors_dirs: frozenset[str] = frozenset()
    """Directories (URLs without a trailing slash) where the listing saw a ``*.safetensors`` file: full-precision
    sources for lineage, never audited as GGUF."""
    listed_dirs: DirectorySet = field(default_factory=DirectorySet)
    """Directories whose every file the root listings saw (the safetensors' among them): lineage needs no
    listing of its own for them. Asked of one at a time (digests: a folder per model is a directory a file)."""
    requests: int | None = None
    """Requests the listing sent (:mod:`~gguf_audit.pipelines.listing.counting`); None when a store was not counted."""
    skipped: tuple[Skipped, ...] = ()
    """Entries named, not given a row (a second path to a file or directory listed already); those that may hide
    a file are among :attr:`files` with their ``io.*`` code (:attr:`~.local.Skipped.code`)."""

    @property
    def total_bytes(self) -> int:
        """The listed sizes added up (files whose size the listing did not give count nothing)."""
        return self.files.total_size()

    @property
    def read_urls(self) -> dict[str, str]:
        """The URL to read each file from, by its (redacted) URL, for the files whose URL holds credentials."""
        return self.files.read_urls()

    @property
    def unsized(self) -> int:
        """Files whose size the listing did not give (manifests of plain URLs): learnt from the first read."""
        return self.files.unsized()


# --------------------------------------------------------------- listing facts


def _to_datetime(value: object) -> datetime | None:
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return datetime.fromtimestamp(float(value), tz=UTC)
    if isinstance(value, str) and value:
        try:
            parsed = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)
    return None


def _first_str(info: Mapping[str, Any], *keys: str) -> str | None:
    for key in keys:
        value = info.get(key)
        if value is not None and value != "":
            return str(value)
    return None


def listed_from_info(url: str, info: Mapping[str, Any]) -> ListedFile:
    """The facts one ``fs.info`` / ``fs.find(detail=True)`` entry gives about ``url``.

    s3fs gives ``ETag``, ``LastModified`` and (for versioned listings)
    ``VersionId``; gcsfs ``etag``, ``generation`` and ``updated``; huggingface_hub's
    ``HfFileSystem`` ``blob_id``, ``last_commit`` and, for LFS files, ``lfs.sha256``;
    local files ``mtime``; memory files ``created``.
    """
    size = info.get("size")
    lfs = info.get("lfs")
    sha256 = lfs.get("sha256") if isinstance(lfs, Mapping) else None
    last_commit = info.get("last_commit")
    commit_date = getattr(last_commit, "date", None) if last_commit is not None else None
    mtime = None
    for key in ("LastModified", "mtime", "updated", "last_modified", "created"):
        mtime = _to_datetime(info.get(key))
        if mtime is not None:
            break
    if mtime is None:
        mtime = _to_datetime(commit_date)
    return ListedFile(
        url=url,
        size=int(size) if isinstance(size, int | float) and not isinstance(size, bool) else None,
        etag=_first_str(info, "ETag", "etag", "e_tag"),
        version_id=_first_str(info, "VersionId", "version_id", "generation", "blob_id"),
        mtime=mtime,
        sha256=_first_str(info, "sha256") if sha256 is None else str(sha256),
    )


# ------------------------------------------------------------------- globs


def _matches(rel: str, patterns: Sequence[str]) -> bool:
    """Whether ``rel`` (a path relative to its root) matches any pattern.

    A pattern with a ``/`` matches the relative path (``*`` crosses folders,
    ``**/`` may match none), one without matches the file name.
    """
    name = rel.rsplit("/", 1)[-1]
    for pattern in patterns:
        if "/" in pattern:
            if fnmatch.fnmatchcase(rel, pattern) or fnmatch.fnmatchcase(rel, pattern.replace("**/", "")):
                return True
        elif fnmatch.fnmatchcase(name, pattern):
            return True
    return False


def _selected(rel: str, include: Sequence[str], exclude: Sequence[str]) -> bool:
    return _matches(rel, include) and not _matches(rel, exclude)


# ------------------------------------------------------------------- roots


def _find(fs: fsspec.AbstractFileSystem, path: str) -> dict[str, Mapping[str, Any]]:
    found = fs.find(path, detail=True, withdirs=False)
    return dict(found) if isinstance(found, Mapping) else {p: fs.info(p) for p in found}


def _list_hub(
    root: str,
    storage_options: Mapping[str, Any],
    include: Sequence[str],
    exclude: Sequence[str],
    requests: ListingRequests | None,
    known: KnownRepo | None,
) -> Iterable[ListedFile]:
    """An ``hf://`` root's files, listed through the Hub's API."""
    if requests is not None:
        requests.watch_hub(hub_endpoint(options_for(root, storage_options)))
    try:
        return list_hub_root(
            root,
            options_for(root, storage_options),
            lambda rel: _selected(rel, include, exclude) or rel.endswith(SAFETENSORS_SUFFIX),
            known,
        )
    except (OSError, ValueError) as exc:  # HubListingError, a malformed root, a token in the options
        raise DiscoveryError(f"cannot list root {root!r}: {exc}") from exc


def _list_root(
    root: str,
    storage_options: Mapping[str, Any],
    include: Sequence[str],
    exclude: Sequence[str],
    requests: ListingRequests | None = None,
    known: KnownRepo | None = None,
) -> tuple[Iterable[ListedFile], bool, tuple[Skipped, ...]]:
    """The files under ``root``, whether the listing saw every file of their directories (a directory
    root on a store that lists; not a single file, not HTTP), and the entries it skipped."""
    protocol = url_protocol(root)
    if protocol == "hf":
        return _list_hub(root, storage_options, include, exclude, requests, known), True, ()
    try:
        fs, path = url_to_fs(root, **options_for(root, storage_options))
    except (ImportError, ValueError, TypeError) as exc:
        raise DiscoveryError(f"cannot open root {root!r}: {type(exc).__name__}: {exc}") from exc
    if protocol in ("http", "https"):
        # HTTP cannot list: a URL root names one file (many belong in a manifest); no request is sent.
        return [ListedFile.at(root)], False, ()
    if requests is not None:
        requests.watch(fs)
    fs.invalidate_cache()  # a long-lived process must see objects changed since its last listing
    path = path.rstrip("/") or path
    try:
        if protocol in _LOCAL_PROTOCOLS or protocol == "memory":
            if fs.isfile(path):
                return _with_siblings(fs, path), False, ()
            if not fs.isdir(path):
                raise DiscoveryError(f"root {root!r} does not exist (or is empty)")
        if protocol in _LOCAL_PROTOCOLS:
            walk = walk_local(
                path,
                lambda rel: _selected(rel, include, exclude) or rel.endswith(SAFETENSORS_SUFFIX),
                fs.unstrip_protocol,
            )
            return walk.files, True, walk.skipped  # columns already, in URL order
        else:
            # One stream of keys first (the common case, a prefix); only an empty answer asks whether the
            # root names one object, which costs a request a directory root never pays.
            if streams_keys(fs):
                streamed = _streamed(fs, root, path, include, exclude)
                if streamed is not None:
                    return streamed, True, ()
                entries = {}
            else:
                try:
                    entries = _find(fs, path)
                except FileNotFoundError:  # no such bucket
                    entries = {}
            if not entries or set(entries) == {path}:
                if fs.isfile(path):
                    return _with_siblings(fs, path), False, ()
                raise DiscoveryError(f"root {root!r} does not exist (or is empty)")
    except DiscoveryError:
        raise
    except (OSError, ValueError) as exc:
        raise DiscoveryError(f"cannot list root {root!r}: {type(exc).__name__}: {exc}") from exc
    return _listed(fs, path, ((p, entries[p]) for p in sorted(entries)), include, exclude), True, ()


def _streamed(
    fs: fsspec.AbstractFileSystem, root: str, path: str, include: Sequence[str], exclude: Sequence[str]
) -> StreamedFiles | None:
    """The files under an S3 ``path`` the globs select, in the store's order; None when the listing's first page
    names no key (no such bucket or prefix: the root may name one object)."""
    seen = KeyStream()
    keys = s3_keys(fs, path, seen)
    try:
        first = next(keys, None)
    except FileNotFoundError:  # no such bucket
        return None
    if first is None:
        return None
    return StreamedFiles(_listing_errors(root, _listed(fs, path, chain([first], keys), include, exclude)), seen)


def _listing_errors(root: str, files: Iterator[ListedFile]) -> Iterator[ListedFile]:
    """``files``, a failure of the listing past its first page raised as the :class:`DiscoveryError` it is."""
    try:
        yield from files
    except (OSError, ValueError) as exc:
        raise DiscoveryError(f"cannot list root {root!r}: {type(exc).__name__}: {exc}") from exc


def _listed(
    fs: fsspec.AbstractFileSystem,
    path: str,
    entries: Iterable[tuple[str, Mapping[str, Any]]],
    include: Sequence[str],
    exclude: Sequence[str],
) -> Iterator[ListedFile]:
    """The files of ``entries`` (a root's listing, ``(path, info)`` in path order) the globs select, made one
    at a time (the caller keeps them as Arrow columns: a collection's worth never lives as Python objects at
    once)."""
    prefix = path.rstrip("/") + "/"
    for p, info in entries:
        if info.get("type", "file") != "file":
            continue
        rel = p[len(prefix) :] if p.startswith(prefix) else posixpath.basename(p)
        if _selected(rel, include, exclude) or rel.endswith(SAFETENSORS_SUFFIX):
            yield listed_from_info(fs.unstrip_protocol(p), info)


def _with_siblings(fs: fsspec.AbstractFileSystem, path: str) -> list[ListedFile]:
    """A root that names one file; when it is a shard (``-00001-of-00004``), the rest of its set beside it.

    A shard set is one model: auditing one shard alone would call the others
    missing. One listing of the file's directory finds them (a missing one is
    then a real ``shard.missing``).
    """
    shard = parse_shard_name(path)
    if shard is None:
        return [listed_from_info(fs.unstrip_protocol(path), fs.info(path))]
    siblings = {}
    for info in fs.ls(posixpath.dirname(path) or "/", detail=True):
        name = str(info["name"])
        if info.get("islink") and info.get("type") != "file":
            info = _followed(fs, name, info)  # a local listing reports a symlink as 'other'
        other = parse_shard_name(name)
        same_set = other is not None and (other.model_id, other.shard_count) == (shard.model_id, shard.shard_count)
        if info.get("type", "file") == "file" and same_set:
            siblings[name] = info
    siblings.setdefault(path, fs.info(path))
    return [listed_from_info(fs.unstrip_protocol(p), siblings[p]) for p in sorted(siblings)]


def _followed(fs: fsspec.AbstractFileSystem, path: str, info: Mapping[str, Any]) -> Mapping[str, Any]:
    """The info of what the symlink ``path`` points at (its own info when broken)."""
    try:
        return dict(fs.info(path))
    except OSError:
        return info


# --------------------------------------------------------------- manifests


def _manifest_kind(url: str) -> str:
    base = url.split("?", 1)[0].lower()
    for suffix, kind in _MANIFEST_SUFFIXES.items():
        if base.endswith(suffix):
            return kind
    return "text"


def _resolve(entry: str, manifest_url: str) -> str:
    """A manifest entry as a URL: absolute URLs and paths as they are, others relative to the manifest."""
    if "://" in entry:
        return entry
    if not entry.startswith("/"):
        where = manifest_url.split("#", 1)[0].split("?", 1)[0]  # a presigned query may hold '/'
        base = where.rsplit("/", 1)[0] if "/" in where else "."
        entry = f"{base}/{entry}"
    if "://" in entry:
        return entry
    # Local paths become file:// URLs, as a listed root's files do.
    return "file://" + os.path.abspath(entry)


def _opt_int(value: object) -> int | None:
    if value is None or value == "":
        return None
    try:
        return int(str(value))
    except ValueError:
        return None


def _opt_str(value: object) -> str | None:
    return None if value is None or value == "" else str(value)


def read_manifest(url: str, storage_options: Mapping[str, Any] | None = None) -> list[ListedFile]:
    """The files a manifest lists.

    A text manifest has one URL per line (blank lines and ``#`` comments
    skipped). A CSV manifest has a header row with a ``url`` column; a Parquet
    manifest a ``url`` column. Both may add ``size``, ``etag``, ``version_id``,
    ``mtime`` and ``sha256`` columns, which an incremental run needs to skip
    unchanged files (without them every file is read each run). Relative
    entries are resolved against the manifest's own location.
    """
    kind = _manifest_kind(url)
    try:
        fs, path = url_to_fs(url, **options_for(url, storage_options or {}))
        data = fs.cat_file(path)
    except (OSError, ValueError) as exc:
        raise DiscoveryError(f"cannot read manifest {url!r}: {type(exc).__name__}: {exc}") from exc
    rows: list[Mapping[str, Any]]
    if kind == "parquet":
        try:
            table = pq.read_table(io.BytesIO(data))
        except (OSError, ValueError) as exc:  # ArrowInvalid is a ValueError
            raise DiscoveryError(f"manifest {url!r} is not a readable Parquet file: {exc}") from exc
        if "url" not in table.column_names:
            raise DiscoveryError(f"Parquet manifest {url!r} has no 'url' column. Got {table.column_names!r}.")
        rows = table.to_pylist()
    elif kind == "csv":
        reader = csv.DictReader(io.StringIO(data.decode("utf-8-sig")))
        if reader.fieldnames is None or "url" not in reader.fieldnames:
            raise DiscoveryError(f"CSV manifest {url!r} has no 'url' column. Got {reader.fieldnames!r}.")
        rows = list(reader)
    else:
        rows = []
        for line in data.decode("utf-8-sig").splitlines():
            entry = line.strip()
            if entry and not entry.startswith("#"):
                rows.append({"url": entry})
    out = []
    for row in rows:
        entry = _opt_str(row.get("url"))
        if entry is None:
            continue
        out.append(
            ListedFile.at(
                _resolve(entry.strip(), url),
                size=_opt_int(row.get("size")),
                etag=_opt_str(row.get("etag")),
                version_id=_opt_str(row.get("version_id")),
                mtime=_to_datetime(row.get("mtime")),
                sha256=_opt_str(row.get("sha256")),
            )
        )
    return out


def discover(
    roots: Iterable[str],
    *,
    manifests: Iterable[str] = (),
    include: Sequence[str] = DEFAULT_INCLUDE,
    exclude: Sequence[str] = (),
    storage_options: Mapping[str, Any] | None = None,
    known: KnownRepo | None = None,
) -> Listing:
    """List every file under ``roots`` and in ``manifests``, each URL once.

    ``known`` (``hf://`` roots) gives the files an earlier listing found in a
    repository at its current commit: its tree is not listed again.

    Raises DiscoveryError when a root does not exist or cannot be listed, or
    a manifest cannot be read: a scan that cannot see its collection fails
    instead of reporting an empty one.
    """
    begun = time.perf_counter()
    options = storage_options or {}
    seen = _Seen()
    with counting() as requests:
        for root in roots:
            seen.add_root(*_list_root(root, options, include, exclude, requests, known))
        for manifest in manifests:
            _watch_manifest(manifest, options, requests)
            seen.found.append(ListedFiles.of(read_manifest(manifest, options)))
            seen.from_manifest = True
    skipped = seen.skipped
    if any(s.code is not None for s in skipped):  # entries that may hide a file: a row, an error, for every gate
        seen.found.append(unaudited_files(skipped))
        skipped = [s for s in skipped if s.code is None]
    # A root's own listing names each path once: only several roots or a manifest can name a URL twice.
    found, seen.found = seen.found, []
    collided = redaction_collisions(found)
    one_each = len(found) == 1 and not seen.from_manifest and not collided
    files = found[0] if one_each else ListedFiles.first_of_each_url(found)
    del found
    seen.listed_dirs.update(sorted(seen.safetensors))
    named = {s.url for s in skipped}
    taken = set(files.find_urls(named)) if named else set()
    return Listing(
        files,
        time.perf_counter() - begun,
        frozenset(seen.safetensors),
        seen.listed_dirs.build(),
        requests.count,
        tuple(s for s in skipped if s.url not in taken) + _collisions_named(collided),
    )


def _collisions_named(collided: dict[str, int]) -> tuple[Skipped, ...]:
    """The files a redacted URL hides (it is a file's identity, so only the first listed is audited)."""
    for url, hidden in collided.items():
        log.warning(
            "%s stands for %d more listed URL(s) that differ only in what redaction hides: only the "
            "first listed is audited",
            url,
            hidden,
        )
    return tuple(
        Skipped(
            url,
            f"{hidden} more listed URL(s) redact to this one (they differ only in a secret-looking "
            "part): only the first listed is audited",
        )
        for url, hidden in collided.items()
    )


class _Seen:
    """What the roots' and manifests' listings found so far: each one's files as Arrow columns, as soon as it is
    listed, the safetensors' directories, the directories seen whole, the entries skipped."""

    def __init__(self) -> None:
        self.found: list[ListedFiles] = []
        self.from_manifest = False
        self.safetensors: set[str] = set()
        self.listed_dirs = DirectoryDigests()
        self.skipped: list[Skipped] = []

    def add_root(self, listed_files: Iterable[ListedFile], whole: bool, skipped: tuple[Skipped, ...]) -> None:
        self.skipped.extend(s for s in skipped if s not in self.skipped)
        if isinstance(listed_files, ListedFiles):  # a local walk's columns: split without a file object each
            part = _sources_apart(listed_files, whole, self.safetensors, self.listed_dirs)
        else:
            part = ListedFiles.of(self._audited(listed_files, whole))
        if isinstance(listed_files, StreamedFiles) and not listed_files.seen.in_order:
            part = part.take(pc.sort_indices(part.url_column()).to_pylist())  # an S3 Express directory bucket
        self.found.append(part)

    def _audited(self, listed_files: Iterable[ListedFile], whole: bool) -> Iterator[ListedFile]:
        for listed in listed_files:
            directory = listed.url.rsplit("/", 1)[0]
            if listed.url.endswith(SAFETENSORS_SUFFIX) and not listed.error_code:
                self.safetensors.add(directory)  # a source beside the GGUFs, not a file to audit
                continue
            if whole:
                self.listed_dirs.add(directory)
            yield listed


def _sources_apart(
    files: ListedFiles, whole: bool, safetensors: set[str], listed_dirs: DirectoryDigests
) -> ListedFiles:
    """``files`` without their ``*.safetensors`` files, whose directories go into ``safetensors`` (sources
    beside the GGUFs, never audited); the directories of the rest go into ``listed_dirs`` when the listing
    saw every file of them (``whole``). What :func:`discover` does a file at a time, on columns (a local
    walk's: no listing errors among them)."""
    is_source = pc.ends_with(files.url_column(), SAFETENSORS_SUFFIX)
    safetensors.update(files.directories(is_source))
    if whole:
        listed_dirs.update(files.directories(pc.invert(is_source)))
    return files.filter(pc.invert(is_source)) if pc.any(is_source).as_py() else files


def _watch_manifest(manifest: str, options: Mapping[str, Any], requests: ListingRequests) -> None:
    """Count the requests reading ``manifest`` sends (a store that cannot be counted makes the count unknown)."""
    try:
        fs, _ = url_to_fs(manifest, **options_for(manifest, options))
    except (ImportError, ValueError, TypeError):
        requests.unknown()  # read_manifest reports why it cannot be read
        return
    requests.watch(fs)
