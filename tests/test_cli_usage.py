"""The user's mistakes are usage errors (exit 2, one line naming the fix), never ``internal.unexpected``."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from corpus import corpus_dir

from gguf_audit.cli import EXIT_USAGE, main


@pytest.mark.parametrize("command", ["inspect", "sample"])
def test_an_unknown_protocol_is_a_usage_error(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main([command, "foo://bar/x.gguf"]) == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    err = captured.err.strip()
    assert len(err.splitlines()) == 1
    assert "unknown protocol 'foo'" in err
    assert "internal.unexpected" not in err


def test_compare_checks_both_urls(capsys: pytest.CaptureFixture[str]) -> None:
    model = str(corpus_dir() / "models" / "tiny-llama-Q8_0.gguf")
    assert main(["compare", model, "nope://x/ref.gguf"]) == EXIT_USAGE
    assert "unknown protocol 'nope'" in capsys.readouterr().err


def test_a_directory_points_at_scan(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(tmp_path)]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "is a directory" in err
    assert f"gguf-audit scan {tmp_path}" in err


def test_a_missing_extra_names_it() -> None:
    # s3fs made unimportable in a fresh interpreter, as on a machine without the s3 extra.
    code = (
        "import sys; sys.modules['s3fs'] = None\n"
        "from gguf_audit.cli import main\n"
        "sys.exit(main(['inspect', 's3://bucket/model.gguf']))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == EXIT_USAGE
    assert done.stdout == ""
    assert done.stderr.strip() == (
        "gguf-audit: s3:// URLs need an extra that is not installed: pip install 'gguf-audit[s3]'"
    )


def test_inspect_fails_a_file_llama_cpp_refuses_even_without_errors(capsys: pytest.CaptureFixture[str]) -> None:
    # A valid big-endian file: its findings are warnings, but llama.cpp refuses it on little-endian hosts.
    path = corpus_dir() / "bigendian" / "tiny-llama-Q8_0-BE.gguf"
    assert main(["inspect", str(path)]) == 1
    out = capsys.readouterr().out
    assert "header.big_endian" in out
    assert "error" not in {line.split()[0] for line in out.splitlines() if line.startswith(("error", "warning"))}


@pytest.mark.parametrize("command", ["demo", "scan"])
def test_a_pipeline_command_without_its_extra_names_it(command: str, tmp_path: Path) -> None:
    # dask and distributed made unimportable in a fresh interpreter, as without the pipeline extra.
    code = (
        "import sys\n"
        "for name in ('dask', 'distributed'):\n"
        "    sys.modules[name] = None\n"
        "from gguf_audit.cli import main\n"
        f"sys.exit(main([{command!r}, '--out', 'x']))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == EXIT_USAGE, done.stderr
    assert done.stderr.strip() == (
        f"gguf-audit: {command} needs an extra that is not installed (dask): pip install 'gguf-audit[pipeline]'"
    )
    assert list(tmp_path.iterdir()) == []  # nothing written before saying so


def test_compare_refuses_a_file_against_itself(capsys: pytest.CaptureFixture[str]) -> None:
    model = str(corpus_dir() / "models" / "tiny-llama-Q4_K_M.gguf")
    assert main(["compare", model, model]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "compared with itself" in err
    assert "compare.layout_suspect" not in err


def test_compare_refuses_a_quantized_reference(capsys: pytest.CaptureFixture[str]) -> None:
    models = corpus_dir() / "models"
    status = main(["compare", str(models / "tiny-llama-Q4_K_M.gguf"), str(models / "tiny-llama-Q8_0.gguf")])
    assert status == EXIT_USAGE
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "the reference" in captured.err and "is quantized" in captured.err and "Q8_0" in captured.err
    # A full-precision reference is still compared.
    assert main(["compare", str(models / "tiny-llama-Q4_K_M.gguf"), str(models / "tiny-llama-F16.gguf")]) == 0


def test_inspect_tells_a_store_that_fails_from_a_bad_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A missing file or a store that cannot be reached is 2 (verdict unknown); a refused file is 1."""
    assert main(["inspect", str(tmp_path / "nope.gguf"), "--json"]) == EXIT_USAGE
    report = json.loads(capsys.readouterr().out)
    assert report["loadable"] is None and [p["code"] for p in report["problems"]] == ["io.not_found"]
    assert main(["inspect", "http://127.0.0.1:9/m.gguf"]) == EXIT_USAGE
    capsys.readouterr()
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUX" + bytes(60))
    assert main(["inspect", str(bad)]) == 1


@pytest.mark.parametrize("command", ["inspect", "scan"])
def test_an_empty_upstream_is_a_usage_error(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``UpstreamConfig`` refuses an empty location itself; the commands say which flag in one line."""
    model = str(corpus_dir() / "models" / "tiny-llama-Q8_0.gguf")
    assert main([command, model, "--upstream", " "]) == EXIT_USAGE
    err = capsys.readouterr().err.strip()
    assert err.endswith("--upstream needs a directory or URL. Got ' '.") and "\n" not in err


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--threads", "0"], "scan: io.threads must be an int >= 1. Got 0."),
        (
            ["--sample-requests", "0"],
            "scan: [checks] sample_requests: SampleConfig.max_requests must be an int >= 1. Got 0.",
        ),
        (["--lease-wait", "-1"], "scan: scan.lease_wait_s must be a number >= 0.0. Got -1.0."),
    ],
)
def test_a_scan_flag_is_checked_by_the_field_it_sets(
    flags: list[str], message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["scan", str(tmp_path), "--out", str(tmp_path / "out"), *flags]) == EXIT_USAGE
    assert capsys.readouterr().err.strip() == f"gguf-audit: {message}"
    assert not (tmp_path / "out").exists()
