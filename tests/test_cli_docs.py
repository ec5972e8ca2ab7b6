"""docs/cli.md names every command and flag, and every command's --help ends with its exit statuses."""

from __future__ import annotations

import argparse
import re

import pytest
from corpus import REPO

from gguf_audit.cli import _parser

DOC = (REPO / "docs" / "cli.md").read_text()


def _commands() -> dict[str, argparse.ArgumentParser]:
    parser = _parser()
    [sub] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def _section(name: str) -> str:
    match = re.search(rf"^## `gguf-audit {name}`\n(.*?)(?=^## |\Z)", DOC, re.S | re.M)
    assert match is not None, f"docs/cli.md has no section for {name}"
    return match.group(1)


@pytest.mark.parametrize("name", sorted(_commands()))
def test_every_command_and_flag_is_documented(name: str) -> None:
    section = _section(name)
    for action in _commands()[name]._actions:
        if isinstance(action, argparse._HelpAction) or action.dest in ("quiet", "verbose"):
            continue  # every command's: named once, in the section on the options of every command
        if isinstance(action, argparse._SubParsersAction):
            for choice in action.choices:
                assert f"{name} {choice}" in section, f"{name} {choice} is not documented"
            continue
        names = [o for o in action.option_strings if o.startswith("--")] or [action.dest]
        for option in names:
            assert option in section or option.upper() in section, f"{name}: {option} is not in docs/cli.md"


def test_the_options_of_every_command_are_documented_once() -> None:
    section = DOC.split("## Options of every command", 1)[1].split("\n## ", 1)[0]
    assert "`-q/--quiet`" in section and "`-v/--verbose`" in section
    assert all("--quiet" in p.format_help() and "--verbose" in p.format_help() for p in _commands().values())


@pytest.mark.parametrize("name", sorted(_commands()))
def test_every_help_names_its_exit_statuses(name: str) -> None:
    text = _commands()[name].format_help()
    assert "exit status:" in text
    assert re.search(r"\b0\b", text.split("exit status:", 1)[1])


def test_the_exit_status_table_is_the_enum() -> None:
    """Every status the enum has is a row of docs/cli.md's table, and the table has no other."""
    from gguf_audit.cli import ExitStatus

    table = DOC.split("## Exit statuses, for every command", 1)[1].split("\n\n## ", 1)[0]
    documented = {int(m) for m in re.findall(r"^\| (\d+) \|", table, re.M)}
    assert documented == {int(s) for s in ExitStatus}


def test_the_scan_gates_are_documented_with_their_default() -> None:
    """``scan --fail-on``: every choice the parser takes is in docs/cli.md's row, with the default the config has."""
    from gguf_audit.pipelines.config import FAIL_ON, ScanConfig

    [action] = [a for a in _commands()["scan"]._actions if "--fail-on" in a.option_strings]
    assert tuple(action.choices or ()) == FAIL_ON
    row = next(line for line in _section("scan").splitlines() if line.startswith("| `--fail-on` |"))
    assert [c for c in FAIL_ON if f"`{c}`" not in row] == []
    assert f"`{ScanConfig().scan.fail_on}` (default" in row
