"""Secrets by shape, not only by name: 44 forms (tests/secret_forms.py) through redaction and ``gguf-audit inspect``.

Every output of ``inspect`` (text, JSON, JSON Lines, SARIF) is read back as bytes: no secret of any form is
there, the redacted marker is, and the server was asked through the real URL. Ordinary names (``hf_model.gguf``,
tensor names, digests) come through unchanged.
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote

import pytest
from corpus import corpus_dir
from secret_forms import FORMS, Made, forms_for, github, google_key, harmless_forms, hugging_face, jwt, leaks, slack

from gguf_audit.cli import main
from gguf_audit.redact import RedactFilter, redact_known, redact_text, redact_url, secrets_in
from gguf_audit.testing.builder import build_gguf, kv_str, tiny_llama_like
from gguf_audit.testing.http import RangeHTTPServer

BASE = "http://127.0.0.1:8765"


@pytest.mark.parametrize("form", range(len(FORMS)), ids=[f.label for f in FORMS])
def test_each_form_redacts_and_stays_stable(form: int) -> None:
    made = forms_for(BASE)[form]
    shown = redact_url(made.url)
    assert not leaks(shown, made), shown
    assert "***" in shown and shown.startswith(("http://127.0.0.1:8765/f", "http://***@127.0.0.1:8765/f")), shown
    assert redact_url(shown) == shown  # idempotent
    said = redact_text(f"ClientResponseError: 403, url='{made.url}'; retry")
    assert not leaks(said, made) and said == f"ClientResponseError: 403, url='{shown}'; retry"
    # The command line's own secrets are found, so an error that quotes one elsewhere still prints none.
    quoted = f"Invalid bucket name {unquote(made.url.partition('://')[2])!r}"
    assert not leaks(redact_known(quoted, secrets_in([made.url])), made)


def test_a_second_signature_of_one_object_redacts_alike() -> None:
    """Stable: another night's signature, date, token or key gives the same redacted URL."""
    one, two = forms_for(BASE), forms_for(BASE, night=2)
    assert len(one) >= 40 and len({m.url for m in one}) == len(one)
    assert all(set(a.secrets).isdisjoint(b.secrets) for a, b in zip(one, two, strict=True))
    assert [redact_url(m.url) for m in one] == [redact_url(m.url) for m in two]


def test_files_that_differ_by_a_harmless_parameter_stay_apart() -> None:
    urls = [u for u, _ in harmless_forms(BASE)]
    assert [redact_url(u) for u in urls] == urls  # shown as they are: a version or a revision names the file
    key = google_key("h")
    assert redact_url(f"{BASE}/m.gguf?revision=main&x-id=GetObject&key={key}&alt=media") == (
        f"{BASE}/m.gguf?revision=main&x-id=GetObject&key=***&alt=media"
    )


@pytest.mark.parametrize(
    "token",
    [
        github("t1"),
        "gho_" + github("t2")[4:],
        "github_pat_11ABCDEFG0" + "x" + github("t3")[4:] + "_" + github("t4")[4:],
        hugging_face("t5"),
        google_key("t6"),
        jwt("t7"),
        "AKIAIOSFODNN7EXAMPLE",
        "ASIA" + "Q7WZ3X2Y1V0U9T8S",
        slack("t8"),
        "sk-proj-" + github("t9")[4:] + "_" + github("t10")[4:],
        "sk-" + github("t11")[4:] + github("t12")[4:16],
    ],
)
def test_token_shapes_are_found_anywhere_in_text(token: str) -> None:
    for text in (
        f"cannot read /models/{token}/m.gguf",
        f"general.description = 'deploy with {token} please'",
        f"GITHUB_TOKEN={token}",
        f"{token}",
        f"s3://bucket/{token}.gguf",
    ):
        out = redact_text(text)
        assert token not in out and token[-12:] not in out and "***" in out, out
        assert redact_text(out) == out
    assert token in secrets_in([f"gguf-audit inspect /x/{token}/m.gguf"])


def test_bearer_and_private_keys_in_text() -> None:
    text = "headers {'Authorization': 'Bearer 9f8e7d6c5b4a39281706abcdef'} refused"
    assert redact_text(text) == "headers {'Authorization': 'Bearer ***'} refused"
    pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIEow1BAAKCAQEAx\n-----END RSA PRIVATE KEY-----"
    assert redact_text(f"key: {pem} end") == "key: *** end"
    assert "MIIEow1" not in redact_text("-----BEGIN PRIVATE KEY-----\nMIIEow1BAAKCAQEAx (cut)")


