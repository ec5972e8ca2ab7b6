"""Nights that tell the truth and cost what changed, on a real family and a real cluster.

The family is the corpus' tiny llama: its F16 file (the reference), Q8_0 and
Q4_0 siblings, and a Q4_K_M sibling truncated as an interrupted upload would
leave it (llama.cpp refuses it).
"""

from __future__ import annotations

import os
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

from pipeline_helpers import s3_options

from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.scan.groups import ModelGroups
from gguf_audit.pipelines.scan.reuse import carried_models
from gguf_audit.pipelines.scan.run import run_scan
from gguf_audit.pipelines.spill import is_mapped
from gguf_audit.pipelines.store.output import Output
from gguf_audit.testing.s3 import MotoS3Server


def _models(out: Path, run_id: str) -> dict[str, dict[str, Any]]:
    rows = Output(str(out)).read("models", [run_id]).to_pylist()
    return {str(r["model_id"]).rsplit("/", 1)[-1]: r for r in rows}


def _files(out: Path, run_id: str) -> dict[str, dict[str, Any]]:
    rows = Output(str(out)).read("files", [run_id]).to_pylist()
    return {str(r["url"]).rsplit("/", 1)[-1]: r for r in rows}


def _verdicts(models: dict[str, dict[str, Any]]) -> dict[str, tuple[Any, ...]]:
    return {k: (m["status"], m["loadable"], tuple(m["codes"] or ())) for k, m in models.items()}


