"""What a listing says of one file before anything is read: :class:`ListedFile`.

It lives with the tables, not with discovery in ``gguf_audit.pipelines``,
because the ``files`` table records these facts (its "what the listing said"
columns) and the row builders take them; the tables must not import the
pipelines. Discovery makes them, an incremental run compares them.

Pure: a frozen value.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gguf_audit.checks.hub_gguf import HubGGUF
from gguf_audit.codes import Code
from gguf_audit.redact import redact_url

__all__ = ["ListedFile"]


@dataclass(frozen=True, slots=True)
class ListedFile:
    """One file as the listing (or a manifest) described it, before anything is read.

    ``url`` is the file's identity, in every row and message: redacted
    (:func:`gguf_audit.redact.redact_url`), stable across nights. The URL to
    read, when it holds a secret (``user:password@``, a presigned query), is
    :attr:`read_url`, which no table, message or ``repr`` shows; make both
    with :meth:`at`.
    """

    url: str
    size: int | None = None
    etag: str | None = None
    version_id: str | None = None
    mtime: datetime | None = None
    sha256: str | None = None
    revision: str | None = None
    """The commit the file was listed at (``hf://``: the sha its revision pointed at); reads are pinned to it."""
    error_code: Code | None = None
    """Set when the listing itself failed for this entry (a repository that could not be listed): the
    ``io.*`` code the file's row gets instead of an audit, with :attr:`error_message`."""
    error_message: str | None = None
    hub_gguf: HubGGUF | None = field(default=None, compare=False)
    """``hf://`` files: the Hub's ``gguf`` card of the repository, from the listing (compared with the header)."""
    read_url: str | None = field(default=None, repr=False, compare=False)
    """The URL bytes are read from when it differs from :attr:`url` (its credentials); None: :attr:`url`.
    Goes to the workers that read, never into a row."""

    @classmethod
    def at(cls, url: str, **facts: Any) -> ListedFile:
        """The file at ``url`` (which may hold credentials): ``url`` redacted, the real one kept to read."""
        shown = redact_url(url)
        return cls(url=shown, read_url=None if shown == url else url, **facts)

    @property
    def source_url(self) -> str:
        """The URL to read the file's bytes from."""
        return self.url if self.read_url is None else self.read_url

    def unchanged_since(self, previous: ListedFile) -> bool:
        """Whether the listing shows the same bytes as ``previous`` (same URL, an earlier run).

        The size must match and so must the strongest identity both listings
        have: the LFS sha256, then a version id, then an ETag, then the
        modification time. With none in common the file counts as changed.
        """
        if self.size is None or self.size != previous.size:
            return False
        for mine, theirs in (
            (self.sha256, previous.sha256),
            (self.version_id, previous.version_id),
            (self.etag, previous.etag),
        ):
            if mine is not None and theirs is not None:
                return mine == theirs
        if self.mtime is not None and previous.mtime is not None:
            return self.mtime == previous.mtime
        return False
