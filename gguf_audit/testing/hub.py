"""A local Hugging Face Hub on 127.0.0.1 for tests: the part of the Hub's HTTP API huggingface_hub reads with.

:class:`LocalHub` holds users, organisations and model repositories in memory
(commits with whole-tree snapshots, branches, LFS and regular files; see
:mod:`gguf_audit.testing.hub_store`) and answers the requests the real client
makes, with the paths, query parameters, JSON fields and headers read from
huggingface_hub's own source (``hf_api.py``, ``hf_file_system.py``,
``file_download.py``, ``utils/_pagination.py``, ``utils/_http.py``; checked
against 2.4):

- ``GET /api/models?author=&search=&limit=&full=&expand=``: ``HfApi.list_models``
  (pages through ``Link: <...>; rel="next"`` with a cursor);
- ``GET /api/models/{id}`` and ``/api/models/{id}/revision/{rev}`` (``blobs``,
  ``expand``): ``model_info``, ``repo_info``, and ``HfFileSystem.resolve_path``;
- ``GET /api/models/{id}/tree/{rev}[/{path}]?recursive=&expand=`` (cursor
  pages): ``list_repo_tree``, ``list_repo_files``, ``HfFileSystem.ls/find/glob/info``;
- ``POST /api/models/{id}/paths-info/{rev}`` (a form with ``paths`` and
  ``expand``): ``get_paths_info``, ``HfFileSystem.info`` when not cached;
- ``GET /api/models/{id}/refs`` and ``/commits/{rev}``: ``list_repo_refs``,
  ``list_repo_commits``; ``GET /api/whoami-v2``: ``whoami``;
- ``GET`` and ``HEAD /{id}/resolve/{rev}/{path}`` with ``Range``:
  ``hf_hub_download``, ``get_hf_file_metadata``, ``HfFileSystem.open``,
  ``cat_file`` and ``cat_ranges``.

What the client does with a 429 (``RateLimit: "<bucket>";r=0;t=<s>``): its
``http_backoff`` (list pages, ``HfFileSystem`` range reads, downloads) sleeps
``t + 1`` seconds and asks again, up to 5 retries, then raises
``HfHubHTTPError``; ``model_info``, ``get_paths_info`` and
``get_hf_file_metadata`` (``retry_on_errors=False``) raise at once, with the
bucket and ``t`` in the message.

Choices, where the Hub does more than a test needs:

- LFS files are served by the resolve endpoint itself (200, 206 or 416),
  with the headers the Hub puts on its LFS redirect (``X-Linked-Etag``,
  ``X-Linked-Size``, ``X-Repo-Commit``); given a ``cdn`` (a
  :class:`~gguf_audit.testing.http.RangeHTTPServer`, another port: another
  origin), they are answered as on the Hub, 302 to the blob on the CDN at a
  URL presigned for an hour (:class:`~gguf_audit.testing.cdn.Presigner`:
  the CDN answers 403 once it expires or the key rotates).
- No Xet: resolve answers no ``X-Xet-Hash``, so the client reads over plain
  HTTP ranges even with ``hf_xet`` installed; tree entries carry a stand-in
  ``xetHash`` only with ``xet_hashes`` on.
- Only model repositories; a revision is a branch name or a full commit sha.
  Listings come in a stable order (``list_models`` by id; trees "tree first":
  per level the directories, each followed by its subtree when recursive,
  then the files); pages hold ``tree_page_size`` entries and so on, settable
  small for tests.
- Auth: a request with ``Authorization: Bearer T`` for an unknown ``T`` gets
  401 ("Invalid credentials in Authorization header"); a private repository
  answers 401 ``RepoNotFound`` without a token of its owner (or of a member
  of its organisation), 404 with another valid token, as on the Hub.

huggingface_hub reads ``HF_ENDPOINT`` (and ``HF_HUB_OFFLINE``, ``HF_TOKEN``...)
once, into ``huggingface_hub.constants``, when it is first imported. Two ways
to point the real client here: set ``HF_ENDPOINT=hub.endpoint`` in the
environment of a process that has not imported it yet (a subprocess), after
which ``HfApi()``, ``HfFileSystem()`` and ``hf://`` URLs need no argument; or,
in-process, pass ``endpoint=hub.endpoint`` to ``HfApi``, ``HfFileSystem`` and
``hf_hub_url`` (``get_hf_file_metadata`` takes the URL). Typical use::

    with LocalHub() as hub:
        hub.add_org("org")
        hub.create_repo("org/m")
        sha = hub.add_files("org/m", {"m.gguf": data})
        fs = HfFileSystem(endpoint=hub.endpoint, token=False, skip_instance_cache=True)
        fs.cat_file("org/m/m.gguf", 0, 64)
"""