def test_a_reread_reference_keeps_each_sibling_s_verdict_and_the_next_night_reads_nothing(
    client: Any, family: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    config = ScanConfig().replace(roots=(str(family),), out=str(out), incremental=True, compare_tensors=4)
    first = run_scan(config, client=client)
    before = _verdicts(_models(out, first.run_id))
    assert before["tiny-llama-Q4_K_M"][:2] == ("error", False)
    assert all(before[f"tiny-llama-{q}"][:2] == ("ok", True) for q in ("F16", "Q8_0", "Q4_0"))

    # The reference is touched: read again, and its family judged again, each member from its own findings.
    later = time.time() + 10
    os.utime(family / "tiny-llama-F16.gguf", (later, later))
    second = run_scan(config, client=client)
    assert (second.n_read, second.n_reused) == (1, 3)
    models = _models(out, second.run_id)
    assert _verdicts(models) == before
    assert {m["source_run_id"] for m in models.values()} == {second.run_id}  # judged this night
    assert second.n_unloadable == first.n_unloadable == 1
    assert second.reaches("error")
    # The siblings were compared again (their reference was read), the reference once for them all.
    compared = {k: f["compare_requests"] for k, f in _files(out, second.run_id).items()}
    assert all(n is not None and n > 0 for n in compared.values())
    assert second.requests == sum(f["requests"] for f in _files(out, second.run_id).values()) + sum(compared.values())

    # Nothing changed since: nothing is read, nothing compared, nothing requested; the verdicts stand.
    third = run_scan(config, client=client)
    assert (third.n_read, third.bytes_read, third.requests) == (0, 0, 0)
    assert third.rows_written.get("compare", 0) == 0
    assert _verdicts(_models(out, third.run_id)) == before
    assert all(f["requests"] == 0 and f["compare_requests"] is None for f in _files(out, third.run_id).values())


def test_the_compare_phase_reads_the_reference_once_and_is_counted_per_file(
    client: Any, family: Path, tmp_path: Path
) -> None:
    plain = run_scan(
        ScanConfig().replace(roots=(str(family),), out=str(tmp_path / "plain"), compare=False), client=client
    )
    out = tmp_path / "out"
    full = run_scan(ScanConfig().replace(roots=(str(family),), out=str(out)), client=client)
    assert full.requests <= 1.5 * plain.requests
    # The compare phase reads each file's tensor infos (its audit said where) and sampled windows, not its header.
    assert full.bytes_read <= 1.2 * plain.bytes_read, (full.bytes_read, plain.bytes_read)
    files = _files(out, full.run_id)
    audit = sum(f["requests"] for f in files.values())
    compare = {k: f["compare_requests"] for k, f in files.items()}
    # Every file was compared (the reference once for its three siblings) and the night counts both phases.
    assert all(n is not None and n > 0 for n in compare.values())
    assert full.requests == audit + sum(compare.values())
    assert full.bytes_read == sum(f["bytes_read"] + f["compare_bytes"] for f in files.values())
    # The reference: its header and the windows its siblings share, no more than one sibling's own reads.
    assert compare["tiny-llama-F16.gguf"] <= max(compare[f"tiny-llama-{q}.gguf"] for q in ("Q8_0", "Q4_0"))
    [run] = Output(str(out)).read("runs", [full.run_id]).to_pylist()
    assert run["requests"] == full.requests


def _object_gets(moto: MotoS3Server, bucket: str) -> int:
    """GETs of the bucket's objects the server has answered (listings not counted)."""
    return sum(
        1
        for r in moto.requests
        if r.method == "GET" and r.path.startswith(f"/{bucket}/") and "list-type" not in r.path.partition("?")[2]
    )


def test_the_same_nights_on_moto_s3(client: Any, moto: MotoS3Server, family: Path, tmp_path: Path) -> None:
    bucket = f"family-{uuid.uuid4().hex[:12]}"
    moto.make_bucket(bucket)
    for path in sorted(family.iterdir()):
        moto.put(bucket, f"family/{path.name}", path.read_bytes())
    out = tmp_path / "out"
    config = ScanConfig().replace(
        roots=(f"s3://{bucket}/family",),
        out=str(out),
        storage_options={"s3": s3_options(moto)},
        incremental=True,
        compare_tensors=4,
        retries=1,
        backoff_s=0.01,
    )
    first = run_scan(config, client=client)
    before = _verdicts(_models(out, first.run_id))
    assert before["tiny-llama-Q4_K_M"][:2] == ("error", False)

    # The reference is uploaded again with one value's lowest bit changed: read again, its family judged again.
    data = bytearray((family / "tiny-llama-F16.gguf").read_bytes())
    data[-2] ^= 1
    moto.put(bucket, "family/tiny-llama-F16.gguf", bytes(data))
    second = run_scan(config, client=client)
    assert second.n_read == 1 and _verdicts(_models(out, second.run_id)) == before

    gets = _object_gets(moto, bucket)
    third = run_scan(config, client=client)
    assert (third.n_read, third.requests, third.bytes_read) == (0, 0, 0)
    assert _object_gets(moto, bucket) == gets  # the store saw no read at all
    assert _verdicts(_models(out, third.run_id)) == before


def test_a_quiet_night_carries_the_models_from_the_driver_s_disk_with_their_problems(
    client: Any, local_collection: Path, tmp_path: Path
) -> None:
    """What the quiet night's driver keeps of the base night's models: their rows, mapped from its disk, and
    the tally of their problems, counted by the run that judged each (no list of ids, no rows in the heap)."""
    out = tmp_path / "out"
    first = run_scan(ScanConfig().replace(roots=(str(local_collection),), out=str(out)), client=client)
    output = Output(str(out))
    stored = output.read("models", [first.run_id])
    urls = sorted(u for m in stored.column("urls").to_pylist() for u in m)
    groups = ModelGroups(urls)
    carried, tally = carried_models(output, first.run_id, groups, [])
    assert is_mapped(carried.column("model_id")) and carried.num_rows == stored.num_rows == len(groups)
    assert carried.drop_columns(["source_run_id"]).equals(stored.drop_columns(["source_run_id"]))
    problems = output.read("problems", [first.run_id], columns=["model_id", "code", "scope"]).to_pylist()
    of_models = [p for p in problems if p["scope"] == "model"]
    assert of_models and tally.codes == Counter(p["code"] for p in of_models)
    # a model one of whose files is read this night is not carried, nor are its problems counted
    model_id = str(of_models[0]["model_id"])
    kept, less = carried_models(output, first.run_id, groups, [groups[model_id][0]])
    assert kept.num_rows == stored.num_rows - 1
    assert less.codes == Counter(p["code"] for p in of_models if p["model_id"] != model_id)
