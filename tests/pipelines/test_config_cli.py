"""The shipped configs: ``gguf-audit config list|show`` and ``--config NAME`` from any directory."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from corpus import REPO

from gguf_audit.cli import main
from gguf_audit.pipelines.config import ConfigError, load_config, shipped_configs

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
    assert config.incremental


def test_a_local_file_wins_over_a_shipped_name(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "local.toml").write_text('[scan]\nout = "elsewhere"\n')
    assert load_config("local.toml").out == "elsewhere"


def test_an_unknown_name_lists_the_shipped_ones(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["config", "show", "nope"]) == 2
    err = capsys.readouterr().err
    assert "nor a shipped config of that name" in err and "hf-mirror" in err
    with pytest.raises(ConfigError, match="cannot read config"):
        load_config("/no/such/dir/x.toml")
