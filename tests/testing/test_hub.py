"""The local Hub answers the real huggingface_hub client as the Hub does, on 127.0.0.1 only.

huggingface_hub reads ``HF_ENDPOINT`` into ``huggingface_hub.constants`` when
first imported, so in this process (where another test may have imported it
already) every client object gets ``endpoint=hub.endpoint`` explicitly;
:func:`test_hf_endpoint_in_a_fresh_process` sets ``HF_ENDPOINT`` (with
``HF_HUB_OFFLINE=0``, ``HF_HUB_DISABLE_TELEMETRY=1``) for a child process and
uses the client with no endpoint argument at all. The ``sent`` fixture adds a
request hook to the client's own httpx client, so each test can assert that
every request the client made went to the hub, and that the hub saw it.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from huggingface_hub import HfApi, HfFileSystem, constants, get_hf_file_metadata, hf_hub_url
from huggingface_hub.errors import (
    HfHubHTTPError,
    RemoteEntryNotFoundError,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import get_session, parse_ratelimit_headers, set_client_factory

# The client's own factory (not exported): the hook goes on the very client it would build.
from huggingface_hub.utils._http import default_client_factory

from gguf_audit.testing.hub import LocalHub
from gguf_audit.testing.hub_store import LFS_THRESHOLD_BYTES, git_blob_oid, lfs_pointer

TOKEN = "hf_alice_token"
OUTSIDER = "hf_bob_token"
BIG = random.Random(7).randbytes(8 * 1024 * 1024 + 123)  # 8 MiB and change: every offset distinguishable
RANGES = [(0, 32), (100, 4196), (65_536, 65_537), (1_000_000, 1_050_000), (2 << 20, (2 << 20) + 777),
          (3_333_333, 3_400_000), (5_000_000, 5_000_008), (6 << 20, (6 << 20) + 65_536),
          (len(BIG) - 4096, len(BIG) - 1024), (len(BIG) - 10, len(BIG))]  # fmt: skip
PROXY_VARS = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy")


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Every URL the client requests, seen by a hook on its own (shared) httpx client."""
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_HUB_DISABLE_TELEMETRY", True)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    for var in PROXY_VARS:
        monkeypatch.delenv(var, raising=False)
    urls: list[str] = []

    def factory() -> Any:  # an httpx2.Client (httpx.Client before huggingface_hub 2)
        client = default_client_factory()
        client.event_hooks["request"].append(lambda request: urls.append(str(request.url)))
        return client

    set_client_factory(factory)
    yield urls
    set_client_factory(default_client_factory)


@pytest.fixture
def hub() -> Iterator[LocalHub]:
    with LocalHub() as server:
        server.add_user("alice", token=TOKEN)
        server.add_user("bob", token=OUTSIDER)
        server.add_org("org", members=["alice"])
        yield server


def _only_hub(sent: list[str], hub: LocalHub) -> None:
    """The client asked nothing of any other host, and the hub saw each of its requests (since the last _reset)."""
    assert sent, "the client made no request"
    assert all(url.startswith(hub.endpoint + "/") for url in sent), sent
    seen = [urllib.parse.unquote(url.removeprefix(hub.endpoint).split("?")[0]) for url in sent]
    assert sorted(seen) == sorted(r.path.split("?")[0] for r in hub.requests)


def _reset(hub: LocalHub, sent: list[str]) -> None:
    hub.reset_stats()
    sent.clear()


def _fs(hub: LocalHub, token: str | bool = False) -> HfFileSystem:
    return HfFileSystem(endpoint=hub.endpoint, token=token, skip_instance_cache=True)


# ---------------------------------------------------------------- list_models and model_info


