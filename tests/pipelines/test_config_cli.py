"""The shipped configs: ``gguf-audit config list|show`` and ``--config NAME`` from any directory."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from corpus import REPO

from gguf_audit.cli import main
from gguf_audit.pipelines.config import ConfigError, load_config, parse_config, shipped_configs

NAMES = sorted(p.stem for p in (REPO / "configs").glob("*.toml"))


def test_list_names_every_shipped_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "list"]) == 0
    listed = [line.split()[0] for line in capsys.readouterr().out.splitlines()]
    assert listed == NAMES == sorted(shipped_configs())


@pytest.mark.parametrize("name", NAMES)
def test_show_prints_the_file_as_shipped(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show", name]) == 0
    out = capsys.readouterr().out
    assert out == (REPO / "configs" / f"{name}.toml").read_text(encoding="utf-8")
    tomllib.loads(out)


@pytest.mark.parametrize("spelling", ["nightly-s3", "nightly-s3.toml", "configs/nightly-s3.toml"])
def test_config_by_name_works_outside_a_checkout(
    spelling: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # no configs/ folder here
    config = load_config(spelling)
    assert config == load_config(REPO / "configs" / "nightly-s3.toml")
    assert config.scan.incremental


def test_a_local_file_wins_over_a_shipped_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "local.toml").write_text('[scan]\nout = "elsewhere"\n')
    assert load_config("local.toml").scan.out == "elsewhere"


def test_an_unknown_name_lists_the_shipped_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show", "nope"]) == 2
    err = capsys.readouterr().err
    assert "nor a shipped config of that name" in err and "hf-mirror" in err
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config("/no/such/dir/x.toml")


@pytest.mark.parametrize("name", NAMES)
def test_effective_shows_every_key_of_what_a_scan_uses(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "effective", name]) == 0
    shown = tomllib.loads(capsys.readouterr().out)
    assert {"scan", "cluster", "io", "checks"} <= set(shown)
    assert parse_config(shown) == load_config(name)
    # Keys the file leaves out are there with their defaults.
    assert shown["scan"]["lease_expiry_s"] == 120.0 and shown["io"]["rate_limit_wait_s"] == 330.0


def test_effective_refuses_an_invalid_config(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[checks]\nsample_budget_bytes = 0\n")
    assert main(["config", "effective", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.endswith("SampleConfig.budget_bytes must be an int >= 1. Got 0.") and "\n" not in err
    assert main(["config", "effective"]) == 0
    assert parse_config(tomllib.loads(capsys.readouterr().out)) == load_config("local")
