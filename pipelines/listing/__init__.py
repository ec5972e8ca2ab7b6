"""What a night lists: the collection's files with their listing facts, and what listing them cost."""

from __future__ import annotations

from gguf_audit.pipelines.listing.counting import ListingRequests, counting
from gguf_audit.pipelines.listing.dirs import DirectoryDigests, DirectorySet
from gguf_audit.pipelines.listing.discover import (
    DEFAULT_INCLUDE,
    SAFETENSORS_SUFFIX,
    DiscoveryError,
    Listing,
    Skipped,
    discover,
    listed_from_info,
    read_manifest,
)
from gguf_audit.pipelines.listing.hub import HubListingError, KnownRepo, list_hub_root
from gguf_audit.pipelines.listing.local import LocalWalk, walk_local

__all__ = [
    "DEFAULT_INCLUDE",
    "SAFETENSORS_SUFFIX",
    "DirectoryDigests",
    "DirectorySet",
    "DiscoveryError",
    "HubListingError",
    "KnownRepo",
    "Listing",
    "ListingRequests",
    "LocalWalk",
    "Skipped",
    "counting",
    "discover",
    "list_hub_root",
    "listed_from_info",
    "read_manifest",
    "walk_local",
]
