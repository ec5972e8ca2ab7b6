"""Scan configuration: TOML files (stdlib ``tomllib``), with command-line flags on top.

A :class:`ScanConfig` is one frozen value per TOML table, each validating its
own fields, and the library's own configs nested where a table's keys are
theirs (``[io]``'s reads are a :class:`~gguf_audit.io.source.ReadConfig`,
``[checks]``' sampling a :class:`~gguf_audit.plan.SampleConfig`, its upstream
search an :class:`~gguf_audit.io.upstream.UpstreamConfig`)::

    [scan]      -> ScanConfig.scan     (ScanSettings)
    [cluster]   -> ScanConfig.cluster  (ClusterSettings)
    [io]        -> ScanConfig.io       (IOSettings; .read is the library's ReadConfig)
    [checks]    -> ScanConfig.checks   (CheckSettings; .sampling SampleConfig, .upstream_search UpstreamConfig)
    [storage_options]      fsspec options, flat or one table per protocol ([storage_options.s3])
    [out_storage_options]  options for --out when it needs its own

A TOML key (and the scan flag of the same name) names one nested field through
:data:`KEYS`, the one table of the keys: defaults and checks are the field's.
``configs/local.toml`` spells out the defaults (a :class:`ScanConfig` with no
arguments); ``gguf-audit config effective NAME`` prints any config with every
key. Credentials never belong in a config or on the command line: an option
that looks like one is refused, and fsspec finds them where it always does
(``AWS_*`` variables and ``~/.aws`` profiles, ``HF_TOKEN`` and the huggingface
cache, ``GOOGLE_APPLICATION_CREDENTIALS``).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
import tomllib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Final

from gguf_audit.audit import DEFAULT_AUDIT_CONFIG, AuditConfig
from gguf_audit.compare import DEFAULT_COMPARE_BUDGET, CompareBudget
from gguf_audit.errors import GGUFAuditError
from gguf_audit.io.options import StorageOptionsError, parse_storage_options
from gguf_audit.io.options import check_no_credentials as _check_no_credentials
from gguf_audit.io.source import DEFAULT_READ_CONFIG, ReadConfig
from gguf_audit.io.upstream import DEFAULT_UPSTREAM_CONFIG, UpstreamConfig
from gguf_audit.plan import DEFAULT_SAMPLE_CONFIG, SampleConfig
from gguf_audit.redact import redact_text
from gguf_audit.validate import check_bool, check_choice, check_int, check_number, check_optional_str, check_strs

__all__ = [
    "KEYS",
    "CheckSettings",
    "ClusterSettings",
    "ConfigError",
    "IOSettings",
    "MirrorSettings",
    "ScanConfig",
    "ScanSettings",
    "check_no_credentials",
    "config_toml",
    "load_config",
    "parse_config",
]

FAIL_ON: Final = ("none", "error", "warning", "new-error", "aborts")
"""``scan.fail_on``: what makes a committed night exit 1. ``none`` (the default) never does, as trivy's
``--exit-code 0``: a collection always holds some broken file, and a nightly job's next steps must run."""
VERIFY_MODES: Final = ("sampled", "full")
"""``mirror.verify``: how a copy no checksum proves is judged: on sampled blocks, or read whole and hashed."""


class ConfigError(GGUFAuditError, ValueError):
    """A config file or flag that cannot be used; the message names the offending value."""


@dataclass(frozen=True, slots=True)
class ScanSettings:
    """``[scan]``: what a night covers and where it goes."""

    roots: tuple[str, ...] = ()
    manifests: tuple[str, ...] = ()
    include: tuple[str, ...] = ("*.gguf",)
    exclude: tuple[str, ...] = ()
    out: str = "audit-out"
    incremental: bool = False
    fail_on: str = "none"
    lease_wait_s: float = 0.0
    """Seconds to wait for another writer's live lease on ``out`` (a scan or a vacuum) before exiting 2."""
    lease_expiry_s: float = 120.0
    """Seconds without a heartbeat after which this scan's lease is another writer's to take (it beats 4 times)."""

    def __post_init__(self) -> None:
        for name in ("roots", "manifests", "include", "exclude"):
            check_strs(f"scan.{name}", getattr(self, name))
        if not isinstance(self.out, str) or not self.out.strip():
            raise ValueError(f"scan.out must be a non-empty path or URL. Got {self.out!r}.")
        check_bool("scan.incremental", self.incremental)
        check_choice("scan.fail_on", self.fail_on, FAIL_ON)
        check_number("scan.lease_wait_s", self.lease_wait_s, 0.0)
        check_number("scan.lease_expiry_s", self.lease_expiry_s, 0.1)


