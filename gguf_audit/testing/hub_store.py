"""The in-memory content of :class:`~gguf_audit.testing.hub.LocalHub`: namespaces, repositories, commits, files.

Values here are immutable once made (a :class:`Commit` holds a whole tree
snapshot), so the server can hand them to handler threads without copying;
:class:`Repo` and :class:`HubState` are mutated only under the hub's lock.
The ``*_json`` functions render the JSON documents the Hub answers with, with
the field names huggingface_hub reads (``RepoFile``, ``RepoFolder``,
``ModelInfo``, ``RepoSibling``, ``GitRefInfo`` and ``GitCommitInfo`` in its
``hf_api.py``).
"""

from __future__ import annotations

import hashlib
import itertools
import posixpath
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final

from gguf_audit.testing.hub_gguf import gguf_card

__all__ = [
    "LFS_SUFFIXES",
    "LFS_THRESHOLD_BYTES",
    "Commit",
    "HubFile",
    "HubState",
    "Repo",
    "git_blob_oid",
    "hub_date",
    "lfs_pointer",
]

# What the Hub's default .gitattributes sends to LFS (the patterns it writes into a new repo), by suffix.
LFS_SUFFIXES: Final = (
    ".7z", ".arrow", ".bin", ".bz2", ".ckpt", ".ftz", ".gguf", ".gz", ".h5", ".joblib", ".mlmodel", ".model",
    ".msgpack", ".npy", ".npz", ".onnx", ".ot", ".parquet", ".pb", ".pickle", ".pkl", ".pt", ".pth", ".rar",
    ".safetensors", ".tar", ".tflite", ".tgz", ".wasm", ".xz", ".zip", ".zst",
)  # fmt: skip
# The Hub refuses regular (non-LFS) files from 10 MiB up, so anything that large is LFS.
LFS_THRESHOLD_BYTES: Final = 10 * 1024 * 1024

_GITATTRIBUTES: Final = "".join(f"*{s} filter=lfs diff=lfs merge=lfs -text\n" for s in LFS_SUFFIXES).encode()
_NAME_RE: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}")
_SHA_RE: Final = re.compile(r"[0-9a-f]{40}")


def git_blob_oid(data: bytes) -> str:
    """Git's object id of a blob: sha1 over ``blob <size>\\0`` and the bytes (what the Hub calls ``oid``)."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest()


def lfs_pointer(sha256: str, size: int) -> bytes:
    """The Git LFS pointer file that git stores in place of an LFS file's bytes (spec v1)."""
    return f"version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n".encode()


