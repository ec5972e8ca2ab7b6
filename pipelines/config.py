"""Scan configuration: TOML files (stdlib ``tomllib``), with command-line flags on top.

A config has four tables::

    [scan]      roots, manifests, include, exclude, out, incremental, fail_on, lease_wait_s, lease_expiry_s
    [cluster]   scheduler, workers, threads_per_worker, dashboard
    [io]        batch_size, threads, retries, backoff_s, timeout_s, initial_bytes, rate_limit_wait_s
    [checks]    semantics, templates, samples, sample_requests, sample_budget_bytes, upstream, upstream_location,
                compare, compare_tensors
    [storage_options]      fsspec options, flat or one table per protocol ([storage_options.s3])
    [out_storage_options]  options for --out when it needs its own

``configs/local.toml`` spells out the defaults (a :class:`ScanConfig` with no
arguments); ``configs/nightly-s3.toml`` and ``configs/hf-mirror.toml`` are the
other real uses. Credentials never belong in a config or on the command line:
an option that looks like one is refused, and fsspec finds them where it always
does (``AWS_*`` variables and ``~/.aws`` profiles, ``HF_TOKEN`` and the
huggingface cache, ``GOOGLE_APPLICATION_CREDENTIALS``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Final

from gguf_audit.audit import AuditConfig
from gguf_audit.errors import GGUFAuditError
from gguf_audit.io.options import StorageOptionsError, parse_storage_options
from gguf_audit.io.options import check_no_credentials as _check_no_credentials
from gguf_audit.io.source import ReadConfig
from gguf_audit.io.upstream import UpstreamConfig
from gguf_audit.plan import SampleConfig
from gguf_audit.redact import redact_text

__all__ = [
    "ConfigError",
    "ScanConfig",
    "check_no_credentials",
    "load_config",
    "parse_config",
]

FAIL_ON: Final = ("error", "warning")
CHECK_SETTINGS: Final = (
    "semantics",
    "templates",
    "samples",
    "sample_requests",
    "sample_budget_bytes",
    "upstream",
    "upstream_location",
    "compare",
    "compare_tensors",
)


class ConfigError(GGUFAuditError, ValueError):
    """A config file or flag that cannot be used; the message names the offending value."""


@dataclass(frozen=True, slots=True)
class ScanConfig:
    """Everything one scan needs. The defaults are ``configs/local.toml``'s."""

    roots: tuple[str, ...] = ()
    manifests: tuple[str, ...] = ()
    include: tuple[str, ...] = ("*.gguf",)
    exclude: tuple[str, ...] = ()
    out: str = "audit-out"
    incremental: bool = False
    fail_on: str = "error"
    lease_wait_s: float = 0.0
    """Seconds to wait for another writer's live lease on ``out`` (a scan or a vacuum) before exiting 2."""
    lease_expiry_s: float = 120.0
    """Seconds without a heartbeat after which this scan's lease is another writer's to take (it beats 4 times)."""
    scheduler: str | None = None
    """Address of a running dask scheduler; None starts a LocalCluster for the run."""
    workers: int = 0
    """LocalCluster worker processes; 0 sizes the cluster to the machine (one per core)."""
    threads_per_worker: int = 2
    """Batches a worker process runs at once. They share its I/O pool, so while one batch
    waits for its last slow reads the other keeps the pool full."""
    dashboard: bool = True
    batch_size: int = 0
    """Files per task; 0 picks one from the collection and cluster size."""
    threads: int = 64
    """Files whose reads are in flight at once in each worker process."""
    retries: int = 3
    backoff_s: float = 0.2
    timeout_s: float = 60.0
    initial_bytes: int = 512 * 1024
    rate_limit_wait_s: float = 330.0
    """Seconds a file may wait, in all, for a store's rate limit to reset (429, ``RateLimit``) before it
    gets ``io.rate_limited``."""
    semantics: bool = True
    """Architecture, tokenizer and declared-type checks (from the header alone)."""
    templates: bool = True
    """Inspect and render chat templates (in a sandboxed child process per worker)."""
    samples: bool = True
    """Also read sampled tensor blocks and check their data (fills ``samples`` and ``files.fingerprint``)."""
    sample_requests: int = 32
    """Range requests per file for samples at most, when sampling (the header's are apart)."""
    sample_budget_bytes: int = 1 << 20
    """Bytes of tensor data read per file at most, when sampling."""
    upstream: bool = False
    """Compare each model with its upstream config.json and tokenizer files (``upstream.*``), found beside
    it or where its header points; two to five requests per directory and batch."""
    upstream_location: str = ""
    """With ``upstream``, compare every model with the upstream here only (a path or URL); empty looks per model."""
    compare: bool = True
    """Compare each quantized file against its family's full-precision file (the ``compare`` table),
    within ``compare_tensors`` tensors and the sampling budget per file."""
    compare_tensors: int = 8
    """Tensors compared per quantized file at most."""
    mirror_source: str = ""
    """Check the scan's one root as a mirror of this root (``hf://ORG``, ``s3://...``, a path); empty: no check."""
    mirror_prefix: str = ""
    """The part of a mirror path (relative to the root) replaced by ``mirror_source_prefix`` to name its source."""
    mirror_source_prefix: str = ""
    mirror_revision_key: str = "hf-revision"
    """The object metadata key (``x-amz-meta-<key>``) recording the source revision a copy was made at."""
    storage_options: Mapping[str, Any] = field(default_factory=dict)
    out_storage_options: Mapping[str, Any] | None = None

    def replace(self, **changes: Any) -> ScanConfig:
        """A copy with ``changes`` applied (None values are ignored: an unset flag changes nothing)."""
        given = {k: v for k, v in changes.items() if v is not None}
        unknown = set(given) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ConfigError(f"unknown scan settings: {', '.join(sorted(unknown))}. Got {sorted(unknown)!r}.")
        merged = dataclasses.replace(self, **given)
        return _validated(merged)

    @property
    def read_config(self) -> ReadConfig:
        return ReadConfig(
            initial_bytes=self.initial_bytes,
            retries=self.retries,
            backoff_s=self.backoff_s,
            timeout_s=self.timeout_s,
            max_rate_limit_wait_s=self.rate_limit_wait_s,
        )

    @property
    def audit_config(self) -> AuditConfig:
        """What each file's audit does."""
        return AuditConfig(
            read=self.read_config,
            samples=(
                SampleConfig(max_requests=self.sample_requests, budget_bytes=self.sample_budget_bytes)
                if self.samples
                else None
            ),
            semantics=self.semantics,
            templates=self.templates,
            upstream=UpstreamConfig(location=self.upstream_location or None) if self.upstream else None,
        )

    def checks(self) -> dict[str, Any]:
        """The settings that change a file's verdict: an incremental run reuses rows only
        from a run made with the same ones (and the same gguf-audit version)."""
        return {name: getattr(self, name) for name in CHECK_SETTINGS}

    def public(self) -> dict[str, Any]:
        """The settings safe to record in the ``runs`` table: no storage options at all, URLs redacted."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out.pop("storage_options")
        out.pop("out_storage_options")
        return {k: _public_value(v) for k, v in out.items()}

    def public_json(self) -> str:
        return json.dumps(self.public(), sort_keys=True)


def _public_value(value: Any) -> Any:
    """A setting as recorded: tuples as lists, any URL in a string redacted (roots, manifests, out, upstream)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, tuple):
        return [_public_value(v) for v in value]
    return value


