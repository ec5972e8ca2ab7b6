"""The mirror check's cost per file, the derivation check's, and what a million-file mirror night costs.

Run as ``python benchmarks/bench_mirror.py [--objects 2100] [--markdown]``.
Uploads the corpus models (9 files, 31 MB) to :class:`~gguf_audit.testing.hub.LocalHub`
(``org/llama``) and copies them to moto's S3 (:class:`~gguf_audit.testing.s3.MotoS3Server`),
with ``--objects`` more tiny keys beside them, and measures, counting requests
and body bytes at each server:

- listing: the mirror (s3fs, one stream of keys) and the source (``hf://org``:
  the model listing with ``expand`` and the repository's tree);
- a checksum-decided pair: the copy's HEAD (``ChecksumMode=ENABLED``); the
  source's sha256 came with its listing, so nothing is read;
- a fingerprint-decided pair: the same HEAD, and the source's header and
  sampled blocks read with the scan's default plan (the copy's fingerprints
  are the scan's own ``files`` row: no extra read, its audit's cost is shown
  for reference);
- ``--verify full``: the same HEAD, and the copy read whole and hashed
  (8 MiB ranged GETs; the source's LFS sha256 came with its listing), once:
  the hash is kept for the nights the copy stays unchanged;
- the derivation check (``compare``) at the scan's default budget
  (:class:`~gguf_audit.compare.CompareBudget`: 8 tensors, 32 ranges and 1 MiB
  per file): each quantized corpus file against the F16 over the Hub.

Then a million-file mirror night from those per-file figures: S3 at
us-east-1 S3 Standard request prices (LIST $0.005 per 1,000, GET and HEAD
$0.0004 per 1,000) and the Hub's rate limits (per 5-minute window: 1,000 API
calls and 5,000 resolves for a signed-in free user, 500 and 3,000
anonymous; https://huggingface.co/docs/hub/rate-limits).
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from gguf_audit.audit import AuditConfig, AuditTarget, audit_file
from gguf_audit.compare import CompareBudget, compare_files
from gguf_audit.io.source import ReadConfig
from gguf_audit.pipelines.listing.discover import discover
from gguf_audit.pipelines.scan.mirror import read_head, source_fingerprints
from gguf_audit.pipelines.scan.mirror_verify import hash_whole
from gguf_audit.plan import SampleConfig
from gguf_audit.tables.listed import ListedFile
from gguf_audit.testing.http import RangeHTTPServer
from gguf_audit.testing.hub import LocalHub
from gguf_audit.testing.s3 import MotoS3Server

CORPUS = Path(os.environ.get("GGUF_AUDIT_CORPUS", Path(__file__).resolve().parents[2] / "shared" / "corpus"))
READ = ReadConfig(backoff_s=0.01)
AUDIT = AuditConfig(read=READ, samples=SampleConfig(), semantics=False, templates=False)
LIST_PRICE = 0.005 / 1000
GET_PRICE = 0.0004 / 1000
HUB_WINDOW_S = 300
HUB_API = {"free": 1000, "anonymous": 500}
HUB_RESOLVES = {"free": 5000, "anonymous": 3000}


@dataclass(frozen=True, slots=True)
class Cost:
    what: str
    files: int
    s3_requests: float
    s3_bytes: float
    hub_api: float
    hub_resolves: float
    hub_bytes: float
    cdn_requests: float = 0.0
    """Ranges asked of the CDN the Hub's resolve redirects to (not counted against the Hub's resolve limit)."""

    def cells(self) -> list[str]:
        return [
            self.what,
            str(self.files),
            f"{self.s3_requests:.3g}",
            f"{self.s3_bytes:,.0f}",
            f"{self.hub_api:.3g}",
            f"{self.hub_resolves:.1f}",
            f"{self.cdn_requests:.1f}",
            f"{self.hub_bytes:,.0f}",
        ]


def _models() -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted((CORPUS / "models").glob("*.gguf"))}


def _measure_listing(hub: LocalHub, moto: MotoS3Server, bucket: str, extra: int) -> list[Cost]:
    moto.reset_stats()
    mirror = discover((f"s3://{bucket}/models",), include=("*.gguf", "*.bin"))
    s3 = len(moto.requests)
    hub.reset_stats()
    source = discover(("hf://org",), storage_options={"hf": {"endpoint": hub.endpoint, "token": False}})
    n, m = len(mirror.files), len(source.files)
    return [
        Cost(f"list the mirror: {s3} LISTs in all", n, s3 / n, moto.bytes_sent / n, 0, 0, 0),
        Cost(
            f"list the source (1 repository): {hub.api_requests} API calls in all", m, 0, 0, hub.api_requests / m, 0, 0
        ),
    ]


def _per_file(
    hub: LocalHub, cdn: RangeHTTPServer, moto: MotoS3Server, bucket: str, models: dict[str, bytes]
) -> list[Cost]:
    source = discover(("hf://org",), storage_options={"hf": {"endpoint": hub.endpoint, "token": False}})
    options = {"hf": {"endpoint": hub.endpoint, "token": False}}
    moto.reset_stats()
    for name in models:
        read_head(f"s3://{bucket}/models/llama/{name}", {}, "hf-revision")
    heads, head_bytes = len(moto.requests), moto.bytes_sent
    n = len(models)
    checksum = Cost("mirror check, checksum-decided", n, heads / n, head_bytes / n, 0, 0, 0)
    hub.reset_stats()
    cdn.reset_stats()
    with ThreadPoolExecutor(4) as pool:
        found = list(pool.map(lambda f: source_fingerprints(f, options, AUDIT), source.files))
    if any(f.weights is None for f in found):
        raise RuntimeError("a source file's fingerprint could not be computed")
    fingerprint = Cost(
        "mirror check, fingerprint-decided",
        n,
        heads / n,
        head_bytes / n,
        0,
        hub.resolve_requests / n,
        (hub.resolve_bytes_sent + cdn.bytes_sent) / n,
        len(cdn.requests) / n,
    )
    moto.reset_stats()
    for name, data in models.items():
        hashed = hash_whole(ListedFile(f"s3://{bucket}/models/llama/{name}", len(data)), {})
        if hashed.sha256 is None:
            raise RuntimeError(f"hashing {name} failed: {hashed.error}")
    whole = Cost(
        "mirror check, --verify full (the copy hashed once)",
        n,
        (heads + len(moto.requests)) / n,
        (head_bytes + moto.bytes_sent) / n,
        0,
        0,
        0,
    )
    moto.reset_stats()
    for name in models:
        audit_file(AuditTarget(f"s3://{bucket}/models/llama/{name}", size=len(models[name])), config=AUDIT)
    own = Cost(
        "(the scan's own audit of a copy, for reference)", n, len(moto.requests) / n, moto.bytes_sent / n, 0, 0, 0
    )
    return [checksum, fingerprint, whole, own]


def _derivation(hub: LocalHub, cdn: RangeHTTPServer, models: dict[str, bytes]) -> Cost:
    options = {"endpoint": hub.endpoint, "token": False}
    reference = "hf://org/llama/tiny-llama-F16.gguf"
    quants = [n for n in models if not any(t in n for t in ("F16", "F32", "BF16"))]
    hub.reset_stats()
    cdn.reset_stats()
    for name in quants:
        compare_files(
            f"hf://org/llama/{name}", reference, budget=CompareBudget(), storage_options=options, read_config=READ
        )
    n = len(quants)
    return Cost(
        "derivation check (compare, default budget)",
        n,
        0,
        0,
        0,
        hub.resolve_requests / n,
        (hub.resolve_bytes_sent + cdn.bytes_sent) / n,
        len(cdn.requests) / n,
    )


def _night(rows: list[Cost], files: int, per_repo: int, changed: float) -> list[list[str]]:
    """A million-file night: a listing, and the changed pairs judged by checksum or by fingerprint.

    The first night lists every repository's tree (``ceil(repos / 1000) + repos`` API calls); this is an
    incremental night after it."""
    checksum = next(r for r in rows if r.what.startswith("mirror check, checksum"))
    fingerprint = next(r for r in rows if r.what.startswith("mirror check, fingerprint"))
    repos = math.ceil(files / per_repo)
    lists = math.ceil(files / 1000)
    judged = round(files * changed)
    # The model pages, and a tree for each repository whose commit moved (at worst one per changed pair);
    # a repository at a commit the last night's rows know is not listed again.
    hub_listing = math.ceil(repos / 1000) + min(repos, judged)
    out = []
    for label, row in (("every copy with a full-object sha256", checksum), ("no copy with one", fingerprint)):
        heads = judged * row.s3_requests
        resolves = judged * row.hub_resolves
        s3_cost = lists * LIST_PRICE + heads * GET_PRICE
        api_min = hub_listing / HUB_API["free"] * HUB_WINDOW_S / 60
        resolve_min = resolves / HUB_RESOLVES["free"] * HUB_WINDOW_S / 60
        out.append(
            [
                label,
                f"{lists:,}",
                f"{hub_listing:,}",
                f"{heads:,.0f} HEAD",
                f"{resolves:,.0f}",
                f"{judged * row.hub_bytes / 1e9:.2f} GB",
                f"${s3_cost:.4f}",
                f"{api_min:,.0f} + {resolve_min:,.0f} min",
            ]
        )
    return out


def _table(head: Sequence[str], rows: Sequence[Sequence[str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=True)]
    return "\n".join("  ".join(str(c).ljust(w) for c, w in zip(r, widths, strict=True)) for r in [head, *rows])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--objects", type=int, default=2100, help="tiny keys added beside the copies (listing)")
    parser.add_argument("--files", type=int, default=1_000_000, help="files of the projected mirror")
    parser.add_argument("--per-repo", type=int, default=10, help="files per source repository (projection)")
    parser.add_argument("--changed", type=float, default=0.01, help="share of pairs changed on a night (projection)")
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args(argv)
    models = _models()
    os.environ.setdefault("AWS_ACCESS_KEY_ID", MotoS3Server.key)
    os.environ.setdefault("AWS_SECRET_ACCESS_KEY", MotoS3Server.secret)
    with RangeHTTPServer() as cdn, LocalHub(cdn=cdn) as hub, MotoS3Server() as moto:
        os.environ["AWS_ENDPOINT_URL"] = moto.endpoint_url
        hub.add_org("org")
        hub.create_repo("org/llama")
        hub.add_files("org/llama", models)
        bucket = f"mirror-{uuid.uuid4().hex[:8]}"
        moto.make_bucket(bucket)
        client = moto.client()
        for i, (name, data) in enumerate(models.items()):
            extra = {"ChecksumAlgorithm": "SHA256"} if i % 2 == 0 else {}
            client.put_object(Bucket=bucket, Key=f"models/llama/{name}", Body=data, **extra)
        with ThreadPoolExecutor(16) as pool:
            list(
                pool.map(
                    lambda i: client.put_object(Bucket=bucket, Key=f"models/pad/{i:06d}.bin", Body=b"x"),
                    range(args.objects),
                )
            )
        rows = _measure_listing(hub, moto, bucket, args.objects)
        rows += _per_file(hub, cdn, moto, bucket, models)
        rows.append(_derivation(hub, cdn, models))
    head = [
        "measured",
        "files",
        "S3 req/file",
        "S3 bytes/file",
        "Hub API/file",
        "Hub resolves/file",
        "CDN ranges/file",
        "Hub+CDN bytes/file",
    ]
    print(_table(head, [r.cells() for r in rows], args.markdown))
    print()
    print(
        f"a mirror night of {args.files:,} files ({args.per_repo} per repository), "
        f"{args.changed:.0%} of pairs changed; Hub time at a free account's limits (API listing + resolves):"
    )
    night_head = [
        "copies",
        "S3 LISTs",
        "Hub API calls",
        "S3 HEAD/GET",
        "Hub resolves",
        "Hub bytes",
        "S3 cost",
        "Hub time",
    ]
    print(_table(night_head, _night(rows, args.files, args.per_repo, args.changed), args.markdown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
