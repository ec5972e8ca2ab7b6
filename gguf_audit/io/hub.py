"""``hf://`` URLs as the Hugging Face Hub's resolve URLs: which repository, revision and file, and how to ask.

A Hub file is read over plain HTTP range requests to
``{endpoint}/{repo}/resolve/{revision}/{path}`` (the URL ``hf_hub_url`` makes),
pinned to the commit sha the listing saw, so every request of a file reads
the same bytes however the branch moves meanwhile. The Hub redirects LFS
files to its CDN; the HTTP client follows the redirect with the ``Range``
header kept (and drops ``Authorization`` on the way to another host). This
reads exactly the bytes asked, concurrently, where ``HfFileSystem`` would
read ahead 5 MiB per file and send a file's ranges one after another.

The endpoint is the storage option ``endpoint`` or the one huggingface_hub
uses (``HF_ENDPOINT``); the token is the one huggingface_hub resolves
(``HF_TOKEN``, then the login file), sent as ``Authorization: Bearer``, never
taken from options (``token: false`` asks anonymously) and never stored.
"""

from __future__ import annotations

import os
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "HF_DEFAULT_ENDPOINT",
    "HubURL",
    "hub_endpoint",
    "hub_headers",
    "hub_token",
    "parse_hf_url",
    "quiet_hub_client",
    "resolve_url",
]

HF_DEFAULT_ENDPOINT: Final = "https://huggingface.co"
_REPO_TYPES: Final = ("datasets/", "spaces/")


@dataclass(frozen=True, slots=True)
class HubURL:
    """An ``hf://`` URL's parts: ``hf://NAMESPACE[/NAME[@REVISION][/PATH]]``."""

    namespace: str
    name: str | None
    revision: str | None
    """As written in the URL (a branch, tag or sha; ``%2F`` decoded), None for the default branch."""
    path: str

    @property
    def repo_id(self) -> str | None:
        return f"{self.namespace}/{self.name}" if self.name is not None else None

    def url_for(self, path: str) -> str:
        """The ``hf://`` URL of ``path`` in this URL's repository, at its revision as written."""
        if self.name is None:
            raise ValueError(f"hf://{self.namespace} names no repository")
        rev = f"@{urllib.parse.quote(self.revision, safe='')}" if self.revision else ""
        tail = f"/{path.strip('/')}" if path.strip("/") else ""
        return f"hf://{self.namespace}/{self.name}{rev}{tail}"


def parse_hf_url(url: str) -> HubURL:
    """The parts of ``hf://ORG``, ``hf://ORG/REPO``, ``hf://ORG/REPO@REV/sub/path`` (``models/`` may lead).

    Raises ValueError for another scheme, dataset or space repositories, and empty parts.
    """
    if not url.startswith("hf://"):
        raise ValueError(f"not an hf:// URL: {url!r}")
    rest = url.removeprefix("hf://").strip("/")
    if rest.startswith(_REPO_TYPES):
        raise ValueError(f"only model repositories can be audited; got {url!r}")
    rest = rest.removeprefix("models/")
    parts = rest.split("/")
    namespace = parts[0]
    if not namespace or "@" in namespace:
        raise ValueError(f"an hf:// URL needs a user or organisation: hf://ORG[/REPO[@REVISION][/PATH]]. Got {url!r}.")
    if len(parts) == 1:
        return HubURL(namespace, None, None, "")
    name, at, revision = parts[1].partition("@")
    if not name or (at and not revision):
        raise ValueError(f"bad repository in {url!r}: hf://ORG/REPO[@REVISION][/PATH]")
    path = "/".join(p for p in parts[2:] if p)
    return HubURL(namespace, name, urllib.parse.unquote(revision) if at else None, path)


def resolve_url(endpoint: str, repo_id: str, revision: str, path: str) -> str:
    """``{endpoint}/{repo_id}/resolve/{revision}/{path}``, quoted as ``hf_hub_url`` quotes it."""
    rev = urllib.parse.quote(revision, safe="")
    return f"{endpoint.rstrip('/')}/{repo_id}/resolve/{rev}/{urllib.parse.quote(path)}"


def hub_endpoint(options: Mapping[str, Any]) -> str:
    """The storage option ``endpoint``, else huggingface_hub's (``HF_ENDPOINT``), else the public Hub."""
    endpoint = options.get("endpoint")
    if isinstance(endpoint, str) and endpoint:
        return endpoint.rstrip("/")
    try:
        from huggingface_hub import constants
    except ImportError:
        return os.environ.get("HF_ENDPOINT", HF_DEFAULT_ENDPOINT).rstrip("/")
    return str(constants.ENDPOINT).rstrip("/")


def hub_token(options: Mapping[str, Any]) -> str | None:
    """The token huggingface_hub resolves (``HF_TOKEN``, then the login file); None when anonymous.

    ``token: false`` in the options asks anonymously; a token given in the
    options is refused (PermissionError, so a file's audit reports
    ``io.permission_denied``): credentials come from the environment and the login only.
    """
    given = options.get("token")
    if given is False:
        return None
    if given not in (None, True):
        raise PermissionError(
            "a token in the storage options is refused: set HF_TOKEN or log in with huggingface_hub instead"
        )
    try:
        from huggingface_hub import get_token
    except ImportError:
        return os.environ.get("HF_TOKEN") or None
    token = get_token()
    return token or None


def hub_headers(options: Mapping[str, Any]) -> dict[str, str]:
    """The headers of every resolve request: the bearer token when there is one."""
    token = hub_token(options)
    return {"Authorization": f"Bearer {token}"} if token else {}


def quiet_hub_client() -> None:
    """Keep huggingface_hub to the requests gguf-audit asks for.

    With its telemetry on, the client adds library versions to its user agent
    and, once a day per machine, fetches an "agent harness" registry from its
    default endpoint, whatever endpoint a scan lists: a request to a host the
    user never named (and, offline, a connection attempt with a 3 s timeout).
    This turns that off for the process, unless the user set
    ``HF_HUB_DISABLE_TELEMETRY`` themselves (their choice wins).
    """
    if "HF_HUB_DISABLE_TELEMETRY" in os.environ:
        return
    try:
        from huggingface_hub import constants
    except ImportError:
        return
    constants.HF_HUB_DISABLE_TELEMETRY = True