# ------------------------------------------------------------------ parsing

_SECTIONS: Final = {
    "scan": {
        *("roots", "manifests", "include", "exclude", "out", "incremental", "fail_on"),
        *("lease_wait_s", "lease_expiry_s"),
    },
    "cluster": {"scheduler", "workers", "threads_per_worker", "dashboard"},
    "io": {"batch_size", "threads", "retries", "backoff_s", "timeout_s", "initial_bytes", "rate_limit_wait_s"},
    "checks": set(CHECK_SETTINGS),
    "mirror": {"source", "mirror_prefix", "source_prefix", "revision_key"},
}
_MIRROR_KEYS: Final = {
    "source": "mirror_source",
    "mirror_prefix": "mirror_prefix",
    "source_prefix": "mirror_source_prefix",
    "revision_key": "mirror_revision_key",
}
"""``[mirror]``'s keys and the settings they set."""
_OPTION_SECTIONS: Final = ("storage_options", "out_storage_options")


def _parse_str_list(name: str, value: object) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if isinstance(value, Sequence) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise ConfigError(f"{name} must be a string or a list of strings. Got {value!r}.")


def _parse_bool(name: str, value: object) -> bool:
    if isinstance(value, bool):
        return value
    raise ConfigError(f"{name} must be true or false. Got {value!r}.")


