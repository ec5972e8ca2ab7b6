"""Forty-odd ways a secret rides in a URL, for tests that run each through every command and read outputs back.

Each :class:`Form` makes, for a server's base URL, the URL of its own file (``f00/...``, ``f01/...``) with its
own secrets in it, and names those secrets as bytes no output may hold. Tokens are made with their issuers'
real shapes (length and alphabet) from a seeded generator, so each secret is unique to its form and a leak
names the form it came from.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import quote

__all__ = ["FORMS", "HARMLESS_NAMES", "Form", "Made", "forms_for", "harmless_forms", "leaks"]

Made3 = tuple[str, str, tuple[str, ...]]
"""What a form's maker returns: the URL, the path the server serves, the secrets."""

_ALNUM = string.ascii_letters + string.digits
_B64URL = _ALNUM + "-_"


def _random(seed: str, n: int, alphabet: str = _ALNUM) -> str:
    rng = random.Random(seed)
    classes = [c for c in (str.isupper, str.islower, str.isdigit) if any(c(a) for a in alphabet)]
    while True:
        text = "".join(rng.choices(alphabet, k=n))
        # a token's random part has every class of its alphabet; draw again in the rare case it does not
        if all(any(c(t) for t in text) for c in classes):
            return text


def github(seed: str) -> str:
    return "ghp_" + _random(seed, 36)


def hugging_face(seed: str) -> str:
    return "hf_" + _random(seed, 34, string.ascii_letters + "0")


def google_key(seed: str) -> str:
    return "AIza" + _random(seed, 35, _B64URL)


def jwt(seed: str) -> str:
    return "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOi" + _random(seed, 20, _B64URL) + "." + _random(seed + "s", 43, _B64URL)


def aws_key_id(seed: str) -> str:
    return "AKIA" + _random(seed, 16, string.ascii_uppercase + string.digits)


def slack(seed: str) -> str:
    return "xoxb-" + _random(seed, 12, string.digits) + "-" + _random(seed + "b", 24)


def opaque(seed: str, n: int = 32) -> str:
    """A secret with no shape (an Azure Functions key, a password): only its place in the URL gives it away."""
    return _random(seed, n)


@dataclass(frozen=True, slots=True)
class Made:
    """One form made for a server: the URL to give a command, the path the server serves, the secrets."""

    label: str
    url: str
    path: str
    secrets: tuple[str, ...]
    sent: bool = True
    """Whether the secret is in the request's path and query (a fragment never is; a userinfo goes as a header)."""


@dataclass(frozen=True, slots=True)
class Form:
    label: str
    make: Callable[[str, str, str], Made3]
    """``(base, dir, seed) -> (url, served path, secrets)``; ``dir`` is the form's own folder (``f07``)."""
    sent: bool = True


def _query(name: str, value: Callable[[str], str]) -> Callable[[str, str, str], Made3]:
    def make(base: str, d: str, s: str) -> Made3:
        secret = value(s + name)
        return f"{base}/{d}/m.gguf?{name}={quote(secret, safe='')}", f"{d}/m.gguf", (secret,)

    return make


def _path(segment: Callable[[str], str], raw: Callable[[str], str] = lambda s: s) -> Callable[[str, str, str], Made3]:
    def make(base: str, d: str, s: str) -> Made3:
        secret = segment(s)
        return f"{base}/{d}/{raw(secret)}/m.gguf", f"{d}/{secret}/m.gguf", (secret,)

    return make


def _userinfo(base: str, d: str, s: str) -> Made3:
    pw = opaque(s, 20)
    return base.replace("://", f"://alice:{pw}@") + f"/{d}/m.gguf", f"{d}/m.gguf", (pw,)


def _userinfo_token(base: str, d: str, s: str) -> Made3:
    token = github(s)
    return base.replace("://", f"://{token}@") + f"/{d}/m.gguf", f"{d}/m.gguf", (token,)


def _userinfo_encoded(base: str, d: str, s: str) -> Made3:
    pw = opaque(s, 18)
    shown = quote(pw[:9] + "@:" + pw[9:], safe="")
    return base.replace("://", f"://bob:{shown}@") + f"/{d}/m.gguf", f"{d}/m.gguf", (pw[:9], pw[9:])


