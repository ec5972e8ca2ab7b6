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
    "for_workers",
    "options_for",
    "parse_storage_options",
    "s3_allows_http",
    "s3_endpoint",
    "s3_region",
    "url_protocol",
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

_LOCAL_PROTOCOLS: Final = frozenset({"file", "local"})

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


# --- which options apply where: flat (every non-local protocol) or keyed by protocol


def url_protocol(url: str) -> str:
    """The protocol of ``url`` as fsspec names it (``file`` for a plain path)."""
    return url.split("://", 1)[0] if "://" in url else "file"


def options_for(url: str, storage_options: Mapping[str, Any]) -> dict[str, Any]:
    """The storage options that apply to ``url``.

    ``storage_options`` is either flat (applied to every non-local protocol)
    or keyed by protocol (``{"s3": {...}, "hf": {...}}``), the form to use when
    roots mix protocols.
    """
    protocol = url_protocol(url)
    if _is_per_protocol(storage_options):
        chosen = storage_options.get(protocol)
        if chosen is None and protocol in ("s3a", "https"):
            chosen = storage_options.get({"s3a": "s3", "https": "http"}[protocol])
        options = dict(chosen or {})
    elif protocol in _LOCAL_PROTOCOLS or protocol == "memory":
        return {}
    else:
        options = dict(storage_options)
    return _with_env_endpoint(options) if protocol in ("s3", "s3a") else options


def _with_env_endpoint(options: dict[str, Any]) -> dict[str, Any]:
    """S3 options with the standard environment's endpoint (``AWS_ENDPOINT_URL``) spelt out when they name none.

    botocore reads the variable itself; spelt out, it also reaches dask workers
    whose environment lacks it (an external cluster), and the tables' readers.
    """
    endpoint = s3_endpoint(options)
    client = dict(options.get("client_kwargs") or {})
    if endpoint is None or client.get("endpoint_url") or options.get("endpoint_url"):
        return options
    client["endpoint_url"] = endpoint
    return {**options, "client_kwargs": client}


def for_workers(storage_options: Mapping[str, Any]) -> dict[str, Any]:
    """Storage options for processes whose environment may lack this one's S3 endpoint (dask workers).

    Options keyed by protocol (or none at all) get their ``s3`` entry with the
    endpoint of ``AWS_ENDPOINT_URL`` spelt out, so a worker started before the
    variable was set (or on another host) reads where the driver listed. Flat
    options apply to every protocol and are left as they are.
    """
    if storage_options and not _is_per_protocol(storage_options):
        return dict(storage_options)
    s3 = options_for("s3://", storage_options)
    if not s3:
        return dict(storage_options)
    return {**storage_options, "s3": s3}


def _is_per_protocol(storage_options: Mapping[str, Any]) -> bool:
    if not storage_options:
        return False
    import fsspec  # here: the command line reads its flags with this module, before any store is opened

    known = set(fsspec.available_protocols()) | {"file", "local", "memory", "s3", "gs", "hf", "http", "https"}
    return all(k in known and isinstance(v, Mapping) for k, v in storage_options.items())
