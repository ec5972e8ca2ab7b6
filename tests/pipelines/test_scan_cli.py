"""``gguf-audit scan`` as a person runs it: flags, summary, exit status."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import pytest
from pipeline_helpers import SAMPLE_COUNT, read_dataset, read_only_dir, s3_options

from gguf_audit.cli import main
from gguf_audit.pipelines.commands.scan import _add_arguments, _config_from_args
from gguf_audit.pipelines.config import ConfigError
from gguf_audit.pipelines.scan import cluster as cluster_module
from gguf_audit.testing.builder import build_gguf, kv_str, tiny_llama_like
from gguf_audit.testing.http import RangeHTTPServer
from gguf_audit.testing.s3 import MotoS3Server
from gguf_audit.testing.sample_collection import build_sample_collection

pytestmark = pytest.mark.slow  # real scans in subprocesses: outside the fast loop


def _scan(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    status = main(["scan", *argv])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_readme_main_job(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """The README's command: build the sample collection, scan it on a LocalCluster of its own."""
    monkeypatch.chdir(tmp_path)
    build_sample_collection("sample-collection")
    status, out, err = _scan(capsys, "sample-collection", "--out", "audit-out", "--workers", "2", "--no-dashboard")
    assert status == 0  # committed: the collection's errors (on purpose) gate nothing by default
    assert out.rstrip().count("the run passes --fail-on none: a committed night exits 0") == 1
    assert "dask: a local cluster, 2 workers" in err
    assert f"{SAMPLE_COUNT}/{SAMPLE_COUNT}" in err  # the progress bar reached the end
    statuses = "ok 7, warning 0, error 2, unreadable 1; 3 llama.cpp b11312 would refuse"
    assert f"files: {SAMPLE_COUNT} ({statuses}) in 7 models" in out
    assert re.search(r"^\s+1\s+shard\.missing\s+error$", out, re.M)
    assert "sharded/llama-split: missing 00002 of 00003" in out
    assert f"every listed file has exactly one row: {SAMPLE_COUNT} of {SAMPLE_COUNT}" in out
    assert "files/s" in out and "of 3.4 MiB" in out
    # The DuckDB query ran on the result.
    assert "SELECT f.status, f.llama_cpp" in out and "│ llama_cpp │" in out
    assert re.search(r"│ unreadable\s+│ refuses\s+│\s+1 │\s+1 │", out)


def test_exit_status(
    client: Any,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    sample: dict[str, bytes],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cluster_module, "SCHEDULER_CONNECT_S", 1.0)
    scheduler = str(client.scheduler.address)
    clean = tmp_path / "clean"
    clean.mkdir()
    (clean / "a.gguf").write_bytes(sample["tiny-llama-Q4_K_M.gguf"])
    common = ["--scheduler", scheduler, "--no-progress"]

    status, out, _ = _scan(capsys, str(clean), "--out", str(tmp_path / "o1"), "--fail-on", "error", *common)
    # A quantized file alone: its family has no full-precision source (info), nothing else.
    passed = "the run passes --fail-on error: no problem is an error and llama.cpp b11312 would refuse no file"
    assert status == 0 and passed in out
    assert re.search(r"most frequent problems:\n +1  lineage\.no_full_precision  info\n(?! )", out), out

    (clean / "b.gguf").write_bytes(sample["tiny-llama-Q4_K_M.gguf"][:-5])  # an error
    status, out, _ = _scan(capsys, str(clean), "--out", str(tmp_path / "o2"), *common)
    assert status == 0 and "the run passes --fail-on none" in out  # the default: committed is 0
    status, out, _ = _scan(capsys, str(clean), "--out", str(tmp_path / "o2b"), "--fail-on", "error", *common)
    assert status == 1
    assert re.search(r"the run fails --fail-on error: (1 problem is an error|\d+ problems are errors), ", out), out

    status, _, _ = _scan(
        capsys, str(clean), "--out", str(tmp_path / "o3"), "--exclude", "b.gguf", "--fail-on", "error", *common
    )
    assert status == 0

    status, _, err = _scan(capsys, str(tmp_path / "nowhere"), "--out", str(tmp_path / "o4"), *common)
    assert status == 2 and "does not exist" in err and "nothing was committed" in err
    assert not (tmp_path / "o4" / "runs").exists()

    status, _, err = _scan(capsys, "--out", str(tmp_path / "o5"), *common)
    assert status == 2 and "give at least one ROOT" in err

    status, _, err = _scan(capsys, str(clean), "--scheduler", "tcp://127.0.0.1:9", "--no-progress")
    assert status == 2 and "cannot reach the dask scheduler" in err


