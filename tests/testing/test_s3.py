"""moto's S3 on the loopback behaves like S3 for s3fs, with the same accounting as the HTTP server."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import s3fs

from gguf_audit.testing.s3 import MotoS3Server

DATA = bytes(range(256)) * 40  # 10240 bytes, every offset distinguishable mod 256
SIZE = len(DATA)


@pytest.fixture(scope="module")
def s3_server() -> Iterator[MotoS3Server]:
    with MotoS3Server() as server:
        yield server


@pytest.fixture
def s3(s3_server: MotoS3Server) -> Iterator[MotoS3Server]:
    s3_server.reset()
    s3_server.reset_stats()
    yield s3_server


def _s3fs(server: MotoS3Server) -> Any:
    return s3fs.S3FileSystem(skip_instance_cache=True, **server.storage_options())


def test_s3_storage_options(s3: MotoS3Server) -> None:
    options = s3.storage_options()
    assert options["client_kwargs"] == {"endpoint_url": s3.endpoint_url, "region_name": "us-east-1"}
    assert s3.endpoint_url.startswith("http://127.0.0.1:")
    assert (options["key"], options["secret"]) == ("testing", "testing")


def test_s3_round_trip(s3: MotoS3Server) -> None:
    s3.make_bucket("models")
    etag = s3.put("models", "m/a.gguf", DATA)
    s3.put("models", "m/b.gguf", b"GGUF")
    assert s3.requests == []  # the helper's own requests are not counted
    fs = _s3fs(s3)

    listing = {entry["name"]: entry for entry in fs.ls("models/m", detail=True)}
    assert {name: entry["size"] for name, entry in listing.items()} == {
        "models/m/a.gguf": SIZE,
        "models/m/b.gguf": 4,
    }
    assert listing["models/m/a.gguf"]["ETag"] == etag
    assert [r.method for r in s3.requests] == ["GET"]
    assert s3.requests[0].path.startswith("/models?list-type=2")
    s3.reset_stats()

    # s3fs's cat_file(path, version_id, start, end): start/end must be keywords.
    assert fs.cat_file("models/m/a.gguf", start=100, end=110) == DATA[100:110]
    assert s3.requests == [("GET", "/models/m/a.gguf", "bytes=100-109")]
    assert s3.bytes_sent == 10
    s3.reset_stats()

    fs.invalidate_cache()
    info = fs.info("models/m/a.gguf")
    assert (info["size"], info["ETag"]) == (SIZE, etag)
    assert s3.requests == [("HEAD", "/models/m/a.gguf", None)]
    s3.reset_stats()

    assert fs.cat_ranges(["models/m/a.gguf"] * 2, [0, 5], [4, 9]) == [DATA[:4], DATA[5:9]]
    assert sorted(r.range or "" for r in s3.requests) == ["bytes=0-3", "bytes=5-8"]


def test_s3_reset_clears_buckets(s3: MotoS3Server) -> None:
    s3.make_bucket("gone")
    s3.put("gone", "x", b"1")
    s3.reset()
    assert s3.client().list_buckets()["Buckets"] == []


def test_s3_ignores_environment_proxy(s3: MotoS3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    # Without config_kwargs={"proxies": {}} botocore would send this to the proxy.
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.delenv("NO_PROXY", raising=False)
    monkeypatch.delenv("no_proxy", raising=False)
    s3.make_bucket("proxied")
    s3.put("proxied", "a", b"abc")
    assert _s3fs(s3).cat_file("proxied/a") == b"abc"