def test_list_models_of_an_organisation_follows_link_pages(hub: LocalHub, sent: list[str]) -> None:
    for i in range(5):
        hub.create_repo(f"org/m{i}")
    hub.create_repo("org/secret", private=True)
    hub.create_repo("alice/own")
    hub.models_page_size = 2

    listed = [m.id for m in HfApi(endpoint=hub.endpoint, token=False).list_models(author="org")]
    assert listed == [f"org/m{i}" for i in range(5)]
    assert [r.path.split("?")[0] for r in hub.requests] == ["/api/models"] * 3  # 2 + 2 + 1
    assert "cursor=" not in hub.requests[0].path and all("cursor=" in r.path for r in hub.requests[1:])

    member = HfApi(endpoint=hub.endpoint, token=TOKEN)
    assert "org/secret" in [m.id for m in member.list_models(author="org")]
    _reset(hub, sent)
    full = list(member.list_models(author="org", full=True, limit=3))
    assert len(full) == 3 and len(hub.requests) == 2  # the client stops paging once it has `limit`
    assert full[0].sha == hub.head("org/m0") and [s.rfilename for s in full[0].siblings or []] == [".gitattributes"]
    assert [m.id for m in HfApi(endpoint=hub.endpoint, token=OUTSIDER).list_models(search="secret")] == []
    _only_hub(sent, hub)


def test_model_info_at_a_pinned_revision_keeps_serving_the_old_bytes(hub: LocalHub, sent: list[str]) -> None:
    hub.create_repo("org/m")
    old = hub.add_files("org/m", {"m.gguf": b"GGUF-old" * 100, "README.md": b"# m\n"}, message="first")
    new = hub.add_files("org/m", {"m.gguf": b"GGUF-new!" * 50}, message="second")
    api = HfApi(endpoint=hub.endpoint, token=False)

    pinned, latest = api.model_info("org/m", revision=old, files_metadata=True), api.model_info("org/m")
    assert (pinned.sha, latest.sha) == (old, new)
    assert pinned.last_modified is not None and latest.last_modified is not None
    assert pinned.last_modified <= latest.last_modified
    sizes = {s.rfilename: s.size for s in pinned.siblings or []}
    assert sizes == {".gitattributes": hub.file("org/m", ".gitattributes").size, "m.gguf": 800, "README.md": 4}
    lfs = next(s.lfs for s in pinned.siblings or [] if s.rfilename == "m.gguf")
    assert lfs is not None and lfs.sha256 == hashlib.sha256(b"GGUF-old" * 100).hexdigest()
    assert [r.path for r in hub.requests] == [f"/api/models/org/m/revision/{old}?blobs=true", "/api/models/org/m"]

    fs = _fs(hub)
    assert fs.cat_file(f"org/m@{old}/m.gguf") == b"GGUF-old" * 100
    assert fs.cat_file("org/m/m.gguf") == b"GGUF-new!" * 50
    with pytest.raises(RevisionNotFoundError):
        api.model_info("org/m", revision="0" * 40)
    _only_hub(sent, hub)


# ---------------------------------------------------------------- tree and paths-info


def test_tree_lists_lfs_sha256_over_cursor_pages(hub: LocalHub, sent: list[str]) -> None:
    hub.create_repo("org/big")
    files = {f"q{i % 3}/part-{i:02d}.gguf": f"tensor data {i}".encode() * (i + 1) for i in range(23)}
    files |= {"config.json": b"{}", "q0/notes.txt": b"regular"}
    sha = hub.add_files("org/big", files)
    hub.tree_page_size = 7
    api = HfApi(endpoint=hub.endpoint, token=False)

    entries = list(api.list_repo_tree("org/big", recursive=True, revision=sha))
    by_path = {e.path: e for e in entries}
    assert len(entries) == len(by_path) == 26 + 3  # 25 files + .gitattributes, and 3 folders
    tree_requests = [r for r in hub.requests if "/tree/" in r.path]
    assert len(tree_requests) == len(hub.requests) == 5  # ceil(29 / 7), one cursor after the other
    for path, data in files.items():
        entry = by_path[path]
        assert entry.size == len(data)
        if path.endswith(".gguf"):
            digest = hashlib.sha256(data).hexdigest()
            assert entry.lfs is not None and (entry.lfs.sha256, entry.lfs.size) == (digest, len(data))
            pointer = f"version https://git-lfs.github.com/spec/v1\noid sha256:{digest}\nsize {len(data)}\n"
            assert entry.lfs.pointer_size == len(pointer)
            assert entry.blob_id == hashlib.sha1(b"blob %d\0%s" % (len(pointer), pointer.encode())).hexdigest()
        else:
            assert entry.lfs is None and entry.blob_id == hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()

    _reset(hub, sent)
    expanded = list(api.list_repo_tree("org/big", "q1", expand=True))
    assert len(hub.requests) == 1 and {e.path for e in expanded} == {p for p in files if p.startswith("q1/")}
    assert all(e.last_commit is not None and e.last_commit.oid == sha for e in expanded)
    hub.tree_expand_page_size = 3
    assert len(list(api.list_repo_tree("org/big", "q1", expand=True))) == 8 and len(hub.requests) == 1 + 3
    with pytest.raises(RemoteEntryNotFoundError):
        list(api.list_repo_tree("org/big", "no-such-dir"))
    _only_hub(sent, hub)


