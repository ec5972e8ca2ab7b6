"""Shard-file names: what ``<base>-NNNNN-of-MMMMM.gguf`` says, and which files make one model.

Pure string work on URLs, no I/O. The spelling is llama.cpp's ``LLAMA_SPLIT_PATH``
(``%s-%05d-of-%05d.gguf`` with ``i_split + 1``): the name numbers shards from 1.
A query string or fragment (signed URLs) is kept out of every id. The checks
across a shard set are in :mod:`gguf_audit.checks.shards`.
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable
from typing import Final, NamedTuple

__all__ = [
    "ShardName",
    "file_name",
    "first_shard_name",
    "group_models",
    "model_id_for",
    "parse_shard_name",
    "url_path",
]

# The spelling of LLAMA_SPLIT_PATH; huggingface.js' gguf package matches the same suffix.
_SHARD_SUFFIX: Final = re.compile(r"-(?P<index>\d{5})-of-(?P<count>\d{5})\.gguf\Z")
_GGUF_SUFFIX: Final = ".gguf"


class ShardName(NamedTuple):
    """What a shard's file name says: the set it belongs to and its place in it."""

    model_id: str
    shard_index: int
    """1-based, as in the name."""
    shard_count: int


def _split_url(url: str) -> tuple[str, str]:
    """``url`` without its query and fragment, and that tail (kept for signed URLs)."""
    if "://" not in url:
        return url, ""
    parts = urllib.parse.urlsplit(url)
    tail = ("?" + parts.query if parts.query else "") + ("#" + parts.fragment if parts.fragment else "")
    if not tail:
        return url, ""
    return url[: len(url) - len(tail)], tail


def _path_only(url: str) -> str:
    return _split_url(url)[0]


def url_path(url: str) -> str:
    """``url`` without its query and fragment: the id :func:`group_models` gives a single file whose own id
    is taken."""
    return _path_only(url)


def file_name(url: str) -> str:
    """The last segment of ``url``'s path, without query or fragment: ``m-00001-of-00002.gguf``."""
    return _path_only(url).rsplit("/", 1)[-1]


def parse_shard_name(url: str) -> ShardName | None:
    """The shard set ``url`` names, or None when it is not named like a shard.

    >>> parse_shard_name("s3://b/m/llama-Q4_K_M-00002-of-00005.gguf")
    ShardName(model_id='s3://b/m/llama-Q4_K_M', shard_index=2, shard_count=5)
    """
    path = _path_only(url)
    match = _SHARD_SUFFIX.search(path)
    if match is None or match.start() == 0 or path[match.start() - 1] == "/":
        return None
    return ShardName(path[: match.start()], int(match.group("index")), int(match.group("count")))


def first_shard_name(url: str, count: int) -> str | None:
    """The file name of the first of ``count`` shards in the set ``url`` is named as one of, or None
    when ``url`` is not named like a shard.

    >>> first_shard_name("s3://b/m/llama-00003-of-00005.gguf?sig=x", 5)
    'llama-00001-of-00005.gguf'
    """
    shard = parse_shard_name(url)
    if shard is None:
        return None
    return f"{file_name(shard.model_id)}-{1:05d}-of-{count:05d}.gguf"


def model_id_for(url: str) -> str:
    """The model a file belongs to: its shard set's URL without the ``-NNNNN-of-MMMMM.gguf``
    suffix, or, for a single file, its URL without ``.gguf`` (and without a query string)."""
    shard = parse_shard_name(url)
    if shard is not None:
        return shard.model_id
    path = _path_only(url)
    return path[: -len(_GGUF_SUFFIX)] if path.endswith(_GGUF_SUFFIX) else path


def group_models(urls: Iterable[str]) -> dict[str, list[str]]:
    """Files grouped by model, shards in index order.

    Equal names in different folders stay apart (the folder is part of the id).
    When a single file's id equals a shard set's (``m.gguf`` beside
    ``m-00001-of-00002.gguf``) the single file keeps its whole URL as its id,
    so the two are never judged as one model.
    """
    sets: dict[str, list[tuple[int, int, str]]] = {}
    singles: dict[str, list[str]] = {}
    for url in dict.fromkeys(urls):
        shard = parse_shard_name(url)
        if shard is None:
            singles.setdefault(model_id_for(url), []).append(url)
        else:
            sets.setdefault(shard.model_id, []).append((shard.shard_index, shard.shard_count, url))
    groups: dict[str, list[str]] = {mid: [u for _, _, u in sorted(members)] for mid, members in sets.items()}
    for mid, members in singles.items():
        for url in members:
            key = mid if (mid not in groups and len(members) == 1) else _path_only(url)
            groups[key] = [url]
    return groups
