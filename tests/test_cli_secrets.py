"""No command prints a secret: every subcommand, given secret-bearing URLs where it takes them.

The URLs name a port nothing listens on, so each command meets a store it cannot
reach (or an output it cannot write): the failure path, where secrets used to
slip out in error lines, is the one exercised. A subcommand added without a case
here fails :func:`test_every_command_has_a_case`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
from corpus import corpus_dir
from secret_forms import github, google_key, jwt

from gguf_audit.cli import ExitStatus, _parser, main

pytestmark = pytest.mark.slow  # the CLI in subprocesses against servers: outside the fast loop

PASSWORD, SIGNATURE = "hunter2secret", "SECRETSIG0123"
SECRET_URL = f"https://user:{PASSWORD}@127.0.0.1:9/audit?X-Amz-Signature={SIGNATURE}&sig={SIGNATURE}"
SECRET_FILE = f"https://user:{PASSWORD}@127.0.0.1:9/m.gguf?sig={SIGNATURE}"
# Secrets known by their shape or by no name at all: a token in the path, a Google key, an Azure Functions code,
# a JWT in the fragment.
SHAPED = (github("cli"), google_key("cli"), "AzFnCode0123456789abcdefXYZ", jwt("cli"))
SHAPED_URL = f"https://127.0.0.1:9/{SHAPED[0]}/audit?key={SHAPED[1]}&code={SHAPED[2]}"
SHAPED_FILE = f"https://127.0.0.1:9/{SHAPED[0]}/m.gguf?key={SHAPED[1]}#id_token={SHAPED[3]}"


def _cases(tmp: Path, url: str = SECRET_URL, file: str = SECRET_FILE) -> dict[str, list[list[str]]]:
    model = str(corpus_dir() / "models" / "tiny-llama-Q8_0.gguf")
    return {
        "inspect": [["inspect", file], ["inspect", file, "--json"]],
        "sample": [["sample", file]],
        "compare": [["compare", file, model], ["compare", model, file]],
        "codes": [["codes"]],
        "completion": [["completion", "bash"], ["completion", "fish"]],  # takes no URL: prints no input back
        "config": [["config", "show", url], ["config", "effective", url]],
        "scan": [
            ["scan", str(tmp / "none"), "--out", url, "--no-progress"],
            # a library that refuses the bucket quotes "user:password@bucket", with no scheme before it
            ["scan", f"s3://user:{PASSWORD}@bucket/models", "--out", str(tmp / "o"), "--no-progress"],
        ],
        "demo": [["demo", str(tmp / "demo"), "--out", url, "--no-progress"]],
        "diff": [["diff", url], ["diff", url, "--json"]],
        "snapshot": [["snapshot", url, "--to", str(tmp / "snap")]],
        "tables": [["tables", url], ["tables", url, "--vacuum", "--keep-nights", "1"]],
        "report": [["report", url, "--html", str(tmp / "r.html")]],
        "sql": [["sql", url, "SELECT 1"], ["sql", url, "--views"]],
        "export": [
            ["export", url, "--sarif", str(tmp / "n.sarif")],
            ["export", url, "--jsonl", file],
        ],
    }


def _subcommands() -> set[str]:
    parser = _parser()
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return set(action.choices)
    raise AssertionError("gguf-audit has no subcommands")


def test_every_command_has_a_case(tmp_path: Path) -> None:
    assert _subcommands() <= set(_cases(tmp_path)), "a subcommand has no secret case in this module"


@pytest.mark.parametrize("command", sorted(_cases(Path("/unused"))))
def test_no_command_prints_a_secret(command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in _cases(tmp_path)[command]:
        status = main(argv)
        out, err = capsys.readouterr()
        for secret in (PASSWORD, SIGNATURE):
            assert secret not in out and secret not in err, (argv, out, err)
        if command not in ("codes", "completion"):
            # A store that cannot be reached is the command's failure (2), or a file judged bad (1), said in one
            # line; never a traceback.
            assert status in (ExitStatus.PROBLEMS, ExitStatus.USAGE), (argv, status, err)
            assert len(err.strip().splitlines()) <= 1 or command in ("demo", "inspect"), (argv, err)
            assert "Traceback" not in err


@pytest.mark.parametrize("command", sorted(_cases(Path("/unused"))))
def test_no_command_prints_a_secret_known_by_shape(
    command: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for argv in _cases(tmp_path, SHAPED_URL, SHAPED_FILE)[command]:
        main(argv)
        out, err = capsys.readouterr()
        for secret in SHAPED:
            assert secret not in out and secret not in err, (argv, out, err)
        assert "Traceback" not in err


def test_secrets_of_the_command_line_are_found_and_blanked() -> None:
    """What the boundary blanks wherever an error quotes it: passwords, secret and signing query values."""
    from gguf_audit.redact import redact_known, redact_text, secrets_in

    found = secrets_in([SECRET_URL, "plain", "s3://b/k?versionId=7"])
    assert {PASSWORD, SIGNATURE} <= found and "7" not in found and "b" not in found
    quoted = f'Invalid bucket name "user:{PASSWORD}@bucket"; sig {SIGNATURE}'
    assert PASSWORD not in redact_known(quoted, found) and SIGNATURE not in redact_known(quoted, found)
    # a URL whose '//' a path normalisation cut, in a text with no '=' and no '://'
    assert PASSWORD not in redact_text(f"cannot read 'https:/user:{PASSWORD}@127.0.0.1/c.toml'")


def test_a_mirror_source_with_secrets_prints_none(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A --source that cannot be listed leaves the copies undecided (exit 0): nothing printed or written holds
    its password or signature."""
    out = tmp_path / "out"
    root = str(corpus_dir() / "models")
    assert main(["scan", root, "--out", str(out), "--source", SECRET_URL, "--no-samples", "--no-progress"]) == 0
    printed = "".join(capsys.readouterr())
    assert "undecided" in printed
    from deltalake import DeltaTable  # the rows as a reader sees them (data files are compressed)

    written = str([DeltaTable(str(out / t)).to_pyarrow_table().to_pylist() for t in ("runs", "mirror", "files")])
    assert "undecided" in written
    for secret in (PASSWORD, SIGNATURE):
        assert secret not in printed and secret not in written
