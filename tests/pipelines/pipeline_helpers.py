"""Helpers shared by the pipeline tests (imported by name: pytest puts this folder on sys.path)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from gguf_audit.pipelines.store.delta import DeltaTables
from gguf_audit.testing.s3 import MotoS3Server
from gguf_audit.testing.sample_collection import SAMPLE_FILES

# Fake credentials for moto. They go into the environment before any worker
# process starts, because a scan takes credentials only from the environment.


def s3_options(server: MotoS3Server) -> dict[str, Any]:
    """Storage options for a scan against moto: the endpoint, no credentials (they are in the environment)."""
    return {
        "client_kwargs": {"endpoint_url": server.endpoint_url, "region_name": server.region},
        "config_kwargs": {"proxies": {}},
    }


def delta_options(server: MotoS3Server) -> dict[str, str]:
    """deltalake's storage options for moto (credentials from the environment, as a scan takes them)."""
    return {"AWS_ENDPOINT_URL": server.endpoint_url, "AWS_ALLOW_HTTP": "true", "AWS_REGION": server.region}


def read_dataset(out: str | Path, table: str, storage_options: dict[str, str] | None = None) -> pa.Table:
    """A Delta table's rows at its latest version (every night), through deltalake."""
    return DeltaTables(str(out), storage_options).read(table)


SAMPLE_COUNT = len(SAMPLE_FILES)


@contextlib.contextmanager
def read_only_dir(path: Path) -> Iterator[Path]:
    """A directory nothing can be written into: mode 0555, or for root (who ignores modes) the immutable flag."""
    path.mkdir()
    if os.geteuid() != 0:
        path.chmod(0o555)
        try:
            yield path
        finally:
            path.chmod(0o755)
        return
    if shutil.which("chattr") is None or subprocess.run(["chattr", "+i", str(path)], check=False).returncode != 0:
        pytest.skip("running as root without chattr +i: no directory is read-only")
    try:
        yield path
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def file_row(url: str, run_id: str, **extra: object) -> dict[str, object]:
    """A ``files`` row with just the columns that cannot be null (and ``extra``), as read by ``run_id``."""
    return {
        "url": url, "model_id": url, "status": "ok", "n_problems": 0, "n_errors": 0, "n_warnings": 0,
        "bytes_read": 1, "requests": 1, "io_seconds": 0.0, "seconds": 0.0, "source_run_id": run_id, "reused": False,
        **extra,
    }  # fmt: skip
