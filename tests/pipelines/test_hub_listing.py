"""Listing hf:// roots through the real huggingface_hub client against LocalHub (in the driver, no cluster)."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest

from gguf_audit.pipelines.listing.discover import DiscoveryError, discover
from gguf_audit.pipelines.listing.hub import rate_limit_waits
from gguf_audit.tables.listed import ListedFile
from gguf_audit.testing.hub import LocalHub

DATA = b"GGUF" + bytes(60)


@pytest.fixture
def hub() -> Iterator[LocalHub]:
    with LocalHub(tree_page_size=2) as hub:  # small pages: the listing must follow them
        hub.add_user("alice", token="alice-token")
        hub.add_org("org", members=["alice"])
        hub.create_repo("org/a")
        hub.add_files("org/a", {"a.gguf": DATA, "q4/a-Q4.gguf": DATA, "q8/a-Q8.gguf": DATA, "notes.txt": b"x"})
        hub.create_repo("org/b")
        hub.add_files("org/b", {"b.gguf": DATA})
        hub.create_repo("org/private", private=True)
        hub.add_files("org/private", {"p.gguf": DATA})
        yield hub


def _options(hub: LocalHub, **extra: Any) -> dict[str, Any]:
    return {"hf": {"endpoint": hub.endpoint, "token": False, **extra}}


def test_an_organisation_costs_one_model_page_and_the_trees(hub: LocalHub) -> None:
    hub.reset_stats()
    listing = discover(["hf://org"], storage_options=_options(hub))
    urls = [f.url for f in listing.files]
    assert sorted(urls) == [
        "hf://org/a/a.gguf",
        "hf://org/a/q4/a-Q4.gguf",
        "hf://org/a/q8/a-Q8.gguf",
        "hf://org/b/b.gguf",
    ]
    assert hub.resolve_requests == 0
    # One models page; org/a's tree (2 folders, 5 files with .gitattributes) in 4 pages of 2, org/b's in 1.
    assert hub.api_requests == 1 + 4 + 1
    assert listing.requests == len(hub.requests) == 6  # counted as huggingface_hub sent them
    for f in listing.files:
        repo, path = f.url.removeprefix("hf://").split("/", 2)[:2], f.url.split("/", 4)[-1]
        stored = hub.file("/".join(repo), path)
        assert (f.size, f.sha256, f.version_id, f.revision) == (
            stored.size,
            stored.sha256,
            stored.blob_oid,
            hub.head("/".join(repo)),
        )


def test_include_and_exclude_are_relative_to_the_root(hub: LocalHub) -> None:
    listing = discover(["hf://org/a"], exclude=["q8/*"], storage_options=_options(hub))
    assert [f.url for f in listing.files] == ["hf://org/a/a.gguf", "hf://org/a/q4/a-Q4.gguf"]
    sub = discover(["hf://org/a/q4"], storage_options=_options(hub))
    assert [f.url for f in sub.files] == ["hf://org/a/q4/a-Q4.gguf"]
    one = discover(["hf://org/a@main/q8/a-Q8.gguf"], storage_options=_options(hub))
    assert [(f.url, f.revision) for f in one.files] == [("hf://org/a@main/q8/a-Q8.gguf", hub.head("org/a"))]


def test_a_member_token_from_the_environment_lists_private_repositories(
    hub: LocalHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", "alice-token")
    listing = discover(["hf://org"], storage_options={"hf": {"endpoint": hub.endpoint}})
    assert "hf://org/private/p.gguf" in [f.url for f in listing.files]
    with pytest.raises(DiscoveryError, match="token"):
        discover(["hf://org"], storage_options={"hf": {"endpoint": hub.endpoint, "token": "alice-token"}})


def test_an_api_429_is_waited_out(hub: LocalHub) -> None:
    hub.fail_next_with_429(1, reset_s=1, resource="api")
    hub.reset_stats()
    listing = discover(["hf://org/b"], storage_options=_options(hub))
    assert [f.url for f in listing.files] == ["hf://org/b/b.gguf"]
    assert listing.requests == len(hub.requests) >= 3  # the refused request and its retry count
    assert [f.error_code for f in listing.files] == [None]


def test_a_repository_at_a_known_commit_costs_no_tree(hub: LocalHub) -> None:
    hub.set_gguf_card("org/a", {"total": 1000, "architecture": "llama", "context_length": 2048})
    first = discover(["hf://org"], storage_options=_options(hub))
    at_a = {f.url: f for f in first.files if f.url.startswith("hf://org/a/")}
    asked: list[tuple[str, str]] = []

    def known(repo_id: str, sha: str) -> list[ListedFile] | None:
        asked.append((repo_id, sha))
        # Known without its card, as a scan's base night gives it: the card comes with this night's model page.
        plain = [dataclasses.replace(f, hub_gguf=None) for f in at_a.values()]
        return plain if (repo_id, sha) == ("org/a", hub.head("org/a")) else None

    hub.reset_stats()
    listing = discover(["hf://org"], storage_options=_options(hub), known=known)
    assert [f.url for f in listing.files] == [f.url for f in first.files]
    assert sorted(asked) == [("org/a", hub.head("org/a")), ("org/b", hub.head("org/b"))]
    # The model page and org/b's tree; org/a's four tree pages are not asked for.
    assert [r.path.split("?")[0] for r in hub.requests] == [
        "/api/models",
        f"/api/models/org/b/tree/{hub.head('org/b')}",
    ]
    again = {f.url: f for f in listing.files}
    assert all(f.hub_gguf is not None and again[u].hub_gguf == f.hub_gguf for u, f in at_a.items())


def test_the_time_waited_on_429s_is_measured(hub: LocalHub) -> None:
    hub.fail_next_with_429(1, reset_s=1, resource="api")
    with rate_limit_waits() as waited:
        listing = discover(["hf://org"], storage_options=_options(hub))
    assert [f.error_code for f in listing.files] == [None] * len(listing.files)
    # The client waits the reset plus a second; the wait ends when the page is asked again.
    assert waited.answers == 1 and 2.0 <= waited.seconds < 10.0
    with rate_limit_waits() as quiet:
        discover(["hf://org/b"], storage_options=_options(hub))
    assert (quiet.answers, quiet.seconds) == (0, 0.0)


def test_an_empty_or_unknown_organisation_is_a_discovery_error(hub: LocalHub) -> None:
    with pytest.raises(DiscoveryError, match="no model repositories"):
        discover(["hf://nobody"], storage_options=_options(hub))
    with pytest.raises(DiscoveryError, match="only model repositories"):
        discover(["hf://datasets/org/d"], storage_options=_options(hub))


def test_a_listed_xet_hash_is_kept(hub: LocalHub) -> None:
    hub.xet_hashes = True
    listing = discover(["hf://org/b"], storage_options=_options(hub))
    stored = hub.file("org/b", "b.gguf")
    assert stored.xet_hash is not None
    assert [(f.etag, f.sha256) for f in listing.files] == [(stored.xet_hash, stored.sha256)]


def test_the_listing_sends_nothing_but_to_the_listed_hub(hub: LocalHub, monkeypatch: pytest.MonkeyPatch) -> None:
    """huggingface_hub's telemetry would fetch its agent registry from huggingface.co whatever the endpoint."""
    from huggingface_hub import get_session
    from huggingface_hub.utils import _detect_agent

    monkeypatch.delenv("HF_HUB_DISABLE_TELEMETRY", raising=False)
    monkeypatch.setattr(_detect_agent, "_registry", None)  # as in a fresh process: not fetched yet
    monkeypatch.setenv("AI_AGENT", "probe")  # an environment an agent harness runs in
    sent: list[str] = []

    def record(request: Any) -> None:
        sent.append(str(request.url))

    session = get_session()
    session.event_hooks["request"].append(record)
    try:
        listing = discover(["hf://org/b"], storage_options=_options(hub))
    finally:
        session.event_hooks["request"].remove(record)
    assert [f.url for f in listing.files] == ["hf://org/b/b.gguf"]
    assert sent and all(url.startswith(hub.endpoint + "/") for url in sent), sent