@pytest.mark.parametrize(
    "plain",
    [
        "hf_model.gguf",
        "https://h/org/hf_tiny-llama-Q4_K_M.gguf",
        "blk.0.attn_q.weight",
        "tokenizer.ggml.tokens",
        "s3://b/ghp_model/sk-learn-port/AIza/eyJ.gguf",
        "hf_" + "a" * 34,  # one case: a word, not a token
        "ghp_" + "0123456789abcdef" * 2 + "abcd",  # a hex digest
        "sha256 " + "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
        "bearer tokens are not printed; Bearer authentication",
        "AKIA is how AWS key ids start",
        "s3://b/xoxo-gpt-model-name-v2/sk-Meta-Llama-3-8B-Instruct-abliterated-Q4_K_M.gguf",
        "tensor 'blk.0.attn_q.weight' ends at 7340064, past the file's 7340000 bytes",
        "https://huggingface.co/org/repo/resolve/main/m.gguf?download=true",
    ],
)
def test_ordinary_names_are_left_alone(plain: str) -> None:
    """Beside a real token, which goes, an ordinary name stays as it was."""
    token = github(plain)
    assert redact_text(f"{plain} {token}") == f"{plain} ***"
    if "://" in plain:
        assert redact_url(plain) == plain
        assert redact_url(f"{plain}#{token}") == f"{plain}#***"


def test_the_log_filter_redacts_shapes_in_messages_and_args() -> None:
    made = forms_for(BASE)
    logger = logging.getLogger("secret_forms_probe")
    sink = io.StringIO()
    handler = logging.StreamHandler(sink)
    handler.addFilter(RedactFilter())
    logger.addHandler(handler)
    logger.propagate = False
    try:
        for m in made:
            logger.warning("reading %s with %s", m.url, m.secrets[0])
            logger.warning(f"token {m.secrets[-1]} refused")
    finally:
        logger.removeHandler(handler)
    text = sink.getvalue()
    # a bare secret with no shape (a password) is only found inside its URL; every shaped one is found alone too
    shaped = [m for m in made if all(redact_text(s) != s for s in m.secrets)]
    assert len(shaped) >= 12
    assert not leaks(text, shaped)
    assert not [m.label for m in made if redact_url(m.url) not in text]


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[RangeHTTPServer, list[Made]]]:
    data = (corpus_dir() / "models/tiny-llama-Q4_K_M.gguf").read_bytes()
    with RangeHTTPServer() as srv:
        made = forms_for(srv.base_url)
        for m in made:
            srv.put(m.path, data)
        yield srv, made


@pytest.mark.parametrize("fmt", ["text", "json", "jsonl", "sarif"])
def test_inspect_shows_no_secret_of_any_form(
    served: tuple[RangeHTTPServer, list[Made]], capsysbinary: pytest.CaptureFixture[bytes], fmt: str
) -> None:
    srv, made = served
    for m in made:
        srv.reset_stats()
        status = main(["inspect", m.url, "--format", fmt])
        out, err = capsysbinary.readouterr()
        assert status in (0, 1), (m.label, err)
        gets = [r.path for r in srv.requests if r.method == "GET"]
        # read through the real URL: the secret reached the server (a fragment never leaves the client)
        assert gets and (not m.sent or all(s in "".join(gets) or _encoded_in(s, gets) for s in m.secrets)), (
            m.label,
            gets[:1],
        )
        assert not leaks(out + err, m), (m.label, fmt)
        shown = redact_url(m.url)
        assert b"***" in out, (m.label, fmt)
        if fmt == "json":
            assert json.loads(out)["url"] == shown, m.label
        elif fmt == "jsonl":
            assert json.loads(out.splitlines()[0])["url"] == shown, m.label
        elif fmt == "sarif":
            # an artifact's location is a URI reference: its '#' is percent-encoded
            uris = (shown, shown.replace("#", "%23"))
            assert any(u in s for s in _strings(json.loads(out)) for u in uris), m.label
        else:
            assert shown.encode() in out, m.label


def _strings(value: object) -> Iterator[str]:
    """Every string inside a parsed JSON document."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _encoded_in(secret: str, paths: list[str]) -> bool:
    from urllib.parse import quote, unquote

    return any(secret in unquote(p) or quote(secret, safe="") in p for p in paths)


def test_metadata_values_are_shown_without_their_secrets(
    tmp_path: Path, capsysbinary: pytest.CaptureFixture[bytes]
) -> None:
    """A file's own text may hold a credential (a source URL with a password, a pasted token): ``inspect``
    shows it redacted, and a chat template's ``key=`` (code, not a credential) as written."""
    kvs, tensors = tiny_llama_like()
    pw, token, key = "srcPW83kLq0", github("meta"), google_key("meta")
    kvs += [
        kv_str("general.source.url", f"https://alice:{pw}@hf.example/org/repo?key={key}"),
        kv_str("general.description", f"pulled with {token}"),
        kv_str("tokenizer.chat_template", "{% set key=message['role'] %}{{ key }}"),
    ]
    path = tmp_path / "m.gguf"
    path.write_bytes(build_gguf(kvs, tensors))
    for fmt in ("text", "json", "jsonl"):
        main(["inspect", str(path), "--format", fmt])
        out, err = capsysbinary.readouterr()
        assert pw.encode() not in out + err and token.encode() not in out and key.encode() not in out, fmt
        assert b"***@hf.example/org/repo?key=***" in out and b"pulled with ***" in out, fmt
    main(["inspect", str(path), "--json"])
    meta = json.loads(capsysbinary.readouterr().out)["metadata"]
    assert meta["tokenizer.chat_template"]["value"] == "{% set key=message['role'] %}{{ key }}"
