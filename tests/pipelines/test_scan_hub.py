"""End to end over LocalHub with the real huggingface_hub client: hf:// organisations, revisions, nights.

The scan's dask workers reach the hub through the ``endpoint`` storage option
(``[storage_options.hf]``), as they would reach a mirror through it or
``HF_ENDPOINT``; anonymous (``token = false``) unless a test says otherwise.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.compute as pc
import pytest
from corpus import REPO, corpus_dir
from pipeline_helpers import read_dataset

from gguf_audit.pipelines.config import ScanConfig, load_config
from gguf_audit.pipelines.scan.run import run_scan
from gguf_audit.testing.hub import LocalHub

SPLIT = "tiny-llama-Q4_K_M-{:05d}-of-00004.gguf"


def _corpus(path: str) -> bytes:
    return (corpus_dir() / path).read_bytes()


@pytest.fixture
def hub() -> Iterator[LocalHub]:
    """An organisation of five repositories: two models, a complete and an incomplete shard set, a cut upload."""
    with LocalHub() as hub:
        hub.add_user("alice", token="alice-token")
        hub.add_org("org", members=["alice"])
        hub.create_repo("org/llama")
        hub.add_files(
            "org/llama",
            {
                "llama-Q4_K_M.gguf": _corpus("models/tiny-llama-Q4_K_M.gguf"),
                "llama-Q8_0.gguf": _corpus("models/tiny-llama-Q8_0.gguf"),
                "README.md": b"# llama\n",
            },
        )
        hub.create_repo("org/split")
        hub.add_files("org/split", {SPLIT.format(i): _corpus(f"split/{SPLIT.format(i)}") for i in (1, 2, 3, 4)})
        hub.create_repo("org/split-broken")
        hub.add_files("org/split-broken", {SPLIT.format(i): _corpus(f"split/{SPLIT.format(i)}") for i in (1, 2, 4)})
        whole = _corpus("models/tiny-llama-Q4_0.gguf")
        hub.create_repo("org/cut")
        hub.add_files("org/cut", {"cut-Q4_0.gguf": whole[: len(whole) // 2]})  # an interrupted upload
        hub.create_repo("org/secret", private=True)
        hub.add_files("org/secret", {"s.gguf": whole})
        yield hub


def _config(hub: LocalHub, roots: tuple[str, ...], out: Path, **kw: Any) -> ScanConfig:
    return ScanConfig().replace(
        roots=roots,
        out=str(out),
        storage_options={"hf": {"endpoint": hub.endpoint, "token": False}},
        retries=1,
        backoff_s=0.01,
        **kw,
    )


def _files(out: Path, run_id: str) -> dict[str, dict[str, Any]]:
    files = read_dataset(out, "files")
    return {r["url"]: r for r in files.filter(pc.equal(files.column("run_id"), run_id)).to_pylist()}


def test_an_organisation_and_its_nights(client: Any, hub: LocalHub, tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = run_scan(_config(hub, ("hf://org",), out), client=client)

    files = _files(out, result.run_id)
    # Every .gguf of every public repository, none of the private one (anonymous), none of the READMEs.
    assert sorted(files) == sorted(
        ["hf://org/llama/llama-Q4_K_M.gguf", "hf://org/llama/llama-Q8_0.gguf", "hf://org/cut/cut-Q4_0.gguf"]
        + [f"hf://org/split/{SPLIT.format(i)}" for i in (1, 2, 3, 4)]
        + [f"hf://org/split-broken/{SPLIT.format(i)}" for i in (1, 2, 4)]
    )
    for url, row in files.items():
        repo, path = url.removeprefix("hf://").rsplit("/", 1)
        stored = hub.file(repo, path)
        assert row["revision"] == hub.head(repo)
        assert row["sha256"] == stored.sha256 and row["size"] == stored.size
        assert row["requests"] > 0 and row["bytes_read"] > 0
    # Requests per file are counted: the files table accounts for every resolve the hub answered.
    assert sum(r["requests"] for r in files.values()) == hub.resolve_requests == result.requests
    assert sum(r["bytes_read"] for r in files.values()) == hub.resolve_bytes_sent
    assert "data.truncated" in files["hf://org/cut/cut-Q4_0.gguf"]["codes"]
    assert files["hf://org/llama/llama-Q8_0.gguf"]["status"] in ("ok", "warning")
    models = {m["model_id"]: m for m in read_dataset(out, "models").to_pylist() if m["run_id"] == result.run_id}
    complete = next(m for k, m in models.items() if k.startswith("hf://org/split/"))
    broken = next(m for k, m in models.items() if k.startswith("hf://org/split-broken/"))
    assert complete["complete"] and not broken["complete"]
    assert broken["shards_missing"] == [3] and "shard.missing" in broken["codes"]

    # An unchanged organisation costs no resolve request on an incremental night.
    hub.reset_stats()
    quiet = run_scan(_config(hub, ("hf://org",), out, incremental=True), client=client)
    assert quiet.n_reused == len(files) and quiet.n_read == 0
    assert hub.resolve_requests == 0 and hub.api_requests > 0

    # A commit that touches no GGUF moves the revision, still reads nothing; a changed file is read alone.
    readme_commit = hub.add_files("org/llama", {"README.md": b"# llama, edited\n"})
    changed_commit = hub.add_files("org/split", {SPLIT.format(2): _corpus(f"split/{SPLIT.format(3)}")})
    hub.reset_stats()
    night = run_scan(_config(hub, ("hf://org",), out, incremental=True), client=client)
    rows = _files(out, night.run_id)
    assert night.n_read == 1 and night.n_reused == len(files) - 1
    assert rows["hf://org/llama/llama-Q8_0.gguf"]["revision"] == readme_commit
    assert rows["hf://org/llama/llama-Q8_0.gguf"]["reused"]
    changed = rows[f"hf://org/split/{SPLIT.format(2)}"]
    assert not changed["reused"] and changed["revision"] == changed_commit
    assert {r.path.split("/resolve/")[1].split("/", 1)[0] for r in hub.requests if "/resolve/" in r.path} == {
        changed_commit
    }


def test_a_pinned_revision_and_repositories_that_fail(client: Any, hub: LocalHub, tmp_path: Path) -> None:
    before = hub.head("org/llama")
    hub.add_files("org/llama", {"llama-Q8_0.gguf": _corpus("models/tiny-llama-Q4_0.gguf")})  # main moves on
    roots = (f"hf://org/llama@{before}", "hf://org/gone", "hf://org/secret", "hf://org/split@no-such-branch")
    out = tmp_path / "out"
    result = run_scan(_config(hub, roots, out), client=client)

    files = _files(out, result.run_id)
    pinned = files[f"hf://org/llama@{before}/llama-Q8_0.gguf"]
    assert pinned["revision"] == before
    assert pinned["sha256"] == hub.file("org/llama", "llama-Q8_0.gguf", before).sha256
    assert pinned["file_type"] == 7  # Q8_0 as it was at the pinned commit, not main's Q4_0
    # Each repository that could not be listed is a row with an io.* code; the others are audited.
    assert files["hf://org/gone"]["codes"] == ["io.permission_denied"]
    assert files["hf://org/secret"]["codes"] == ["io.permission_denied"]
    assert files["hf://org/split@no-such-branch"]["codes"] == ["io.not_found"]
    assert result.statuses["unreadable"] == 3 and len(files) == 5


def test_a_429_is_waited_out(client: Any, hub: LocalHub, tmp_path: Path) -> None:
    hub.fail_next_with_429(3, reset_s=1, resource="resolvers")
    out = tmp_path / "out"
    result = run_scan(_config(hub, ("hf://org/llama",), out, samples=False), client=client)
    files = _files(out, result.run_id)
    assert all(not any(c.startswith("io.") for c in r["codes"]) for r in files.values())
    assert sum(r["rate_limited"] for r in files.values()) == 3
    assert sum(r["rate_limit_wait_s"] for r in files.values()) > 0


def test_the_hf_mirror_config_as_written(client: Any, hub: LocalHub, tmp_path: Path) -> None:
    """configs/hf-mirror.toml, pointed at the local hub: header-only, at most 2 resolve requests per file."""
    config = load_config(REPO / "configs" / "hf-mirror.toml").replace(
        roots=("hf://org",),
        out=str(tmp_path / "out"),
        storage_options={"hf": {"endpoint": hub.endpoint, "token": False}},
    )
    assert not config.checks.samples and config.scan.incremental
    result = run_scan(config, client=client)
    files = _files(tmp_path / "out", result.run_id)
    assert len(files) == 10
    assert max(r["requests"] for r in files.values()) <= 2
    assert hub.resolve_requests == result.requests <= 2 * len(files)
    # The listing: one page of models, then one tree per repository.
    assert hub.api_requests == 1 + 4


def test_a_sampled_night_resolves_each_file_once_and_reads_from_the_cdn(client: Any, tmp_path: Path) -> None:
    """The Hub redirects every LFS resolve to a presigned CDN URL: one resolve per file, the ranges go there."""
    from gguf_audit.testing.http import RangeHTTPServer

    with RangeHTTPServer() as cdn, LocalHub(cdn=cdn) as hub:
        hub.add_org("org")
        hub.create_repo("org/llama")
        names = ["tiny-llama-Q4_K_M.gguf", "tiny-llama-Q8_0.gguf", "tiny-llama-F16.gguf"]
        hub.add_files("org/llama", {n: _corpus(f"models/{n}") for n in names})
        hub.reset_stats()
        out = tmp_path / "out"
        result = run_scan(_config(hub, ("hf://org/llama",), out), client=client)
        files = _files(out, result.run_id)
        assert len(files) == 3 and all(r["status"] != "unreadable" for r in files.values())
        # The audit of each file resolves it once; the compare phase, in another worker process, may once more.
        assert hub.resolve_requests <= 2 * len(files)
        assert [r["resolve_requests"] for r in files.values()] == [1, 1, 1]
        assert all(r["cdn_requests"] > 1 and r["requests"] == 1 + r["cdn_requests"] for r in files.values())
        assert sum(r["cdn_requests"] for r in files.values()) <= len(cdn.requests)
        assert hub.resolve_bytes_sent == 0  # every byte came from the CDN


def test_the_hubs_gguf_card_is_compared_with_each_header_at_no_request(client: Any, tmp_path: Path) -> None:
    """``expand=gguf`` rides on the listing call: a repository whose card disagrees gets ``hub.gguf_mismatch``."""
    with LocalHub() as hub:
        hub.add_org("org")
        for repo in ("org/right", "org/stale"):
            hub.create_repo(repo)
            hub.add_files(repo, {"m-Q4_K_M.gguf": _corpus("models/tiny-llama-Q4_K_M.gguf")})
        good = hub.model_card("org/right")
        assert good is not None and good["architecture"] == "llama" and good["total"] > 0
        hub.set_gguf_card("org/stale", {**good, "context_length": good["context_length"] * 4, "total": 7})
        out = tmp_path / "out"
        result = run_scan(_config(hub, ("hf://org",), out, samples=False, compare=False), client=client)
        problems = read_dataset(out, "problems").to_pylist()
        mismatches = sorted((p["url"], p["message"]) for p in problems if p["code"] == "hub.gguf_mismatch")
        assert [url for url, _ in mismatches] == ["hf://org/stale/m-Q4_K_M.gguf"] * 2
        assert any(f"context length {good['context_length'] * 4}" in m for _, m in mismatches)
        assert any(f"parameter count 7, the file's header {good['total']}" in m for _, m in mismatches)
        # The card came with the listing: the model list and one tree per repository, nothing more.
        assert result.listing_requests == 3


def test_a_quiet_night_costs_the_listing_pages(client: Any, tmp_path: Path) -> None:
    """Hub listings by commit: the first night lists every tree, a later one only the repositories that moved."""
    n_repos, page = 25, 10
    data = _corpus("models/tiny-llama-IQ2_XXS.gguf")
    with LocalHub(models_page_size=page) as hub:
        hub.add_org("big")
        for i in range(n_repos):
            hub.create_repo(f"big/m{i:02d}")
            hub.add_files(f"big/m{i:02d}", {f"m{i:02d}.gguf": data})
        out = tmp_path / "out"
        config = _config(hub, ("hf://big",), out, samples=False, incremental=True)
        pages = -(-n_repos // page)
        first = run_scan(config, client=client)
        trees = [r.path for r in hub.requests if "/tree/" in r.path]
        assert first.n_read == n_repos and len(trees) == n_repos and first.listing_requests == pages + n_repos

        # Nothing moved: the organisation's model pages, nothing else, and every row carried.
        hub.reset_stats()
        quiet = run_scan(config, client=client)
        assert [r.path.split("?")[0] for r in hub.requests] == ["/api/models"] * pages
        assert quiet.listing_requests == pages and quiet.n_reused == n_repos and quiet.n_read == 0

        # One repository gets a new commit: one tree call, its new file read; the rest carried at their commits.
        moved = hub.add_files("big/m07", {"m07.gguf": _corpus("models/tiny-llama-IQ4_NL.gguf")})
        hub.reset_stats()
        night = run_scan(config, client=client)
        trees = [r.path.split("?")[0] for r in hub.requests if "/tree/" in r.path]
        assert trees == [f"/api/models/big/m07/tree/{moved}"] and night.listing_requests == pages + 1
        assert night.n_read == 1 and night.n_reused == n_repos - 1
        rows = _files(out, night.run_id)
        assert rows["hf://big/m07/m07.gguf"]["revision"] == moved

        # The Hub rate-limits the model listing (429, Retry-After: 1): waited out, the night commits, and says so.
        hub.reset_stats()
        hub.fail_next_with_429(1, reset_s=1, resource="api")
        limited = run_scan(config, client=client)
        assert limited.listing_wait_s >= 1.0 and limited.n_reused == n_repos
        assert [r.path.split("?")[0] for r in hub.requests] == ["/api/models"] * (pages + 1)  # the page asked again
        [run] = [r for r in read_dataset(out, "runs").to_pylist() if r["run_id"] == limited.run_id]
        assert run["listing_wait_s"] == pytest.approx(limited.listing_wait_s)