def test_paths_info_answers_files_and_folders_and_skips_missing(hub: LocalHub, sent: list[str]) -> None:
    hub.create_repo("org/m")
    sha = hub.add_files("org/m", {"a/b.gguf": b"x" * 10, "c.txt": b"c"})
    api = HfApi(endpoint=hub.endpoint, token=False)
    infos = api.get_paths_info("org/m", ["a/b.gguf", "a", "missing.bin"], expand=True)
    assert [type(i).__name__ for i in infos] == ["RepoFile", "RepoFolder"]
    assert infos[0].path == "a/b.gguf" and infos[0].size == 10 and infos[0].lfs is not None
    assert all(i.last_commit is not None and i.last_commit.oid == sha for i in infos)
    assert hub.requests == [("POST", "/api/models/org/m/paths-info/main", None)]
    _only_hub(sent, hub)


# ---------------------------------------------------------------- HfFileSystem and resolve


def test_hffs_ls_info_find_glob(hub: LocalHub, sent: list[str]) -> None:
    hub.create_repo("org/m")
    hub.add_files("org/m", {"m-Q4_K.gguf": BIG, "sub/m-00001-of-00002.gguf": b"s1", "sub/x.txt": b"x"})
    fs = _fs(hub)
    assert fs.ls("org/m", detail=False) == ["org/m/sub", "org/m/.gitattributes", "org/m/m-Q4_K.gguf"]
    info = fs.info("org/m/m-Q4_K.gguf")
    assert (info["type"], info["size"]) == ("file", len(BIG))
    assert info["lfs"].sha256 == hashlib.sha256(BIG).hexdigest()
    assert fs.find("org/m") == [
        "org/m/.gitattributes", "org/m/m-Q4_K.gguf", "org/m/sub/m-00001-of-00002.gguf", "org/m/sub/x.txt"
    ]  # fmt: skip
    assert fs.glob("org/m/**/*.gguf") == ["org/m/m-Q4_K.gguf", "org/m/sub/m-00001-of-00002.gguf"]
    assert fs.isdir("org/m/sub") and not fs.exists("org/m/nope.gguf") and not fs.exists("org/none/a")
    assert hub.resolve_requests == 0  # listing is all API
    _only_hub(sent, hub)


def _warm(hub: LocalHub, sent: list[str], fs: HfFileSystem, path: str) -> None:
    fs.info(path)  # resolve_path's repo_info and the parent listing, cached from here on
    _reset(hub, sent)