def test_fail_on_warning(
    client: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], sample: dict[str, bytes]
) -> None:
    root = tmp_path / "c"
    root.mkdir()
    (root / "a.gguf").write_bytes(sample["tiny-llama-Q4_K_M.gguf"] + b"\0" * 64)  # data.trailing_bytes: info
    common = ["--scheduler", str(client.scheduler.address), "--no-progress"]
    assert _scan(capsys, str(root), "--out", str(tmp_path / "o1"), "--fail-on", "warning", *common)[0] == 0
    kvs, tensors = tiny_llama_like()
    odd = [kv_str("general.name", "tiny\x1b[2J") if kv.key == "general.name" else kv for kv in kvs]
    (root / "odd.gguf").write_bytes(build_gguf(odd, tensors))  # meta.control_characters: a warning; it loads
    status, out, _ = _scan(capsys, str(root), "--out", str(tmp_path / "o2"), *common)
    assert status == 0 and "meta.control_characters" in out
    assert _scan(capsys, str(root), "--out", str(tmp_path / "o3"), "--fail-on", "warning", *common)[0] == 1
    # A big-endian file's finding is a warning too, but llama.cpp refuses it: --fail-on error fails the night.
    (root / "be.gguf").write_bytes(build_gguf(kvs, tensors, big_endian=True))
    status, out, _ = _scan(capsys, str(root), "--out", str(tmp_path / "o4"), "--fail-on", "error", *common)
    assert status == 1 and "header.big_endian" in out and "1 llama.cpp b11312 would refuse" in out
    assert "the run fails --fail-on error: llama.cpp b11312 would refuse 1 file\n" in out


def test_credentials_are_refused_and_never_written(
    client: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], local_collection: Path
) -> None:
    secret = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYEXAMPLEKEY"
    status, out, err = _scan(
        capsys, str(local_collection), "--out", str(tmp_path / "o"), "--storage-options", json.dumps({"secret": secret})
    )
    assert status == 2 and "looks like a credential" in err
    assert secret not in out + err

    config = tmp_path / "c.toml"
    config.write_text(f'[storage_options.s3]\nclient_kwargs = {{ aws_secret_access_key = "{secret}" }}\n')
    status, out, err = _scan(capsys, str(local_collection), "--config", str(config), "--out", str(tmp_path / "o"))
    assert status == 2 and "storage_options.s3.client_kwargs.aws_secret_access_key" in err
    assert secret not in out + err

    # Options that are not secrets are used, and still never recorded.
    status, out, err = _scan(
        capsys, str(local_collection), "--out", str(tmp_path / "o"), "--scheduler", str(client.scheduler.address),
        "--no-progress", "--storage-options", json.dumps({"s3": {"anon": True}}),
    )  # fmt: skip
    assert status == 0
    [run] = read_dataset(tmp_path / "o", "runs").to_pylist()
    assert "anon" not in run["config"] and "storage_options" not in run["config"]


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    _add_arguments(parser)
    return parser.parse_args(list(argv))


def test_flags_override_the_config(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        '[scan]\nroots = ["s3://a/"]\nout = "s3://o/"\nincremental = true\nfail_on = "warning"\n'
        "[cluster]\nworkers = 3\n[io]\nthreads = 16\n[storage_options.s3]\nanon = true\n"
    )
    config = _config_from_args(_args("--config", str(path)))
    assert (
        config.scan.roots,
        config.scan.out,
        config.scan.incremental,
        config.scan.fail_on,
        config.cluster.workers,
        config.io.threads,
    ) == (
        ("s3://a/",),
        "s3://o/",
        True,
        "warning",
        3,
        16,
    )
    config = _config_from_args(
        _args("--config", str(path), "/data", "--out", "o", "--no-incremental", "--fail-on", "error", "--workers", "1")
    )
    assert (
        config.scan.roots,
        config.scan.out,
        config.scan.incremental,
        config.scan.fail_on,
        config.cluster.workers,
        config.io.threads,
    ) == (
        ("/data",),
        "o",
        False,
        "error",
        1,
        16,
    )
    assert config.storage_options == {"s3": {"anon": True}}
    with pytest.raises(ConfigError, match=r"--storage-options must be a JSON object\. Got '\[1\]'\."):
        _config_from_args(_args("--storage-options", "[1]"))


