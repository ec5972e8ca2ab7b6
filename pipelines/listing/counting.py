"""What listing a collection cost in requests, counted where the requests are sent.

S3 bills every LIST (and the HEADs ``isfile``/``isdir`` make), the Hugging Face
Hub rate-limits every API call: a night's cost includes its listing, not only
its reads. :class:`ListingRequests` counts, while it is open, the requests the
listing sends:

- ``s3://``: every request s3fs's botocore clients send (a ``before-send``
  event handler on the filesystem's client and its session, so clients made
  for other regions count too);
- ``hf://``: every request huggingface_hub's HTTP client sends to the listed
  Hub's endpoint (an httpx request hook on its shared session): model
  listings, repository trees, model infos, their pages and retries; what the
  client sends elsewhere on its own (its agent-detection registry, fetched
  from its default endpoint) is not the listing's;
- local and in-memory roots: none (no request is sent).

Any other store (``gs://``, ``az://``, HTTP manifests) makes the count
unknown (None): a number that leaves out some requests would mislead.

The hooks stay installed (one per client or session, never two) and count
only while a :class:`ListingRequests` is open; requests sent meanwhile by
anything else in the process on the same clients count too (a scan lists
before it reads).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

import fsspec

__all__ = ["ListingRequests", "counting"]

_HOOK_ID: Final = "gguf-audit-listing-requests"
_LOCAL: Final = frozenset({"file", "local", "memory"})


class ListingRequests:
    """Requests counted while listing; ``count`` is None once a store that cannot be counted was listed."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._count = 0
        self._known = True

    @property
    def count(self) -> int | None:
        with self._lock:
            return self._count if self._known else None

    def add(self, n: int = 1) -> None:
        with self._lock:
            self._count += n

    def unknown(self) -> None:
        """A store whose requests are not counted was listed: the total is unknown."""
        with self._lock:
            self._known = False

    def watch(self, fs: fsspec.AbstractFileSystem) -> None:
        """Count the requests ``fs`` sends from now on (or mark the count unknown)."""
        protocol = fs.protocol if isinstance(fs.protocol, str) else fs.protocol[0]
        if protocol in _LOCAL:
            return
        if protocol in ("s3", "s3a") and _hook_s3(fs):
            return
        self.unknown()

    def watch_hub(self, endpoint: str) -> None:
        """Count the requests huggingface_hub sends to ``endpoint`` from now on (or mark the count unknown)."""
        with _current_lock:
            _hub_endpoints.add(endpoint.rstrip("/") + "/")
        if not _hook_hub():
            self.unknown()


_current: ListingRequests | None = None
_current_lock = threading.Lock()
_hub_endpoints: set[str] = set()


def _count_one(*_: Any, **__: Any) -> None:
    """The hook: one request sent (a botocore ``before-send`` event, an httpx request hook)."""
    with _current_lock:
        current = _current
    if current is not None:
        current.add()


def _count_hub(request: Any) -> None:
    """The httpx hook: one request sent, counted when it goes to a Hub being listed."""
    url = str(getattr(request, "url", ""))
    with _current_lock:
        listed = any(url.startswith(e) for e in _hub_endpoints)
    if listed:
        _count_one()


@contextmanager
def counting() -> Iterator[ListingRequests]:
    """A :class:`ListingRequests` that counts until the block ends."""
    global _current
    requests = ListingRequests()
    with _current_lock:
        _current = requests
    try:
        yield requests
    finally:
        with _current_lock:
            _current = None
            _hub_endpoints.clear()


def _hook_s3(fs: Any) -> bool:
    try:
        client = fs.connect()
    except Exception:  # noqa: BLE001 - no client, no count; the listing itself reports the failure
        return False
    emitters = [getattr(getattr(client, "meta", None), "events", None)]
    session = getattr(fs, "session", None)
    emitters.append(getattr(session, "_events", None) if session is not None else None)
    hooked = False
    for events in emitters:
        if events is not None:
            events.register("before-send.s3", _count_one, unique_id=_HOOK_ID)
            hooked = True
    return hooked


def _hook_hub() -> bool:
    try:
        from huggingface_hub import get_session
    except ImportError:
        return False
    session = get_session()
    hooks = getattr(session, "event_hooks", None)
    if not isinstance(hooks, dict):
        return False
    request_hooks = hooks.setdefault("request", [])
    if _count_hub not in request_hooks:
        request_hooks.append(_count_hub)
        session.event_hooks = hooks
    return True
