"""What a night would do, said before it does it: ``scan --dry-run``, and the checks a scan makes before listing.

A dry run lists the collection and plans reuse exactly as an incremental night
does (:func:`~gguf_audit.pipelines.scan.reuse.plan_reuse` against the last
committed run), then estimates the reads from the config's budgets: one header
read of ``initial_bytes`` per file (more when a header is larger), and with
samples at most ``max_requests`` requests and ``budget_bytes`` per file. No
object is read and nothing is written to the output.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
from collections.abc import Iterator
from dataclasses import dataclass

from gguf_audit.errors import UsageError
from gguf_audit.io.options import options_for
from gguf_audit.io.protocols import ProtocolUnavailable, check_protocol
from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.listing import discover
from gguf_audit.pipelines.scan.reuse import base_run, plan_reuse
from gguf_audit.pipelines.store import LEASE_DIR, Output
from gguf_audit.report.format import counted, fmt_bytes

log = logging.getLogger(__name__)

__all__ = ["NightEstimate", "check_protocols", "estimate_night", "removed_if_left_empty", "render_estimate"]


@dataclass(frozen=True, slots=True)
class NightEstimate:
    """A night's listing and reuse as a scan would find them, and the reads it would make (an estimate)."""

    n_listed: int
    listed_bytes: int
    n_read: int
    n_reused: int
    base_run_id: str | None
    reuse_note: str | None
    listing_requests: int | None
    requests: int
    """At most: one header read per file, plus the sample budget's requests."""
    bytes: int
    """At most: each file's first read (or the whole file, when smaller), plus the sample budget's bytes."""
    samples: bool
    urls: tuple[str, ...]
    """The files a night would read, in listing order."""


def check_protocols(config: ScanConfig) -> None:
    """Refuse (one line, exit 2) a root, manifest or output whose protocol's extra is not installed."""
    for url in (*config.scan.roots, *config.scan.manifests, str(config.scan.out)):
        try:
            check_protocol(url)
        except ProtocolUnavailable as exc:
            raise UsageError(str(exc)) from None


def _base(config: ScanConfig) -> tuple[Output | None, str | None, str | None]:
    """The output, read only, and the run an incremental night would build on (nothing is made)."""
    out_url = str(config.scan.out)
    options = config.out_storage_options
    out = Output(out_url, dict(options) if options is not None else options_for(out_url, config.storage_options))
    if not config.scan.incremental:
        return out, None, None
    if not out.fs.exists(out.path("runs")):
        return out, None, "incremental: no committed run yet, every file is read"
    run_id, note = base_run(out, config)
    return out, run_id, note


def estimate_night(config: ScanConfig) -> NightEstimate:
    """List the collection, plan the night's reuse and estimate its reads; no object is read."""
    out, base_run_id, reuse_note = _base(config)
    listing = discover(
        config.scan.roots,
        manifests=config.scan.manifests,
        include=config.scan.include,
        exclude=config.scan.exclude,
        storage_options=config.storage_options,
    )
    log.info("listed %d files (%d bytes) in %.2f s", len(listing.files), listing.total_bytes, listing.seconds)
    plan = plan_reuse(out, base_run_id, listing) if out is not None else None
    read = listing.files if plan is None else plan.read
    audit = config.audit_config
    first = audit.read.initial_bytes
    sampled = audit.samples
    requests = n_bytes = 0
    for file in read:
        size = file.size if file.size is not None else first
        n_bytes += min(size, first)
        requests += 1
        if sampled is not None and size > first:
            n_bytes += min(sampled.budget_bytes, size - first)
            requests += sampled.max_requests
    return NightEstimate(
        n_listed=len(listing.files),
        listed_bytes=listing.total_bytes,
        n_read=len(read),
        n_reused=0 if plan is None else len(plan.reuse),
        base_run_id=base_run_id,
        reuse_note=reuse_note,
        listing_requests=listing.requests,
        requests=requests,
        bytes=n_bytes,
        samples=sampled is not None,
        urls=tuple(file.url for file in read),
    )


def render_estimate(estimate: NightEstimate, *, shown: int = 20) -> str:
    """The dry run's report: the files a night would read, then what it would cost (an estimate, said so)."""
    e = estimate
    base = f" (incremental on {e.base_run_id}: {counted(e.n_reused, 'file')} unchanged)" if e.base_run_id else ""
    lines = [f"dry run: {counted(e.n_listed, 'file')} listed ({fmt_bytes(e.listed_bytes)}){base}"]
    if e.reuse_note:
        lines.append(f"  ({e.reuse_note})")
    lines.append(f"would read {counted(e.n_read, 'file')}:")
    lines += [f"  {url}" for url in e.urls[:shown]]
    if len(e.urls) > shown:
        lines.append(f"  … {len(e.urls) - shown} more")
    what = "headers and sampled blocks" if e.samples else "headers only"
    listed = f"; listing sent {counted(e.listing_requests, 'request')}" if e.listing_requests else ""
    lines.append(
        f"estimate ({what}): at most {counted(e.requests, 'request')} and about {fmt_bytes(e.bytes)} "
        f"(a header larger than the first read costs more){listed}"
    )
    lines.append("--dry-run: no object was read and nothing was written to --out")
    return "\n".join(lines)


def _only_leases(path: str) -> bool:
    """Whether the folder holds nothing but the lease a scan took (folders and its files)."""
    for folder, dirs, files in os.walk(path):
        relative = os.path.relpath(folder, path)
        if files and relative.split(os.sep)[0] != LEASE_DIR:
            return False
        if relative == "." and any(d != LEASE_DIR for d in dirs):
            return False
    return True


@contextlib.contextmanager
def removed_if_left_empty(config: ScanConfig) -> Iterator[None]:
    """A local ``--out`` the scan makes is removed again when the scan fails and leaves nothing in it but its lease."""
    out = str(config.scan.out)
    local = "://" not in out or out.startswith("file://")
    path = out.removeprefix("file://")
    existed = not local or os.path.exists(path)
    try:
        yield
    except BaseException:
        if not existed and os.path.isdir(path) and _only_leases(path):
            shutil.rmtree(path, ignore_errors=True)
        raise
