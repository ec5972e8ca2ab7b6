"""Listing ``hf://`` roots through the Hub's API: organisations, repositories at pinned revisions, sub-paths.

``hf://ORG`` lists every model repository of a user or organisation
(``HfApi.list_models(author=ORG, expand=["sha", "gguf"])``: one paged request
for a thousand repositories, each with the commit its main branch points at
and the Hub's ``gguf`` card, which the audit compares with each file's header);
``hf://ORG/REPO[@REVISION][/PATH]`` one repository, its revision resolved to
a commit sha first (``model_info``). Each repository's files then come from
one recursive tree listing at that sha (``list_repo_tree``, a request per
thousand entries), with what the Hub says of each file for free: size, git
blob id, LFS sha256 and Xet hash. A repository whose commit an earlier night
already listed (``known``: a commit pins its tree) costs no tree call, so the
first night costs ``ceil(repos / 1000) + repos`` API requests (plus one per
repository given by name) and a later night ``ceil(repos / 1000)`` plus one
per repository whose commit moved, before any file is read.

A repository that cannot be listed (gone, private, gated, a revision that
does not exist, the API failing) does not stop the others: it becomes one
entry carrying the ``io.*`` code, which the scan turns into that URL's row.
Rate limits: the client waits on 429 for paged listings (``Retry-After``, or
the reset its ``RateLimit`` header names, plus a second); for the one-shot
calls here a 429 is waited out (the reset its headers name, bounded) and
asked again. Never a failed night for it: :func:`rate_limit_waits` measures
how long the listing spent waiting (each 429's answer to the next request
of the same thread), which the run records.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any, Final, TypeVar

from gguf_audit.checks.hub_gguf import HubGGUF, parse_hub_gguf
from gguf_audit.codes import Code
from gguf_audit.errors import GGUFAuditError
from gguf_audit.io.hub import HubURL, hub_endpoint, hub_token, parse_hf_url, quiet_hub_client
from gguf_audit.io.limits import parse_rate_limit
from gguf_audit.tables.listed import ListedFile

__all__ = ["HubListingError", "KnownRepo", "RateLimitWaits", "list_hub_root", "rate_limit_waits"]

log = logging.getLogger(__name__)

REPO_THREADS: Final = 4
"""Repositories of an organisation listed at once."""
MAX_RATE_LIMIT_WAIT_S: Final = 330.0
"""Seconds one listing call may wait for the API's rate limit to reset, in all."""

T = TypeVar("T")

KnownRepo = Callable[[str, str], "list[ListedFile] | None"]
"""``(repo_id, commit sha) -> files``: what an earlier listing found in a repository at that commit (a commit
pins its tree), or None; a repository known at its current sha costs no tree listing."""


class HubListingError(GGUFAuditError, OSError):
    """An ``hf://`` root that cannot be listed at all (an organisation's model list failing)."""


class RateLimitWaits:
    """The Hub's 429 answers while open, and the seconds from each to its thread's next request (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._seconds = 0.0
        self._answers = 0

    @property
    def seconds(self) -> float:
        with self._lock:
            return self._seconds

    @property
    def answers(self) -> int:
        with self._lock:
            return self._answers

    def _add(self, seconds: float = 0.0, answers: int = 0) -> None:
        with self._lock:
            self._seconds += seconds
            self._answers += answers


_open_waits: RateLimitWaits | None = None
_waits_lock = threading.Lock()
_limited_at = threading.local()
"""This thread's last 429, as a monotonic time, until it sends its next request."""


def _on_request(request: Any) -> None:
    """The httpx request hook: a request after a 429 on the same thread ends a wait."""
    began = getattr(_limited_at, "t", None)
    if began is None:
        return
    _limited_at.t = None
    with _waits_lock:
        waits = _open_waits
    if waits is not None:
        waits._add(seconds=time.monotonic() - began)


def _on_response(response: Any) -> None:
    """The httpx response hook: a 429 begins a wait."""
    if getattr(response, "status_code", None) != 429:
        return
    with _waits_lock:
        waits = _open_waits
    if waits is not None:
        _limited_at.t = time.monotonic()
        waits._add(answers=1)