def _s3_presigned(base: str, d: str, s: str) -> Made3:
    key, token, sig = aws_key_id(s), opaque(s + "t", 40), opaque(s + "s", 64).lower()
    date = "20261207T0" + str(sum(map(ord, s)) % 10) + "1234Z"
    query = (
        f"X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential={key}%2F20261207%2Fus-east-1%2Fs3%2Faws4_request"
        f"&X-Amz-Date={date}&X-Amz-Expires=3600&X-Amz-SignedHeaders=host"
        f"&X-Amz-Security-Token={token}&X-Amz-Signature={sig}"
    )
    return f"{base}/{d}/m.gguf?{query}", f"{d}/m.gguf", (key, token, sig)


def _azure_sas(base: str, d: str, s: str) -> Made3:
    sig = opaque(s, 43)
    query = f"sv=2022-11-02&se=2026-12-07T09%3A00Z&sr=b&sp=r&sig={quote(sig + '=', safe='')}"
    return f"{base}/{d}/m.gguf?{query}", f"{d}/m.gguf", (sig,)


def _gcs(base: str, d: str, s: str) -> Made3:
    sig, cred = opaque(s, 64).lower(), "svc-" + opaque(s + "c", 12)
    query = (
        f"X-Goog-Algorithm=GOOG4-RSA-SHA256&X-Goog-Credential={cred}%40p.iam%2F20261207"
        f"&X-Goog-Date=20261207T000000Z&X-Goog-Expires=900&X-Goog-SignedHeaders=host&X-Goog-Signature={sig}"
    )
    return f"{base}/{d}/m.gguf?{query}", f"{d}/m.gguf", (sig, cred)


def _cloudfront(base: str, d: str, s: str) -> Made3:
    sig, pair = opaque(s, 40), "K" + opaque(s + "k", 13).upper()
    return (
        f"{base}/{d}/m.gguf?Expires=1796601600&Signature={sig}~&Key-Pair-Id={pair}",
        f"{d}/m.gguf",
        (sig, pair),
    )


def _encoded_name(base: str, d: str, s: str) -> Made3:
    sig = opaque(s, 30)
    return f"{base}/{d}/m.gguf?%73ig={sig}&X%2DAmz%2DSignature={sig}", f"{d}/m.gguf", (sig,)


def _bare(base: str, d: str, s: str) -> Made3:
    secret = opaque(s, 32)
    return f"{base}/{d}/m.gguf?{secret}", f"{d}/m.gguf", (secret,)


def _harmless_carrying(base: str, d: str, s: str) -> Made3:
    token = github(s)
    return f"{base}/{d}/m.gguf?revision={token}&download=1", f"{d}/m.gguf", (token,)


def _mixed(base: str, d: str, s: str) -> Made3:
    key = google_key(s)
    return f"{base}/{d}/m.gguf?download=true&key={key}&revision=main", f"{d}/m.gguf", (key,)


def _matrix(base: str, d: str, s: str) -> Made3:
    sig = opaque(s, 28)
    return f"{base}/{d}/m.gguf;sig={sig}", f"{d}/m.gguf;sig={sig}", (sig,)


def _sig_segment(base: str, d: str, s: str) -> Made3:
    sig = opaque(s, 28)
    return f"{base}/{d}/sig={sig}/m.gguf", f"{d}/sig={sig}/m.gguf", (sig,)


def _fragment(make_value: Callable[[str], str], name: str | None) -> Callable[[str, str, str], Made3]:
    def make(base: str, d: str, s: str) -> Made3:
        secret = make_value(s)
        frag = f"{name}={secret}" if name else secret
        return f"{base}/{d}/m.gguf#{frag}", f"{d}/m.gguf", (secret,)

    return make


def _nested(base: str, d: str, s: str) -> Made3:
    pw = opaque(s, 20)
    return f"{base}/{d}/m.gguf?path={quote(f'https://u:{pw}@other/x', safe='')}", f"{d}/m.gguf", (pw,)


def _bearer(base: str, d: str, s: str) -> Made3:
    token = opaque(s, 40)
    return f"{base}/{d}/m.gguf?Authorization={quote('Bearer ' + token, safe='')}", f"{d}/m.gguf", (token,)


def _two_secrets(base: str, d: str, s: str) -> Made3:
    a, b = hugging_face(s), jwt(s)
    return f"{base}/{d}/m.gguf?hf_token={a}&id_token={b}", f"{d}/m.gguf", (a, b)


