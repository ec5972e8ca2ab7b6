"""A healthy 3-shard set in a real scan: llama.cpp b11312 loads it from its first shard and refuses each later
shard given alone; the scan's files rows judge each shard as a member of the set, and its models row keeps the
set's verdict, on a first night and on an incremental one that judges the set from stored rows."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.scan.run import run_scan
from gguf_audit.pipelines.store.output import Output
from gguf_audit.testing.builder import build_gguf, kv_i32, kv_u16, tiny_llama_like
from gguf_audit.testing.conformance import compare
from gguf_audit.testing.oracle import Oracle

pytestmark = [pytest.mark.conformance, pytest.mark.cluster, pytest.mark.slow]


@pytest.fixture
def client() -> Iterator[Any]:
    """One worker process on loopback, for both nights (the caller owns the client)."""
    from distributed import Client, LocalCluster

    with (
        LocalCluster(  # type: ignore[no-untyped-call]
            n_workers=1,
            threads_per_worker=1,
            processes=True,
            host="127.0.0.1",
            dashboard_address="127.0.0.1:0",
            silence_logs=logging.CRITICAL,
        ) as cluster,
        Client(cluster) as dask_client,  # type: ignore[no-untyped-call]
    ):
        yield dask_client


def _write_set(folder: Path, stem: str, count: int) -> list[Path]:
    kvs, tensors = tiny_llama_like()
    paths = []
    for i in range(count):
        split = [kv_u16("split.no", i), kv_u16("split.count", count), kv_i32("split.tensors.count", len(tensors))]
        paths.append(folder / f"{stem}-{i + 1:05d}-of-{count:05d}.gguf")
        paths[-1].write_bytes(build_gguf([*(kvs if i == 0 else []), *split], tensors[i::count]))
    return paths


def _night(out: Path, run_id: str) -> tuple[dict[str, dict[str, object]], dict[str, object]]:
    output = Output(str(out))
    files = {Path(str(r["url"])).name: r for r in output.read("files", [run_id]).to_pylist()}
    [model] = output.read("models", [run_id]).to_pylist()
    return files, model


def test_a_healthy_shard_set_loads_in_a_scan_and_its_later_shards_are_refused_alone(
    oracle: Oracle, client: Any, tmp_path: Path
) -> None:
    root = tmp_path / "c"
    root.mkdir()
    first, *later = _write_set(root, "healthy", 3)
    outcomes = compare(oracle, [first, *later])
    assert [(o.theirs, o.ours) for o in outcomes] == [("loaded", "loads"), *[("refused", "refuses")] * 2]
    out = tmp_path / "out"
    config = ScanConfig().replace(roots=(str(root),), out=str(out))
    night = run_scan(config, client=client)
    files, model = _night(out, night.run_id)
    # The builder's zero weights are a sampled warning (data.zero_filled) in every shard: never an error.
    assert (model["loadable"], model["llama_cpp"], model["complete"]) == (True, "loads", True)
    assert model["status"] == "warning"
    assert (files[first.name]["loadable"], files[first.name]["llama_cpp"]) == (True, "loads")
    for path in later:
        row = files[path.name]
        # A member of a set that loads: refused only alone, which is no problem of the set's.
        assert (row["loadable"], row["llama_cpp"], row["status"]) == (True, "loads", "warning")
        assert row["codes"] == ["data.zero_filled"]
    assert night.n_unloadable == 0
    # The next night reads the first shard again and judges the set with its later shards' stored rows.
    time.sleep(0.01)
    first.write_bytes(first.read_bytes())
    again = run_scan(config.replace(incremental=True), client=client)
    assert again.n_read == 1
    _, model = _night(out, again.run_id)
    assert (model["loadable"], model["llama_cpp"], model["status"]) == (True, "loads", "warning")
