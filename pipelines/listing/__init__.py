"""What a night lists: the collection's files with their listing facts, and what listing them cost."""

from __future__ import annotations

from gguf_audit.pipelines.listing.dirs import DirectorySet
from gguf_audit.pipelines.listing.discover import DiscoveryError, Listing, discover
from gguf_audit.pipelines.listing.hub import KnownRepo, rate_limit_waits

__all__ = [
    "DirectorySet",
    "DiscoveryError",
    "KnownRepo",
    "Listing",
    "discover",
    "rate_limit_waits",
]
