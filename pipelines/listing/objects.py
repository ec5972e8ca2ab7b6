"""An S3 root's keys streamed a page at a time, so listing a million keys never holds a million info dicts.

``fs.find(path, detail=True)`` on s3fs gathers every key's info dict into a
list, then a dict, and fills its directory cache with them before the first
one can be made into a column: the driver held every key's dict while a root
was listed. :func:`s3_keys` asks the same
flat listing (ListObjectsV2 with no delimiter, or ListObjectVersions on a
version-aware filesystem: one request per 1,000 keys) through s3fs's own
``_iterdir`` on the filesystem's own event loop, so the requests go through
the client :mod:`~gguf_audit.pipelines.listing.counting` counts, with the
filesystem's credentials, endpoint and region, and gives its info dicts (the
same ones ``find`` gives) :data:`PAGE_KEYS` at a time: the caller turns each
page into columns before the next is asked for.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

import fsspec
from fsspec.asyn import sync

from gguf_audit.tables.listed import ListedFile

__all__ = ["PAGE_KEYS", "KeyStream", "StreamedFiles", "s3_keys", "streams_keys"]

PAGE_KEYS: Final = 1000
"""Info dicts taken from the stream at a time: one ListObjectsV2 page's worth."""

_S3_PROTOCOLS: Final = frozenset({"s3", "s3a"})


def streams_keys(fs: fsspec.AbstractFileSystem) -> bool:
    """Whether ``fs`` is an s3fs filesystem whose listing :func:`s3_keys` can stream."""
    protocols = (fs.protocol,) if isinstance(fs.protocol, str) else tuple(fs.protocol)
    return bool(_S3_PROTOCOLS & set(protocols)) and all(
        callable(getattr(fs, name, None)) for name in ("_iterdir", "split_path")
    )


@dataclass(slots=True)
class KeyStream:
    """What :func:`s3_keys` saw so far: every key the store named, and whether they came in path order."""

    keys: int = 0
    """Keys the listing named, placeholders and keys the globs leave out included."""
    in_order: bool = True
    """False once a key came before the one listed ahead of it (S3 Express directory buckets list unordered)."""


@dataclass(frozen=True, slots=True)
class StreamedFiles:
    """A root's files, made as its keys are listed (iterate once), and what the listing saw (read it after)."""

    files: Iterator[ListedFile]
    seen: KeyStream

    def __iter__(self) -> Iterator[ListedFile]:
        return self.files


def s3_keys(fs: Any, path: str, seen: KeyStream) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """``(name, info)`` for every key under the s3fs path ``path``, as the store lists them, counted in ``seen``.

    ``path`` is a bucket or a bucket and key prefix, without protocol or
    trailing slash; the keys under ``prefix/`` are listed (as ``find`` lists
    them), not those that merely start with ``prefix``. Errors are s3fs's own
    (a missing bucket is a ``FileNotFoundError``). The stream is closed when
    the iterator is, whether or not it was read to its end.
    """
    bucket, key, _ = fs.split_path(path)
    prefix = key.lstrip("/") + "/" if key else ""
    entries: AsyncGenerator[dict[str, Any], None] = fs._iterdir(bucket, delimiter="", prefix=prefix)
    last = ""
    try:
        while page := sync(fs.loop, _take, entries, PAGE_KEYS):
            seen.keys += len(page)
            for info in page:
                name = str(info["name"])
                if name < last:
                    seen.in_order = False
                last = name
                yield name, info
            del page
    finally:
        sync(fs.loop, entries.aclose)


async def _take(entries: AsyncGenerator[dict[str, Any], None], n: int) -> list[dict[str, Any]]:
    """Up to ``n`` items of ``entries`` (fewer at its end, none past it).

    Raises the OSError a failed LIST is: s3fs's paginated listing passes botocore's errors through as they come,
    and neither a ``ClientError`` (denied, no such bucket) nor a ``BotoCoreError`` (no endpoint) is one.
    """
    # s3fs's own dependency, loaded with it
    from botocore.exceptions import BotoCoreError, ClientError  # type: ignore[import-untyped]
    from s3fs.errors import translate_boto_error

    page: list[dict[str, Any]] = []
    while len(page) < n:
        try:
            page.append(await anext(entries))
        except StopAsyncIteration:
            break
        except ClientError as exc:
            raise translate_boto_error(exc) from exc
        except BotoCoreError as exc:
            raise ConnectionError(str(exc)) from exc
    return page