@dataclass(frozen=True, slots=True)
class ClusterSettings:
    """``[cluster]``: where the night runs."""

    scheduler: str | None = None
    """Address of a running dask scheduler; None (``""`` in TOML) starts a LocalCluster for the run."""
    workers: int = 0
    """LocalCluster worker processes; 0 sizes the cluster to the machine (one per core)."""
    threads_per_worker: int = 2
    """Batches a worker process runs at once. They share its I/O pool, so while one batch
    waits for its last slow reads the other keeps the pool full."""
    dashboard: bool = True

    def __post_init__(self) -> None:
        check_optional_str("cluster.scheduler", self.scheduler)
        check_int("cluster.workers", self.workers, 0)
        check_int("cluster.threads_per_worker", self.threads_per_worker, 1)
        check_bool("cluster.dashboard", self.dashboard)


@dataclass(frozen=True, slots=True)
class IOSettings:
    """``[io]``: how files are batched and read."""

    batch_size: int = 0
    """Files per task; 0 picks one from the collection and cluster size."""
    threads: int = 64
    """Files whose reads are in flight at once in each worker process."""
    read: ReadConfig = DEFAULT_READ_CONFIG
    """How each file is read (keys ``retries``, ``backoff_s``, ``timeout_s``, ``initial_bytes``, and
    ``rate_limit_wait_s`` for its ``max_rate_limit_wait_s``)."""

    def __post_init__(self) -> None:
        check_int("io.batch_size", self.batch_size, 0)
        check_int("io.threads", self.threads, 1)


@dataclass(frozen=True, slots=True)
class CheckSettings:
    """``[checks]``: what each file's audit does, and the family comparison. Each switch that
    turns a library step on has that step's own config beside it, used when it is on."""

    semantics: bool = DEFAULT_AUDIT_CONFIG.semantics
    """Architecture, tokenizer and declared-type checks (from the header alone)."""
    templates: bool = DEFAULT_AUDIT_CONFIG.templates
    """Inspect and render chat templates (in a sandboxed child process per worker)."""
    samples: bool = True
    """Also read sampled tensor blocks and check their data (fills ``samples`` and ``files.fingerprint``)."""
    sampling: SampleConfig = DEFAULT_SAMPLE_CONFIG
    """What sampling a file may cost (keys ``sample_requests``, ``sample_budget_bytes``); the compare's
    budget per file too."""
    upstream: bool = False
    """Compare each model with its upstream config.json and tokenizer files (``upstream.*``), found beside
    it or where its header points; two to five requests per directory and batch."""
    upstream_search: UpstreamConfig = DEFAULT_UPSTREAM_CONFIG
    """Where upstream files are looked for (key ``upstream_location``: one place for every model)."""
    compare: bool = True
    """Compare each quantized file against its family's full-precision file (the ``compare`` table),
    within ``compare_tensors`` tensors and the sampling budget per file."""
    compare_tensors: int = DEFAULT_COMPARE_BUDGET.max_tensors
    """Tensors compared per quantized file at most."""

    def __post_init__(self) -> None:
        for name in ("semantics", "templates", "samples", "upstream", "compare"):
            check_bool(f"checks.{name}", getattr(self, name))
        check_int("checks.compare_tensors", self.compare_tensors, 1)

    def audit(self, read: ReadConfig) -> AuditConfig:
        """What each file's audit does, reading with ``read``."""
        return AuditConfig(
            read=read,
            samples=self.sampling if self.samples else None,
            semantics=self.semantics,
            templates=self.templates,
            upstream=self.upstream_search if self.upstream else None,
        )

    @property
    def compare_budget(self) -> CompareBudget:
        return CompareBudget(self.compare_tensors, self.sampling.max_requests, self.sampling.budget_bytes)