def test_cat_ranges_without_read_ahead_sends_exactly_the_asked_bytes(hub: LocalHub, sent: list[str]) -> None:
    hub.create_repo("org/m")
    hub.add_files("org/m", {"m.gguf": BIG})
    path, asked = "org/m/m.gguf", sum(e - s for s, e in RANGES)
    fs = _fs(hub)
    _warm(hub, sent, fs, path)

    got = fs.cat_ranges([path] * len(RANGES), [s for s, _ in RANGES], [e for _, e in RANGES], cache_type="none")
    assert got == [BIG[s:e] for s, e in RANGES]
    assert hub.requests == [("GET", "/org/m/resolve/main/m.gguf", f"bytes={s}-{e - 1}") for s, e in RANGES]
    assert (hub.resolve_requests, hub.api_requests) == (len(RANGES), 0)
    assert hub.resolve_bytes_sent == hub.bytes_sent == asked

    # The default cache ("readahead") asks for a block more than each read: correct bytes, far more sent.
    with fs.open(path) as f:
        block = f.blocksize
    _reset(hub, sent)
    got = fs.cat_ranges([path] * len(RANGES), [s for s, _ in RANGES], [e for _, e in RANGES])
    assert got == [BIG[s:e] for s, e in RANGES] and hub.resolve_requests == len(RANGES)
    assert hub.resolve_bytes_sent == sum(min(len(BIG), e + block) - s for s, e in RANGES) > 20 * asked

    # block_size=0 is a stream that cannot seek: ranges past 0 fail, and a read from 0 gets the whole body sent.
    _reset(hub, sent)
    streamed = fs.cat_ranges([path] * 2, [0, 100], [32, 200], block_size=0)
    assert streamed[0] == BIG[:32] and isinstance(streamed[1], ValueError)
    assert hub.requests == [("GET", "/org/m/resolve/main/m.gguf", None)]
    assert hub.resolve_bytes_sent > 32
    _only_hub(sent, hub)


def test_open_and_read_through_the_file_object(hub: LocalHub, sent: list[str]) -> None:
    hub.create_repo("org/m")
    hub.add_files("org/m", {"m.gguf": BIG})
    fs = _fs(hub)
    with fs.open("org/m/m.gguf", cache_type="none") as f:
        f.seek(len(BIG) - 8)
        assert f.read(8) == BIG[-8:] and f.read(8) == b""
    assert hub.requests[-1] == ("GET", "/org/m/resolve/main/m.gguf", f"bytes={len(BIG) - 8}-{len(BIG) - 1}")
    with fs.open("org/m/m.gguf") as f:
        assert f.read() == BIG  # a whole read from 0 streams (block_size=0) without a Range
    assert hub.requests[-1] == ("GET", "/org/m/resolve/main/m.gguf", None)
    _only_hub(sent, hub)


def test_head_on_resolve_gives_the_metadata_the_client_reads(hub: LocalHub, sent: list[str]) -> None:
    hub.create_repo("org/m")
    sha = hub.add_files("org/m", {"m.gguf": BIG, "config.json": b'{"a": 1}'})
    lfs = get_hf_file_metadata(hf_hub_url("org/m", "m.gguf", endpoint=hub.endpoint), token=False)
    assert (lfs.commit_hash, lfs.etag, lfs.size) == (sha, hashlib.sha256(BIG).hexdigest(), len(BIG))
    assert lfs.location == hub.resolve_url("org/m", "m.gguf") and lfs.xet_file_data is None
    regular = get_hf_file_metadata(hf_hub_url("org/m", "config.json", revision=sha, endpoint=hub.endpoint))
    assert (regular.commit_hash, regular.etag, regular.size) == (sha, git_blob_oid(b'{"a": 1}'), 8)
    assert [r.method for r in hub.requests] == ["HEAD", "HEAD"] and hub.resolve_bytes_sent == 0
    with pytest.raises(RemoteEntryNotFoundError):
        get_hf_file_metadata(hf_hub_url("org/m", "missing.gguf", endpoint=hub.endpoint))

    session = get_session()
    past_end = session.get(hub.resolve_url("org/m", "m.gguf"), headers={"Range": f"bytes={len(BIG)}-"})
    assert past_end.status_code == 416 and past_end.headers["Content-Range"] == f"bytes */{len(BIG)}"
    tail = session.get(hub.resolve_url("org/m", "m.gguf"), headers={"Range": "bytes=-5"})
    assert tail.status_code == 206 and tail.content == BIG[-5:]
    assert tail.headers["Content-Range"] == f"bytes {len(BIG) - 5}-{len(BIG) - 1}/{len(BIG)}"
    assert tail.headers["X-Linked-Size"] == str(len(BIG)) and tail.headers["X-Repo-Commit"] == sha
    _only_hub(sent, hub)


