"""Whether a URL's protocol can be read here, said before anything is opened.

An unknown protocol (``foo://``) or one whose fsspec implementation is not
installed (``s3://`` without s3fs) is the user's to fix, not a problem of the
file: :func:`check_protocol` names the protocol and the extra that brings it,
so commands can refuse the URL as a usage error instead of reporting
``internal.unexpected`` for it.
"""

from __future__ import annotations

import os
from typing import Final

import fsspec
from fsspec.core import split_protocol

from gguf_audit.errors import GGUFAuditError

__all__ = ["EXTRAS", "ProtocolUnavailable", "check_protocol", "local_directory"]

EXTRAS: Final[dict[str, str]] = {"s3": "s3", "s3a": "s3", "hf": "hf", "gs": "gcs", "gcs": "gcs"}
"""The gguf-audit extra that installs each protocol's filesystem."""

_LOCAL: Final = frozenset({"file", "local"})


class ProtocolUnavailable(GGUFAuditError, ValueError):
    """A URL whose protocol fsspec does not know, or whose filesystem is not installed."""


def check_protocol(url: str) -> str:
    """The URL's protocol (``file`` for a plain path), or :class:`ProtocolUnavailable` saying what to install."""
    protocol = split_protocol(url)[0] or "file"
    try:
        fsspec.get_filesystem_class(protocol)
    except ValueError:
        known = ", ".join(f"{p}://" for p in ("s3", "gs", "hf", "http", "https", "file"))
        raise ProtocolUnavailable(f"unknown protocol {protocol!r} in {url!r}; gguf-audit reads {known}") from None
    except ImportError:
        extra = EXTRAS.get(protocol)
        hint = f"pip install 'gguf-audit[{extra}]'" if extra else f"install the fsspec filesystem for {protocol}://"
        raise ProtocolUnavailable(f"{protocol}:// URLs need an extra that is not installed: {hint}") from None
    return protocol


def local_directory(url: str) -> str | None:
    """The path, when the URL names a local directory (which a one-file command cannot read)."""
    protocol, path = split_protocol(url)
    if (protocol or "file") not in _LOCAL:
        return None
    return path if os.path.isdir(path) else None
