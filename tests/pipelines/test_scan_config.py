"""TOML configs: the shipped ones, validation, credentials."""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

import pytest

from gguf_audit.compare import CompareBudget
from gguf_audit.io.source import ReadConfig
from gguf_audit.io.upstream import UpstreamConfig
from gguf_audit.pipelines.config import (
    KEYS,
    CheckSettings,
    ClusterSettings,
    ConfigError,
    IOSettings,
    ScanConfig,
    ScanSettings,
    config_toml,
    load_config,
    parse_config,
)
from gguf_audit.plan import SampleConfig

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_local_toml_is_the_default() -> None:
    assert load_config(CONFIGS / "local.toml") == ScanConfig()


def test_shipped_configs_parse() -> None:
    nightly = load_config(CONFIGS / "nightly-s3.toml")
    assert (
        nightly.scan.roots[0].startswith("s3://") and nightly.scan.out.startswith("s3://") and nightly.scan.incremental
    )
    hf = load_config(CONFIGS / "hf-mirror.toml")
    assert all(r.startswith("hf://") for r in hf.scan.roots) and hf.scan.incremental
    assert sorted(p.name for p in CONFIGS.glob("*.toml")) == ["hf-mirror.toml", "local.toml", "nightly-s3.toml"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"scan": {"rootz": []}}, r"unknown key 'rootz' in \[scan\] .* Got 'rootz'\."),
        ({"scna": {}}, r"unknown table \[scna\] .* Got 'scna'\."),
        (
            {"scan": {"fail_on": "info"}},
            r"config: scan\.fail_on must be one of none, error, warning, new-error, aborts\. Got 'info'\.",
        ),
        ({"io": {"threads": 0}}, r"io\.threads must be an int >= 1\. Got 0\."),
        (
            {"io": {"timeout_s": "fast"}},
            r"\[io\] timeout_s: ReadConfig\.timeout_s must be a number > 0\.0\. Got 'fast'\.",
        ),
        ({"scan": {"roots": [1]}}, r"scan\.roots must be a list of strings\. Got \[1\]\."),
        ({"cluster": {"dashboard": "yes"}}, r"cluster\.dashboard must be true or false\. Got 'yes'\."),
        ({"scan": {"out": ""}}, r"scan\.out must be a non-empty path or URL\. Got ''\."),
        ({"storage_options": {"s3": {"key": "AKIA"}}}, r"storage_options\.s3\.key looks like a credential"),
        ({"storage_options": {"token": "hf_x"}}, r"storage_options\.token looks like a credential"),
        ({"out_storage_options": {"password": "p"}}, r"out_storage_options\.password looks like a credential"),
    ],
)
def test_invalid_configs(data: dict[str, object], message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_config(data)


def test_credential_values_are_never_echoed() -> None:
    with pytest.raises(ConfigError) as err:
        parse_config({"storage_options": {"s3": {"client_kwargs": {"aws_secret_access_key": "s3cr3t-value"}}}})
    assert "s3cr3t-value" not in str(err.value)
    # Flags that are not secrets are fine, anonymous access included.
    assert parse_config({"storage_options": {"s3": {"anon": True}, "hf": {"token": False}}}).storage_options


def test_replace_and_public() -> None:
    config = (
        ScanConfig()
        .replace(storage_options={"s3": {"anon": True}})
        .replace(roots=("a",), workers=None, incremental=True)
    )
    assert (config.scan.roots, config.cluster.workers, config.scan.incremental) == (("a",), 0, True)
    with pytest.raises(ConfigError, match="unknown scan settings: nope"):
        config.replace(nope=1)
    with pytest.raises(ConfigError, match=r"Got -1\."):
        config.replace(retries=-1)
    public = config.public()
    assert "storage_options" not in public and "out_storage_options" not in public
    assert public["roots"] == ["a"]


def test_unreadable_config(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config(tmp_path / "nope.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("[scan\n")
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(bad)


def test_gguf_audit_does_not_import_dask() -> None:
    """Only gguf_audit.pipelines imports dask, and only once a scan starts: the other commands never pay for it."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "import gguf_audit.tables.schema, gguf_audit.tables.per_file, gguf_audit.tables.models\n"
        "import gguf_audit.tables.shard_facts, gguf_audit.checks.shards\n"
        "from gguf_audit.cli import _parser\n"
        "_parser()\n"
        "import gguf_audit.pipelines.scan.run, gguf_audit.pipelines.commands.scan\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('dask', 'distributed', 'tqdm'))\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_sample_requests_is_a_check_setting_and_a_flag() -> None:
    import argparse

    from gguf_audit.pipelines.commands.scan import _add_arguments, _config_from_args

    config = parse_config({"checks": {"sample_requests": 4, "sample_budget_bytes": 65536}})
    samples = config.audit_config.samples
    assert samples is not None and (samples.max_requests, samples.budget_bytes) == (4, 65536)
    assert config.verdict_settings()["sample_requests"] == 4 and ScanConfig().checks.sampling.max_requests == 32
    with pytest.raises(
        ConfigError, match=r"\[checks\] sample_requests: SampleConfig\.max_requests must be an int >= 1\. Got 0\."
    ):
        parse_config({"checks": {"sample_requests": 0}})
    parser = argparse.ArgumentParser()
    _add_arguments(parser)
    flagged = _config_from_args(parser.parse_args(["root", "--sample-requests", "8"]))
    assert flagged.checks.sampling.max_requests == 8 and flagged.audit_config.samples.max_requests == 8  # type: ignore[union-attr]
    assert _config_from_args(parser.parse_args(["root"])).checks.sampling.max_requests == 32


def _fields_reached() -> set[str]:
    return {".".join(key.path[:2]) for key in KEYS.values()}


def test_every_setting_has_one_key_and_every_key_one_field() -> None:
    """A field added to a table without a TOML key (or a key pointing nowhere) fails here."""
    own = {
        f"{table}.{f.name}"
        for table, kind in (("scan", ScanSettings), ("cluster", ClusterSettings), ("io", IOSettings))
        for f in dataclasses.fields(kind)
        if f.name != "read"
    }
    own |= {
        f"checks.{f.name}" for f in dataclasses.fields(CheckSettings) if f.name not in ("sampling", "upstream_search")
    }
    assert own <= _fields_reached()
    config = ScanConfig()
    values = {name: key.get(config) for name, key in KEYS.items()}
    assert {n for n, v in values.items() if v is None} == {"scheduler", "upstream_location", "out_storage_options"}
    # The renamed keys land in the library's own configs, whose defaults are the ones used.
    assert KEYS["rate_limit_wait_s"].path == ("io", "read", "max_rate_limit_wait_s")
    assert config.io.read == ReadConfig() and config.checks.sampling == SampleConfig()
    assert config.checks.upstream_search == UpstreamConfig()
    assert config.checks.compare_budget == CompareBudget()


def test_the_library_configs_validate_themselves() -> None:
    with pytest.raises(ValueError, match=r"ReadConfig\.retries must be an int >= 0\. Got -1\."):
        ReadConfig(retries=-1)
    with pytest.raises(ValueError, match=r"ReadConfig\.timeout_s must be a number > 0\.0\. Got 0\."):
        ReadConfig(timeout_s=0)
    with pytest.raises(ValueError, match=r"UpstreamConfig\.location must be a non-empty string or unset\. Got ''\."):
        UpstreamConfig(location="")
    with pytest.raises(ValueError, match=r"CompareBudget\.max_tensors must be an int >= 1\. Got 0\."):
        CompareBudget(max_tensors=0)
    # The same checks whoever builds the value: a TOML key, a flag, a caller of the nested type.
    with pytest.raises(ConfigError, match=r"\[io\] retries: ReadConfig\.retries must be an int >= 0\. Got -1\."):
        parse_config({"io": {"retries": -1}})
    with pytest.raises(ValueError, match=r"io\.threads must be an int >= 1\. Got 0\."):
        IOSettings(threads=0)


def test_nested_fields_from_toml_keys() -> None:
    config = parse_config(
        {
            "io": {"rate_limit_wait_s": 5, "retries": 0, "threads": 4},
            "checks": {"upstream": True, "upstream_location": "s3://b/up", "samples": False, "compare_tensors": 2},
            "cluster": {"scheduler": ""},
        }
    )
    assert config.io.read.max_rate_limit_wait_s == 5.0 and config.io.read.retries == 0 and config.io.threads == 4
    assert config.cluster.scheduler is None
    audit = config.audit_config
    assert audit.samples is None and audit.upstream == UpstreamConfig(location="s3://b/up")
    assert audit.read is config.io.read
    assert config.checks.compare_budget == CompareBudget(2, 32, 1 << 20)
    # What runs.config records keeps its flat keys (nights committed before read the same).
    public = config.public()
    assert set(public) == {k for k, key in KEYS.items() if key.table in ("scan", "cluster", "io", "checks", "mirror")}
    assert (public["rate_limit_wait_s"], public["upstream_location"], public["scheduler"]) == (5.0, "s3://b/up", None)


@pytest.mark.parametrize("name", ["local", "nightly-s3", "hf-mirror"])
def test_effective_toml_round_trips(name: str) -> None:
    config = load_config(CONFIGS / f"{name}.toml")
    text = config_toml(config)
    assert parse_config(tomllib.loads(text)) == config
    for table in ("[scan]", "[cluster]", "[io]", "[checks]", "[mirror]"):
        assert table in text


def test_effective_toml_shows_options_and_redacts() -> None:
    config = ScanConfig().replace(
        storage_options={"s3": {"anon": True, "client_kwargs": {"endpoint_url": "http://127.0.0.1:9000"}}},
        out="https://user:hunter2@example.com/out",
        roots=("a b", 'q"uote'),
    )
    text = config_toml(config)
    assert "hunter2" not in text
    back = parse_config(tomllib.loads(text))
    assert back.storage_options == config.storage_options and back.scan.roots == ("a b", 'q"uote')
