"""The loopback HTTP range server behaves like the servers it stands in for."""

from __future__ import annotations

import http.client
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import fsspec
import pytest

from gguf_audit.testing.http import RangeHTTPServer, parse_byte_range
from gguf_audit.testing.loopback import RequestRecord

DATA = bytes(range(256)) * 40  # 10240 bytes, every offset distinguishable mod 256
SIZE = len(DATA)


@pytest.fixture
def srv() -> Iterator[RangeHTTPServer]:
    with RangeHTTPServer(files={"m/a.gguf": DATA}) as server:
        yield server


@pytest.fixture
def httpfs() -> Any:
    return fsspec.filesystem("http", skip_instance_cache=True)


def _get(
    server: RangeHTTPServer, path: str, *, method: str = "GET", headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request(method, path, headers=headers or {})
        response = conn.getresponse()
        body = response.read()
        return response.status, dict(response.getheaders()), body
    finally:
        conn.close()


# ---------------------------------------------------------------- range parsing


@pytest.mark.parametrize(
    ("header", "size", "expected"),
    [
        ("bytes=0-9", 100, (0, 10)),
        ("bytes=90-200", 100, (90, 100)),
        ("bytes=99-99", 100, (99, 100)),
        ("bytes=10-", 100, (10, 100)),
        ("bytes=-10", 100, (90, 100)),
        ("bytes=-500", 100, (0, 100)),
        (" bytes=1-2 ", 100, (1, 3)),
        ("bytes=100-", 100, "unsatisfiable"),
        ("bytes=100-200", 100, "unsatisfiable"),
        ("bytes=-0", 100, "unsatisfiable"),
        ("bytes=0-0", 0, "unsatisfiable"),
        ("bytes=-5", 0, "unsatisfiable"),
        ("bytes=5-1", 100, "ignore"),
        ("bytes=-", 100, "ignore"),
        ("bytes=0-1,5-6", 100, "ignore"),
        ("items=0-1", 100, "ignore"),
        ("bytes=a-b", 100, "ignore"),
    ],
)
def test_parse_byte_range(header: str, size: int, expected: object) -> None:
    assert parse_byte_range(header, size) == expected


# ---------------------------------------------------------------- raw HTTP


@pytest.mark.parametrize(
    ("range_header", "start", "end"),
    [("bytes=10-19", 10, 20), ("bytes=10000-", 10000, SIZE), ("bytes=-7", SIZE - 7, SIZE), ("bytes=0-99999", 0, SIZE)],
)
def test_range_get(srv: RangeHTTPServer, range_header: str, start: int, end: int) -> None:
    status, headers, body = _get(srv, "/m/a.gguf", headers={"Range": range_header})
    assert status == 206
    assert body == DATA[start:end]
    assert headers["Content-Range"] == f"bytes {start}-{end - 1}/{SIZE}"
    assert headers["Content-Length"] == str(end - start)
    assert srv.requests == [("GET", "/m/a.gguf", range_header)]
    assert srv.bytes_sent == end - start


def test_full_get_and_head(srv: RangeHTTPServer) -> None:
    status, headers, body = _get(srv, "/m/a.gguf")
    assert (status, body) == (200, DATA)
    assert headers["Content-Length"] == str(SIZE)
    assert headers["Accept-Ranges"] == "bytes"
    assert "Content-Encoding" not in headers
    etag = headers["ETag"]

    status, headers, body = _get(srv, "/m/a.gguf", method="HEAD")
    assert (status, body) == (200, b"")
    assert headers["Content-Length"] == str(SIZE)
    assert headers["Accept-Ranges"] == "bytes"
    assert headers["ETag"] == etag
    assert srv.requests == [RequestRecord("GET", "/m/a.gguf", None), RequestRecord("HEAD", "/m/a.gguf", None)]
    assert srv.bytes_sent == SIZE


def test_unsatisfiable_and_missing(srv: RangeHTTPServer) -> None:
    status, headers, _ = _get(srv, "/m/a.gguf", headers={"Range": f"bytes={SIZE}-"})
    assert status == 416
    assert headers["Content-Range"] == f"bytes */{SIZE}"
    status, _, _ = _get(srv, "/m/nope.gguf")
    assert status == 404
    status, _, body = _get(srv, "/m/a.gguf", headers={"Range": "bytes=5-1"})
    assert (status, body) == (200, DATA)  # an invalid range is ignored


def test_etag_changes_with_content(srv: RangeHTTPServer) -> None:
    first = _get(srv, "/m/a.gguf", method="HEAD")[1]["ETag"]
    srv.put("m/a.gguf", DATA[:-1])
    second = _get(srv, "/m/a.gguf", method="HEAD")[1]
    assert second["ETag"] != first
    assert second["Content-Length"] == str(SIZE - 1)
    srv.remove("m/a.gguf")
    assert _get(srv, "/m/a.gguf")[0] == 404


def test_serves_root_directory(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "x y.gguf").write_bytes(DATA)
    (tmp_path.parent / "outside.bin").write_bytes(b"secret")
    with RangeHTTPServer(root=tmp_path, files={"mem.gguf": b"abc"}) as server:
        url = server.url_for("d/x y.gguf")
        assert url.endswith("/d/x%20y.gguf")
        status, headers, body = _get(server, "/d/x%20y.gguf", headers={"Range": "bytes=1-3"})
        assert (status, body) == (206, DATA[1:4])
        stat = (tmp_path / "d" / "x y.gguf").stat()
        assert headers["ETag"] == f'"{stat.st_size:x}-{stat.st_mtime_ns:x}"'
        assert _get(server, "/mem.gguf")[2] == b"abc"
        assert _get(server, "/d")[0] == 404  # no directory listings
        assert _get(server, "/../outside.bin")[0] == 404
        assert server.requests[0] == ("GET", "/d/x y.gguf", "bytes=1-3")


def test_keep_alive_reuses_one_connection(srv: RangeHTTPServer) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    try:
        for start in (0, 100, 200):
            conn.request("GET", "/m/a.gguf", headers={"Range": f"bytes={start}-{start + 9}"})
            response = conn.getresponse()
            assert response.read() == DATA[start : start + 10]
    finally:
        conn.close()
    assert srv.connections == 1
    assert len(srv.requests) == 3


def test_close_ends_idle_keep_alive_connections() -> None:
    server = RangeHTTPServer(files={"a": b"x"})
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
    try:
        conn.request("GET", "/a")
        assert conn.getresponse().read() == b"x"
        started = time.monotonic()
        server.close()
        server.close()  # idempotent
        assert time.monotonic() - started < 5
        # The handler idle on this connection is gone: a closed server answers nothing.
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            conn.request("GET", "/a")
            conn.getresponse().read()
        assert len(server.requests) == 1
    finally:
        conn.close()


def test_ignore_range(srv: RangeHTTPServer) -> None:
    srv.ignore_range = True
    status, headers, body = _get(srv, "/m/a.gguf", headers={"Range": "bytes=10-19"})
    assert (status, body) == (200, DATA)
    assert "Accept-Ranges" not in headers
    assert "Content-Range" not in headers
    srv.ignore_range = False
    assert _get(srv, "/m/a.gguf", headers={"Range": "bytes=10-19"})[0] == 206


def test_latency() -> None:
    with RangeHTTPServer(files={"a": b"x"}, latency_s=0.2) as server:
        started = time.monotonic()
        assert _get(server, "/a")[0] == 200
        assert time.monotonic() - started >= 0.2
        server.latency_s = 0.0
        started = time.monotonic()
        _get(server, "/a")
        assert time.monotonic() - started < 0.2


def test_fail_next(srv: RangeHTTPServer) -> None:
    srv.fail_next = 2
    assert _get(srv, "/m/a.gguf")[0] == 503
    assert srv.fail_next == 1
    srv.fail_status = 500
    assert _get(srv, "/m/a.gguf")[0] == 500
    assert srv.fail_next == 0
    assert _get(srv, "/m/a.gguf")[0] == 200
    assert len(srv.requests) == 3


def test_truncate_next_cuts_bodies_and_closes(srv: RangeHTTPServer) -> None:
    srv.truncate_next = 1
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    try:
        conn.request("GET", "/m/a.gguf", headers={"Range": "bytes=0-99"})
        response = conn.getresponse()
        assert response.status == 206 and response.getheader("Content-Length") == "100"
        with pytest.raises(http.client.IncompleteRead) as cut:
            response.read()
        assert cut.value.partial == DATA[:50]
    finally:
        conn.close()
    assert srv.truncate_next == 0
    assert _get(srv, "/m/a.gguf", headers={"Range": "bytes=0-99"})[2] == DATA[:100]


def test_max_in_flight_is_the_peak_of_waiting_requests() -> None:
    with RangeHTTPServer(files={"a": b"x"}, latency_s=0.2) as server:
        assert server.max_in_flight == 0
        threads = [threading.Thread(target=_get, args=(server, "/a")) for _ in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert server.max_in_flight == 3
        server.reset_stats()
        _get(server, "/a")
        assert server.max_in_flight == 1


def test_put_virtual_serves_bytes_made_on_demand(srv: RangeHTTPServer) -> None:
    calls: list[tuple[int, int]] = []

    def read(start: int, end: int) -> bytes:
        calls.append((start, end))
        return bytes(i % 251 for i in range(start, end))

    srv.put_virtual("big.bin", 10**12, read)
    status, headers, body = _get(srv, "/big.bin", headers={"Range": "bytes=999999999990-999999999999"})
    assert status == 206 and headers["Content-Range"] == f"bytes 999999999990-999999999999/{10**12}"
    assert body == bytes(i % 251 for i in range(999999999990, 10**12 - 0)) and calls == [(999999999990, 10**12)]
    srv.remove("big.bin")
    assert _get(srv, "/big.bin")[0] == 404


def test_fail_next_keeps_connection_alive(srv: RangeHTTPServer) -> None:
    srv.fail_next = 1
    conn = http.client.HTTPConnection("127.0.0.1", srv.port, timeout=10)
    try:
        for expected in (503, 206):
            conn.request("GET", "/m/a.gguf", headers={"Range": "bytes=0-3"})
            response = conn.getresponse()
            response.read()
            assert response.status == expected
    finally:
        conn.close()
    assert srv.connections == 1


def test_no_content_length(srv: RangeHTTPServer) -> None:
    srv.no_content_length = True
    status, headers, body = _get(srv, "/m/a.gguf", headers={"Range": "bytes=0-9"})
    assert (status, body) == (206, DATA[:10])
    assert "Content-Length" not in headers
    assert headers["Connection"] == "close"


def test_disallow_head(srv: RangeHTTPServer) -> None:
    srv.allow_head = False
    status, headers, _ = _get(srv, "/m/a.gguf", method="HEAD")
    assert status == 405
    assert headers["Allow"] == "GET"


def test_accounting_is_thread_safe(srv: RangeHTTPServer) -> None:
    def worker() -> None:
        for i in range(10):
            _get(srv, "/m/a.gguf", headers={"Range": f"bytes={i}-{i}"})

    threads = [threading.Thread(target=worker) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(srv.requests) == 80
    assert srv.bytes_sent == 80
    srv.reset_stats()
    assert (srv.requests, srv.bytes_sent, srv.connections) == ([], 0, 0)


# ---------------------------------------------------------------- fsspec http


def test_fsspec_info_is_one_head(srv: RangeHTTPServer, httpfs: Any) -> None:
    info = httpfs.info(srv.url_for("m/a.gguf"))
    assert info["size"] == SIZE
    assert info["ETag"].startswith('"')
    assert srv.requests == [("HEAD", "/m/a.gguf", None)]


def test_fsspec_info_falls_back_to_get(srv: RangeHTTPServer, httpfs: Any) -> None:
    # Without HEAD, fsspec asks for the whole body (no Range) and drops the
    # connection after the headers: one wasted transfer per info().
    srv.allow_head = False
    assert httpfs.info(srv.url_for("m/a.gguf"))["size"] == SIZE
    assert srv.requests == [("HEAD", "/m/a.gguf", None), ("GET", "/m/a.gguf", None)]


def test_fsspec_info_without_content_length(srv: RangeHTTPServer, httpfs: Any) -> None:
    srv.no_content_length = True
    assert httpfs.info(srv.url_for("m/a.gguf"))["size"] is None


def test_fsspec_cat_file_ranges(srv: RangeHTTPServer, httpfs: Any) -> None:
    url = srv.url_for("m/a.gguf")
    assert httpfs.cat_file(url, 10, 20) == DATA[10:20]
    assert httpfs.cat_file(url, -10) == DATA[-10:]
    assert httpfs.cat_file(url, 10000) == DATA[10000:]
    # cat_file makes exactly one request, and never HEAD, unless end < 0.
    assert srv.requests == [
        ("GET", "/m/a.gguf", "bytes=10-19"),
        ("GET", "/m/a.gguf", "bytes=-10"),
        ("GET", "/m/a.gguf", "bytes=10000-"),
    ]
    srv.reset_stats()
    assert httpfs.cat_file(url, 0, -10) == DATA[:-10]
    assert [r.method for r in srv.requests] == ["HEAD", "GET"]


def test_fsspec_cat_file_ignored_range_returns_whole_body(srv: RangeHTTPServer, httpfs: Any) -> None:
    # fsspec's cat_file does not check the status or length: callers must.
    srv.ignore_range = True
    assert httpfs.cat_file(srv.url_for("m/a.gguf"), 10, 20) == DATA


def test_fsspec_cat_file_errors(srv: RangeHTTPServer, httpfs: Any) -> None:
    import aiohttp

    with pytest.raises(FileNotFoundError):
        httpfs.cat_file(srv.url_for("m/missing.gguf"), 0, 10)
    with pytest.raises(aiohttp.ClientResponseError) as past_end:
        httpfs.cat_file(srv.url_for("m/a.gguf"), SIZE + 1, SIZE + 5)
    assert past_end.value.status == 416
    srv.fail_next = 1
    with pytest.raises(aiohttp.ClientResponseError) as failed:
        httpfs.cat_file(srv.url_for("m/a.gguf"), 0, 10)
    assert failed.value.status == 503  # no retries in HTTPFileSystem
    assert httpfs.cat_file(srv.url_for("m/a.gguf"), 0, 10) == DATA[:10]


def test_fsspec_cat_ranges(srv: RangeHTTPServer, httpfs: Any) -> None:
    url = srv.url_for("m/a.gguf")
    out = httpfs.cat_ranges([url, url, url], [0, 100, 5000], [4, 110, 5008])
    assert out == [DATA[0:4], DATA[100:110], DATA[5000:5008]]
    # One GET per range, no merging, no HEAD.
    assert sorted(srv.requests) == sorted(
        [
            ("GET", "/m/a.gguf", "bytes=0-3"),
            ("GET", "/m/a.gguf", "bytes=100-109"),
            ("GET", "/m/a.gguf", "bytes=5000-5007"),
        ]
    )
    assert srv.bytes_sent == 22


def test_fsspec_open_range_reads(srv: RangeHTTPServer, httpfs: Any) -> None:
    url = srv.url_for("m/a.gguf")
    with httpfs.open(url, block_size=64, cache_type="none") as f:
        assert f.size == SIZE
        f.seek(1000)
        assert f.read(16) == DATA[1000:1016]
        f.seek(-4, 2)
        assert f.read() == DATA[-4:]
    assert srv.requests == [
        ("HEAD", "/m/a.gguf", None),
        ("GET", "/m/a.gguf", "bytes=1000-1015"),
        ("GET", "/m/a.gguf", f"bytes={SIZE - 4}-{SIZE - 1}"),
    ]
    srv.reset_stats()
    with httpfs.open(url, block_size=64, size=SIZE) as f:  # a known size skips the HEAD
        assert f.read(8) == DATA[:8]
    assert srv.requests == [("GET", "/m/a.gguf", "bytes=0-71")]  # readahead cache: read + block


def test_fsspec_open_block_size_zero_streams(srv: RangeHTTPServer, httpfs: Any) -> None:
    # block_size=0 is a streaming file: one GET of the whole body, no ranges.
    with httpfs.open(srv.url_for("m/a.gguf"), block_size=0) as f:
        assert f.read(10) == DATA[:10]
    assert srv.requests == [("HEAD", "/m/a.gguf", None), ("GET", "/m/a.gguf", None)]


def test_fsspec_open_ignored_range_fails_past_start(srv: RangeHTTPServer, httpfs: Any) -> None:
    srv.ignore_range = True
    with httpfs.open(srv.url_for("m/a.gguf"), block_size=64, cache_type="none") as f:
        assert f.read(8) == DATA[:8]  # from the start, a 200 is cut to size
        f.seek(100)
        with pytest.raises(ValueError, match="support range requests"):
            f.read(8)
