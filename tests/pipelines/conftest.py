"""Fixtures for the scan pipeline: one real dask cluster on loopback, moto's S3, the sample collection."""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from corpus import corpus_dir

from gguf_audit.testing.s3 import FAKE_AWS_ENV, MotoS3Server
from gguf_audit.testing.sample_collection import sample_files


@pytest.fixture(scope="session")
def aws_env() -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in FAKE_AWS_ENV}
    os.environ.update(FAKE_AWS_ENV)
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def dask_client(aws_env: None) -> Iterator[Any]:
    """A LocalCluster of two worker processes (one thread each), shared by the whole session."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(  # type: ignore[no-untyped-call]
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.CRITICAL,
        ) as cluster,
        Client(cluster) as client,  # type: ignore[no-untyped-call]
    ):
        yield client


@pytest.fixture
def client(dask_client: Any) -> Any:
    """The session cluster, with both workers up (a test may have killed one)."""
    dask_client.wait_for_workers(2, timeout=60)
    return dask_client


@pytest.fixture(scope="session")
def moto(aws_env: None) -> Iterator[MotoS3Server]:
    with MotoS3Server() as server:
        yield server


@pytest.fixture(scope="session")
def sample() -> dict[str, bytes]:
    """The sample collection's files (see gguf_audit.testing.sample_collection)."""
    return sample_files()


@pytest.fixture
def bucket(moto: MotoS3Server, sample: dict[str, bytes]) -> str:
    """A fresh bucket holding the sample collection under ``models/``; returns its name."""
    name = f"gguf-{uuid.uuid4().hex[:12]}"
    moto.make_bucket(name)
    for rel, data in sample.items():
        moto.put(name, f"models/{rel}", data)
    moto.put(name, "models/README.md", b"not a model")
    return name


@pytest.fixture
def local_collection(tmp_path: Path, sample: dict[str, bytes]) -> Path:
    root = tmp_path / "collection"
    for rel, data in sample.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


@pytest.fixture(scope="session")
def report_nights(dask_client: Any, tmp_path_factory: pytest.TempPathFactory, sample: dict[str, bytes]) -> Any:
    """Three real nights with known changes (tests/pipelines/report_nights.py), scanned once per session."""
    from report_nights import scan_three_nights

    dask_client.wait_for_workers(2, timeout=60)
    return scan_three_nights(dask_client, tmp_path_factory.mktemp("report-nights"), sample)


@pytest.fixture
def family(tmp_path: Path) -> Path:
    """A tiny family from the corpus: the F16 reference, its Q8_0 and Q4_0, and a Q4_K_M cut to two thirds (a
    truncated upload)."""
    models = corpus_dir() / "models"
    root = tmp_path / "family"
    root.mkdir()
    for quant in ("F16", "Q8_0", "Q4_0"):
        shutil.copy(models / f"tiny-llama-{quant}.gguf", root)
    data = (models / "tiny-llama-Q4_K_M.gguf").read_bytes()
    (root / "tiny-llama-Q4_K_M.gguf").write_bytes(data[: len(data) * 2 // 3])
    return root
