"""``--scheduler``: a scan on separately started ``dask scheduler`` and ``dask worker`` processes."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import cloudpickle
import pyarrow.compute as pc
import pytest
from distributed import Client
from pipeline_helpers import SAMPLE_COUNT, read_dataset

from gguf_audit.cli import main as gguf_audit_main
from gguf_audit.testing.cluster import external_cluster

pytestmark = pytest.mark.slow  # a scheduler in a subprocess: outside the fast loop

PYTHON = sys.executable


# A worker that cannot import gguf_audit, as on a cluster where the package was never installed:
# the import system forgets how this environment finds it, then the ordinary worker starts.
_WORKER_WITHOUT_GGUF_AUDIT = (
    "import sys\n"
    "sys.meta_path[:] = [f for f in sys.meta_path if not getattr(f, '__module__', '').startswith('__editable__')]\n"
    "sys.path[:] = [p for p in sys.path if p not in ('', '.', sys.argv[1])]\n"
    "for name in [m for m in sys.modules if m == 'gguf_audit' or m.startswith('gguf_audit.')]:\n"
    "    del sys.modules[name]\n"
    "from distributed.cli.dask_worker import main\n"
    "sys.argv = ['dask-worker', *sys.argv[2:]]\n"
    "main()\n"
)


@pytest.fixture
def external_scheduler(tmp_path: Path, aws_env: None) -> Iterator[str]:
    """A ``dask scheduler`` and one ``dask worker`` (two threads), as separate processes on 127.0.0.1."""
    with external_cluster(tmp_path) as address:
        yield address


@pytest.fixture
def scheduler_without_gguf_audit(tmp_path: Path, aws_env: None) -> Iterator[str]:
    """The same, but the worker's Python cannot import gguf_audit."""
    repo = str(Path(__file__).resolve().parents[2])
    # No nanny: the worker runs in this very process (a nanny's child would start a fresh interpreter).
    with external_cluster(
        tmp_path, worker_command=[PYTHON, "-c", _WORKER_WITHOUT_GGUF_AUDIT, repo, "--no-nanny"]
    ) as address:
        yield address


def test_scan_with_scheduler_flag(
    external_scheduler: str, local_collection: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = ["scan", str(local_collection), "--out", str(out), "--scheduler", external_scheduler, "--no-progress"]
    status = gguf_audit_main(argv)
    captured = capsys.readouterr()
    assert status == 0, captured.err  # committed; the sample collection's errors gate nothing by default
    assert f"the scheduler at {external_scheduler}, 1 workers" in captured.err
    assert f"every listed file has exactly one row: {SAMPLE_COUNT} of {SAMPLE_COUNT}" in captured.out
    runs = read_dataset(out, "runs").to_pylist()
    assert [(r["scheduler"], r["n_workers"], r["n_files"]) for r in runs] == [(external_scheduler, 1, SAMPLE_COUNT)]
    files = read_dataset(out, "files")
    assert files.num_rows == len(set(files.column("url").to_pylist())) == SAMPLE_COUNT
    assert pc.sum(files.column("bytes_read")).as_py() > 0

    # The worker process redacts what any library logs there, through whichever handler writes it.
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    with Client(external_scheduler, timeout=30) as client:
        [(handlers, lines)] = client.run(_worker_log_lines).values()
    assert handlers >= 1  # distributed's own stderr handler, at least
    assert lines and all("X-Amz-Signature=***" in line and "0f1e2d3c" not in line for line in lines)


_PRESIGNED = "https://b.s3.amazonaws.com/m.gguf?X-Amz-Credential=AKIAEXAMPLE&X-Amz-Signature=0f1e2d3c"


def _worker_log_lines() -> tuple[int, list[str]]:
    """In a worker process: each configured handler's view of a record a library logs with a presigned URL."""
    import logging

    loggers = [
        logging.getLogger(),
        *(v for v in logging.Logger.manager.loggerDict.values() if isinstance(v, logging.Logger)),
    ]
    handlers = [h for logger in loggers for h in logger.handlers]
    lines = []
    for handler in handlers:
        record = logging.LogRecord(
            "distributed.worker", logging.WARNING, __file__, 1, "fetching %s", (_PRESIGNED,), None
        )
        if handler.filter(record):
            lines.append(record.getMessage())
    return len(handlers), lines


def test_workers_without_the_package_are_refused_before_submitting(
    scheduler_without_gguf_audit: str, local_collection: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "out"
    argv = ["scan", str(local_collection), "--out", str(out), "--scheduler", scheduler_without_gguf_audit]
    status = gguf_audit_main([*argv, "--no-progress"])
    captured = capsys.readouterr()
    assert status == 2, captured.err
    failure = [line for line in captured.err.splitlines() if "lacks" in line]
    assert len(failure) == 1, captured.err
    assert "lacks gguf-audit: pip install 'gguf-audit[pipeline]==" in failure[0]
    assert "nothing was submitted" in failure[0]
    assert "Traceback" not in captured.err
    # Nothing was audited, so nothing was written or committed.
    assert list(out.glob("*/_delta_log/*.json")) == []
    assert list(out.rglob("*.parquet")) == []
