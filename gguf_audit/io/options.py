"""Storage options given on a command line or in a config: JSON objects without secrets.

Credentials reach fsspec only from where it always finds them: the ``AWS_*``
variables and ``~/.aws`` profiles, ``HF_TOKEN`` and the Hugging Face login,
``GOOGLE_APPLICATION_CREDENTIALS``. An option that looks like a secret, at any
depth (nested tables, lists, HTTP header names), is refused, naming where it
is but never its value, so it is never echoed, logged or written into a table.
Every command applies this one rule.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from typing import Any, Final

from gguf_audit.errors import GGUFAuditError

__all__ = [
    "CREDENTIAL_KEYS",
    "StorageOptionsError",
    "check_no_credentials",
    "parse_storage_options",
    "s3_allows_http",
    "s3_endpoint",
    "s3_region",
]

CREDENTIAL_KEYS: Final = frozenset(
    {
        # s3fs/botocore, gcsfs, adlfs, huggingface_hub
        "key",
        "secret",
        "token",
        "password",
        "passwd",
        "access_key",
        "secret_key",
        "access_key_id",
        "secret_access_key",
        "aws_access_key_id",
        "aws_secret_access_key",
        "aws_session_token",
        "session_token",
        "security_token",
        "client_secret",
        "account_key",
        "sas_token",
        "connection_string",
        "credentials",
        "hf_token",
        "api_key",
        # HTTP headers (fsspec's http takes client_kwargs={"headers": {...}})
        "authorization",
        "proxy-authorization",
        "x-api-key",
        "x-amz-security-token",
        "cookie",
        "auth",
    }
)
"""Option and header names that carry secrets, compared lowercased, with ``_`` and ``-`` alike."""

_NORMALISED: Final = frozenset(k.replace("-", "_") for k in CREDENTIAL_KEYS)

WHERE_CREDENTIALS_COME_FROM: Final = (
    "AWS_* variables or ~/.aws, HF_TOKEN or the huggingface login, GOOGLE_APPLICATION_CREDENTIALS"
)


class StorageOptionsError(GGUFAuditError, ValueError):
    """Storage options that carry a secret, or a flag that is not a JSON object; the message says where."""


def _is_secret_name(key: object) -> bool:
    return str(key).strip().lower().replace("-", "_") in _NORMALISED


def _is_set(value: object) -> bool:
    return value not in (None, False, True, "")


def check_no_credentials(options: Mapping[str, Any], where: str = "storage_options") -> None:
    """Refuse options that carry a secret at any depth, naming the option but never its value."""
    _check(options, where)


def _check(value: object, path: str) -> None:
    if isinstance(value, Mapping):
        for key, inner in value.items():
            inner_path = f"{path}.{key}"
            if _is_secret_name(key) and _is_set(inner) and not isinstance(inner, Mapping):
                _refuse(inner_path)
            _check(inner, inner_path)
    elif isinstance(value, list | tuple):
        # Header lists ([["Authorization", "Bearer ..."]]) and lists of tables.
        if len(value) == 2 and isinstance(value[0], str) and _is_secret_name(value[0]) and _is_set(value[1]):
            _refuse(f"{path}[{value[0]!r}]")
        for i, inner in enumerate(value):
            _check(inner, f"{path}[{i}]")


def _refuse(path: str) -> None:
    raise StorageOptionsError(
        f"{path} looks like a credential; gguf-audit takes credentials only from the environment and "
        f"profiles ({WHERE_CREDENTIALS_COME_FROM}), never from a config or a flag. Got {path!r}."
    )


def parse_storage_options(text: str | None, flag: str = "--storage-options") -> dict[str, Any]:
    """A flag's JSON object of fsspec options ({} when absent), refused when it is not one or holds secrets."""
    if not text:
        return {}
    try:
        parsed = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StorageOptionsError(f"{flag} is not valid JSON: {exc.msg}. Got {text!r}.") from exc
    if not isinstance(parsed, dict):
        raise StorageOptionsError(f"{flag} must be a JSON object. Got {text!r}.")
    check_no_credentials(parsed, flag)
    return parsed


# --- S3-compatible stores (MinIO, Ceph, moto): the standard environment, as botocore and delta-rs read it


def s3_endpoint(options: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> str | None:
    """The S3 endpoint URL: the options' ``client_kwargs.endpoint_url`` (or ``endpoint_url``), else
    ``AWS_ENDPOINT_URL_S3``, else ``AWS_ENDPOINT_URL`` (botocore's service-specific and global variables)."""
    opts = options or {}
    env = os.environ if environ is None else environ
    client = opts.get("client_kwargs")
    for value in (
        client.get("endpoint_url") if isinstance(client, Mapping) else None,
        opts.get("endpoint_url"),
        env.get("AWS_ENDPOINT_URL_S3"),
        env.get("AWS_ENDPOINT_URL"),
    ):
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def s3_region(options: Mapping[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> str | None:
    """The region: the options' ``client_kwargs.region_name``, else ``AWS_REGION``, else ``AWS_DEFAULT_REGION``."""
    opts = options or {}
    env = os.environ if environ is None else environ
    client = opts.get("client_kwargs")
    for value in (
        client.get("region_name") if isinstance(client, Mapping) else None,
        env.get("AWS_REGION"),
        env.get("AWS_DEFAULT_REGION"),
    ):
        if isinstance(value, str) and value.strip():
            return value.strip()
    return None


def s3_allows_http(endpoint: str | None, environ: Mapping[str, str] | None = None) -> bool:
    """Whether plain HTTP is to be used: an ``http://`` endpoint, or ``AWS_ALLOW_HTTP`` set true."""
    env = os.environ if environ is None else environ
    if env.get("AWS_ALLOW_HTTP", "").strip().lower() in ("1", "true", "yes"):
        return True
    return endpoint is not None and endpoint.lower().startswith("http://")