FORMS: tuple[Form, ...] = (
    Form("userinfo user:password", _userinfo, sent=False),
    Form("userinfo token only", _userinfo_token, sent=False),
    Form("userinfo percent-encoded", _userinfo_encoded, sent=False),
    Form("key= Google API key", _query("key", google_key)),
    Form("code= Azure Functions key", _query("code", lambda s: opaque(s, 54) + "==")),
    Form("auth=", _query("auth", opaque)),
    Form("sas_token=", _query("sas_token", lambda s: "sv=2022&sig=" + opaque(s, 40))),
    Form("github_token=ghp_", _query("github_token", github)),
    Form("jwt=", _query("jwt", jwt)),
    Form("KEY= upper-case name", _query("KEY", opaque)),
    Form("Api-Key=", _query("Api-Key", opaque)),
    Form("apikey=", _query("apikey", opaque)),
    Form("access_token=", _query("access_token", opaque)),
    Form("Token= capitalised", _query("Token", opaque)),
    Form("client_secret=", _query("client_secret", opaque)),
    Form("password=", _query("password", lambda s: opaque(s, 14))),
    Form("session= an unknown name", _query("session", opaque)),
    Form("x_custom= an unknown name", _query("x_custom", opaque)),
    Form("t= a one-letter name", _query("t", lambda s: opaque(s, 24))),
    Form("hf_token=hf_", _query("hf_token", hugging_face)),
    Form("slack in an unknown name", _query("webhook", slack)),
    Form("S3 presigned (AKIA, token, signature)", _s3_presigned),
    Form("Azure SAS sig=", _azure_sas),
    Form("GCS X-Goog-Signature", _gcs),
    Form("CloudFront Signature, Key-Pair-Id", _cloudfront),
    Form("percent-encoded parameter names", _encoded_name),
    Form("a bare query part", _bare),
    Form("a harmless name carrying a token", _harmless_carrying),
    Form("key= between harmless parameters", _mixed),
    Form("a nested URL's password in a harmless value", _nested),
    Form("Authorization=Bearer in the query", _bearer),
    Form("hf_token and id_token together", _two_secrets),
    Form("ghp_ token as a path segment", _path(github)),
    Form("hf_ token as a path segment", _path(hugging_face)),
    Form("JWT as a path segment", _path(jwt)),
    Form("AIza key as a path segment", _path(google_key)),
    Form("AKIA key id as a path segment", _path(aws_key_id)),
    Form("slack token as a path segment", _path(slack)),
    Form("ghp_ token percent-encoded in the path", _path(github, lambda s: quote(s, safe="").replace("_", "%5F"))),
    Form("matrix parameter ;sig=", _matrix),
    Form("a sig= path segment", _sig_segment),
    Form("fragment access_token=", _fragment(opaque, "access_token"), sent=False),
    Form("fragment id_token=JWT", _fragment(jwt, "id_token"), sent=False),
    Form("fragment bare ghp_ token", _fragment(github, None), sent=False),
)


def forms_for(base: str, night: int = 1) -> list[Made]:
    """Every form made for the server at ``base`` (``http://127.0.0.1:PORT``), each in its own folder; another
    ``night`` signs the same files again (other secrets, same shapes)."""
    made = []
    for i, form in enumerate(FORMS):
        url, path, secrets = form.make(base, f"f{i:02d}", f"f{i:02d}" if night == 1 else f"f{i:02d}/{night}")
        made.append(Made(form.label, url, path, secrets, form.sent))
    return made


HARMLESS_NAMES = ("revision", "v", "versionId", "file")


def harmless_forms(base: str) -> list[tuple[str, str]]:
    """URLs that differ only by a harmless parameter: ``(url, served path)``; each must stay its own file."""
    return [(f"{base}/h/m.gguf?{name}=v{i}", "h/m.gguf") for i, name in enumerate(HARMLESS_NAMES)]


def leaks(text: str | bytes, made: list[Made] | Made) -> list[str]:
    """The secrets of ``made`` found in ``text``: each whole, and the last 16 characters of each long one
    (a secret that left percent-encoded or cut still shows its random tail)."""
    raw = text.encode() if isinstance(text, str) else text
    found = []
    for m in [made] if isinstance(made, Made) else made:
        for secret in m.secrets:
            probes = {secret, secret[-16:]} if len(secret) >= 16 else {secret}
            found += [f"{m.label}: {p}" for p in probes if p.encode() in raw]
    return found
