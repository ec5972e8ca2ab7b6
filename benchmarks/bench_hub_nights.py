"""What listing an ``hf://`` organisation costs a night: the first, a quiet one, one where some repositories moved.

Run as ``python benchmarks/bench_hub_nights.py [--repos 1000] [--moved 10] [--markdown]``.

Builds an organisation of ``--repos`` repositories of one small GGUF each on
:class:`~gguf_audit.testing.hub.LocalHub` (pages of 1,000 models, as the Hub
serves them) and lists it with :func:`~gguf_audit.pipelines.listing.discover`
through the real huggingface_hub client, three nights in a row:

- the first night, nothing known: the model pages, then a tree per repository;
- a quiet night, every repository at the commit the first night listed
  (``known``, as a scan builds it from the base night's ``files`` rows,
  :mod:`gguf_audit.pipelines.scan.hub_known`): the model pages only;
- a night after ``--moved`` repositories got a new commit: the pages and one
  tree per moved repository;
- the quiet night again with the Hub answering the first models page 429
  (``Retry-After: 1``): the page asked again after the wait, which
  :func:`~gguf_audit.pipelines.listing.hub.rate_limit_waits` reports.

Per night: API calls the Hub answered (its own log), calls the listing
counted, seconds waited out, wall time.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from dataclasses import dataclass

from gguf_audit.pipelines.listing.discover import Listing, discover
from gguf_audit.pipelines.listing.hub import KnownRepo, rate_limit_waits
from gguf_audit.tables.listed import ListedFile
from gguf_audit.testing.hub import LocalHub

DATA = b"GGUF" + bytes(60)


@dataclass(frozen=True, slots=True)
class Night:
    name: str
    api_calls: int
    tree_calls: int
    counted: int | None
    waited_s: float
    seconds: float
    n_files: int


def _known(listing: Listing) -> KnownRepo:
    """What a scan's base night gives: each repository's files by (repo_id, commit)."""
    by_repo: dict[tuple[str, str], list[ListedFile]] = {}
    for f in listing.files:
        repo_id = "/".join(f.url.removeprefix("hf://").split("/", 2)[:2])
        by_repo.setdefault((repo_id, str(f.revision)), []).append(f)
    return lambda repo_id, sha: by_repo.get((repo_id, sha))


def _night(hub: LocalHub, name: str, known: KnownRepo | None) -> tuple[Night, Listing]:
    hub.reset_stats()
    begun = time.perf_counter()
    with rate_limit_waits() as waited:
        listing = discover(
            ["hf://org"], storage_options={"hf": {"endpoint": hub.endpoint, "token": False}}, known=known
        )
    seconds = time.perf_counter() - begun
    trees = sum(1 for r in hub.requests if "/tree/" in r.path)
    night = Night(name, hub.api_requests, trees, listing.requests, waited.seconds, seconds, len(listing.files))
    return night, listing


def run(n_repos: int, n_moved: int) -> list[Night]:
    with LocalHub() as hub:
        hub.add_org("org")
        for i in range(n_repos):
            hub.create_repo(f"org/m{i:05d}")
            hub.add_files(f"org/m{i:05d}", {"m.gguf": DATA})
        first, listing = _night(hub, "first night", None)
        quiet, _ = _night(hub, "quiet night", _known(listing))
        for i in range(0, n_repos, max(1, n_repos // max(1, n_moved)))[:n_moved]:
            hub.add_files(f"org/m{i:05d}", {"m.gguf": DATA + b"\x01"})
        moved, listing = _night(hub, f"{n_moved} repositories moved", _known(listing))
        hub.fail_next_with_429(1, reset_s=1, resource="api")
        limited, _ = _night(hub, "quiet night, one 429", _known(listing))
        return [first, quiet, moved, limited]


def _table(nights: Sequence[Night], markdown: bool) -> str:
    head = ("night", "API calls", "tree calls", "counted", "waited s", "wall s", "files")
    rows = [
        (
            n.name,
            str(n.api_calls),
            str(n.tree_calls),
            str(n.counted),
            f"{n.waited_s:.1f}",
            f"{n.seconds:.2f}",
            str(n.n_files),
        )
        for n in nights
    ]
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        return "\n".join([*lines, *("| " + " | ".join(r) + " |" for r in rows)])
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
    return "\n".join("  ".join(x.ljust(w) for x, w in zip(r, widths, strict=True)) for r in [head, *rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repos", type=int, default=1000)
    parser.add_argument("--moved", type=int, default=10)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    print(_table(run(args.repos, args.moved), args.markdown))


if __name__ == "__main__":
    main()