@dataclass(frozen=True, slots=True)
class MirrorSettings:
    """``[mirror]``: check the scan's one root as a mirror of ``source`` (``--source``); empty: no check."""

    source: str = ""
    """What the mirror copies: ``hf://ORG``, ``s3://...``, a path."""
    mirror_prefix: str = ""
    """The part of a mirror path (relative to the root) replaced by ``source_prefix`` to name its source."""
    source_prefix: str = ""
    revision_key: str = "hf-revision"
    """The object metadata key (``x-amz-meta-<key>``) recording the source revision a copy was made at."""
    verify: str = "sampled"
    """``sampled``: a copy no checksum proves is judged on sampled blocks (``sampled_match`` at best); ``full``:
    it is read whole and hashed (each hash kept, so an unchanged file is read once)."""

    def __post_init__(self) -> None:
        for name in ("source", "mirror_prefix", "source_prefix", "revision_key", "verify"):
            if not isinstance(getattr(self, name), str):
                raise ValueError(f"mirror.{name} must be a string. Got {getattr(self, name)!r}.")
        check_choice("mirror.verify", self.verify, VERIFY_MODES)


def _options(value: object, where: str) -> None:
    if not isinstance(value, Mapping):
        raise ValueError(f"{where} must be a table of fsspec options. Got {value!r}.")
    check_no_credentials(value, where)


@dataclass(frozen=True, slots=True)
class ScanConfig:
    """Everything one scan needs, a field per TOML table. The defaults are ``configs/local.toml``'s."""

    scan: ScanSettings = ScanSettings()
    cluster: ClusterSettings = ClusterSettings()
    io: IOSettings = IOSettings()
    checks: CheckSettings = CheckSettings()
    mirror: MirrorSettings = MirrorSettings()
    storage_options: Mapping[str, Any] = field(default_factory=dict)
    out_storage_options: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        _options(self.storage_options, "storage_options")
        if self.out_storage_options is not None:
            _options(self.out_storage_options, "out_storage_options")

    def replace(self, **changes: Any) -> ScanConfig:
        """A copy with ``changes`` applied, named by their TOML keys (:data:`KEYS`, the scan flags' names)
        or ``storage_options``; None values are ignored: an unset flag changes nothing."""
        given = {k: v for k, v in changes.items() if v is not None}
        unknown = set(given) - set(KEYS)
        if unknown:
            raise ConfigError(f"unknown scan settings: {', '.join(sorted(unknown))}. Got {sorted(unknown)!r}.")
        config = self
        for key, value in given.items():
            config = KEYS[key].set(config, key, value, "")
        return config

    @property
    def audit_config(self) -> AuditConfig:
        """What each file's audit does."""
        return self.checks.audit(self.io.read)

    def verdict_settings(self) -> dict[str, Any]:
        """The settings that change a file's verdict, by TOML key: an incremental run reuses rows only
        from a run made with the same ones (and the same gguf-audit version)."""
        return {k: KEYS[k].recorded(self) for k in CHECK_KEYS}

    def public(self) -> dict[str, Any]:
        """The settings safe to record in the ``runs`` table, by TOML key: no storage options, URLs redacted."""
        return {k: _public_value(key.recorded(self)) for k, key in KEYS.items() if key.table in TABLES}

    def public_json(self) -> str:
        return json.dumps(self.public(), sort_keys=True)


def _public_value(value: Any) -> Any:
    """A setting as recorded: tuples as lists, any URL in a string redacted (roots, manifests, out, upstream)."""
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, tuple | list):
        return [_public_value(v) for v in value]
    return value


# ------------------------------------------------------------------ the keys


def _same(value: Any) -> Any:
    return value


def _strs(value: Any) -> Any:
    """A string or a list of strings as a tuple (the field checks the items)."""
    if isinstance(value, str):
        return (value,)
    if isinstance(value, list | tuple) and all(isinstance(v, str) for v in value):
        return tuple(value)
    return value


