"""Credentials kept out of every output: :func:`redact_url`, :func:`redact_text` and a log filter.

A URL may carry a secret: ``user:password@`` in its authority, or a presigned
query string (S3 ``X-Amz-Signature``, GCS ``X-Goog-Signature``, Azure SAS
``sig``, CloudFront ``Signature``, bearer ``token``). The real URL is needed
where bytes are read and nowhere else: every row, message, finding, log line
and report shows the redacted form.

The redacted form is stable: the same object presigned on two nights (other
signature, other date, other expiry) redacts to the same URL, so an
incremental run still matches the file across nights. Userinfo becomes
``***@``; the value of every secret parameter, and of the signing parameters
that come with one (expiry, date, permissions, version), becomes ``***``.
Parameter names are kept, so a reader sees the URL was presigned. Redacting a
redacted URL changes nothing.

Pure: strings in, strings out (the log filter edits the records it is given).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Final
from urllib.parse import unquote_plus

__all__ = [
    "REDACTED",
    "RedactFilter",
    "install_handler_redaction",
    "install_log_redaction",
    "is_redacted",
    "redact_known",
    "redact_text",
    "redact_url",
    "secrets_in",
]

REDACTED: Final = "***"

# Parameters whose value is a secret (or a credential naming one) on their own.
_SECRET: Final = frozenset(
    {
        "x-amz-signature",
        "x-amz-credential",
        "x-amz-security-token",
        "x-goog-signature",
        "x-goog-credential",
        "x-goog-security-token",
        "signature",
        "sig",
        "token",
        "access_token",
        "accesstoken",
        "id_token",
        "refresh_token",
        "api_key",
        "apikey",
        "api-key",
        "password",
        "passwd",
        "secret",
        "client_secret",
        "awsaccesskeyid",
        "googleaccessid",
        "policy",
        "key-pair-id",
        "x-api-key",
    }
)

# Signing parameters that change with each signature: reduced when a secret parameter is present,
# so two signatures of one object give one redacted URL.
_SIGNING: Final = frozenset(
    {
        "expires",
        "x-amz-expires",
        "x-amz-date",
        "x-goog-expires",
        "x-goog-date",
        "se",
        "st",
        "sp",
        "sv",
        "sr",
        "spr",
        "sip",
        "ss",
        "srt",
        "skoid",
        "sktid",
        "skt",
        "ske",
        "sks",
        "skv",
        "sdd",
    }
)

# A scheme of at most 32 characters: unbounded, each start inside a long run of letters would rescan the run
# to its end (quadratic in the text); bounded, the cost is linear whatever the text holds.
_URL: Final = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]{0,31}://[^\s'\"<>`]+")
# A secret parameter outside any URL (a query string logged alone, a header-like "token=...").
_LOOSE: Final = re.compile(
    r"(?i)(?<![A-Za-z0-9_\-])(" + "|".join(re.escape(n) for n in sorted(_SECRET, key=len, reverse=True)) + r")="
    r"(?!\*\*\*(?:[&;,\s'\"<>`]|$))[^&;,\s'\"<>`]+"
)


# A password in userinfo whose '//' a path normalisation cut to '/' ("https:/user:pw@host", as pathlib shows a URL).
_USERINFO: Final = re.compile(r"(?<=/)[^\s/@:'\"<>`]+:[^\s/@'\"<>`]+@")


def _name(raw: str) -> str:
    return unquote_plus(raw).strip().lower()


def _redact_query(query: str) -> str:
    parts = query.split("&")
    names = [_name(p.split("=", 1)[0]) for p in parts]
    signed = any(n in _SECRET for n in names)
    out = []
    for part, name in zip(parts, names, strict=True):
        if "=" in part and (name in _SECRET or (signed and name in _SIGNING)):
            out.append(part.split("=", 1)[0] + "=" + REDACTED)
        else:
            out.append(part)
    return "&".join(out)


def redact_url(url: str) -> str:
    """``url`` without its secrets: userinfo as ``***@``, secret and signing query values as ``***``.

    Stable (two signatures of one object give one result), idempotent, and the
    identity on a URL that holds no secret. Parameter names are matched
    case-insensitively and after percent-decoding; the rest of the URL is kept
    byte for byte.
    """
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    # The authority ends at the first '/', '?' or '#'.
    cut = len(rest)
    for stop in "/?#":
        at = rest.find(stop)
        if at != -1:
            cut = min(cut, at)
    authority, tail = rest[:cut], rest[cut:]
    if sep and "@" in authority:
        authority = REDACTED + "@" + authority.rsplit("@", 1)[1]
    fragment = ""
    if "#" in tail:
        tail, hashmark, frag = tail.partition("#")
        fragment = hashmark + frag
    if "?" in tail:
        path, _, query = tail.partition("?")
        tail = path + "?" + _redact_query(query)
    if "=" in fragment:  # OAuth implicit flows put tokens in the fragment
        fragment = "#" + _redact_query(fragment[1:])
    return (scheme + sep if sep else "") + authority + tail + fragment


def redact_text(text: str) -> str:
    """``text`` with every URL in it redacted (:func:`redact_url`), and any loose ``secret=value`` too."""
    if "://" not in text and "=" not in text and "@" not in text:
        return text
    if "://" in text:  # the URL pattern is only tried where a URL can be
        text = _URL.sub(_redact_match, text)
    if "@" in text:
        text = _USERINFO.sub(REDACTED + "@", text)
    if "=" not in text:
        return text
    return _LOOSE.sub(lambda m: m.group(1) + "=" + REDACTED, text)


MIN_KNOWN_SECRET: Final = 4
"""Shorter values are not looked for elsewhere: they would blank ordinary words."""


def secrets_in(texts: Iterable[str]) -> frozenset[str]:
    """The secret values the URLs in ``texts`` hold (a userinfo password, secret and signing query values).

    A command line's own secrets, so that an error which quotes one out of its URL (a bucket name
    ``user:pw@bucket`` a library refused, a path cut at its ``//``) still prints none (:func:`redact_known`).
    """
    found: set[str] = set()
    for text in texts:
        for match in _URL.finditer(text):
            url = match.group(0)
            authority = url.partition("://")[2].split("/", 1)[0].split("?", 1)[0]
            if "@" in authority:
                userinfo = authority.rsplit("@", 1)[0]
                found.update((userinfo, userinfo.partition(":")[2]))
            query = url.partition("?")[2].partition("#")[0]
            parts = [part.partition("=") for part in query.split("&") if "=" in part]
            signed = any(_name(name) in _SECRET for name, _, _ in parts)
            found.update(v for name, _, v in parts if _name(name) in _SECRET or (signed and _name(name) in _SIGNING))
    return frozenset(s for s in found if len(s) >= MIN_KNOWN_SECRET)


def redact_known(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each of ``secrets`` (longest first) replaced by ``***``, wherever it stands."""
    for secret in sorted(secrets, key=len, reverse=True):
        text = text.replace(secret, REDACTED)
    return text