def test_large_files_go_to_lfs_whatever_their_name(hub: LocalHub) -> None:
    hub.create_repo("org/m")
    hub.add_files("org/m", {"big.txt": b"\0" * LFS_THRESHOLD_BYTES, "small.txt": b"s", "forced.txt": b"f"})
    hub.add_files("org/m", {"forced.txt": b"f"}, lfs=True)
    assert hub.file("org/m", "big.txt").is_lfs and not hub.file("org/m", "small.txt").is_lfs
    forced = hub.file("org/m", "forced.txt")
    assert forced.is_lfs and forced.blob_oid == git_blob_oid(lfs_pointer(hashlib.sha256(b"f").hexdigest(), 1))


# ---------------------------------------------------------------- 429 and RateLimit headers


def test_a_429_on_a_range_read_is_waited_out_by_the_client(hub: LocalHub, sent: list[str]) -> None:
    hub.create_repo("org/m")
    hub.add_files("org/m", {"m.gguf": BIG})
    fs = _fs(hub)
    _warm(hub, sent, fs, "org/m/m.gguf")
    hub.fail_next_with_429(2, reset_s=0, resource="resolvers")
    # http_backoff reads RateLimit ("r=0;t=0"), sleeps t + 1 s and asks again: the caller sees only the bytes.
    assert fs.cat_file("org/m/m.gguf", 10, 20, cache_type="none") == BIG[10:20]
    assert hub.requests == [("GET", "/org/m/resolve/main/m.gguf", "bytes=10-19")] * 3
    _only_hub(sent, hub)


def test_a_429_on_model_info_or_head_is_the_callers_to_handle(hub: LocalHub, sent: list[str]) -> None:
    hub.create_repo("org/m")
    api = HfApi(endpoint=hub.endpoint, token=False)
    hub.fail_next_with_429(1, reset_s=7)
    with pytest.raises(HfHubHTTPError) as info:
        api.model_info("org/m")  # a plain session.get: no retry
    assert info.value.response.status_code == 429 and "'api' rate limit" in str(info.value)
    assert "Retry after 7 seconds" in str(info.value)
    hub.fail_next_with_429(1, reset_s=7, resource="resolvers")
    with pytest.raises(HfHubHTTPError) as info:
        get_hf_file_metadata(hub.resolve_url("org/m", ".gitattributes"))  # retry_on_errors=False by default
    assert info.value.response.status_code == 429 and "'resolvers' rate limit" in str(info.value)
    assert len(hub.requests) == 2
    assert api.model_info("org/m").sha == hub.head("org/m")
    _only_hub(sent, hub)


def test_listing_pages_retry_a_429(hub: LocalHub, sent: list[str]) -> None:
    hub.create_repo("org/m")
    hub.add_files("org/m", {f"f{i}.txt": b"x" for i in range(5)})
    hub.tree_page_size = 4
    api = HfApi(endpoint=hub.endpoint, token=False)
    pages = iter(api.list_repo_tree("org/m"))
    first = [next(pages) for _ in range(4)]
    hub.fail_next_with_429(1, reset_s=0, resource="api")
    assert len(first + list(pages)) == 6
    assert len(hub.requests) == 3 and hub.requests[1] == hub.requests[2]  # page 2 answered 429, then again
    _only_hub(sent, hub)


def test_rate_limit_headers_count_down_in_the_format_the_client_parses(hub: LocalHub, sent: list[str]) -> None:
    hub.create_repo("org/m")
    hub.rate_limit(2, window_s=300, resource="resolvers")
    url, session = hub.resolve_url("org/m", ".gitattributes"), get_session()
    answers = [session.get(url) for _ in range(3)]
    assert [a.status_code for a in answers] == [200, 200, 429]
    infos = [parse_ratelimit_headers(a.headers) for a in answers]
    assert [(i.resource_type, i.remaining, i.limit, i.window_seconds) for i in infos if i] == [
        ("resolvers", 1, 2, 300), ("resolvers", 0, 2, 300), ("resolvers", 0, 2, 300)
    ]  # fmt: skip
    assert 0 < int(answers[2].headers["Retry-After"]) <= 300
    assert session.get(f"{hub.endpoint}/api/models/org/m").headers.get("RateLimit") is None  # api is not limited
    hub.rate_limit(None, resource="resolvers")
    assert session.get(url).status_code == 200
    _only_hub(sent, hub)


