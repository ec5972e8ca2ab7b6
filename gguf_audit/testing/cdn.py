"""Presigned CDN URLs for the local Hub: what the Hub's LFS redirect points at.

The Hub answers a resolve of an LFS file with a 302 to its CDN, at a URL
presigned for an hour that signs only the path and the expiry (CloudFront's
``Expires=...&Signature=...``), so any ``Range`` may be asked of it until it
expires; then (or once its key is rotated) the CDN answers 403 and the client
must resolve again. :class:`Presigner` makes and checks such URLs for a
:class:`~gguf_audit.testing.http.RangeHTTPServer` playing the CDN.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import threading
import time
import urllib.parse

__all__ = ["Presigner"]


class Presigner:
    """Signs CDN paths for ``ttl_s`` seconds; :meth:`allows` is the CDN's check, :meth:`rotate` revokes all."""

    def __init__(self, ttl_s: float = 3600.0) -> None:
        self.ttl_s = float(ttl_s)
        self._lock = threading.Lock()
        self._key = secrets.token_bytes(16)

    def _signature(self, key: bytes, path: str, expires: int) -> str:
        return hmac.new(key, f"{path}\n{expires}".encode(), hashlib.sha256).hexdigest()[:32]

    def sign(self, url: str) -> str:
        """``url`` with ``Expires`` (unix seconds) and ``Signature`` for its path."""
        path = urllib.parse.unquote(urllib.parse.urlsplit(url).path)
        expires = int(time.time() + self.ttl_s)
        with self._lock:
            key = self._key
        query = urllib.parse.urlencode({"Expires": expires, "Signature": self._signature(key, path, expires)})
        return f"{url}?{query}"

    def allows(self, path: str, query: str) -> bool:
        """Whether a request for ``path`` with ``query`` carries a valid, unexpired signature."""
        params = urllib.parse.parse_qs(query)
        try:
            expires = int(params["Expires"][0])
            given = params["Signature"][0]
        except (KeyError, IndexError, ValueError):
            return False
        with self._lock:
            key = self._key
        return time.time() < expires and hmac.compare_digest(given, self._signature(key, path, expires))

    def rotate(self) -> None:
        """A new signing key: every URL signed so far is refused (403) from now on."""
        with self._lock:
            self._key = secrets.token_bytes(16)
