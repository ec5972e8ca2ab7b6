"""Secrets never leave: redact_url, redact_text, the log filter, and ``inspect`` of a presigned URL."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest
from corpus import corpus_dir

from gguf_audit.cli import main
from gguf_audit.redact import (
    RedactFilter,
    install_handler_redaction,
    install_log_redaction,
    is_redacted,
    redact_text,
    redact_url,
)
from gguf_audit.testing.http import RangeHTTPServer

S3 = (
    "https://bucket.s3.amazonaws.com/m/a.gguf?X-Amz-Algorithm=AWS4-HMAC-SHA256"
    "&X-Amz-Credential=AKIAEXAMPLE%2F20261201%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Date=20261201T010203Z"
    "&X-Amz-Expires=3600&X-Amz-SignedHeaders=host&X-Amz-Security-Token=FwoGZXIvYXdzEXAMPLE"
    "&X-Amz-Signature=0f1e2d3c4b5a69788796a5b4c3d2e1f0&download=1"
)
S3_REDACTED = (
    "https://bucket.s3.amazonaws.com/m/a.gguf?X-Amz-Algorithm=AWS4-HMAC-SHA256"
    "&X-Amz-Credential=***&X-Amz-Date=***&X-Amz-Expires=***&X-Amz-SignedHeaders=host"
    "&X-Amz-Security-Token=***&X-Amz-Signature=***&download=1"
)


def test_presigned_s3_keeps_names_and_plain_parameters() -> None:
    assert redact_url(S3) == S3_REDACTED


def test_two_signatures_of_one_object_redact_alike() -> None:
    other_night = (
        S3.replace("20261201", "20261202").replace("0f1e2d3c", "99aa88bb").replace("T010203Z", "T230000Z")
    ).replace("FwoGZXIvYXdzEXAMPLE", "IQoJb3JpZ2luEXAMPLE")
    assert other_night != S3
    assert redact_url(other_night) == redact_url(S3)


def test_idempotent() -> None:
    for url in (S3, "https://u:p@h/x.gguf", "https://h/x.gguf?sig=a&se=b", "s3://b/k.gguf", "/tmp/x.gguf"):
        once = redact_url(url)
        assert redact_url(once) == once
        assert is_redacted(once)
    assert not is_redacted(S3)


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        # Azure SAS: sig, and the expiry/permission/version that come with it
        (
            "https://acct.blob.core.windows.net/c/m.gguf?sv=2022-11-02&se=2026-12-01T00%3A00Z&sr=b&sp=r&sig=Ab%2Bc%3D",
            "https://acct.blob.core.windows.net/c/m.gguf?sv=***&se=***&sr=***&sp=***&sig=***",
        ),
        # GCS V4 signing
        (
            "https://storage.googleapis.com/b/m.gguf?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Credential=sa%40p"
            "&X-Goog-Date=20261201T000000Z&X-Goog-Expires=900&X-Goog-SignedHeaders=host&X-Goog-Signature=beef",
            "https://storage.googleapis.com/b/m.gguf?X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Credential=***"
            "&X-Goog-Date=***&X-Goog-Expires=***&X-Goog-SignedHeaders=host&X-Goog-Signature=***",
        ),
        # S3 signature v2 / CloudFront style, names in another case
        (
            "https://h/m.gguf?AWSAccessKeyId=AKIA1&EXPIRES=1767225600&signature=abc%3D",
            "https://h/m.gguf?AWSAccessKeyId=***&EXPIRES=***&signature=***",
        ),
        # a percent-encoded parameter name still counts
        ("https://h/m.gguf?X%2DAmz%2DSignature=ff&Token=t", "https://h/m.gguf?X%2DAmz%2DSignature=***&Token=***"),
        # userinfo, with and without a password
        ("https://alice:hunter2@h:8443/m.gguf", "https://***@h:8443/m.gguf"),
        ("https://ghp_abc@h/m.gguf#frag", "https://***@h/m.gguf#frag"),
        # a value is shown only for a harmless parameter (page), signed or not
        ("https://h/m.gguf?sv=2&page=3&expires=soon", "https://h/m.gguf?sv=***&page=3&expires=***"),
        ("hf://org/repo/m.gguf", "hf://org/repo/m.gguf"),
        ("file:///tmp/a@b/m.gguf", "file:///tmp/a@b/m.gguf"),
    ],
)
def test_redact_url(url: str, expected: str) -> None:
    assert redact_url(url) == expected


def test_redact_text_finds_urls_and_loose_parameters() -> None:
    text = (
        "ClientResponseError: 403, message='Forbidden', url='https://u:pw1@h/m.gguf?sig=SEKRIT&se=2026'; "
        "retry with token=TOK2, X-Amz-Signature=ABC3"
    )
    out = redact_text(text)
    for secret in ("pw1", "SEKRIT", "2026", "TOK2", "ABC3"):
        assert secret not in out
    assert "url='https://***@h/m.gguf?sig=***&se=***'" in out
    assert "token=***," in out and "X-Amz-Signature=***" in out
    assert redact_text(out) == out
    assert redact_text("no url here: a=1") == "no url here: a=1"
    assert redact_text("(see https://h/m.gguf?sig=S1&se=2), then https://u:p@h/x.") == (
        "(see https://h/m.gguf?sig=***&se=***), then https://***@h/x."
    )


def test_log_filter_redacts_message_args_and_traceback(caplog: pytest.LogCaptureFixture) -> None:
    logger = logging.getLogger("gguf_audit.test_redact_probe")
    install_log_redaction()
    assert any(isinstance(f, RedactFilter) for f in logger.filters)
    with caplog.at_level(logging.WARNING, logger="gguf_audit"):
        logger.warning("reading %s (%d tries)", S3, 3)
        logger.warning(f"direct {S3}")
        try:
            raise OSError(f"cannot open {S3}")
        except OSError:
            logger.exception("failed")
    assert "0f1e2d3c" not in caplog.text and "AKIAEXAMPLE" not in caplog.text
    assert caplog.text.count("X-Amz-Signature=***") == 3
    assert "(3 tries)" in caplog.text


@pytest.fixture
def served() -> Iterator[RangeHTTPServer]:
    data = (corpus_dir() / "models/tiny-llama-Q4_K_M.gguf").read_bytes()
    with RangeHTTPServer(files={"m/a.gguf": data}) as srv:
        yield srv


def _presigned(srv: RangeHTTPServer, path: str) -> str:
    query = S3.split("?", 1)[1]
    return srv.url_for(path).replace("http://", "http://alice:hunter2@") + "?" + query


SECRETS = ("hunter2", "AKIAEXAMPLE", "FwoGZXIvYXdzEXAMPLE", "0f1e2d3c4b5a69788796a5b4c3d2e1f0", "20261201T010203Z")


@pytest.mark.parametrize("fmt", ["text", "json", "sarif"])
def test_inspect_reads_the_real_url_and_shows_the_redacted_one(
    served: RangeHTTPServer, capsys: pytest.CaptureFixture[str], fmt: str
) -> None:
    url = _presigned(served, "m/a.gguf")
    assert main(["inspect", url, "--format", fmt]) == 0
    captured = capsys.readouterr()
    gets = [r for r in served.requests if r.method == "GET"]
    # The query reached the server: the bytes were read through the real URL.
    # (The client may decode %2F in the query; the signature and token arrive as they were.)
    signed = ("X-Amz-Signature=0f1e2d3c4b5a69788796a5b4c3d2e1f0", "X-Amz-Security-Token=FwoGZXIvYXdzEXAMPLE")
    assert gets and all(r.path.startswith("/m/a.gguf?") and all(p in r.path for p in signed) for r in gets)
    for secret in SECRETS:
        assert secret not in captured.out and secret not in captured.err
    shown = redact_url(url)
    assert shown.startswith("http://***@127.0.0.1:")
    if fmt == "json":
        assert json.loads(captured.out)["url"] == shown
    else:
        assert shown in captured.out


def test_inspect_of_a_missing_presigned_url_redacts_the_message(
    served: RangeHTTPServer, capsys: pytest.CaptureFixture[str]
) -> None:
    url = _presigned(served, "m/gone.gguf")
    assert main(["inspect", url, "--json"]) != 0
    captured = capsys.readouterr()
    problems = json.loads(captured.out)["problems"]
    assert [p["code"] for p in problems] == ["io.not_found"]
    assert redact_url(url) in problems[0]["message"]
    for secret in SECRETS:
        assert secret not in captured.out and secret not in captured.err


def test_sample_and_compare_show_redacted_urls(capsys: pytest.CaptureFixture[str]) -> None:
    models = corpus_dir() / "models"
    files = {f"m/{q}.gguf": (models / f"tiny-llama-{q}.gguf").read_bytes() for q in ("F16", "Q8_0")}
    with RangeHTTPServer(files=files) as srv:
        quant, reference = _presigned(srv, "m/Q8_0.gguf"), _presigned(srv, "m/F16.gguf")
        main(["sample", quant, "--json"])
        sampled = capsys.readouterr()
        main(["compare", quant, reference])
        compared = capsys.readouterr()
        gets = [r.path for r in srv.requests if r.method == "GET"]
    assert {p.split("?", 1)[0] for p in gets} == {"/m/Q8_0.gguf", "/m/F16.gguf"}
    assert all("X-Amz-Signature=0f1e2d3c4b5a69788796a5b4c3d2e1f0" in p for p in gets)
    assert json.loads(sampled.out)["url"] == redact_url(quant)
    assert redact_url(quant) in compared.out and redact_url(reference) in compared.out
    for captured in (sampled, compared):
        for secret in SECRETS:
            assert secret not in captured.out and secret not in captured.err


def test_handler_filter_redacts_what_other_libraries_log() -> None:
    """A library's logger (here one named like dask's) logs a presigned URL: its handler writes it redacted."""
    library = logging.getLogger("thirdparty_probe")
    sink = io.StringIO()
    handler = logging.StreamHandler(sink)
    library.addHandler(handler)
    library.propagate = False
    try:
        assert install_handler_redaction() >= 1
        assert install_handler_redaction() == 0  # idempotent
        logging.getLogger("thirdparty_probe.child").warning("fetching %s", S3)
        try:
            raise OSError(f"cannot open {S3}")
        except OSError:
            library.exception("failed")
    finally:
        library.removeHandler(handler)
    text = sink.getvalue()
    assert "0f1e2d3c" not in text and "AKIAEXAMPLE" not in text
    assert text.count("X-Amz-Signature=***") == 2