def hub_date(moment: datetime) -> str:
    """A date as the Hub writes it (``2024-05-01T12:00:00.000Z``), which huggingface_hub's parse_datetime reads."""
    moment = moment.astimezone(UTC)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{moment.microsecond // 1000:03d}Z"


@dataclass(frozen=True, slots=True)
class HubFile:
    """One file at one commit: its bytes and what git and LFS say about them.

    ``blob_oid`` is the oid of what git stores: the bytes themselves for a
    regular file, the LFS pointer for an LFS file (as on the Hub).
    ``commit`` is the commit that last wrote this path.
    """

    path: str
    data: bytes = field(repr=False)
    blob_oid: str
    sha256: str | None
    pointer_size: int | None
    commit: str
    xet_hash: str | None = None
    """For LFS files, a stand-in for the Xet hash the Hub lists for Xet-stored files (a keyed hash of the
    LFS sha256: stable per content, not Xet's merkle hash); listed only when the hub's ``xet_hashes`` is on."""

    @classmethod
    def make(cls, path: str, data: bytes, *, lfs: bool, commit: str) -> HubFile:
        if not lfs:
            return cls(path, data, git_blob_oid(data), None, None, commit)
        sha256 = hashlib.sha256(data).hexdigest()
        pointer = lfs_pointer(sha256, len(data))
        xet = hashlib.sha256(b"xet\0" + sha256.encode()).hexdigest()
        return cls(path, data, git_blob_oid(pointer), sha256, len(pointer), commit, xet)

    @property
    def size(self) -> int:
        return len(self.data)

    @property
    def is_lfs(self) -> bool:
        return self.sha256 is not None

    @property
    def etag(self) -> str:
        """The resolve endpoint's ETag: the LFS sha256, or the git blob oid, quoted."""
        return f'"{self.sha256 or self.blob_oid}"'


@dataclass(frozen=True, slots=True)
class _Dir:
    oid: str
    last_commit: str
    dirs: tuple[str, ...]
    files: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Commit:
    """A commit: its id, parent, message, and the whole tree it leaves (path to file, and the directories)."""

    sha: str
    parent: str | None
    title: str
    message: str
    author: str
    date: datetime
    files: Mapping[str, HubFile] = field(repr=False)
    dirs: Mapping[str, _Dir] = field(repr=False)
    """Every directory ('' for the root) with a stable oid and the last commit that wrote under it."""


def _index_dirs(files: Mapping[str, HubFile], seqs: Mapping[str, int]) -> dict[str, _Dir]:
    children: dict[str, tuple[set[str], list[str]]] = {"": (set(), [])}
    for path in files:
        parent = posixpath.dirname(path)
        children.setdefault(parent, (set(), []))[1].append(path)
        while parent:
            grand = posixpath.dirname(parent)
            children.setdefault(grand, (set(), []))[0].add(parent)
            children.setdefault(parent, (set(), []))
            parent = grand
    out: dict[str, _Dir] = {}
    # Deepest first, so each directory's oid and last commit can use its children's.
    for path in sorted(children, key=lambda p: (-p.count("/") - bool(p), p)):
        dirs, names = children[path]
        parts = [f"tree {out[d].oid} {posixpath.basename(d)}" for d in sorted(dirs)]
        parts += [f"blob {files[n].blob_oid} {posixpath.basename(n)}" for n in sorted(names)]
        # Not git's binary tree encoding, but stable: the same content gives the same oid.
        oid = hashlib.sha1("\n".join(parts).encode(), usedforsecurity=False).hexdigest()
        commits = [out[d].last_commit for d in dirs] + [files[n].commit for n in names]
        last = max(commits, key=lambda c: seqs.get(c, -1)) if commits else ""
        out[path] = _Dir(oid, last, tuple(sorted(dirs)), tuple(sorted(names)))
    return out


@dataclass(slots=True)
class Repo:
    """A model repository: its commits by sha and its branches (name to sha)."""

    repo_id: str
    private: bool
    created_at: datetime
    commits: dict[str, Commit] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    gguf_override: dict[str, Any] | None = None
    """A ``gguf`` card to serve instead of the one read from the files (a stale or wrong card, for tests)."""

    @property
    def namespace(self) -> str:
        return self.repo_id.split("/", 1)[0]

    def resolve(self, revision: str) -> Commit | None:
        """A branch name or a full commit sha to its commit; None when it names neither."""
        sha = self.branches.get(revision)
        if sha is None and _SHA_RE.fullmatch(revision):
            sha = revision
        return self.commits.get(sha) if sha is not None else None

    def history(self, head: Commit) -> list[Commit]:
        """``head`` and its ancestors, newest first."""
        out = [head]
        while out[-1].parent is not None:
            out.append(self.commits[out[-1].parent])
        return out


@dataclass(slots=True)
class HubState:
    """Everything the hub holds. Not thread-safe: LocalHub calls it under its lock."""

    users: dict[str, str | None] = field(default_factory=dict)  # name -> token
    orgs: dict[str, set[str]] = field(default_factory=dict)  # name -> member users
    repos: dict[str, Repo] = field(default_factory=dict)
    seqs: dict[str, int] = field(default_factory=dict)  # commit sha -> creation order
    _counter: itertools.count[int] = field(default_factory=itertools.count)

    def add_user(self, name: str, token: str | None) -> None:
        _check_name(name, "user")
        if name in self.orgs or (name in self.users and self.users[name] != token):
            raise ValueError(f"namespace already exists: {name!r}")
        if token is not None and token in self.users.values() and self.users.get(name) != token:
            raise ValueError(f"token already belongs to another user: {token!r}")
        self.users[name] = token

    def add_org(self, name: str, members: Iterable[str]) -> None:
        _check_name(name, "organisation")
        if name in self.users:
            raise ValueError(f"namespace already exists: {name!r}")
        members = set(members)
        unknown = sorted(members - set(self.users))
        if unknown:
            raise ValueError(f"organisation members must be users; unknown: {unknown!r}")
        self.orgs.setdefault(name, set()).update(members)

    def user_for(self, token: str) -> str | None:
        return next((name for name, t in self.users.items() if t == token), None)

    def can_read(self, repo: Repo, user: str | None) -> bool:
        if not repo.private:
            return True
        return user is not None and (user == repo.namespace or user in self.orgs.get(repo.namespace, ()))

    def create_repo(self, repo_id: str, *, private: bool, gitattributes: bool) -> Repo:
        namespace, sep, name = repo_id.partition("/")
        if not sep or "/" in name:
            raise ValueError(f"repo id must be 'namespace/name': {repo_id!r}")
        _check_name(name, "repository")
        if namespace not in self.users and namespace not in self.orgs:
            raise ValueError(f"no user or organisation named {namespace!r}; add it first")
        if repo_id in self.repos:
            raise ValueError(f"repository already exists: {repo_id!r}")
        repo = Repo(repo_id, private, datetime.now(UTC))
        self.repos[repo_id] = repo
        initial = {".gitattributes": _GITATTRIBUTES} if gitattributes else {}
        self.commit(repo, initial, title="initial commit", branch="main", lfs=False, author=namespace)
        return repo

    def commit(
        self, repo: Repo, changes: Mapping[str, bytes | None], *, title: str, branch: str, lfs: bool | None,
        author: str, message: str = "",
    ) -> Commit:  # fmt: skip
        """Write ``changes`` (None deletes a path) on top of ``branch``, which then points at the new commit."""
        base_sha = repo.branches.get(branch)
        base = repo.commits[base_sha] if base_sha is not None else None
        files = dict(base.files) if base else {}
        seq = next(self._counter)
        date = datetime.now(UTC)
        digest = hashlib.sha1(usedforsecurity=False)
        digest.update(f"{repo.repo_id}\n{base_sha}\n{seq}\n{title}\n{hub_date(date)}\n".encode())
        for path in sorted(changes):
            data = changes[path]
            digest.update(f"{path}\n{git_blob_oid(data) if data is not None else '-'}\n".encode())
        sha = digest.hexdigest()
        for path, data in changes.items():
            clean = _check_path(path)
            if data is None:
                if clean not in files:
                    raise ValueError(f"cannot delete {clean!r}: not in {repo.repo_id}@{branch}")
                del files[clean]
                continue
            if any(p.startswith(clean + "/") for p in files) or _parents(clean) & set(files):
                raise ValueError(f"path collides with a file or directory: {clean!r}")
            store_lfs = lfs if lfs is not None else _default_lfs(clean, data)
            files[clean] = HubFile.make(clean, bytes(data), lfs=store_lfs, commit=sha)
        self.seqs[sha] = seq
        commit = Commit(sha, base_sha, title, message, author, date, files, _index_dirs(files, self.seqs))
        repo.commits[sha] = commit
        repo.branches[branch] = sha
        return commit


def _check_name(name: str, what: str) -> None:
    if not _NAME_RE.fullmatch(name) or "--" in name or ".." in name:
        raise ValueError(f"invalid {what} name: {name!r}")


def _check_path(path: str) -> str:
    clean = path.strip("/")
    parts = clean.split("/")
    if not clean or any(p in ("", ".", "..") for p in parts):
        raise ValueError(f"invalid path in repo: {path!r}")
    return clean


def _parents(path: str) -> set[str]:
    out = set()
    while "/" in path:
        path = posixpath.dirname(path)
        out.add(path)
    return out


def _default_lfs(path: str, data: bytes) -> bool:
    return path.lower().endswith(LFS_SUFFIXES) or len(data) >= LFS_THRESHOLD_BYTES


# ---------------------------------------------------------------- JSON documents


def _commit_ref(commit: Commit) -> dict[str, str]:
    return {"id": commit.sha, "title": commit.title, "date": hub_date(commit.date)}


def file_json(file: HubFile, *, expand: bool, commits: Mapping[str, Commit], xet: bool = False) -> dict[str, Any]:
    """A tree or paths-info entry for a file (``RepoFile(**entry)`` reads it); ``xet`` adds ``xetHash``."""
    out: dict[str, Any] = {"type": "file", "oid": file.blob_oid, "size": file.size, "path": file.path}
    if file.sha256 is not None:
        out["lfs"] = {"oid": file.sha256, "size": file.size, "pointerSize": file.pointer_size}
    if xet and file.xet_hash is not None:
        out["xetHash"] = file.xet_hash
    if expand:
        out["lastCommit"] = _commit_ref(commits[file.commit])
        out["securityFileStatus"] = {
            "status": "safe",
            "avScan": {"virusFound": False, "virusNames": None},
            "pickleImportScan": None,
        }
    return out


def dir_json(path: str, node: _Dir, *, expand: bool, commits: Mapping[str, Commit]) -> dict[str, Any]:
    """A tree or paths-info entry for a directory (``RepoFolder(**entry)`` reads it)."""
    out: dict[str, Any] = {"type": "directory", "oid": node.oid, "size": 0, "path": path}
    if expand:
        out["lastCommit"] = _commit_ref(commits[node.last_commit])
    return out


def tree_json(
    repo: Repo, commit: Commit, path: str, *, recursive: bool, expand: bool, xet: bool = False
) -> list[dict[str, Any]] | None:
    """The entries under directory ``path`` ('' for the root), or None when it is not a directory.

    Per level, directories come before files (the Hub's "tree first" order);
    a recursive listing descends into each directory right after its entry.
    """
    dirs = commit.dirs
    if path not in dirs:
        return None
    out: list[dict[str, Any]] = []
    # A stack of directories still to list, so a deep tree needs no recursion.
    pending: list[tuple[str, int]] = [(path, 0)]
    while pending:
        name, done = pending.pop()
        node = dirs[name]
        if done < len(node.dirs):
            sub = node.dirs[done]
            pending.append((name, done + 1))
            out.append(dir_json(sub, dirs[sub], expand=expand, commits=repo.commits))
            if recursive:
                pending.append((sub, 0))
            continue
        out.extend(file_json(commit.files[f], expand=expand, commits=repo.commits, xet=xet) for f in node.files)
    return out


def paths_info_json(repo: Repo, commit: Commit, paths: Iterable[str], *, expand: bool) -> list[dict[str, Any]]:
    """One entry per path that exists (a file or a directory); missing paths are left out, as on the Hub."""
    dirs = commit.dirs
    out: list[dict[str, Any]] = []
    for raw in paths:
        path = raw.strip("/")
        if path in commit.files:
            out.append(file_json(commit.files[path], expand=expand, commits=repo.commits))
        elif path and path in dirs:
            out.append(dir_json(path, dirs[path], expand=expand, commits=repo.commits))
    return out


_CARDS: dict[str, dict[str, Any] | None] = {}


def _card(commit: Commit) -> dict[str, Any] | None:
    """The commit's ``gguf`` card, read once per commit (a commit never changes)."""
    if commit.sha not in _CARDS:
        _CARDS[commit.sha] = gguf_card({p: f.data for p, f in commit.files.items() if p.endswith(".gguf")})
    return _CARDS[commit.sha]


def model_json(repo: Repo, commit: Commit, *, full: bool, blobs: bool, expand: Iterable[str] | None) -> dict[str, Any]:
    """A model as ``/api/models`` (``full``: with siblings and sha) and ``/api/models/{id}`` answer it.

    ``blobs`` adds each sibling's size, blob id and LFS facts (``files_metadata=True``);
    ``expand`` keeps only the named properties (plus ``id`` and ``_id``).
    """
    siblings: list[dict[str, Any]] = []
    for path in sorted(commit.files):
        file = commit.files[path]
        sibling: dict[str, Any] = {"rfilename": path}
        if blobs:
            sibling["size"] = file.size
            sibling["blobId"] = file.blob_oid
            if file.sha256 is not None:
                sibling["lfs"] = {"sha256": file.sha256, "size": file.size, "pointerSize": file.pointer_size}
        siblings.append(sibling)
    props: dict[str, Any] = {
        "author": repo.namespace,
        "sha": commit.sha,
        "lastModified": hub_date(commit.date),
        "createdAt": hub_date(repo.created_at),
        "private": repo.private,
        "gated": False,
        "disabled": False,
        "downloads": 0,
        "likes": 0,
        "tags": [],
        "siblings": siblings,
        "usedStorage": sum(f.size for f in commit.files.values()),
    }
    card = repo.gguf_override if repo.gguf_override is not None else _card(commit)
    if card is not None:
        props["gguf"] = card
    base = {"_id": hashlib.sha1(repo.repo_id.encode(), usedforsecurity=False).hexdigest()[:24], "id": repo.repo_id}
    if expand is not None:
        wanted = set(expand)
        return base | {k: v for k, v in props.items() if k in wanted}
    if not full:
        keep = ("private", "downloads", "likes", "tags", "createdAt")
        return base | {"modelId": repo.repo_id} | {k: props[k] for k in keep}
    return base | {"modelId": repo.repo_id} | props


def refs_json(repo: Repo, *, include_prs: bool) -> dict[str, Any]:
    """``/api/models/{id}/refs``: branches (no tags, converts or pull requests here)."""
    branches = [
        {"name": name, "ref": f"refs/heads/{name}", "targetCommit": sha} for name, sha in sorted(repo.branches.items())
    ]
    out: dict[str, Any] = {"branches": branches, "converts": [], "tags": []}
    if include_prs:
        out["pullRequests"] = []
    return out


def commit_json(commit: Commit) -> dict[str, Any]:
    """One item of ``/api/models/{id}/commits/{rev}`` (``GitCommitInfo`` reads it)."""
    return {
        "id": commit.sha,
        "title": commit.title,
        "message": commit.message,
        "authors": [{"user": commit.author}],
        "date": hub_date(commit.date),
    }
