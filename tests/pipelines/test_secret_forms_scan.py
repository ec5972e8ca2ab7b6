"""44 secret forms (tests/secret_forms.py) through one real night and every command that shows it.

One scan of a presigned manifest listing every form into Delta tables on S3 (moto), then ``report --html``,
``export --sarif/--jsonl``, ``snapshot``, ``sql`` (table and JSON Lines) and ``sql --views`` with ``AWS_ENDPOINT_URL``
carrying a userinfo. Every output is read back as bytes (and the tables and snapshots as rows too, since a
data file is compressed): no secret of any form is there, and each file's URL is there redacted.
"""

from __future__ import annotations

import contextlib
import io
import json
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from pipeline_helpers import delta_options, read_dataset
from secret_forms import Made, forms_for, google_key, harmless_forms, leaks

from gguf_audit.cli import main
from gguf_audit.redact import redact_url
from gguf_audit.tables.schema import TABLE_NAMES
from gguf_audit.testing.http import RangeHTTPServer
from gguf_audit.testing.s3 import MotoS3Server

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

ENDPOINT_PASSWORD = "minioPW7z9Qk2Lx"
MANIFEST_SIG = "MANIFESTsig4Tq8Zr1"
MANIFEST_KEY = google_key("manifest")


@dataclass
class Night:
    """What one night and the commands after it wrote and printed, by name."""

    made: list[Made]
    harmless: list[str]
    outputs: dict[str, bytes] = field(default_factory=dict)
    rows: dict[str, list[str]] = field(default_factory=dict)
    statuses: dict[str, int] = field(default_factory=dict)
    requests: list[str] = field(default_factory=list)
    endpoint: str = ""


def _run(night: Night, name: str, argv: list[str]) -> None:
    """Run ``gguf-audit argv`` in this process; keep its standard output and error as bytes."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        night.statuses[name] = main(argv)
    night.outputs[f"{name} (stdout)"] = out.getvalue().encode()
    night.outputs[f"{name} (stderr)"] = err.getvalue().encode()


def _strings(value: Any) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _strings(k)
            yield from _strings(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _strings(v)


def _store(night: Night, moto: MotoS3Server, bucket: str, out: str) -> None:
    """Every object under the output, as bytes, and every table's rows as strings."""
    client = moto.client()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix="audit/"):
        for obj in page.get("Contents", []):
            body = client.get_object(Bucket=bucket, Key=obj["Key"])["Body"].read()
            night.outputs[f"s3://{bucket}/{obj['Key']}"] = body
    for table in TABLE_NAMES:
        with contextlib.suppress(Exception):  # a table this night never wrote
            rows = read_dataset(out, table, delta_options(moto)).to_pylist()
            night.rows[f"table {table}"] = list(_strings(rows))


def _commands(night: Night, out: str, tmp: Path) -> None:
    """The commands that show a committed night, each output file read back."""
    _run(night, "report", ["report", out, "--html", str(tmp / "r.html")])
    _run(night, "export", ["export", out, "--sarif", str(tmp / "e.sarif"), "--jsonl", str(tmp / "e.jsonl")])
    _run(night, "snapshot", ["snapshot", out, "--to", str(tmp / "snap")])
    query = "SELECT f.url, p.code, p.message FROM files f LEFT JOIN problems p USING (url) ORDER BY 1"
    for fmt in ("table", "jsonl"):  # each opens the night's views over S3: the slowest step here
        _run(night, f"sql {fmt}", ["sql", out, query, "--format", fmt])
    for path in (tmp / "r.html", tmp / "e.sarif", tmp / "e.jsonl", *sorted((tmp / "snap").glob("*"))):
        night.outputs[str(path.relative_to(tmp))] = path.read_bytes()
        if path.suffix == ".parquet":
            night.rows[f"snapshot {path.name}"] = list(_strings(pq.read_table(path).to_pylist()))