from __future__ import annotations

import base64
import json
import math
import threading
import time
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Final, Literal

from gguf_audit.testing.cdn import Presigner
from gguf_audit.testing.http import RangeHTTPServer, parse_byte_range
from gguf_audit.testing.hub_store import (
    Commit,
    HubFile,
    HubState,
    Repo,
    commit_json,
    model_json,
    paths_info_json,
    refs_json,
    tree_json,
)
from gguf_audit.testing.loopback import LOOPBACK, ConnectionTracking, LoopbackServer, RequestRecord

__all__ = ["LocalHub", "Resource"]

Resource = Literal["api", "resolvers"]
"""The Hub's rate-limit buckets: ``/api/...`` requests and file resolves (``/{id}/resolve/...``)."""

# The Hub's free-tier policies (requests per window, window seconds), named in 429s that no set limit explains.
_DEFAULT_POLICY: Final[Mapping[Resource, tuple[int, int]]] = {"api": (500, 300), "resolvers": (5000, 300)}
_BODY_CHUNK_BYTES: Final = 1 << 20
_TRUE: Final = frozenset({"1", "true", "True"})


class _HubError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None, extra: Mapping[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.extra = status, message, code, dict(extra or {})


@dataclass(slots=True)
class _Window:
    limit: int
    window_s: int
    start: float = 0.0
    count: int = 0


@dataclass(slots=True)
class _Reply:
    status: int
    headers: dict[str, str] = field(default_factory=dict)
    body: bytes = b""
    file: HubFile | None = None
    span: tuple[int, int] = (0, 0)


def _json_reply(doc: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> _Reply:
    body = json.dumps(doc, separators=(",", ":")).encode()
    return _Reply(status, {"Content-Type": "application/json; charset=utf-8", **(headers or {})}, body)


class _HubHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "gguf-audit-hub/1"
    sys_version = ""
    disable_nagle_algorithm = True  # see _RangeHandler: headers and body go out in two sends
    server: _HubServer

    def do_GET(self) -> None:
        self._handle()

    def do_HEAD(self) -> None:
        self._handle()

    def do_POST(self) -> None:
        self._handle()

    def log_message(self, format: str, *args: Any) -> None:
        return  # LocalHub.requests is the log

    def _handle(self) -> None:
        hub = self.server.owner
        split = urllib.parse.urlsplit(self.path)
        segments = [urllib.parse.unquote(s) for s in split.path.split("/")[1:]]
        shown = urllib.parse.unquote(split.path) + (f"?{split.query}" if split.query else "")
        length = int(self.headers.get("Content-Length") or 0)
        form = self.rfile.read(length) if length > 0 else b""
        resource: Resource = "api" if segments[:1] == ["api"] else "resolvers"
        latency_s, gate = hub._begin(RequestRecord(self.command, shown, self.headers.get("Range")), resource)
        if latency_s > 0:
            hub._closing.wait(latency_s)
        hub._end_request()
        try:
            if gate.status == 429:
                raise _HubError(429, "You have been rate-limited; retry later.", None, gate.headers)
            reply = hub._route(self.command, segments, split.query, form, self.headers)
            reply.headers.update(gate.headers)
        except _HubError as err:
            headers = {**err.extra, "X-Error-Message": err.message}
            if err.code is not None:
                headers["X-Error-Code"] = err.code
            reply = _json_reply({"error": err.message}, err.status, headers)
        self._send(reply, resource)

    def _send(self, reply: _Reply, resource: Resource) -> None:
        hub = self.server.owner
        start, end = reply.span
        self.send_response(reply.status)
        for name, value in reply.headers.items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(end - start if reply.file is not None else len(reply.body)))
        self.end_headers()
        if self.command == "HEAD":
            return
        if reply.file is None:
            hub._add_bytes(len(reply.body), resource)
            self.wfile.write(reply.body)
            return
        view = memoryview(reply.file.data)
        for pos in range(start, end, _BODY_CHUNK_BYTES):
            chunk = view[pos : min(pos + _BODY_CHUNK_BYTES, end)]
            hub._add_bytes(len(chunk), resource)  # counted before the write, as RangeHTTPServer does
            self.wfile.write(chunk)


class _HubServer(ConnectionTracking, ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128  # see _RangeServer

    def __init__(self, owner: LocalHub) -> None:
        self.owner = owner
        self._init_tracking(owner._note_connection)
        super().__init__((LOOPBACK, 0), _HubHandler)


class LocalHub(LoopbackServer):
    """The Hub's read API on 127.0.0.1 (an ephemeral port), over in-memory repositories.

    Content: :meth:`add_user`, :meth:`add_org`, :meth:`create_repo`,
    :meth:`add_files` (a commit; returns its sha), :meth:`create_branch`.
    Knobs, safe to change while requests run: ``latency_s``; the page sizes
    ``tree_page_size`` (``tree_expand_page_size`` with ``expand=True``),
    ``models_page_size``, ``commits_page_size``; :meth:`rate_limit` and
    :meth:`fail_next_with_429`; ``cdn`` (LFS resolves redirect there). Accounting: ``requests``, ``bytes_sent`` and
    ``connections`` as every :class:`LoopbackServer`, plus
    ``resolve_requests`` / ``api_requests`` and ``resolve_bytes_sent`` (file
    bytes, the expensive part).
    """

    def __init__(
        self,
        *,
        latency_s: float = 0.0,
        tree_page_size: int = 1000,
        tree_expand_page_size: int = 50,
        models_page_size: int = 1000,
        commits_page_size: int = 50,
        cdn: RangeHTTPServer | None = None,
    ) -> None:
        super().__init__()
        self.cdn, self._on_cdn = cdn, set[str]()
        self.presigner = Presigner()  # CDN URLs signed for an hour (presigner.ttl_s); presigner.rotate() revokes
        if cdn is not None:
            cdn.authorize = self.presigner.allows
        self.xet_hashes = False  # tree entries of LFS files carry a stand-in xetHash (never X-Xet-Hash)
        self._closing = threading.Event()
        self._state = HubState()
        self._latency_s = float(latency_s)
        self.tree_page_size = tree_page_size
        self.tree_expand_page_size = tree_expand_page_size
        self.models_page_size = models_page_size
        self.commits_page_size = commits_page_size
        self._windows: dict[Resource, _Window] = {}
        self._fail_429 = 0
        self._fail_429_reset_s = 0
        self._fail_429_resource: Resource | None = None
        self._resolve_bytes = 0
        self._serve(_HubServer(self))

    # -- addresses

    @property
    def endpoint(self) -> str:
        """``http://127.0.0.1:PORT``: the value for ``HF_ENDPOINT`` or ``endpoint=``."""
        return f"http://{LOOPBACK}:{self.port}"

    base_url = endpoint

    def resolve_url(self, repo_id: str, path: str, revision: str = "main") -> str:
        """What ``hf_hub_url(repo_id, path, revision=revision, endpoint=hub.endpoint)`` gives."""
        rev = urllib.parse.quote(revision, safe="")
        return f"{self.endpoint}/{repo_id}/resolve/{rev}/{urllib.parse.quote(path)}"

    # -- content

    def add_user(self, name: str, token: str | None = None) -> None:
        """A user; ``token`` is what they present as ``Authorization: Bearer <token>``."""
        with self._lock:
            self._state.add_user(name, token)

    def add_org(self, name: str, members: Iterable[str] = ()) -> None:
        """An organisation; its members (users) may read its private repositories."""
        with self._lock:
            self._state.add_org(name, members)

    def create_repo(self, repo_id: str, *, private: bool = False, gitattributes: bool = True) -> str:
        """A model repository with an initial commit on ``main`` (the Hub's ``.gitattributes``); returns its sha."""
        with self._lock:
            repo = self._state.create_repo(repo_id, private=private, gitattributes=gitattributes)
            return repo.branches["main"]

    def add_files(
        self,
        repo_id: str,
        files: Mapping[str, bytes | None],
        *,
        message: str = "Upload files",
        branch: str = "main",
        lfs: bool | None = None,
    ) -> str:
        """Commit ``files`` (``{path: bytes}``; None deletes a path) on ``branch``; returns the new sha.

        ``lfs=None`` stores a file in LFS as the Hub's default .gitattributes
        does (:data:`~gguf_audit.testing.hub_store.LFS_SUFFIXES`, or 10 MiB and
        more); True or False forces it for every file of the commit.
        """
        with self._lock:
            repo = self._repo_for_setup(repo_id)
            if branch not in repo.branches:
                raise ValueError(f"no branch {branch!r} in {repo_id}; create_branch first")
            title, _, body = message.partition("\n")
            commit = self._state.commit(
                repo, files, title=title, message=body, branch=branch, lfs=lfs, author=repo.namespace
            )
            return commit.sha

    def create_branch(self, repo_id: str, branch: str, revision: str = "main") -> str:
        """A new branch at ``revision`` (a branch or a sha); returns the sha it points at."""
        with self._lock:
            repo = self._repo_for_setup(repo_id)
            commit = repo.resolve(revision)
            if commit is None:
                raise ValueError(f"no revision {revision!r} in {repo_id}")
            if branch in repo.branches:
                raise ValueError(f"branch already exists in {repo_id}: {branch!r}")
            repo.branches[branch] = commit.sha
            return commit.sha

    def head(self, repo_id: str, branch: str = "main") -> str:
        with self._lock:
            return self._repo_for_setup(repo_id).branches[branch]

    def file(self, repo_id: str, path: str, revision: str = "main") -> HubFile:
        """The stored file (its bytes, blob oid, sha256), for a test to compare with what a client saw."""
        with self._lock:
            commit = self._repo_for_setup(repo_id).resolve(revision)
            if commit is None or path not in commit.files:
                raise KeyError(f"{repo_id}@{revision}: {path}")
            return commit.files[path]

    def _repo_for_setup(self, repo_id: str) -> Repo:
        repo = self._state.repos.get(repo_id)
        if repo is None:
            raise ValueError(f"no repository {repo_id!r}; create_repo first")
        return repo

    # -- knobs

    def rate_limit(self, n_requests: int | None, window_s: int = 300, *, resource: Resource = "resolvers") -> None:
        """Allow ``n_requests`` per fixed ``window_s`` window on ``resource``; None lifts the limit.

        Every answer on a limited resource carries the Hub's headers
        (``RateLimit: "resolvers";r=<left>;t=<seconds to reset>`` and
        ``RateLimit-Policy: "fixed window";"resolvers";q=<n>;w=<window>``, the
        IETF draft format huggingface_hub's ``parse_ratelimit_headers`` reads);
        requests past the limit get 429 with ``r=0`` and ``Retry-After``.
        """
        with self._lock:
            if n_requests is None:
                self._windows.pop(resource, None)
            else:
                self._windows[resource] = _Window(int(n_requests), int(window_s))

    def fail_next_with_429(self, n: int, reset_s: int = 0, *, resource: Resource | None = None) -> None:
        """Answer the next ``n`` requests (on ``resource``, or any) with 429, ``r=0;t=reset_s`` and ``Retry-After``."""
        with self._lock:
            self._fail_429, self._fail_429_reset_s, self._fail_429_resource = int(n), int(reset_s), resource

    # -- accounting

    @property
    def resolve_requests(self) -> int:
        """File requests (``/{id}/resolve/...``): the ones the Hub's resolver limit counts."""
        return sum(1 for r in self.requests if not r.path.startswith("/api/"))

    @property
    def api_requests(self) -> int:
        return sum(1 for r in self.requests if r.path.startswith("/api/"))

    @property
    def resolve_bytes_sent(self) -> int:
        """Body bytes of resolve answers (file bytes, and their error bodies); ``bytes_sent`` adds the API's."""
        with self._lock:
            return self._resolve_bytes

    def reset_stats(self) -> None:
        super().reset_stats()
        with self._lock:
            self._resolve_bytes = 0

    def _add_bytes(self, n_bytes: int, resource: Resource = "api") -> None:
        with self._lock:
            self._bytes_sent += n_bytes
            if resource == "resolvers":
                self._resolve_bytes += n_bytes

    def _begin(self, record: RequestRecord, resource: Resource) -> tuple[float, _Reply]:
        """Log the request; its latency and either a 429 or the RateLimit headers to add (as a _Reply)."""
        self._arrived(record)
        with self._lock:
            headers: dict[str, str] = {}
            window = self._windows.get(resource)
            limit, window_s = (window.limit, window.window_s) if window else _DEFAULT_POLICY[resource]
            over = False
            if window is not None:
                now = time.monotonic()
                if window.count == 0 or now >= window.start + window.window_s:
                    window.start, window.count = now, 0
                window.count += 1
                over = window.count > window.limit
                reset_s = max(0, math.ceil(window.start + window.window_s - now))
                left = max(0, window.limit - window.count)
                headers["RateLimit"] = f'"{resource}";r={left};t={reset_s}'
            if self._fail_429 > 0 and self._fail_429_resource in (None, resource):
                self._fail_429 -= 1
                over, reset_s = True, self._fail_429_reset_s
            if over:
                headers["RateLimit"] = f'"{resource}";r=0;t={reset_s}'
                headers["Retry-After"] = str(reset_s)
            if headers:
                headers["RateLimit-Policy"] = f'"fixed window";"{resource}";q={limit};w={window_s}'
            return self._latency_s, _Reply(429 if over else 200, headers)

    # -- the API

    def _route(self, method: str, seg: list[str], query: str, form: bytes, headers: Any) -> _Reply:
        params = urllib.parse.parse_qs(query, keep_blank_values=True)
        with self._lock:
            user = self._user(headers.get("Authorization"))
            if seg[:1] == ["api"]:
                return self._api(method, seg[1:], params, form, headers, user)
            if len(seg) >= 5 and seg[2] == "resolve" and method in ("GET", "HEAD"):
                repo = self._readable(f"{seg[0]}/{seg[1]}", user)
                return self._resolve(repo, seg[3], "/".join(seg[4:]), headers.get("Range"))
        raise _HubError(404, f"Not found: {method} /{'/'.join(seg)}")

    def _user(self, authorization: str | None) -> str | None:
        if authorization is None:
            return None
        scheme, _, token = authorization.partition(" ")
        user = self._state.user_for(token.strip()) if scheme.lower() == "bearer" else None
        if user is None:
            raise _HubError(401, "Invalid credentials in Authorization header")
        return user

    def _readable(self, repo_id: str, user: str | None) -> Repo:
        repo = self._state.repos.get(repo_id)
        if repo is None or not self._state.can_read(repo, user):
            # The Hub does not tell a private repository from a missing one.
            raise _HubError(401 if user is None else 404, "Repository not found", "RepoNotFound")
        return repo

    def _api(
        self, method: str, seg: list[str], params: dict[str, list[str]], form: bytes, headers: Any, user: str | None
    ) -> _Reply:
        if method == "GET" and seg == ["whoami-v2"]:
            if user is None:
                raise _HubError(401, "Invalid username or password.")
            orgs = sorted(o for o, members in self._state.orgs.items() if user in members)
            return _json_reply({"type": "user", "name": user, "orgs": [{"type": "org", "name": o} for o in orgs]})
        if method == "GET" and seg == ["models"]:
            return self._list_models(params, user)
        if len(seg) < 3 or seg[0] != "models":
            raise _HubError(404, f"Not found: /api/{'/'.join(seg)}")
        repo = self._readable(f"{seg[1]}/{seg[2]}", user)
        rest = seg[3:]
        expand = _flag(params, "expand")
        if method == "GET" and (not rest or (len(rest) == 2 and rest[0] == "revision")):
            commit = self._commit(repo, rest[1] if rest else "main")
            props = params.get("expand") or params.get("expand[]")
            doc = model_json(repo, commit, full=True, blobs=_flag(params, "blobs"), expand=props)
            return _json_reply(doc)
        if method == "GET" and len(rest) >= 2 and rest[0] == "tree":
            commit = self._commit(repo, rest[1])
            path = "/".join(rest[2:]).strip("/")
            recursive = _flag(params, "recursive")
            entries = tree_json(repo, commit, path, recursive=recursive, expand=expand, xet=self.xet_hashes)
            if entries is None:
                raise _HubError(404, f"Entry not found: {path!r}", "EntryNotFound", {"X-Repo-Commit": commit.sha})
            size = self.tree_expand_page_size if expand else self.tree_page_size
            return self._page(entries, params, size, "/".join(["", "api", *seg]))
        if method == "POST" and len(rest) == 2 and rest[0] == "paths-info":
            commit = self._commit(repo, rest[1])
            paths, expand = _paths_form(form, headers.get("Content-Type", ""))
            return _json_reply(paths_info_json(repo, commit, paths, expand=expand))
        if method == "GET" and rest == ["refs"]:
            return _json_reply(refs_json(repo, include_prs=_flag(params, "include_prs")))
        if method == "GET" and len(rest) == 2 and rest[0] == "commits":
            history = [commit_json(c) for c in repo.history(self._commit(repo, rest[1]))]
            return self._page(history, params, self.commits_page_size, "/".join(["", "api", *seg]))
        raise _HubError(404, f"Not found: {method} /api/{'/'.join(seg)}")

    def _commit(self, repo: Repo, revision: str) -> Commit:
        commit = repo.resolve(revision)
        if commit is None:
            raise _HubError(404, f"Invalid rev id: {revision}", "RevisionNotFound")
        return commit

    def _list_models(self, params: dict[str, list[str]], user: str | None) -> _Reply:
        author = params["author"][-1] if params.get("author") else None
        search = (params.get("search") or [""])[0].lower()
        props = params.get("expand") or params.get("expand[]")
        models = [
            model_json(repo, repo.commits[repo.branches["main"]], full=_flag(params, "full"), blobs=False, expand=props)
            for repo_id, repo in sorted(self._state.repos.items())
            if (author is None or repo.namespace == author)
            and search in repo_id.lower()
            and self._state.can_read(repo, user)
        ]
        size = self.models_page_size
        if params.get("limit"):
            size = min(size, _int_param(params, "limit"))
        return self._page(models, params, size, "/api/models")

    def _page(self, items: list[Any], params: dict[str, list[str]], size: int, path: str) -> _Reply:
        """One page of ``items`` from ``cursor``, with a ``Link: <...>; rel="next"`` while more remain."""
        offset = 0
        if params.get("cursor"):
            try:
                cursor = params["cursor"][0]
                offset = int(base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode())
            except ValueError as err:
                raise _HubError(400, f"Invalid cursor: {params['cursor'][0]!r}") from err
        size = max(1, size)
        headers: dict[str, str] = {}
        if offset + size < len(items):
            query = [(k, v) for k, values in params.items() if k != "cursor" for v in values]
            query.append(("cursor", base64.urlsafe_b64encode(str(offset + size).encode()).decode().rstrip("=")))
            url = f"{self.endpoint}{urllib.parse.quote(path)}?{urllib.parse.urlencode(query)}"
            headers["Link"] = f'<{url}>; rel="next"'
        return _json_reply(items[offset : offset + size], headers=headers)

    def _resolve(self, repo: Repo, revision: str, path: str, range_header: str | None) -> _Reply:
        commit = self._commit(repo, revision)
        file = commit.files.get(path)
        if file is None:
            raise _HubError(404, "Entry not found", "EntryNotFound", {"X-Repo-Commit": commit.sha})
        headers = {
            "Content-Type": "application/octet-stream",
            "Accept-Ranges": "bytes",
            "ETag": file.etag,
            "X-Repo-Commit": commit.sha,
        }
        if file.is_lfs:
            headers["X-Linked-Etag"] = file.etag
            headers["X-Linked-Size"] = str(file.size)
            if self.cdn is not None:
                if file.sha256 not in self._on_cdn:  # put hashes the bytes: once per blob
                    self.cdn.put(f"lfs/{file.sha256}", file.data)
                    self._on_cdn.add(str(file.sha256))
                location = self.presigner.sign(self.cdn.url_for(f"lfs/{file.sha256}"))
                return _Reply(302, {**headers, "Location": location})
        status, span = 200, (0, file.size)
        if range_header is not None:
            parsed = parse_byte_range(range_header, file.size)
            if parsed == "unsatisfiable":
                raise _HubError(
                    416, "Range Not Satisfiable", None, {**headers, "Content-Range": f"bytes */{file.size}"}
                )
            if parsed != "ignore":
                status, span = 206, parsed
                headers["Content-Range"] = f"bytes {span[0]}-{span[1] - 1}/{file.size}"
        return _Reply(status, headers, file=file, span=span)

    def model_card(self, repo_id: str) -> dict[str, Any] | None:
        """The ``gguf`` card the Hub serves for ``repo_id`` at its main branch (read from its files)."""
        repo = self._repo_for_setup(repo_id)
        card = model_json(repo, repo.commits[repo.branches["main"]], full=True, blobs=False, expand=["gguf"])
        return card.get("gguf")

    def set_gguf_card(self, repo_id: str, card: dict[str, Any] | None) -> None:
        """Serve ``card`` as ``repo_id``'s ``gguf`` field instead of the one its files give (None: theirs again)."""
        self._repo_for_setup(repo_id).gguf_override = card

    # -- lifecycle

    def _before_close(self) -> None:
        self._closing.set()  # wakes handlers sleeping on latency_s

    def __repr__(self) -> str:
        return f"LocalHub({self.endpoint!r})"


def _flag(params: Mapping[str, list[str]], name: str) -> bool:
    return bool(params.get(name)) and params[name][-1] in _TRUE


def _int_param(params: Mapping[str, list[str]], name: str) -> int:
    value = params[name][-1]
    if not value.isdigit():
        raise _HubError(400, f"Invalid {name}: {value!r}")
    return int(value)


def _paths_form(form: bytes, content_type: str) -> tuple[list[str], bool]:
    """``paths`` and ``expand`` from a paths-info body: a form (what the client sends) or JSON."""
    if content_type.startswith("application/json"):
        try:
            doc = json.loads(form or b"{}")
        except ValueError as err:
            raise _HubError(400, f"Invalid JSON body: {form[:80]!r}") from err
        paths = doc.get("paths", [])
        return ([paths] if isinstance(paths, str) else list(paths)), bool(doc.get("expand"))
    fields = urllib.parse.parse_qs(form.decode("utf-8", "replace"), keep_blank_values=True)
    return fields.get("paths", []) + fields.get("paths[]", []), _flag(fields, "expand")
