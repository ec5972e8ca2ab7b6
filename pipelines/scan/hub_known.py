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

from gguf_audit.io.hub import parse_hf_url
from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.listing.hub import KnownRepo
from gguf_audit.pipelines.store.output import Output
from gguf_audit.tables.listed import ListedFile

__all__ = ["known_hub_repos"]

_SAME_LISTING: Final = ("roots", "manifests", "include", "exclude")
"""Settings the base night must share for its rows to stand for a repository's listing."""
_COLUMNS: Final = ["url", "size", "etag", "version_id", "sha256", "revision"]


def _takes_safetensors(include: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in include for name in ("m.safetensors", "r/m.safetensors"))


def _same_listing(out: Output, base_run_id: str, config: ScanConfig) -> bool:
    rows = out.read("runs", [base_run_id], columns=["config"]).to_pylist()
    recorded: Mapping[str, Any] = json.loads(rows[0]["config"] or "{}") if rows else {}
    public = config.public()
    return all(recorded.get(k) == public.get(k) for k in _SAME_LISTING)


def known_hub_repos(out: Output, base_run_id: str | None, config: ScanConfig) -> KnownRepo | None:
    """``(repo_id, sha) -> files`` from the base night's ``files`` rows; None when they cannot stand for a
    listing (no base night, no ``hf://`` root, other roots or globs, globs that take safetensors)."""
    if base_run_id is None or not any(r.startswith("hf://") for r in config.scan.roots):
        return None
    if _takes_safetensors(config.scan.include) or not _same_listing(out, base_run_id, config):
        return None
    by_repo: dict[tuple[str, str], list[ListedFile]] = {}
    spoilt: set[str] = set()
    for row in out.read("files", [base_run_id], columns=_COLUMNS).to_pylist():
        url = str(row["url"])
        if not url.startswith("hf://"):
            continue
        try:
            hub = parse_hf_url(url)
        except ValueError:
            continue
        repo_id = hub.repo_id
        if repo_id is None:
            continue
        if row["size"] is None or not hub.path or not row["revision"]:
            spoilt.add(repo_id)  # the repository's listing failed, or a file of it has no commit: list it again
            continue
        listed = ListedFile(
            url,
            row["size"],
            etag=row["etag"],
            version_id=row["version_id"],
            sha256=row["sha256"],
            revision=str(row["revision"]),
        )
        by_repo.setdefault((repo_id, str(row["revision"])), []).append(listed)
    known = {key: sorted(files, key=lambda f: f.url) for key, files in by_repo.items() if key[0] not in spoilt}

    def lookup(repo_id: str, sha: str) -> list[ListedFile] | None:
        return known.get((repo_id, sha))

    return lookup