def _float(value: Any) -> Any:
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def _unset_if_empty(value: Any) -> Any:
    return None if value == "" else value


def _empty_if_unset(value: Any) -> Any:
    return "" if value is None else value


def _replaced(obj: Any, path: tuple[str, ...], value: Any) -> Any:
    """``obj`` with the field at ``path`` set to ``value``; each level's ``__post_init__`` checks it."""
    head, *rest = path
    new = _replaced(getattr(obj, head), tuple(rest), value) if rest else value
    return dataclasses.replace(obj, **{head: new})


@dataclass(frozen=True, slots=True)
class Key:
    """One TOML key: its table, the nested field it sets (a path from :class:`ScanConfig`), and how a TOML
    value becomes the field's (``load``) and back (``dump``: what ``runs.config`` records and TOML shows)."""

    table: str
    path: tuple[str, ...]
    load: Callable[[Any], Any] = _same
    dump: Callable[[Any], Any] = _same

    def get(self, config: ScanConfig) -> Any:
        return functools.reduce(getattr, self.path, config)

    def recorded(self, config: ScanConfig) -> Any:
        return self.dump(self.get(config))

    def set(self, config: ScanConfig, key: str, value: Any, source: str) -> ScanConfig:
        """``config`` with this key set to ``value``, or a :class:`ConfigError` naming the key and the value
        (after ``source``, the file it came from, when there is one)."""
        try:
            return _replaced(config, self.path, self.load(value))  # type: ignore[no-any-return]
        except (ValueError, TypeError) as exc:
            message = str(exc)
            named = ".".join(self.path)
            where = "" if message.startswith(f"{named} ") else f"[{self.table}] {key}: "
            raise ConfigError(f"{source}: {where}{message}" if source else f"{where}{message}") from None


def _k(table: str, *path: str, load: Callable[[Any], Any] = _same, dump: Callable[[Any], Any] = _same) -> Key:
    return Key(table, path, load, dump)


KEYS: Final[Mapping[str, Key]] = {
    "roots": _k("scan", "scan", "roots", load=_strs),
    "manifests": _k("scan", "scan", "manifests", load=_strs),
    "include": _k("scan", "scan", "include", load=_strs),
    "exclude": _k("scan", "scan", "exclude", load=_strs),
    "out": _k("scan", "scan", "out"),
    "incremental": _k("scan", "scan", "incremental"),
    "fail_on": _k("scan", "scan", "fail_on"),
    "lease_wait_s": _k("scan", "scan", "lease_wait_s", load=_float),
    "lease_expiry_s": _k("scan", "scan", "lease_expiry_s", load=_float),
    "scheduler": _k("cluster", "cluster", "scheduler", load=_unset_if_empty),
    "workers": _k("cluster", "cluster", "workers"),
    "threads_per_worker": _k("cluster", "cluster", "threads_per_worker"),
    "dashboard": _k("cluster", "cluster", "dashboard"),
    "batch_size": _k("io", "io", "batch_size"),
    "threads": _k("io", "io", "threads"),
    "retries": _k("io", "io", "read", "retries"),
    "backoff_s": _k("io", "io", "read", "backoff_s", load=_float),
    "timeout_s": _k("io", "io", "read", "timeout_s", load=_float),
    "initial_bytes": _k("io", "io", "read", "initial_bytes"),
    "rate_limit_wait_s": _k("io", "io", "read", "max_rate_limit_wait_s", load=_float),
    "semantics": _k("checks", "checks", "semantics"),
    "templates": _k("checks", "checks", "templates"),
    "samples": _k("checks", "checks", "samples"),
    "sample_requests": _k("checks", "checks", "sampling", "max_requests"),
    "sample_budget_bytes": _k("checks", "checks", "sampling", "budget_bytes"),
    "upstream": _k("checks", "checks", "upstream"),
    "upstream_location": _k(
        "checks", "checks", "upstream_search", "location", load=_unset_if_empty, dump=_empty_if_unset
    ),
    "compare": _k("checks", "checks", "compare"),
    "compare_tensors": _k("checks", "checks", "compare_tensors"),
    "source": _k("mirror", "mirror", "source"),
    "mirror_prefix": _k("mirror", "mirror", "mirror_prefix"),
    "source_prefix": _k("mirror", "mirror", "source_prefix"),
    "revision_key": _k("mirror", "mirror", "revision_key"),
    "verify": _k("mirror", "mirror", "verify"),
    "storage_options": _k("storage_options", "storage_options", load=dict),
    "out_storage_options": _k("out_storage_options", "out_storage_options", load=dict),
}
"""Every TOML key (and scan setting) by name: the table it sits in and the field it sets."""

