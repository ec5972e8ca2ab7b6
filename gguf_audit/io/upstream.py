"""Finding and reading a GGUF file's upstream configuration through fsspec.

Where it looks, in order, taking the first place that has ``config.json`` or
``tokenizer_config.json``:

1. the location given (``inspect --upstream``, ``scan --upstream``): that alone;
2. beside the file (its directory, or its repository on the Hub);
3. the repositories the header names: ``general.base_model.N.repo_url``,
   ``general.source.repo_url``, ``general.source.url`` and
   ``general.source.huggingface.repository``. A Hub URL
   (``https://huggingface.co/ORG/NAME``, ``hf.co``, or ``HF_ENDPOINT``'s) and a
   bare ``ORG/NAME`` are read through ``{endpoint}/ORG/NAME/resolve/main/``;
   other URLs and paths as directories. A place that cannot be reached (not
   found, connection refused, no such filesystem) is skipped silently.

Each place costs two requests when it holds neither file (``config.json``,
``tokenizer_config.json``), five when it does (``generation_config.json``,
``chat_template.jinja``, ``tokenizer.json`` too); each file is one bounded
read (:attr:`UpstreamConfig.max_json_bytes`, and
:attr:`UpstreamConfig.max_tokenizer_bytes` for ``tokenizer.json``, which is
reduced at once to its added tokens and the number of ids it spans). Every
request is counted in the auditing file's :class:`IOStats`. An
:class:`UpstreamCache` shared by the files of a batch reads each place once;
the file that reads it pays its requests. Nothing here raises for a file's sake.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import urlsplit

from fsspec.core import url_to_fs

from gguf_audit.checks.upstream import UPSTREAM_FILES, Upstream
from gguf_audit.errors import UsageError
from gguf_audit.format.model import Header
from gguf_audit.io.source import DEFAULT_READ_CONFIG, IOStats, ReadConfig, _with_timeouts

__all__ = [
    "UpstreamCache",
    "UpstreamConfig",
    "candidate_locations",
    "locate_upstream",
    "read_upstream",
    "require_upstream",
]

HUB_HOSTS: Final = ("https://huggingface.co", "https://hf.co")
"""URL prefixes of Hub repositories (``HF_ENDPOINT``'s is added when set)."""

MAX_BASE_MODELS: Final = 8
"""``general.base_model.N`` entries followed at most."""


@dataclass(frozen=True, slots=True)
class UpstreamConfig:
    """Where to look for a file's upstream, and how much of each file to read."""

    location: str | None = None
    """Only this directory or repository URL (``--upstream``); None looks beside the file, then where
    its header points."""
    follow_links: bool = True
    """Follow ``general.base_model.N.repo_url`` and ``general.source.*`` when nothing is beside the file."""
    max_json_bytes: int = 8 << 20
    max_tokenizer_bytes: int = 50 << 20


class UpstreamCache:
    """Each upstream place read once, by whichever file asks first; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[str, tuple[threading.Lock, list[Upstream | None]]] = {}

    def get(self, key: str, load: Callable[[], Upstream | None]) -> Upstream | None:
        with self._lock:
            entry = self._entries.setdefault(key, (threading.Lock(), []))
        lock, value = entry
        with lock:
            if not value:
                value.append(load())
            return value[0]


def _hub_endpoints() -> tuple[str, ...]:
    extra = os.environ.get("HF_ENDPOINT", "").rstrip("/")
    return (*HUB_HOSTS, extra) if extra else HUB_HOSTS


def _repo_location(text: str) -> str | None:
    """A place to read from, for a URL, path or ``ORG/NAME`` a header names; None for anything else."""
    text = text.strip()
    if not text:
        return None
    for endpoint in _hub_endpoints():
        if text.startswith(endpoint + "/"):
            parts = text[len(endpoint) + 1 :].split("/")
            if len(parts) >= 2 and parts[0] and parts[1]:
                return f"{endpoint}/{parts[0]}/{parts[1]}/resolve/main"
            return None
    scheme = urlsplit(text).scheme
    if scheme or text.startswith(("/", "./", "../")):
        return text.rstrip("/")
    parts = text.split("/")
    if len(parts) == 2 and all(parts):
        return f"{_hub_endpoints()[-1]}/{parts[0]}/{parts[1]}/resolve/main"
    return None


def _beside(url: str) -> str | None:
    head, sep, _ = url.rpartition("/")
    if not sep:
        return "."
    return head or "/"


def candidate_locations(url: str, header: Header, config: UpstreamConfig) -> list[str]:
    """The places to look for ``url``'s upstream, in order, without repeats."""
    if config.location is not None:
        return [config.location.rstrip("/") or config.location]
    found: list[str] = []
    beside = _beside(url)
    if beside is not None:
        found.append(beside)
    if config.follow_links:
        count = header.get_int("general.base_model.count") or 0
        keys = [f"general.base_model.{i}.repo_url" for i in range(min(count, MAX_BASE_MODELS))]
        keys += ["general.source.repo_url", "general.source.url", "general.source.huggingface.repository"]
        for key in keys:
            value = header.get_str(key)
            place = _repo_location(value) if value else None
            if place is not None and place not in found:
                found.append(place)
    return found


def locate_upstream(
    url: str,
    header: Header,
    *,
    config: UpstreamConfig,
    stats: IOStats,
    storage_options: Mapping[str, Any] | None = None,
    read: ReadConfig = DEFAULT_READ_CONFIG,
    cache: UpstreamCache | None = None,
) -> Upstream | None:
    """The first upstream found for ``url``; None when no place has one. Never raises."""
    file_protocol = _protocol(url)
    for i, place in enumerate(candidate_locations(url, header, config)):
        # The file's own storage options go only where the file is stored.
        options = storage_options if _protocol(place) == file_protocol else None
        quiet = config.location is None and i > 0

        def load(
            place: str = place, options: Mapping[str, Any] | None = options, quiet: bool = quiet
        ) -> Upstream | None:
            return read_upstream(place, config=config, stats=stats, storage_options=options, read=read, quiet=quiet)

        found = cache.get(place, load) if cache is not None else load()
        if found is not None:
            return found
    return None


def _protocol(url: str) -> str:
    return url.split("://", 1)[0] if "://" in url else "file"


def read_upstream(
    location: str,
    *,
    config: UpstreamConfig = UpstreamConfig(),
    stats: IOStats | None = None,
    storage_options: Mapping[str, Any] | None = None,
    read: ReadConfig = DEFAULT_READ_CONFIG,
    quiet: bool = False,
) -> Upstream | None:
    """The upstream files at ``location``; None when it holds neither ``config.json`` nor
    ``tokenizer_config.json``. ``quiet`` treats a place that fails to answer as absent
    (a linked repository that cannot be reached); otherwise its failures are ``unreadable``."""
    stats = stats if stats is not None else IOStats()
    try:
        fs, root = url_to_fs(location, **_with_timeouts(_protocol(location), storage_options or {}, read))
    except Exception as exc:  # noqa: BLE001 - an unknown protocol or missing driver is a place we cannot read
        return None if quiet else Upstream(location, {}, (("*", _why(exc)),))
    documents: dict[str, Any] = {}
    unreadable: list[tuple[str, str]] = []
    for name in UPSTREAM_FILES:
        if name == "generation_config.json" and not documents and not unreadable:
            break  # neither config.json nor tokenizer_config.json: nothing here
        limit = config.max_tokenizer_bytes if name == "tokenizer.json" else config.max_json_bytes
        outcome = _read_one(fs, f"{root.rstrip('/')}/{name}", limit, stats)
        if outcome is None:
            continue
        if isinstance(outcome, Exception):
            if quiet and not documents:
                return None
            unreadable.append((name, _why(outcome)))
            continue
        parsed = _parse(name, outcome, limit)
        if isinstance(parsed, _Bad):
            unreadable.append((name, parsed.why))
        else:
            documents[name] = parsed
    if not documents and not unreadable:
        return None
    return Upstream(location, documents, tuple(unreadable))


def require_upstream(
    location: str, *, storage_options: Mapping[str, Any] | None = None, read: ReadConfig = DEFAULT_READ_CONFIG
) -> None:
    """Refuse, as a usage error, an upstream location the user named that holds neither ``config.json`` nor
    ``tokenizer_config.json`` (a typo or an empty folder would otherwise compare with nothing, silently).

    A place that exists but cannot be read passes: its failures become ``upstream.unreadable`` rows.
    """
    if read_upstream(location, storage_options=storage_options, read=read) is None:
        raise UsageError(f"--upstream: no config.json or tokenizer_config.json there. Got {location!r}.")


def _read_one(fs: Any, path: str, limit: int, stats: IOStats) -> bytes | Exception | None:
    """The first ``limit + 1`` bytes of ``path``; None when it does not exist."""
    begun = time.perf_counter()
    try:
        data = bytes(fs.cat_file(path, start=0, end=limit + 1))
    except FileNotFoundError:
        stats.add(0, time.perf_counter() - begun)
        return None
    except Exception as exc:  # noqa: BLE001 - any failure of one file is reported, never raised
        stats.add(0, time.perf_counter() - begun)
        if isinstance(exc, IsADirectoryError):
            return None
        return exc
    stats.add(len(data), time.perf_counter() - begun)
    return data


@dataclass(frozen=True, slots=True)
class _Bad:
    why: str


def _parse(name: str, data: bytes, limit: int) -> Any:
    if len(data) > limit:
        return _Bad(f"larger than the {limit}-byte read limit")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        return _Bad(f"not UTF-8 ({exc.reason} at byte {exc.start})")
    if name.endswith(".jinja"):
        return text
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        return _Bad(f"not valid JSON ({getattr(exc, 'msg', type(exc).__name__)} at line {getattr(exc, 'lineno', '?')})")
    if not isinstance(value, dict):
        return _Bad(f"not a JSON object (a {type(value).__name__})")
    if name == "tokenizer.json":
        return _reduce_tokenizer(value)
    return value


def _reduce_tokenizer(doc: Mapping[str, Any]) -> dict[str, Any]:
    """``tokenizer.json`` without its vocabulary: its added tokens and the number of ids it spans."""
    added = [t for t in doc.get("added_tokens") or [] if isinstance(t, dict) and isinstance(t.get("id"), int)]
    model = doc.get("model")
    vocab = model.get("vocab") if isinstance(model, dict) else None
    ids: Iterator[int]
    if isinstance(vocab, dict):
        ids = (v for v in vocab.values() if isinstance(v, int))
    elif isinstance(vocab, list):  # Unigram: [[piece, score], ...], ids are positions
        ids = iter([len(vocab) - 1] if vocab else [])
    else:
        ids = iter(())
    top = max([*ids, *(int(t["id"]) for t in added)], default=-1)
    reduced: dict[str, Any] = {"added_tokens": [{"id": t["id"], "content": t.get("content")} for t in added]}
    if top >= 0:
        reduced["vocab_count"] = top + 1
    return reduced


def _why(exc: BaseException) -> str:
    text = str(exc).splitlines()[0][:200] if str(exc) else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