@pytest.fixture(scope="module")
def night(
    dask_client: Any, moto: MotoS3Server, sample: dict[str, bytes], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Night]:
    dask_client.wait_for_workers(2, timeout=60)
    tmp = tmp_path_factory.mktemp("secret-forms")
    data = sample["tiny-llama-Q4_K_M.gguf"]
    bucket = f"forms-{uuid.uuid4().hex[:12]}"
    moto.make_bucket(bucket)
    out = f"s3://{bucket}/audit"
    with RangeHTTPServer() as srv, pytest.MonkeyPatch.context() as env:
        made = forms_for(srv.base_url)
        harmless = harmless_forms(srv.base_url)
        for m in made:
            srv.put(m.path, data)
        srv.put("h/m.gguf", data)
        listed = [m.url for m in made] + [u for u, _ in harmless]
        srv.put("lists/m.txt", "".join(u + "\n" for u in listed).encode())
        manifest = f"{srv.url_for('lists/m.txt')}?sig={MANIFEST_SIG}&key={MANIFEST_KEY}&download=1"
        night = Night(made, [u for u, _ in harmless])
        env.setenv("AWS_ENDPOINT_URL", moto.endpoint_url)
        env.setenv("AWS_REGION", moto.region)
        argv = ["scan", "--manifest", manifest, "--out", out, "--scheduler", dask_client.scheduler.address]
        argv += ["--no-progress", "--sarif", str(tmp / "scan.sarif"), "--jsonl", str(tmp / "scan.jsonl")]
        _run(night, "scan", argv)
        night.requests = [r.path for r in srv.requests if r.method == "GET"]
        for name in ("scan.sarif", "scan.jsonl"):
            night.outputs[name] = (tmp / name).read_bytes()
        _store(night, moto, bucket, out)
        _commands(night, out, tmp)
        # An S3-compatible store named with a userinfo (MinIO's user:password@host): the printed DuckDB secret.
        night.endpoint = moto.endpoint_url.replace("://", f"://minio:{ENDPOINT_PASSWORD}@")
        env.setenv("AWS_ENDPOINT_URL", night.endpoint)
        _run(night, "sql --views", ["sql", out, "--views"])
    yield night


def _all_secrets(night: Night) -> list[Made]:
    extra = Made("manifest and endpoint", "", "", (MANIFEST_SIG, MANIFEST_KEY, ENDPOINT_PASSWORD))
    return [*night.made, extra]


def _unquoted(text: str) -> str:
    from urllib.parse import unquote

    return unquote(text)


def _ran(night: Night) -> None:
    """The night read every form through its real URL, and every command after it ran."""
    assert night.statuses["scan"] in (0, 1), night.outputs["scan (stderr)"]
    assert "files: 48" in night.outputs["scan (stdout)"].decode()
    sent = "\n".join(night.requests)
    assert f"sig={MANIFEST_SIG}" in sent
    for m in night.made:
        assert any(p.startswith(f"/{m.path.split('/', 1)[0]}/") for p in night.requests), m.label
        if m.sent:
            assert leaks(sent, m) or leaks(_unquoted(sent), m), m.label  # the secret went to the server
    for name in ("report", "export", "snapshot", "sql table", "sql jsonl", "sql --views"):
        assert night.statuses[name] == 0, (name, night.outputs[f"{name} (stderr)"])


def test_no_output_holds_a_secret_byte_string(night: Night) -> None:
    _ran(night)
    secrets = _all_secrets(night)
    assert len(night.outputs) >= 20 and any("_delta_log" in k for k in night.outputs)
    found = {name: leaks(raw, secrets) for name, raw in night.outputs.items()}
    assert not {k: v for k, v in found.items() if v}
    rows = {name: leaks("\n".join(strings), secrets) for name, strings in night.rows.items()}
    assert {"table files", "table problems", "snapshot files.parquet"} <= set(rows)
    assert not {k: v for k, v in rows.items() if v}


def test_each_form_is_one_file_shown_redacted(night: Night) -> None:
    urls = {s for s in night.rows["table files"] if s.startswith("http://")}
    shown = [redact_url(m.url) for m in night.made]
    assert all("***" in u for u in shown)
    assert set(shown) <= urls
    # Files that differ by a harmless parameter alone stay four files, their values shown.
    assert set(night.harmless) <= urls and len(set(night.harmless)) == 4
    for name in ("scan.jsonl", "e.jsonl"):
        listed = {json.loads(line)["url"] for line in night.outputs[name].splitlines()}
        assert set(shown) <= listed, name
    sql = night.outputs["sql jsonl (stdout)"].decode()
    assert set(shown) <= {json.loads(line)["url"] for line in sql.splitlines()}
    html = night.outputs["r.html"].decode()
    assert html.count("***") >= len(shown) // 2


def test_sql_views_prints_the_endpoint_without_its_userinfo(night: Night) -> None:
    views = night.outputs["sql --views (stdout)"].decode()
    host = night.endpoint.rsplit("@", 1)[1]
    [secret] = [line for line in views.splitlines() if line.startswith("CREATE SECRET")]
    assert f"ENDPOINT '{host}'" in secret and "minio" not in secret
    assert ENDPOINT_PASSWORD not in views
