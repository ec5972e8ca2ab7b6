"""gguf_audit.io.errors: the one table from exceptions to io.* codes, and the messages of failed reads."""

from __future__ import annotations

import pytest

from gguf_audit.errors import SourceError
from gguf_audit.findings import CODES
from gguf_audit.io.errors import classify_error, describe_io_error, source_error


class _StatusError(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"status {status}")
        self.status = status


class ServerDisconnectedError(Exception):
    """Named like aiohttp's: the table knows connection failures by name."""


class ReadTimeoutError(Exception):
    """Named like botocore's."""


@pytest.mark.parametrize(
    ("exc", "expected"),
    [
        (SourceError("io.timeout", "slow"), ("io.timeout", False)),
        (FileNotFoundError("gone"), ("io.not_found", False)),
        (IsADirectoryError("dir"), ("io.not_found", False)),
        (PermissionError("no"), ("io.permission_denied", False)),
        (TimeoutError(), ("io.timeout", True)),
        (_StatusError(404), ("io.not_found", False)),
        (_StatusError(401), ("io.permission_denied", False)),
        (_StatusError(403), ("io.permission_denied", False)),
        (_StatusError(503), ("io.error", True)),
        (_StatusError(429), ("io.error", True)),
        (_StatusError(400), ("io.error", False)),
        (ReadTimeoutError(), ("io.timeout", True)),
        (ConnectionResetError(), ("io.error", True)),
        (ServerDisconnectedError(), ("io.error", True)),
        (ValueError("odd"), ("io.error", False)),
    ],
)
def test_every_exception_maps_to_a_registered_io_code(exc: BaseException, expected: tuple[str, bool]) -> None:
    assert classify_error(exc) == expected
    assert expected[0] in CODES


def test_a_failed_read_is_described_by_its_first_line() -> None:
    assert describe_io_error(OSError("refused\nat some depth")) == "OSError: refused"
    assert describe_io_error(TimeoutError()) == "TimeoutError"
    assert describe_io_error(ValueError("x" * 400)) == "ValueError: " + "x" * 300


def test_source_error_carries_the_code_and_description() -> None:
    error = source_error(FileNotFoundError("s3://b/k"))
    assert (error.code, error.message) == ("io.not_found", "FileNotFoundError: s3://b/k")