def _redact_match(match: re.Match[str]) -> str:
    # Punctuation that ends a sentence or closes a bracket is the text's, not the URL's.
    url = match.group(0)
    bare = url.rstrip(".,;:!)]}")
    return redact_url(bare) + url[len(bare) :]


def is_redacted(url: str) -> bool:
    """Whether ``url`` shows no secret (redacting it changes nothing)."""
    return redact_url(url) == url


class RedactFilter(logging.Filter):
    """Redacts the message, its arguments and its traceback of each record it sees; drops none."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = redact_text(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_redact_arg(a) for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: _redact_arg(v) for k, v in record.args.items()}
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
            record.exc_text = redact_text(logging.Formatter().formatException(record.exc_info))
        return True


def _redact_arg(value: object) -> object:
    if isinstance(value, int | float | bool) or value is None:
        return value
    text = str(value)
    clean = redact_text(text)
    return value if clean == text else clean


_FILTER: Final = RedactFilter()


def install_log_redaction(prefix: str = "gguf_audit") -> None:
    """Put the redacting filter on the ``prefix`` logger and every logger below it made so far.

    A logger's filters see only the records logged on it (a child's records
    reach the parent's handlers without them), so each logger gets one.
    Idempotent; call it once the modules that log are imported.
    """
    names = [prefix] + [n for n in list(logging.Logger.manager.loggerDict) if n.startswith(prefix + ".")]
    for name in names:
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactFilter) for f in logger.filters):
            logger.addFilter(_FILTER)


def install_handler_redaction() -> int:
    """Put the redacting filter on every handler configured so far, of any logger; how many got one.

    Third-party loggers (dask's ``distributed``, fsspec, s3fs, botocore,
    urllib3, huggingface_hub) can log a URL they were given, presigned query
    and all, and their records never pass a ``gguf_audit`` logger's filters.
    A handler's filters see every record the handler emits, whichever logger
    it came from and whichever child logged it, so filtering at the handlers
    covers them. Handlers added later are not covered (call again after
    configuring logging). Idempotent.
    """
    loggers: list[logging.Logger] = [logging.getLogger()]
    loggers += [v for v in list(logging.Logger.manager.loggerDict.values()) if isinstance(v, logging.Logger)]
    added = 0
    for logger in loggers:
        for handler in list(logger.handlers):
            if not any(isinstance(f, RedactFilter) for f in handler.filters):
                handler.addFilter(_FILTER)
                added += 1
    return added
