"""Credentials kept out of every output: :func:`redact_url`, :func:`redact_text` and a log filter.

A URL may carry a secret: ``user:password@`` in its authority, a presigned
query string (S3 ``X-Amz-Signature``, GCS ``X-Goog-Signature``, Azure SAS
``sig``), an API key by any parameter name (Google's ``key``, Azure Functions'
``code``, ``auth``, ``jwt``...), or a token in its path or fragment. The real
URL is needed where bytes are read and nowhere else: every row, message,
finding, log line and report shows the redacted form.

Query values are redacted by default: only the parameters of
:data:`HARMLESS_PARAMETERS` (which file, which version, how it is served) keep
theirs; every other value becomes ``***``, its name kept, so a reader sees the
URL was presigned. Userinfo becomes ``***@``. Tokens are also recognised by
their shape wherever they stand, in a URL's path or fragment or in any text
(:data:`_SHAPES`: GitHub, Hugging Face, Google API keys, JWTs, AWS access key
ids, Slack, bearer tokens, private-key PEM blocks); their shapes ask for a
realistic length and alphabet, so a file called ``hf_model.gguf`` or a tensor
name is left alone.

The redacted form is stable: the same object presigned on two nights (other
signature, other date, other expiry) redacts to the same URL, so an
incremental run still matches the file across nights. Redacting a redacted URL
changes nothing.

Pure: strings in, strings out (the log filter edits the records it is given).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable
from typing import Final
from urllib.parse import quote, unquote, unquote_plus

__all__ = [
    "HARMLESS_PARAMETERS",
    "REDACTED",
    "RedactFilter",
    "install_handler_redaction",
    "install_log_redaction",
    "is_redacted",
    "redact_known",
    "redact_text",
    "redact_url",
    "redact_value",
    "secrets_in",
]

REDACTED: Final = "***"

HARMLESS_PARAMETERS: Final = frozenset(
    {
        # which file, and which version of it: these tell files apart, so they must stay readable
        "revision",
        "rev",
        "ref",
        "branch",
        "tag",
        "commit",
        "version",
        "v",
        "ver",
        "versionid",
        "version_id",
        "generation",  # GCS object generation
        "snapshot",  # Azure blob snapshot
        "file",
        "filename",
        "name",
        "path",
        "id",
        "part",
        "partnumber",
        "x-id",  # S3's operation name (GetObject)
        # how it is served
        "download",
        "dl",
        "raw",
        "export",
        "alt",  # GCS alt=media
        "format",
        "inline",
        "response-content-disposition",
        "response-content-type",
        # the method a presigned URL was signed with, never the signer
        "x-amz-algorithm",
        "x-amz-signedheaders",
        "x-goog-algorithm",
        "x-goog-signedheaders",
        # Azure blob addressing, listing and paging
        "comp",
        "restype",
        "prefix",
        "delimiter",
        "list-type",
        "max-keys",
        "page",
        "per_page",
        "limit",
        "offset",
    }
)
"""Query parameters whose value is shown: named for what they select or how, never a credential. Every other
parameter's value is redacted; a value of one of these is redacted only where it has a token's shape."""

# Parameters whose value is a secret wherever it is written (a query string or header-like text outside any URL).
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
        "auth_token",
        "github_token",
        "gh_token",
        "hf_token",
        "sas_token",
        "session_token",
        "aws_secret_access_key",
        "aws_session_token",
        "api_key",
        "apikey",
        "api-key",
        "key",
        "code",
        "auth",
        "jwt",
        "password",
        "passwd",
        "pwd",
        "secret",
        "client_secret",
        "awsaccesskeyid",
        "googleaccessid",
        "accountkey",  # an Azure connection string's key=value;...
        "sharedaccesskey",
        "sharedaccesssignature",
        "policy",
        "key-pair-id",
        "x-api-key",
    }
)

# Signing parameters that change with each signature: a secret found outside a URL (``secrets_in``) counts
# them only where a secret parameter is beside them.
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
_SECRET_NAMES: Final = "|".join(re.escape(n) for n in sorted(_SECRET, key=len, reverse=True))
# A parameter outside any URL (a query string logged alone, a header-like "token=..."): any name, then a set
# lookup (:func:`_redact_loose`), the value read only after a secret's name. An alternation of every name,
# tried case-insensitively at each word, took seconds on a long query string.
_LOOSE: Final = re.compile(r"(?<![A-Za-z0-9_\-])([A-Za-z][A-Za-z0-9_\-]{0,39})=")
_LOOSE_VALUE: Final = re.compile(r"[^&;,\s'\"<>`]*")
_AFTER_REDACTED: Final = frozenset("&;,/#'\"<>` \t\n\r\f\v")
"""What may follow a value already redacted: the end of the value, or of a path segment or query."""
# The same inside a URL's path (matrix parameters, a ``/sig=.../`` segment): the value ends at the segment.
_PATH_LOOSE: Final = re.compile(r"(?i)(?<![A-Za-z0-9_\-])(" + _SECRET_NAMES + r")=(?!\*\*\*(?:[/;&]|$))[^/;&]+")
_PATH_LOOSE_VALUE: Final = re.compile(r"(?i)(?<![A-Za-z0-9_\-])(" + _SECRET_NAMES + r")=([^/;&?#\s'\"<>`]+)")

# Token shapes, each with the length and alphabet its issuer uses. Every one starts where no letter or digit
# stands before it, so a long run is tried once (linear), and a name that merely contains a prefix is no match.
_SHAPES: Final = re.compile(
    r"(?<![A-Za-z0-9])(?:"
    r"gh[pousr]_[A-Za-z0-9]{30,255}"  # GitHub classic, OAuth, user, server and refresh tokens
    r"|github_pat_[A-Za-z0-9_]{40,255}"  # GitHub fine-grained tokens
    r"|hf_[A-Za-z0-9]{30,40}(?![A-Za-z0-9])"  # Hugging Face (34 letters after hf_)
    r"|AIza[0-9A-Za-z_\-]{35}(?![0-9A-Za-z_\-])"  # Google API keys (39 characters)
    r"|(?<![_\-])eyJ[A-Za-z0-9_\-]{4,}\.eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*"  # JWTs: header.payload.signature
    r"|(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA)[A-Z0-9]{16}(?![A-Za-z0-9])"  # AWS access key ids
    r"|xox[abposre]-[0-9]{6,32}-[A-Za-z0-9\-]{6,255}"  # Slack tokens: a team id's digits come first
    r"|sk-(?:[A-Za-z0-9]{48}(?![A-Za-z0-9_\-])|(?:proj|ant-[a-z0-9]{2,8})-[A-Za-z0-9_\-]{40,255})"  # OpenAI, Anthropic
    r"|(?i:bearer)\s+[A-Za-z0-9._~+/\-]{12,4096}=*"  # an Authorization header's bearer token
    r"|-----BEGIN[A-Z ]{0,32}PRIVATE KEY-----[\s\S]*?(?:-----END[A-Z ]{0,32}PRIVATE KEY-----|\Z)"
    r")"
)
_MIXED_CASE: Final = ("gh", "github_pat_", "hf_", "sk-")
"""Shapes whose random part is mixed-case base62: a run of one case (a hex digest, a word) is no token."""


# A password in userinfo whose '//' a path normalisation cut to '/' ("https:/user:pw@host", as pathlib shows a URL).
_USERINFO: Final = re.compile(r"(?<=/)[^\s/@:'\"<>`]+:[^\s/@'\"<>`]+@")


def _is_token(found: str) -> bool:
    """Whether a match of :data:`_SHAPES` is a token: the mixed-case kinds need both cases, a bearer a digit."""
    if found[:6].lower() == "bearer":
        return any(c.isdigit() for c in found[6:])
    if found.startswith(_MIXED_CASE):
        body = found.split("_", 1)[1] if "_" in found[:11] else found[3:]
        return any(c.isupper() for c in body) and any(c.islower() for c in body)
    return True


def _shape_sub(match: re.Match[str]) -> str:
    found = match.group(0)
    if not _is_token(found):
        return found
    if found[:6].lower() == "bearer":
        return found[:6] + " " + REDACTED
    return REDACTED


def _redact_shapes(text: str) -> str:
    return _SHAPES.sub(_shape_sub, text)


def _has_token(text: str) -> bool:
    return any(_is_token(m.group(0)) for m in _SHAPES.finditer(text))


def _name(raw: str) -> str:
    if "%" not in raw and "+" not in raw:
        return raw.strip().lower()
    return unquote_plus(raw).strip().lower()


def _redact_query(query: str) -> str:
    """Each value redacted but those of :data:`HARMLESS_PARAMETERS`; a bare part not among them too."""
    out = []
    for part in query.split("&"):
        raw, eq, value = part.partition("=")
        if _name(raw) in HARMLESS_PARAMETERS:
            out.append(raw + eq + REDACTED if _holds_secret(unquote_plus(value)) else part)
        elif not part or (eq and not value):
            out.append(part)
        else:
            out.append(raw + "=" + REDACTED if eq else REDACTED)
    return "&".join(out)


def _redact_loose(text: str) -> str:
    """``text`` with the value of each loose ``secret=value`` as ``***`` (one already redacted kept)."""
    out: list[str] = []
    done = 0
    for match in _LOOSE.finditer(text):
        if match.start() < done or match.group(1).lower() not in _SECRET:
            continue
        # Redacted already: told from the next four characters, never by reading the value (a text of
        # many "sig=***/" would be read again from each).
        after = text[match.end() : match.end() + len(REDACTED) + 1]
        if after.startswith(REDACTED) and (after == REDACTED or after[-1] in _AFTER_REDACTED):
            continue
        value = _LOOSE_VALUE.match(text, match.end())
        end = value.end() if value is not None else match.end()
        if end == match.end():
            continue
        out += [text[done : match.end()], REDACTED]
        done = end
    return "".join(out) + text[done:] if out else text


def _holds_secret(value: str) -> bool:
    """Whether a harmless parameter's (decoded) value still holds a secret: a token, a nested URL's, ``sig=...``."""
    return value != REDACTED and redact_text(value) != value


def _redact_segment(segment: str) -> str:
    """A path segment with its tokens and ``secret=value`` redacted, read after percent-decoding."""
    plain = unquote(segment) if "%" in segment else segment
    clean = _PATH_LOOSE.sub(lambda m: m.group(1) + "=" + REDACTED, _redact_shapes(plain))
    if clean == plain:
        return segment
    return quote(clean, safe="!$&'()*+,;=:@~") if plain != segment else clean


def _redact_path(path: str) -> str:
    if "%" not in path and "=" not in path:  # the common path: one pass, no segment holds a parameter
        return _redact_shapes(path)
    plain = unquote(path)
    if "=" not in plain and not _has_token(plain):  # percent-encoded, holding nothing: each segment as it was
        return path
    return "/".join(_redact_segment(s) for s in path.split("/"))


def redact_url(url: str) -> str:
    """``url`` without its secrets: userinfo as ``***@``, query values as ``***`` (all but the harmless
    parameters'), and tokens in its path or fragment.

    Stable (two signatures of one object give one result), idempotent, and the
    identity on a URL with no userinfo, no token and no query value but those of
    :data:`HARMLESS_PARAMETERS`. Parameter names are matched case-insensitively
    and after percent-decoding; the rest of the URL is kept byte for byte (a
    percent-encoded path segment that held a token is shown re-encoded).
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
    path, question, query = tail.partition("?")
    tail = _redact_path(path) + question + (_redact_query(query) if question else "")
    if "=" in fragment:  # OAuth implicit flows put tokens in the fragment
        fragment = "#" + _redact_query(fragment[1:])
    elif fragment:
        fragment = "#" + _redact_segment(fragment[1:])
    return (scheme + sep if sep else "") + authority + tail + fragment


def redact_text(text: str) -> str:
    """``text`` with every URL in it redacted (:func:`redact_url`), any loose ``secret=value`` and any token."""
    if "://" not in text:
        return _redact_plain(text)
    out: list[str] = []
    done = 0
    for match in _URL.finditer(text):  # a URL is redacted whole; only the text between URLs is read again
        out += [_redact_plain(text[done : match.start()]), _redact_match(match)]
        done = match.end()
    out.append(_redact_plain(text[done:]))
    return "".join(out)


def _redact_plain(text: str) -> str:
    """Text outside any URL: a userinfo whose ``//`` was cut, loose ``secret=value``, tokens."""
    if "@" in text:
        text = _USERINFO.sub(REDACTED + "@", text)
    if "=" in text:
        text = _redact_loose(text)
    return _redact_shapes(text)


def redact_value(text: str) -> str:
    """A file's own text (a metadata value) as an output shows it: its URLs redacted and its tokens by shape.

    Unlike :func:`redact_text`, a loose ``name=value`` is kept: a chat template's ``key=...`` is code, not
    a credential.
    """
    if "://" in text:
        text = _URL.sub(_redact_match, text)
    return _redact_shapes(text)


MIN_KNOWN_SECRET: Final = 4
"""Shorter values are not looked for elsewhere: they would blank ordinary words."""
MIN_UNKNOWN_SECRET: Final = 8
"""A value of a parameter neither secret nor harmless by name is looked for elsewhere from this length."""


def secrets_in(texts: Iterable[str]) -> frozenset[str]:
    """The secret values ``texts`` hold: what :func:`redact_url` takes out of each URL (userinfo and password,
    query and fragment values, tokens and ``sig=`` values in the path), and every token by its shape; each
    also percent-decoded.

    A command line's own secrets, so that an error which quotes one out of its URL (a bucket name
    ``user:pw@bucket`` a library refused, a path cut at its ``//``, a URL the library decoded) still prints
    none (:func:`redact_known`). Values of parameters not named secret count from :data:`MIN_UNKNOWN_SECRET`
    characters, so that a short ordinary word is not blanked everywhere.
    """
    found: set[str] = set()
    for text in texts:
        for plain in {text, unquote_plus(text)}:
            found.update(m.group(0) for m in _SHAPES.finditer(plain) if _is_token(m.group(0)))
            found.update(m.group(2) for m in _PATH_LOOSE_VALUE.finditer(plain))
        for match in _URL.finditer(text):
            found.update(_url_secrets(match.group(0)))
    found.update([unquote_plus(s) for s in found])  # as a library that decoded the URL would quote it
    return frozenset(s for s in found if len(s) >= MIN_KNOWN_SECRET and s != REDACTED)


def _url_secrets(url: str) -> set[str]:
    found: set[str] = set()
    authority = url.partition("://")[2].split("/", 1)[0].split("?", 1)[0].split("#", 1)[0]
    if "@" in authority:
        userinfo = authority.rsplit("@", 1)[0]
        found.update((userinfo, userinfo.partition(":")[2]))
    query, _, fragment = url.partition("?")[2].partition("#")
    if "?" not in url:
        fragment = url.partition("#")[2]
    parts = [p.partition("=") for p in (*query.split("&"), *fragment.split("&")) if p]
    signed = any(_name(name) in _SECRET for name, _, _ in parts)
    for raw, eq, value in parts:
        name = _name(raw)
        if not eq:
            value = raw
        elif name in HARMLESS_PARAMETERS and not _holds_secret(unquote_plus(value)):
            continue
        if name in _SECRET or (signed and name in _SIGNING) or len(value) >= MIN_UNKNOWN_SECRET:
            plain = unquote_plus(value)
            found.update((value, *plain.split()))
            if "://" in plain:  # a URL inside a value: its own secrets too
                found.update(_url_secrets(plain))
    return found


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
