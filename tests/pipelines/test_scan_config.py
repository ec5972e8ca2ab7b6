"""TOML configs: the shipped ones, validation, credentials."""

from __future__ import annotations

from pathlib import Path

import pytest

from gguf_audit.pipelines.config import ConfigError, ScanConfig, load_config, parse_config

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_local_toml_is_the_default() -> None:
    assert load_config(CONFIGS / "local.toml") == ScanConfig()


def test_shipped_configs_parse() -> None:
    nightly = load_config(CONFIGS / "nightly-s3.toml")
    assert nightly.roots[0].startswith("s3://") and nightly.out.startswith("s3://") and nightly.incremental
    hf = load_config(CONFIGS / "hf-mirror.toml")
    assert all(r.startswith("hf://") for r in hf.roots) and hf.incremental
    assert sorted(p.name for p in CONFIGS.glob("*.toml")) == ["hf-mirror.toml", "local.toml", "nightly-s3.toml"]


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"scan": {"rootz": []}}, r"unknown key 'rootz' in \[scan\] .* Got 'rootz'\."),
        ({"scna": {}}, r"unknown table \[scna\] .* Got 'scna'\."),
        ({"scan": {"fail_on": "info"}}, r"fail_on must be one of error, warning\. Got 'info'\."),
        ({"io": {"threads": 0}}, r"threads must be an integer of at least 1\. Got 0\."),
        ({"io": {"timeout_s": "fast"}}, r"timeout_s must be a number of at least 0.0\. Got 'fast'\."),
        ({"scan": {"roots": [1]}}, r"roots must be a string or a list of strings\. Got \[1\]\."),
        ({"cluster": {"dashboard": "yes"}}, r"dashboard must be true or false\. Got 'yes'\."),
        ({"scan": {"out": ""}}, r"out must be a non-empty path or URL\. Got ''\."),
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
    config = ScanConfig(storage_options={"s3": {"anon": True}}).replace(roots=("a",), workers=None, incremental=True)
    assert (config.roots, config.workers, config.incremental) == (("a",), 0, True)
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
    assert config.checks()["sample_requests"] == 4 and ScanConfig().sample_requests == 32
    with pytest.raises(ConfigError, match=r"sample_requests must be an integer of at least 1\. Got 0\."):
        parse_config({"checks": {"sample_requests": 0}})
    parser = argparse.ArgumentParser()
    _add_arguments(parser)
    flagged = _config_from_args(parser.parse_args(["root", "--sample-requests", "8"]))
    assert flagged.sample_requests == 8 and flagged.audit_config.samples.max_requests == 8  # type: ignore[union-attr]
    assert _config_from_args(parser.parse_args(["root"])).sample_requests == 32
