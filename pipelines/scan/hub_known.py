"""What the base night listed of each Hub repository, by commit: a repository still at that commit costs no tree.

A night lists an ``hf://ORG`` root with one paged model listing that gives
every repository's current commit sha. A commit pins its tree, so a
repository at the commit whose files the base night's ``files`` rows name
has the same files: they are given again from those rows (size, git blob id,
LFS sha256, Xet hash, commit) and only the repositories whose sha moved are
listed again. A quiet night over 1,000 repositories then costs one listing
page.

The base night's rows stand for a repository's listing only when it listed
the same roots with the same globs (another glob, root or sub-path would have
listed other files), when the globs cannot take ``*.safetensors`` files
(those are taken out of the listing, never given rows, so rows could not
give them back), and when none of the repository's rows is a listing failure
(a row with no size naming the repository itself).
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Mapping
from typing import Any, Final

import pyarrow as pa
import pyarrow.compute as pc

from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.listing import KnownRepo
from gguf_audit.pipelines.store import Output
from gguf_audit.tables.listed import ListedFile

__all__ = ["known_hub_repos"]

_SAME_LISTING: Final = ("roots", "manifests", "include", "exclude")
"""Settings the base night must share for its rows to stand for a repository's listing."""
_COLUMNS: Final = ["url", "size", "etag", "version_id", "sha256", "revision"]
_HF_URL: Final = r"^hf://(?:models/)?(?P<repo>[^/@]+/[^/@]+)(?:@[^/]*)?(?P<path>/.*)?$"
"""An ``hf://`` URL's repository and the path in it (empty when the URL names the repository itself)."""


def _takes_safetensors(include: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in include for name in ("m.safetensors", "r/m.safetensors"))


def _same_listing(out: Output, base_run_id: str, config: ScanConfig) -> bool:
    rows = out.read("runs", [base_run_id], columns=["config"]).to_pylist()
    recorded: Mapping[str, Any] = json.loads(rows[0]["config"] or "{}") if rows else {}
    public = config.public()
    return all(recorded.get(k) == public.get(k) for k in _SAME_LISTING)


def _repo_ids(urls: pa.Array) -> tuple[pa.Array, pa.Array]:
    """Each ``hf://`` URL's repository (null for another URL) and whether it names a file in it."""
    parts = pc.extract_regex(urls, _HF_URL)
    repo = pc.struct_field(parts, "repo")
    path = pc.struct_field(parts, "path")
    return repo, pc.fill_null(pc.greater(pc.utf8_length(path), 0), False)


def known_hub_repos(out: Output, base_run_id: str | None, config: ScanConfig) -> KnownRepo | None:
    """``(repo_id, sha) -> files`` from the base night's ``files`` rows; None when they cannot stand for a
    listing (no base night, no ``hf://`` root, other roots or globs, globs that take safetensors).

    The rows stay Arrow columns; a repository's files are made into :class:`ListedFile` values only when
    the listing asks for it (a repository at a commit the rows know)."""
    if base_run_id is None or not any(r.startswith("hf://") for r in config.scan.roots):
        return None
    if _takes_safetensors(config.scan.include) or not _same_listing(out, base_run_id, config):
        return None
    rows = out.read("files", [base_run_id], columns=_COLUMNS)
    repo, names_file = _repo_ids(rows.column("url").combine_chunks())
    usable = pc.and_(names_file, pc.and_(pc.is_valid(rows.column("size")), pc.is_valid(rows.column("revision"))))
    # A repository with a row that is not a listed file (its listing failed) is listed again.
    spoilt = set(pc.unique(pc.filter(repo, pc.and_(pc.is_valid(repo), pc.invert(usable)))).to_pylist())
    by_repo: dict[tuple[str, str], list[int]] = {}
    revisions = rows.column("revision").to_pylist()
    for i, (repo_id, ok) in enumerate(zip(repo.to_pylist(), usable.to_pylist(), strict=True)):
        if repo_id is not None and ok and repo_id not in spoilt:
            by_repo.setdefault((repo_id, str(revisions[i])), []).append(i)
    del revisions

    def lookup(repo_id: str, sha: str) -> list[ListedFile] | None:
        found = by_repo.get((repo_id, sha))
        if found is None:
            return None
        listed = [
            ListedFile(
                str(r["url"]),
                r["size"],
                etag=r["etag"],
                version_id=r["version_id"],
                sha256=r["sha256"],
                revision=str(r["revision"]),
            )
            for r in rows.take(found).to_pylist()
        ]
        return sorted(listed, key=lambda f: f.url)

    return lookup
