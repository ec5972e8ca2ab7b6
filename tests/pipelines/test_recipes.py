"""The documented nightly recipes, run as written, three nights each, on a collection with a broken file.

Each recipe is read from its marked block (``<!-- recipe: NAME -->``) in README.md
or docs/recipes.md, never copied here; only places are swapped for the test's own
(a page under tmp_path, moto's S3 through ``AWS_ENDPOINT_URL``, the session
cluster's scheduler). The ``gguf-audit`` console script of this venv runs them in
a real shell. Night 1 holds a broken file: the report is written and the diff
alerts (exit 1). Night 2 changes nothing: the scan exits 0, the report is written,
the diff exits 0. Night 3 brings a new broken file: the diff alerts again, and
``scan --fail-on new-error`` exits 1.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
import yaml
from corpus import REPO
from pipeline_helpers import delta_options, read_dataset

from gguf_audit.testing.s3 import FAKE_AWS_ENV, MotoS3Server

pytestmark = [pytest.mark.slow, pytest.mark.cluster]

BIN: Final = Path(sys.executable).parent
"""This venv's scripts: ``gguf-audit`` among them."""
GOOD: Final = "good-Q4_K_M.gguf"
BROKEN: Final = "broken-Q4_K_M.gguf"
NEW_BROKEN: Final = "broken-again-Q4_K_M.gguf"
ALERT_LINE: Final = re.compile(r"^(\d+) new problems? at or above error$", re.M)
SCHEDULE: Final = re.compile(r"^#\s+((?:[\d*/,-]+\s+){5})(.+)$", re.M)
"""A crontab entry quoted in a script's comment: five schedule fields, then (a user and) the command."""


def recipe(doc: str, name: str) -> str:
    """The code block marked ``<!-- recipe: NAME -->`` in ``doc``."""
    text = (REPO / doc).read_text()
    found = re.search(rf"<!-- recipe: {re.escape(name)} -->\n```\w*\n(.*?)```", text, re.S)
    assert found is not None, f"{doc} has no block marked recipe: {name}"
    return found.group(1)


def swapped(text: str, places: dict[str, str]) -> str:
    """``text`` with each documented place replaced by the test's, every one of them present."""
    for documented, here in places.items():
        assert documented in text, (documented, text)
        text = text.replace(documented, here)
    return text


def cron_job(script_block: str, script_path: Path) -> str:
    """The command of the crontab entry a script's comment gives, with the script at ``script_path``."""
    found = SCHEDULE.search(script_block)
    assert found is not None, script_block
    fields = found.group(2).split()
    command = fields[1:] if not fields[0].startswith("/") else fields  # /etc/cron.d: a user before it
    documented = next(f for f in command if f.startswith("/usr/local/bin/"))
    return " ".join(str(script_path) if f == documented else shlex.quote(f) for f in command)


def shell_env(moto: MotoS3Server) -> dict[str, str]:
    env = {**os.environ, **FAKE_AWS_ENV, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.update(AWS_ENDPOINT_URL=moto.endpoint_url, AWS_REGION=moto.region)
    env.pop("AWS_ALLOW_HTTP", None)  # an http:// endpoint implies it (docs/recipes.md)
    return env


def run(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, timeout=400, check=False)


def fresh_bucket(moto: MotoS3Server, name: str) -> None:
    """``name`` made, or emptied: moto's buckets are the process's (docs/recipes.md names fixed ones)."""
    s3 = moto.client()
    if name not in {b["Name"] for b in s3.list_buckets()["Buckets"]}:
        moto.make_bucket(name)
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=name):
        for obj in page.get("Contents", []):
            s3.delete_object(Bucket=name, Key=obj["Key"])