def _parse_int(name: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(f"{name} must be an integer of at least {minimum}. Got {value!r}.")
    return value


def _parse_float(name: str, value: object, minimum: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < minimum:
        raise ConfigError(f"{name} must be a number of at least {minimum}. Got {value!r}.")
    return float(value)


def _parse_fail_on(value: object) -> str:
    if value not in FAIL_ON:
        raise ConfigError(f"fail_on must be one of {', '.join(FAIL_ON)}. Got {value!r}.")
    return str(value)


def _parse_out(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ConfigError(f"out must be a non-empty path or URL. Got {value!r}.")
    return value


def check_no_credentials(options: Mapping[str, Any], where: str = "storage_options") -> None:
    """Refuse storage options that carry a secret (the library's one rule, :mod:`gguf_audit.io.options`)."""
    try:
        _check_no_credentials(options, where)
    except StorageOptionsError as exc:
        raise ConfigError(str(exc)) from None


def parse_storage_options_flag(text: str, flag: str = "--storage-options") -> dict[str, Any]:
    """A ``--storage-options`` flag's JSON object, refused when it is not one or holds credentials."""
    try:
        return parse_storage_options(text, flag)
    except StorageOptionsError as exc:
        raise ConfigError(str(exc)) from None


def _parse_options(name: str, value: object) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{name} must be a table of fsspec options. Got {value!r}.")
    options = dict(value)
    check_no_credentials(options, name)
    return options


def _validated(config: ScanConfig) -> ScanConfig:
    _parse_fail_on(config.fail_on)
    _parse_out(config.out)
    _parse_int("workers", config.workers, 0)
    _parse_int("threads_per_worker", config.threads_per_worker, 1)
    _parse_int("batch_size", config.batch_size, 0)
    _parse_int("threads", config.threads, 1)
    _parse_int("retries", config.retries, 0)
    _parse_int("initial_bytes", config.initial_bytes, 8)
    _parse_int("sample_requests", config.sample_requests, 1)
    _parse_int("sample_budget_bytes", config.sample_budget_bytes, 1)
    _parse_int("compare_tensors", config.compare_tensors, 1)
    _parse_float("backoff_s", config.backoff_s, 0.0)
    _parse_float("timeout_s", config.timeout_s, 0.001)
    _parse_float("rate_limit_wait_s", config.rate_limit_wait_s, 0.0)
    _parse_float("lease_wait_s", config.lease_wait_s, 0.0)
    _parse_float("lease_expiry_s", config.lease_expiry_s, 0.1)
    check_no_credentials(config.storage_options)
    if config.out_storage_options is not None:
        check_no_credentials(config.out_storage_options, "out_storage_options")
    return config


def parse_config(data: Mapping[str, Any], *, source: str = "config") -> ScanConfig:
    """A :class:`ScanConfig` from parsed TOML; unknown tables and keys are errors."""
    values: dict[str, Any] = {}
    for section, content in data.items():
        if section in _OPTION_SECTIONS:
            values[section] = _parse_options(section, content)
            continue
        allowed = _SECTIONS.get(section)
        if allowed is None:
            known = ", ".join([*_SECTIONS, *_OPTION_SECTIONS])
            raise ConfigError(f"{source}: unknown table [{section}] (known: {known}). Got {section!r}.")
        if not isinstance(content, Mapping):
            raise ConfigError(f"{source}: [{section}] must be a table. Got {content!r}.")
        for key, value in content.items():
            if key not in allowed:
                raise ConfigError(
                    f"{source}: unknown key {key!r} in [{section}] (known: {', '.join(sorted(allowed))}). Got {key!r}."
                )
            if section == "mirror":
                if not isinstance(value, str):
                    raise ConfigError(f"{source}: [mirror] {key} must be a string. Got {value!r}.")
                values[_MIRROR_KEYS[key]] = value
                continue
            values[key] = _convert(key, value)
    return _validated(ScanConfig(**values))


def _convert(key: str, value: object) -> Any:
    if key in ("roots", "manifests", "include", "exclude"):
        return _parse_str_list(key, value)
    if key in ("incremental", "dashboard", "semantics", "templates", "samples", "upstream", "compare"):
        return _parse_bool(key, value)
    if key in ("workers", "threads_per_worker", "batch_size", "threads", "retries", "initial_bytes"):
        return _parse_int(key, value, 0)
    if key in ("sample_requests", "sample_budget_bytes", "compare_tensors"):
        return _parse_int(key, value, 1)
    if key in ("backoff_s", "timeout_s", "rate_limit_wait_s", "lease_wait_s"):
        return _parse_float(key, value, 0.0)
    if key == "lease_expiry_s":
        return _parse_float(key, value, 0.1)
    if key == "upstream_location":
        if not isinstance(value, str):
            raise ConfigError(f"upstream_location must be a path or URL string (empty: per model). Got {value!r}.")
        return value
    if key == "fail_on":
        return _parse_fail_on(value)
    if key == "out":
        return _parse_out(value)
    if key == "scheduler":
        if not isinstance(value, str):
            raise ConfigError(f"scheduler must be an address string (empty: start a local cluster). Got {value!r}.")
        return value or None
    raise ConfigError(f"unknown key {key!r}. Got {key!r}.")  # pragma: no cover - _SECTIONS guards


def shipped_configs() -> dict[str, str]:
    """The configs that ship with the package (``configs/`` as ``gguf_audit.configs``): name -> TOML text."""
    root = resources.files("gguf_audit.configs")
    return {
        entry.name.removesuffix(".toml"): entry.read_text(encoding="utf-8")
        for entry in sorted(root.iterdir(), key=lambda e: e.name)
        if entry.name.endswith(".toml")
    }


def config_text(path_or_name: str | Path) -> tuple[str, str]:
    """A config's TOML text and where it came from: a file, else a shipped config by name (``hf-mirror``)."""
    p = Path(path_or_name)
    # A file wins; otherwise a bare name, or the repository's own spelling (configs/NAME.toml), is
    # looked up among the shipped configs, so the README's commands work outside a checkout.
    if p.is_file() or p.parent not in (Path("."), Path("configs")) or p.suffix not in ("", ".toml"):
        try:
            return p.read_text(encoding="utf-8"), str(p)
        except OSError as exc:
            raise ConfigError(f"cannot read config {str(p)!r}: {exc.strerror or exc}. Got {str(p)!r}.") from exc
    shipped = shipped_configs()
    name = p.name.removesuffix(".toml")
    if name not in shipped:
        names = ", ".join(sorted(shipped))
        raise ConfigError(f"no config file {str(p)!r}, nor a shipped config of that name ({names}). Got {str(p)!r}.")
    return shipped[name], f"gguf_audit.configs/{name}.toml"


def load_config(path: str | Path) -> ScanConfig:
    """Read a TOML config: a file, or a shipped one by name (``gguf-audit config list``)."""
    text, source = config_text(path)
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{source}: not valid TOML: {exc}. Got {source!r}.") from exc
    return parse_config(data, source=source)