TABLES: Final = ("scan", "cluster", "io", "checks", "mirror")
"""The tables of plain keys, in the order a config shows them; the option tables follow."""
OPTION_TABLES: Final = ("storage_options", "out_storage_options")
CHECK_KEYS: Final = tuple(k for k, key in KEYS.items() if key.table == "checks")


# ------------------------------------------------------------------ parsing


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


def parse_config(data: Mapping[str, Any], *, source: str = "config") -> ScanConfig:
    """A :class:`ScanConfig` from parsed TOML; unknown tables and keys are errors."""
    config = ScanConfig()
    for table, content in data.items():
        if table in OPTION_TABLES:
            if not isinstance(content, Mapping):
                raise ConfigError(f"{source}: {table} must be a table of fsspec options. Got {content!r}.")
            check_no_credentials(content, table)
            config = KEYS[table].set(config, table, content, source)
            continue
        if table not in TABLES:
            known = ", ".join([*TABLES, *OPTION_TABLES])
            raise ConfigError(f"{source}: unknown table [{table}] (known: {known}). Got {table!r}.")
        if not isinstance(content, Mapping):
            raise ConfigError(f"{source}: [{table}] must be a table. Got {content!r}.")
        allowed = sorted(k for k, key in KEYS.items() if key.table == table)
        for name, value in content.items():
            if name not in allowed:
                raise ConfigError(
                    f"{source}: unknown key {name!r} in [{table}] (known: {', '.join(allowed)}). Got {name!r}."
                )
            config = KEYS[name].set(config, name, value, source)
    return config


# ------------------------------------------------------------------ showing

_BARE_KEY: Final = re.compile(r"[A-Za-z0-9_-]+")


def _toml_key(name: str) -> str:
    return name if _BARE_KEY.fullmatch(name) else json.dumps(name)


def _toml_value(value: Any) -> str:
    if value is None:
        return '""'
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, Mapping):
        return "{ " + ", ".join(f"{_toml_key(str(k))} = {_toml_value(v)}" for k, v in value.items()) + " }"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return json.dumps(redact_text(str(value)), ensure_ascii=False)


def _toml_options(name: str, options: Mapping[str, Any]) -> list[str]:
    """``[name]``: its plain options, then a sub-table per mapping (``[storage_options.s3]``)."""
    lines = [f"[{name}]"]
    lines += [f"{_toml_key(str(k))} = {_toml_value(v)}" for k, v in options.items() if not isinstance(v, Mapping)]
    for k, v in options.items():
        if isinstance(v, Mapping):
            lines += ["", *_toml_options(f"{name}.{_toml_key(str(k))}", v)]
    return lines


def config_toml(config: ScanConfig) -> str:
    """``config`` as TOML with every key, in the tables a config file has: what a scan with it uses.
    ``parse_config`` of it gives ``config`` back."""
    lines: list[str] = []
    for table in TABLES:
        lines += [f"[{table}]"] if not lines else ["", f"[{table}]"]
        lines += [f"{k} = {_toml_value(key.recorded(config))}" for k, key in KEYS.items() if key.table == table]
    if config.storage_options:
        lines += ["", *_toml_options("storage_options", config.storage_options)]
    if config.out_storage_options is not None:
        lines += ["", *_toml_options("out_storage_options", config.out_storage_options)]
    return "\n".join(lines) + "\n"


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