def put_night(moto: MotoS3Server, root: str, night: int, sample: dict[str, bytes]) -> None:
    """The collection at ``s3://root`` on ``night``: a good file and a truncated one; a new truncated one on 3."""
    bucket, _, prefix = root.partition("/")
    data = sample["tiny-llama-Q4_K_M.gguf"]
    if night == 1:
        moto.put(bucket, f"{prefix}/{GOOD}", data)
        moto.put(bucket, f"{prefix}/{BROKEN}", data[:-5])
    if night == 3:
        moto.put(bucket, f"{prefix}/{NEW_BROKEN}", data[: len(data) // 2])


@dataclass
class Nightly:
    """One recipe's nights: how to run it, and where its page and its diff's lines land."""

    argv: list[str]
    models: str
    """``bucket/prefix`` the recipe audits."""
    out: str
    page: Callable[[], str | None]
    """The page's text, or None when it is not there."""
    clear_page: Callable[[], None]
    diff_text: Callable[[subprocess.CompletedProcess[str]], str]


def check_three_nights(
    job: Nightly, moto: MotoS3Server, sample: dict[str, bytes], env: dict[str, str], cwd: Path
) -> None:
    """Night 1 alerts, night 2 does not, night 3 alerts on the new file only; every night has its page."""
    for night, alerts in ((1, True), (2, False), (3, True)):
        put_night(moto, job.models, night, sample)
        job.clear_page()
        done = run(job.argv, env, cwd)
        assert done.returncode == (1 if alerts else 0), (night, done.stdout[-3000:], done.stderr[-3000:])
        assert "Traceback" not in done.stderr
        runs = read_dataset(f"s3://{job.out}", "runs", delta_options(moto)).to_pylist()
        assert len(runs) == night and all(r["status"] == "committed" for r in runs)
        page = job.page()  # written after `scan &&`: the scan exited 0 with a broken file in the collection
        assert page is not None and max(runs, key=lambda r: r["finished_at"])["run_id"] in page, night
        text = job.diff_text(done)
        counts = [int(n) for n in ALERT_LINE.findall(text)]
        assert len(counts) == 1 and (counts[0] > 0) == alerts, (night, text)
        if night == 3:
            assert NEW_BROKEN in text and f"/{BROKEN}" not in text  # the carried error is not new again


def local_page(path: Path) -> tuple[Callable[[], str | None], Callable[[], None]]:
    return (lambda: path.read_text() if path.exists() else None), (lambda: path.unlink(missing_ok=True))


def test_the_readme_nightly_script(moto: MotoS3Server, sample: dict[str, bytes], tmp_path: Path) -> None:
    block = recipe("README.md", "readme-cron")
    www = tmp_path / "www"
    www.mkdir()
    script = tmp_path / "gguf-audit-nightly"
    script.write_text(swapped(block, {"/srv/www/": f"{www}/"}))
    script.chmod(0o755)
    fresh_bucket(moto, "bucket")
    page, clear = local_page(www / "gguf-audit.html")
    job = Nightly(
        ["bash", "-c", cron_job(block, script)], "bucket/models", "bucket/audit", page, clear, lambda d: d.stdout
    )
    check_three_nights(job, moto, sample, shell_env(moto), tmp_path)


def test_the_cron_recipe_and_the_diff_gate(moto: MotoS3Server, sample: dict[str, bytes], tmp_path: Path) -> None:
    block = recipe("docs/recipes.md", "cron")
    www, log = tmp_path / "www", tmp_path / "log"
    www.mkdir()
    log.mkdir()
    script = tmp_path / "gguf-audit-nightly"
    script.write_text(swapped(block, {"/srv/www/": f"{www}/", "/var/log/": f"{log}/"}))
    script.chmod(0o755)
    for name in ("models-bucket", "audit-bucket"):
        fresh_bucket(moto, name)
    env = shell_env(moto)
    gate = swapped(recipe("docs/recipes.md", "diff-gate"), {"s3://audit/gguf": "s3://audit-bucket/gguf-audit/"})
    gates: list[tuple[int, Any]] = []

    def diff_log(done: subprocess.CompletedProcess[str]) -> str:
        # the CI gate on the same output, right after the night: its status and its JSON follow the alert
        ci = run(["bash", "-c", gate], env, tmp_path)
        gates.append((ci.returncode, json_of(tmp_path / "diff.json")))
        return (log / "gguf-audit-diff.txt").read_text()

    page, clear = local_page(www / "gguf-audit.html")
    job = Nightly(
        ["bash", "-c", cron_job(block, script)], "models-bucket/gguf", "audit-bucket/gguf-audit", page, clear, diff_log
    )
    check_three_nights(job, moto, sample, env, tmp_path)
    assert [status for status, _ in gates] == [1, 0, 1]
    assert [bool(j["new_at_fail_on"]) for _, j in gates] == [True, False, True]
    assert gates[0][1]["from"] == "(none)" and gates[2][1]["fail_on"] == "error"


def json_of(path: Path) -> Any:
    return json.loads(path.read_text())


def test_the_kubernetes_job(client: Any, moto: MotoS3Server, sample: dict[str, bytes], tmp_path: Path) -> None:
    spec = yaml.safe_load(recipe("docs/recipes.md", "kubernetes"))
    [container] = spec["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"]
    argv = [*container["command"], *container["args"]]
    assert argv[:2] == ["/bin/sh", "-c"] and len(argv) == 3
    argv[2] = swapped(argv[2], {"tcp://dask-scheduler:8786": str(client.scheduler.address)})
    for name in ("models-bucket", "audit-bucket"):
        fresh_bucket(moto, name)
    s3 = moto.client()
    key = "pages/night.html"

    def page() -> str | None:
        try:
            return str(s3.get_object(Bucket="audit-bucket", Key=key)["Body"].read().decode())
        except s3.exceptions.NoSuchKey:
            return None

    job = Nightly(
        argv,
        "models-bucket/gguf",
        "audit-bucket/gguf-audit",
        page,
        lambda: s3.delete_object(Bucket="audit-bucket", Key=key),
        lambda d: d.stdout,
    )
    check_three_nights(job, moto, sample, shell_env(moto), tmp_path)


def test_the_scan_gate_on_new_errors(sample: dict[str, bytes], tmp_path: Path, moto: MotoS3Server) -> None:
    """``scan --fail-on new-error``: the first night's errors are new, the second night's are carried, the third
    night's new file fails it again; every night is committed."""
    command = recipe("docs/recipes.md", "scan-gate").strip()
    models = tmp_path / "models"
    models.mkdir()
    data = sample["tiny-llama-Q4_K_M.gguf"]
    (models / GOOD).write_bytes(data)
    (models / BROKEN).write_bytes(data[:-5])
    env = shell_env(moto)
    lines = []
    for night in (1, 2, 3):
        if night == 3:
            (models / NEW_BROKEN).write_bytes(data[: len(data) // 2])
        done = run(["bash", "-c", command], env, tmp_path)
        [line] = [x for x in done.stdout.splitlines() if x.startswith("the run ")]
        lines.append(line)
        assert done.returncode == (0 if night == 2 else 1), (night, line, done.stderr[-3000:])
        assert len(read_dataset(tmp_path / "audit-out", "runs")) == night
    assert re.fullmatch(r"the run fails --fail-on new-error: \d+ errors? new on the first night", lines[0]), lines
    assert re.fullmatch(
        r"the run passes --fail-on new-error: no new error since night \S+ \(\d+ errors? carried\)", lines[1]
    ), lines
    assert re.fullmatch(r"the run fails --fail-on new-error: \d+ errors? new since night \S+", lines[2]), lines