# ---------------------------------------------------------------- auth, latency, a fresh process


def test_private_repos_need_a_members_bearer_token(hub: LocalHub, sent: list[str]) -> None:
    hub.create_repo("org/private", private=True)
    hub.add_files("org/private", {"m.gguf": b"secret"})
    with pytest.raises(RepositoryNotFoundError) as anonymous:
        HfApi(endpoint=hub.endpoint, token=False).model_info("org/private")
    assert anonymous.value.response.status_code == 401
    with pytest.raises(RepositoryNotFoundError) as outsider:
        HfApi(endpoint=hub.endpoint, token=OUTSIDER).model_info("org/private")
    assert outsider.value.response.status_code == 404
    with pytest.raises(HfHubHTTPError) as wrong:
        HfApi(endpoint=hub.endpoint, token="hf_wrong").model_info("org/private")
    assert wrong.value.response.status_code == 401 and not isinstance(wrong.value, RepositoryNotFoundError)
    assert not _fs(hub).exists("org/private/m.gguf")

    assert _fs(hub, TOKEN).cat_file("org/private/m.gguf", 0, 3) == b"sec"
    assert HfApi(endpoint=hub.endpoint, token=TOKEN).whoami()["orgs"] == [{"type": "org", "name": "org"}]
    _only_hub(sent, hub)


def test_latency_delays_every_answer(hub: LocalHub, sent: list[str]) -> None:
    hub.create_repo("org/m")
    hub.latency_s = 0.2
    started = time.monotonic()
    HfApi(endpoint=hub.endpoint, token=False).model_info("org/m")
    assert time.monotonic() - started >= 0.2
    _only_hub(sent, hub)


CHILD = """
import json, os, sys
import fsspec
from huggingface_hub import HfApi, constants, hf_hub_download
from huggingface_hub.utils import set_client_factory
from huggingface_hub.utils._http import default_client_factory
sent = []
def factory():
    client = default_client_factory()
    client.event_hooks["request"].append(lambda request: sent.append(str(request.url)))
    return client
set_client_factory(factory)
fs, path = fsspec.core.url_to_fs("hf://org/m/m.gguf")  # fsspec.open would keep the read-ahead cache
head = fs.cat_file(path, 100, 116, cache_type="none").hex()
path = hf_hub_download("org/m", "config.json", cache_dir=sys.argv[1])
print(json.dumps({
    "endpoint": constants.ENDPOINT,
    "offline": constants.HF_HUB_OFFLINE,
    "models": [m.id for m in HfApi().list_models(author="org")],
    "head": head,
    "config": open(path).read(),
    "sent": sent,
}))
"""


def test_hf_endpoint_in_a_fresh_process(hub: LocalHub, tmp_path: Path) -> None:
    hub.create_repo("org/m")
    sha = hub.add_files("org/m", {"m.gguf": BIG, "config.json": b'{"n": 1}'})
    env = {k: v for k, v in os.environ.items() if not k.startswith("HF_") and k not in PROXY_VARS}
    env |= {
        "HF_ENDPOINT": hub.endpoint,
        "HF_HUB_OFFLINE": "0",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HOME": str(tmp_path / "hf-home"),
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    }
    child = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "cache")], env=env, capture_output=True, text=True, timeout=120
    )
    assert child.returncode == 0, child.stderr
    out = json.loads(child.stdout)
    assert (out["endpoint"], out["offline"], out["models"]) == (hub.endpoint, False, ["org/m"])
    assert out["head"] == BIG[100:116].hex() and out["config"] == '{"n": 1}'
    assert out["sent"] and all(url.startswith(hub.endpoint + "/") for url in out["sent"])
    assert len(out["sent"]) == len(hub.requests)
    assert ("HEAD", "/org/m/resolve/main/config.json", None) in hub.requests
    assert ("GET", "/org/m/resolve/main/config.json", None) in hub.requests  # HEAD gave sha and size, then GET
    assert sha in os.listdir(tmp_path / "cache" / "models--org--m" / "snapshots")
    assert ("GET", "/org/m/resolve/main/m.gguf", "bytes=100-115") in hub.requests
