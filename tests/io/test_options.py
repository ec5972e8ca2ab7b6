"""One credentials rule for every command: storage options never carry a secret."""

from __future__ import annotations

from typing import Any

import pytest

from gguf_audit.cli import EXIT_USAGE, main
from gguf_audit.io.options import StorageOptionsError, check_no_credentials, parse_storage_options

SECRET = "s3cr3t-value-never-echoed"


@pytest.mark.parametrize(
    ("options", "where"),
    [
        ({"token": SECRET}, "storage_options.token"),
        ({"s3": {"secret": SECRET}}, "storage_options.s3.secret"),
        ({"client_kwargs": {"headers": {"Authorization": f"Bearer {SECRET}"}}}, "headers.Authorization"),
        ({"client_kwargs": {"headers": {"X-Api-Key": SECRET}}}, "headers.X-Api-Key"),
        ({"client_kwargs": {"headers": {"proxy-authorization": SECRET}}}, "headers.proxy-authorization"),
        ({"headers": {"X-AMZ-SECURITY-TOKEN": SECRET}}, "headers.X-AMZ-SECURITY-TOKEN"),
        ({"headers": [["Authorization", SECRET]]}, "['Authorization']"),
        ({"token": [SECRET]}, "storage_options.token"),
        ({"endpoints": [{"key": SECRET}]}, "storage_options.endpoints[0].key"),
    ],
)
def test_secrets_are_refused_at_any_depth(options: dict[str, Any], where: str) -> None:
    with pytest.raises(StorageOptionsError) as caught:
        check_no_credentials(options)
    message = str(caught.value)
    assert where in message
    assert SECRET not in message
    assert "HF_TOKEN" in message  # says where credentials come from instead


@pytest.mark.parametrize(
    "options",
    [
        {"anon": True},
        {"token": None},
        {"client_kwargs": {"endpoint_url": "http://127.0.0.1:9000", "headers": {"User-Agent": "gguf-audit"}}},
        {"s3": {"anon": False}, "hf": {"revision": "main"}},
        {"headers": [["Accept", "application/octet-stream"]]},
    ],
)
def test_options_without_secrets_pass(options: dict[str, Any]) -> None:
    check_no_credentials(options)


def test_the_flag_must_be_a_json_object() -> None:
    assert parse_storage_options(None) == {}
    assert parse_storage_options('{"anon": true}') == {"anon": True}
    with pytest.raises(StorageOptionsError, match="not valid JSON"):
        parse_storage_options("{anon")
    with pytest.raises(StorageOptionsError, match="must be a JSON object"):
        parse_storage_options("[1]")


@pytest.mark.parametrize("command", ["inspect", "sample"])
def test_every_command_applies_the_rule(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    status = main([command, "hf://org/repo/m.gguf", "--storage-options", f'{{"token": "{SECRET}"}}'])
    assert status == EXIT_USAGE
    captured = capsys.readouterr()
    assert "--storage-options.token looks like a credential" in captured.err
    assert SECRET not in captured.err + captured.out
