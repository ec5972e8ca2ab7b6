"""S3-compatible stores from the standard environment: ``AWS_ENDPOINT_URL`` over plain HTTP, nothing else.

moto plays MinIO or Ceph. No storage option names the endpoint: the listing,
the reads, the output preflight, the Delta commit and the printed DuckDB lines
all take it from the environment.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from pipeline_helpers import SAMPLE_COUNT, delta_options, read_dataset

from gguf_audit.cli import main
from gguf_audit.pipelines.store.delta import delta_storage_options
from gguf_audit.pipelines.store.duck import connect
from gguf_audit.pipelines.store.output import Output, OutputError
from gguf_audit.testing.s3 import MotoS3Server


@pytest.fixture
def endpoint_env(moto: MotoS3Server, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto.endpoint_url)
    monkeypatch.setenv("AWS_REGION", moto.region)
    monkeypatch.delenv("AWS_ALLOW_HTTP", raising=False)
    return moto.endpoint_url


def test_delta_options_come_from_the_environment(endpoint_env: str) -> None:
    assert delta_storage_options("s3://b/out", {}) == {
        "AWS_ENDPOINT_URL": endpoint_env,
        "AWS_ALLOW_HTTP": "true",
        "AWS_REGION": "us-east-1",
    }
    assert delta_storage_options("/local/out", {}) == {}


def test_preflight_writes_through_deltalake(endpoint_env: str, moto: MotoS3Server, bucket: str) -> None:
    """The probe goes the commit's way: told not to use HTTP, deltalake refuses, though fsspec could write."""
    Output(f"s3://{bucket}/ok").preflight()
    assert "Contents" not in moto.client().list_objects_v2(Bucket=bucket, Prefix="ok/")  # the probe is gone
    refused = Output(f"s3://{bucket}/no", {"delta": {"AWS_ALLOW_HTTP": "false"}})
    with pytest.raises(OutputError, match=r"^cannot write to the output: .*") as caught:
        refused.preflight()
    message = str(caught.value)
    assert "\n" not in message and "\x1b" not in message and len(message) < 600, message


def test_scan_with_the_endpoint_only_in_the_environment(
    client: Any, endpoint_env: str, moto: MotoS3Server, bucket: str, capsys: pytest.CaptureFixture[str]
) -> None:
    out = f"s3://{bucket}/audit"
    status = main(["scan", f"s3://{bucket}/models", "--out", out, "--scheduler", client.scheduler.address])
    printed = capsys.readouterr()
    assert status == 0, printed.err  # committed: the collection's errors (on purpose) gate nothing by default
    assert f"committed to {out}" in printed.out
    assert f"every listed file has exactly one row: {SAMPLE_COUNT} of {SAMPLE_COUNT}" in printed.out
    runs = read_dataset(out, "runs", delta_options(moto)).to_pylist()
    assert [r["n_files"] for r in runs] == [SAMPLE_COUNT]
    assert json.loads(runs[0]["config"])["out"] == out
    files = read_dataset(out, "files", delta_options(moto))
    assert files.num_rows == SAMPLE_COUNT and sum(files.column("requests").to_pylist()) > 0
    # The printed DuckDB lines work as printed: the secret carries the endpoint, plain HTTP and the region.
    host = endpoint_env.split("://", 1)[1]
    [secret] = [line.strip() for line in printed.out.splitlines() if line.strip().startswith("CREATE SECRET")]
    assert f"ENDPOINT '{host}'" in secret and "USE_SSL false" in secret and "REGION 'us-east-1'" in secret
    # Every printed DuckDB statement, as printed: the extensions from their wheels, the secret, the views, the query.
    lines = printed.out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("or in DuckDB"))
    statements = []
    for line in lines[start + 1 :]:
        if not line.startswith("  "):
            break
        statements.append(line.strip())
    con = connect(())
    try:
        for statement in statements[:-1]:
            con.execute(statement)
        rows = con.execute(statements[-1].rstrip(";")).fetchall()
    finally:
        con.close()
    assert rows, statements[-1]