def _hook_waits() -> None:
    try:
        from huggingface_hub import get_session
    except ImportError:
        return
    session = get_session()
    hooks = getattr(session, "event_hooks", None)
    if not isinstance(hooks, dict):
        return
    for kind, hook in (("request", _on_request), ("response", _on_response)):
        chain = hooks.setdefault(kind, [])
        if hook not in chain:
            chain.append(hook)
    session.event_hooks = hooks


@contextmanager
def rate_limit_waits() -> Iterator[RateLimitWaits]:
    """A :class:`RateLimitWaits` counting the Hub's 429s (and the time waited after them) until the block ends."""
    global _open_waits
    waits = RateLimitWaits()
    _hook_waits()
    with _waits_lock:
        _open_waits = waits
    try:
        yield waits
    finally:
        with _waits_lock:
            _open_waits = None


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    status = getattr(response, "status_code", None)
    return status if isinstance(status, int) else None


def _code(exc: BaseException) -> Code:
    status = _status(exc)
    name = type(exc).__name__
    if status == 404 or name in ("RepositoryNotFoundError", "RevisionNotFoundError", "EntryNotFoundError"):
        # The Hub answers 401 for a repository it will not show an anonymous caller (private, or gone).
        return Code.IO_PERMISSION_DENIED if status == 401 else Code.IO_NOT_FOUND
    if status in (401, 403) or name == "GatedRepoError":
        return Code.IO_PERMISSION_DENIED
    if status == 429:
        return Code.IO_RATE_LIMITED
    if isinstance(exc, TimeoutError) or "Timeout" in name:
        return Code.IO_TIMEOUT
    return Code.IO_ERROR


def _message(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0][:300]}" if lines else type(exc).__name__


def _waiting_out_429(fn: Callable[[], T]) -> T:
    """``fn()``, asked again after each 429 once the reset its headers name has passed (bounded)."""
    waited = 0.0
    while True:
        try:
            return fn()
        except Exception as exc:
            if _status(exc) != 429:
                raise
            headers = getattr(getattr(exc, "response", None), "headers", None) or {}
            reset = parse_rate_limit(headers).reset_s
            delay = 1.0 if reset is None else reset + 0.1
            if waited + delay > MAX_RATE_LIMIT_WAIT_S:
                raise
            log.warning("the Hub's API rate-limits the listing: waiting %.1f s", delay)
            time.sleep(delay)
            waited += delay


def _api(options: Mapping[str, Any]) -> Any:
    try:
        from huggingface_hub import HfApi
    except ImportError as exc:
        raise HubListingError("hf:// roots need huggingface_hub: pip install 'gguf-audit[hf]'") from exc
    quiet_hub_client()
    token = hub_token(options)
    return HfApi(endpoint=hub_endpoint(options), token=token if token else False)


def _known_files(known: KnownRepo | None, repo_id: str, sha: str, card: HubGGUF | None) -> list[ListedFile] | None:
    """The files an earlier listing found at ``sha`` (the same commit, the same tree), with this night's card."""
    cached = known(repo_id, sha) if known is not None else None
    if cached is None:
        return None
    return [dataclasses.replace(f, hub_gguf=card if f.url.endswith(".gguf") else None) for f in cached]