def test_an_unwritable_out_fails_before_auditing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], moto: MotoS3Server, sample: dict[str, bytes]
) -> None:
    """A missing bucket, a file in the path, a read-only directory: exit 2, one line, no request to the collection."""
    with RangeHTTPServer(files={"m.gguf": sample["tiny-llama-Q4_K_M.gguf"]}) as srv:
        manifest = tmp_path / "m.txt"
        manifest.write_text(srv.url_for("m.gguf") + "\n")
        (tmp_path / "a-file").write_text("not a directory")
        options = json.dumps({"s3": s3_options(moto)})
        with read_only_dir(tmp_path / "ro") as ro:
            cases = {
                "s3://gguf-audit-missing-bucket/x": "the bucket 'gguf-audit-missing-bucket' does not exist",
                str(tmp_path / "a-file" / "out"): "is a file, not a directory",
                str(ro / "out"): "cannot write to the output",
            }
            for out, reason in cases.items():
                status, _, err = _scan(
                    capsys, "--manifest", str(manifest), "--out", out, "--storage-options", options, "--no-progress"
                )
                lines = err.strip().splitlines()
                assert status == 2 and len(lines) == 1 and reason in lines[0], (out, err)
                assert lines[0].startswith("gguf-audit: scan: ") and repr(out) in lines[0]
        assert srv.requests == []  # the manifest is a local file: nothing was listed or read
    assert "gguf-audit-missing-bucket" not in {b["Name"] for b in moto.client().list_buckets()["Buckets"]}


def test_a_file_llama_cpp_refuses_fails_the_night_even_with_only_warnings(client: Any, tmp_path: Path) -> None:
    """A big-endian file's finding is a warning, but llama.cpp refuses it: the night fails --fail-on error."""
    from gguf_audit.pipelines.commands.scan import render_summary
    from gguf_audit.pipelines.config import ScanConfig
    from gguf_audit.pipelines.scan.gate import judge_gate
    from gguf_audit.pipelines.scan.run import run_scan
    from gguf_audit.pipelines.store.output import Output

    root = tmp_path / "models"
    root.mkdir()
    kvs, tensors = tiny_llama_like()
    (root / "be.gguf").write_bytes(build_gguf(kvs, tensors, big_endian=True))
    config = ScanConfig().replace(roots=(str(root),), out=str(tmp_path / "out"), samples=False, compare=False)
    result = run_scan(config, client=client)
    assert result.severities.get("error", 0) == 0  # no finding is an error...
    assert result.n_unloadable == 1  # ...but the file will not load
    assert result.reaches("error") and result.reaches("warning")
    gate = judge_gate(result, "error", Output(str(tmp_path / "out"), {}))
    assert "1 llama.cpp b11312 would refuse" in render_summary(result, gate)
    assert render_summary(result, gate).endswith("the run fails --fail-on error: llama.cpp b11312 would refuse 1 file")


def test_a_manifest_scan_learns_the_collection_size_from_its_reads(
    client: Any, tmp_path: Path, sample: dict[str, bytes]
) -> None:
    """A manifest of plain URLs lists no size: the summary's collection size comes from the first reads."""
    from gguf_audit.pipelines.commands.scan import render_summary
    from gguf_audit.pipelines.config import ScanConfig
    from gguf_audit.pipelines.scan.gate import Gate
    from gguf_audit.pipelines.scan.run import run_scan

    files = {f"m/{i}.gguf": sample["tiny-llama-Q4_K_M.gguf"] for i in range(3)}
    with RangeHTTPServer(files=files) as srv:
        manifest = tmp_path / "urls.txt"
        manifest.write_text("".join(srv.url_for(n) + "\n" for n in files))
        config = ScanConfig().replace(
            manifests=(str(manifest),), out=str(tmp_path / "out"), samples=False, compare=False
        )
        result = run_scan(config, client=client)
    total = sum(len(d) for d in files.values())
    assert result.collection_bytes == total
    assert f"of {total / 1024 / 1024:.1f} MiB" in render_summary(result, Gate("none", False, "the default"))