def _list_repo(
    api: Any,
    hub: HubURL,
    sha: str | None,
    selected: Callable[[str], bool],
    options: Mapping[str, Any],
    card: HubGGUF | None = None,
    known: KnownRepo | None = None,
) -> list[ListedFile]:
    """The files of one repository at its pinned sha; one ``io.*`` entry when it cannot be listed."""
    repo_id = str(hub.repo_id)
    revision = hub.revision or str(options.get("revision") or "main")
    sub = hub.path
    try:
        if sha is None:
            info = _waiting_out_429(lambda: api.model_info(repo_id, revision=revision, expand=["sha", "gguf"]))
            sha = str(info.sha)
            card = parse_hub_gguf(getattr(info, "gguf", None))
        pinned = sha
        cached = _known_files(known, repo_id, pinned, card) if not sub else None
        if cached is not None:
            return cached
        try:
            entries = _waiting_out_429(
                lambda: list(api.list_repo_tree(repo_id, path_in_repo=sub or None, recursive=True, revision=pinned))
            )
        except Exception as exc:
            if not sub or _status(exc) != 404:
                raise
            # The sub-path may name one file: the tree of a file is not found, its paths-info is.
            entries = _waiting_out_429(lambda: list(api.get_paths_info(repo_id, [sub], revision=pinned)))
            if not entries:
                raise
    except Exception as exc:  # noqa: BLE001 - one repository's failure is its row, never the night's
        code = _code(exc)
        log.warning("cannot list %s: %s (%s)", hub.url_for(sub), _message(exc), code)
        message = f"listing {repo_id}@{revision} failed: {_message(exc)}"
        return [ListedFile(url=hub.url_for(sub), revision=sha, error_code=code, error_message=message)]
    out = []
    prefix = sub.strip("/") + "/" if sub else ""
    for entry in entries:
        if not hasattr(entry, "blob_id"):
            continue  # a folder
        path = str(entry.path)
        rel = path[len(prefix) :] if path.startswith(prefix) else path.rsplit("/", 1)[-1]
        if not selected(rel):
            continue
        lfs = getattr(entry, "lfs", None)
        out.append(
            ListedFile(
                url=hub.url_for(path),
                size=int(entry.size) if entry.size is not None else None,
                etag=getattr(entry, "xet_hash", None),
                version_id=str(entry.blob_id),
                sha256=str(lfs.sha256) if lfs is not None and getattr(lfs, "sha256", None) else None,
                revision=sha,
                hub_gguf=card if path.endswith(".gguf") else None,
            )
        )
    return sorted(out, key=lambda f: f.url)


def list_hub_root(
    root: str, options: Mapping[str, Any], selected: Callable[[str], bool], known: KnownRepo | None = None
) -> Iterator[ListedFile]:
    """Every selected file under an ``hf://`` root, pinned to commit shas; failed repositories as ``io.*`` entries.

    An organisation's repositories are listed at once (a failure raises here);
    their trees are listed on a few threads and their files given a repository
    at a time, in order, as the caller takes them: the files of the repositories
    already taken are not held here.

    ``selected`` takes a path relative to the root's repository (or sub-path);
    ``known`` gives the files of repositories an earlier listing saw at the same
    commit (whose tree is then not listed again).
    Raises HubListingError when an organisation's repositories cannot be
    listed or it has none, ValueError for a malformed root.
    """
    hub = parse_hf_url(root)
    api = _api(options)
    if hub.repo_id is not None:
        return iter(_list_repo(api, hub, None, selected, options, known=known))
    try:
        models = _waiting_out_429(lambda: list(api.list_models(author=hub.namespace, expand=["sha", "gguf"])))
    except Exception as exc:  # any client failure: the root cannot be listed
        raise HubListingError(f"cannot list the models of {hub.namespace!r}: {_message(exc)}") from exc
    if not models:
        raise HubListingError(f"hf://{hub.namespace} has no model repositories (or they are all private)")
    repos = [
        (
            HubURL(hub.namespace, str(m.id).split("/", 1)[1], None, ""),
            getattr(m, "sha", None),
            parse_hub_gguf(getattr(m, "gguf", None)),
        )
        for m in models
    ]
    return _each_repo(api, repos, selected, options, known)


def _each_repo(
    api: Any,
    repos: Sequence[tuple[HubURL, str | None, HubGGUF | None]],
    selected: Callable[[str], bool],
    options: Mapping[str, Any],
    known: KnownRepo | None,
) -> Iterator[ListedFile]:
    with ThreadPoolExecutor(min(REPO_THREADS, len(repos)), thread_name_prefix="gguf-audit-hub") as pool:
        for files in pool.map(lambda r: _list_repo(api, r[0], r[1], selected, options, r[2], known), repos):
            yield from files
