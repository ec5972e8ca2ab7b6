"""A night that re-reads only a family's reference compares its unchanged siblings from their stored rows.

The siblings were not read this night: their tensor tables come from the
``files`` and ``tensors`` rows of the night that read them, so the compare
phase reads only their sampled blocks, never a header range; the ``compare``
rows are those of a full night. Rows that cannot stand for a header (lost, or
an output from before a column existed) fall back to the header read.
"""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from deltalake import DeltaTable
from deltalake.transaction import AddAction, RemoveAction
from pipeline_helpers import s3_options

from gguf_audit.compare import open_reference, read_reference_ranges, sample_quantized
from gguf_audit.format.model import Header
from gguf_audit.format.parser import parse_header
from gguf_audit.format.tensor_table import KnownTable
from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.scan import lineage as lineage_module
from gguf_audit.pipelines.scan.reuse import stored_tables
from gguf_audit.pipelines.scan.run import ScanObserver, run_scan
from gguf_audit.pipelines.store.delta import table_uri
from gguf_audit.pipelines.store.output import Output
from gguf_audit.tables.listed import ListedFile
from gguf_audit.tables.schema import SCHEMAS
from gguf_audit.tables.stored_header import STORED_FILE_COLUMNS, STORED_TENSOR_COLUMNS, known_table
from gguf_audit.testing.s3 import MotoS3Server

REFERENCE = "tiny-llama-F16.gguf"
SIBLINGS = ("tiny-llama-Q8_0.gguf", "tiny-llama-Q4_0.gguf")
"""The siblings whose blocks decode (the truncated Q4_K_M is compared too, from what its stored rows say)."""
VARYING = ("source_run_id", "run_id")


def _name(url: object) -> str:
    return str(url).rsplit("/", 1)[-1]


def _files(out: Path, run_id: str) -> dict[str, dict[str, Any]]:
    return {_name(r["url"]): r for r in Output(str(out)).read("files", [run_id]).to_pylist()}


def _compare_rows(out: Path, run_id: str) -> list[dict[str, Any]]:
    """The night's ``compare`` rows without what names the night, in a stable order, URLs as file names."""
    rows = Output(str(out)).read("compare", [run_id]).to_pylist()
    for row in rows:
        for column in VARYING:
            row.pop(column, None)
        row["url"], row["reference_url"], row["model_id"] = _name(row["url"]), _name(row["reference_url"]), None
    return sorted(rows, key=lambda r: (r["url"], r["tensor"]))


def _header(path: Path) -> Header:
    data = path.read_bytes()
    parsed = parse_header(data, len(data))
    assert isinstance(parsed, Header)
    return parsed


def _sibling_cost(config: ScanConfig, quant: Path, reference: Path, *, header: bool) -> tuple[int, int, int]:
    """``(requests, bytes, lowest block offset)`` of comparing the sibling: its sampled blocks alone (its header
    given, as its stored rows give it), or with its header read whole (``header``)."""
    opened = open_reference(str(reference), read_config=config.io.read)
    sample = sample_quantized(
        str(quant),
        opened,
        budget=config.checks.compare_budget,
        read_config=config.io.read,
        table=None if header else KnownTable(_header(quant), imatrix=False),
    )
    lowest = min(d.block.offset for d in sample.decoded)
    return sample.io.requests, sample.io.bytes_read, lowest


def _touch(path: Path) -> None:
    later = time.time() + 10
    os.utime(path, (later, later))


def test_a_reread_reference_compares_its_siblings_from_their_stored_rows(
    client: Any, family: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    config = ScanConfig().replace(roots=(str(family),), out=str(out), incremental=True, compare_tensors=4)
    full = run_scan(config, client=client)
    _touch(family / REFERENCE)
    night = run_scan(config, client=client)
    assert (night.n_read, night.n_reused) == (1, 3)

    # The same comparisons as the full night's, every sibling's.
    rows = _compare_rows(out, night.run_id)
    assert rows == _compare_rows(out, full.run_id)
    assert {r["url"] for r in rows} >= set(SIBLINGS)

    files = _files(out, night.run_id)
    for sibling in SIBLINGS:
        requests, bytes_read, lowest = _sibling_cost(config, family / sibling, family / REFERENCE, header=False)
        # What the scan spent on the sibling is its sampled blocks' reads, no more: no header range.
        assert (files[sibling]["compare_requests"], files[sibling]["compare_bytes"]) == (requests, bytes_read)
        assert lowest >= _header(family / sibling).data_offset
        # The full night read its tensor infos besides (the audit said where), so it cost more.
        before = _files(out, full.run_id)[sibling]
        assert before["compare_requests"] > requests and before["compare_bytes"] > bytes_read


def _range(header: str | None) -> tuple[int, int]:
    assert header is not None and header.startswith("bytes=")
    start, _, end = header.removeprefix("bytes=").partition("-")
    return int(start), int(end) + 1


def test_on_moto_s3_the_siblings_get_only_their_sampled_ranges(
    client: Any, moto: MotoS3Server, family: Path, tmp_path: Path
) -> None:
    bucket = f"siblings-{uuid.uuid4().hex[:12]}"
    moto.make_bucket(bucket)
    for path in sorted(family.iterdir()):
        moto.put(bucket, f"family/{path.name}", path.read_bytes())
    config = ScanConfig().replace(
        roots=(f"s3://{bucket}/family",),
        out=str(tmp_path / "out"),
        storage_options={"s3": s3_options(moto)},
        incremental=True,
        compare_tensors=4,
        retries=1,
        backoff_s=0.01,
    )
    run_scan(config, client=client)
    # The reference uploaded again with one value's lowest bit changed: only it is read.
    data = bytearray((family / REFERENCE).read_bytes())
    data[-2] ^= 1
    moto.put(bucket, f"family/{REFERENCE}", bytes(data))
    seen = len(moto.requests)
    night = run_scan(config, client=client)
    assert (night.n_read, night.n_reused) == (1, 3)
    asked = moto.requests[seen:]

    files = _files(tmp_path / "out", night.run_id)
    for sibling in SIBLINGS:
        gets = [r for r in asked if r.method == "GET" and r.path == f"/{bucket}/family/{sibling}"]
        ranges = [_range(r.range) for r in gets]
        # Every GET of the sibling is a sampled range past its header, and the files row counts them all.
        assert ranges and min(start for start, _ in ranges) >= _header(family / sibling).data_offset
        assert files[sibling]["compare_requests"] == len(ranges)
        assert files[sibling]["compare_bytes"] == sum(end - start for start, end in ranges)

    # A full night over the same bytes makes the same comparisons.
    (family / REFERENCE).write_bytes(bytes(data))
    fresh = run_scan(config.replace(out=str(tmp_path / "fresh"), incremental=False), client=client)
    assert _compare_rows(tmp_path / "out", night.run_id) == _compare_rows(tmp_path / "fresh", fresh.run_id)


def _rewrite(out: Path, table: str, change: Callable[[pa.Table], pa.Table]) -> None:
    """Every data file of ``table`` replaced, in one commit, by a file of its rows as ``change`` leaves them
    (what another writer, or an older gguf-audit, would have left)."""
    dt = DeltaTable(table_uri(str(out), table))
    root = Path(table_uri(str(out), table))
    now = int(time.time() * 1000)
    actions: list[AddAction | RemoveAction] = []
    for add in pa.table(dt.get_add_actions(flatten=True)).to_pylist():
        path, partition = str(add["path"]), {"run_id": str(add["partition.run_id"])}
        new = path.replace(".parquet", "-rewritten.parquet")
        rows = change(pq.read_table(root / path))
        pq.write_table(rows, root / new)
        size = (root / new).stat().st_size
        actions.append(RemoveAction(path, True, now, int(add["size_bytes"]), partition))
        actions.append(AddAction(new, size, partition, now, True, f'{{"numRecords":{rows.num_rows}}}'))
    dt.create_write_transaction(actions, mode="append", schema=SCHEMAS[table], partition_by=["run_id"])


def test_rows_that_cannot_stand_for_a_header_fall_back_to_reading_it(client: Any, family: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    config = ScanConfig().replace(roots=(str(family),), out=str(out), incremental=True, compare_tensors=4)
    full = run_scan(config, client=client)
    lost, old = ((family / s).as_uri() for s in SIBLINGS)
    # One sibling's tensors rows are gone; the other's files row reads as an output's from before
    # made_with_imatrix existed (null): neither can stand for its header.
    _rewrite(out, "tensors", lambda rows: rows.filter(pc.not_equal(rows.column("url"), lost)))

    def unknown_imatrix(rows: pa.Table) -> pa.Table:
        i = rows.schema.get_field_index("made_with_imatrix")
        column = pc.if_else(pc.equal(rows.column("url"), old), pa.scalar(None, pa.bool_()), rows.column(i))
        return rows.set_column(i, rows.schema.field(i), column)

    _rewrite(out, "files", unknown_imatrix)
    imatrix = Output(str(out)).read("files", [full.run_id], columns=["url", "made_with_imatrix"]).to_pylist()
    assert [r["url"] for r in imatrix if r["made_with_imatrix"] is None] == [old]
    _touch(family / REFERENCE)
    night = run_scan(config, client=client)
    assert (night.n_read, night.n_reused) == (1, 3)

    # Still the full night's comparisons; both siblings had their headers read whole to make them.
    assert _compare_rows(out, night.run_id) == _compare_rows(out, full.run_id)
    files = _files(out, night.run_id)
    for sibling in SIBLINGS:
        requests, bytes_read, _ = _sibling_cost(config, family / sibling, family / REFERENCE, header=True)
        assert (files[sibling]["compare_requests"], files[sibling]["compare_bytes"]) == (requests, bytes_read)
        assert bytes_read > _sibling_cost(config, family / sibling, family / REFERENCE, header=False)[1]


def test_stored_tables_serve_only_files_the_listing_still_shows_unchanged(
    client: Any, family: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    night = run_scan(ScanConfig().replace(roots=(str(family),), out=str(out), incremental=True), client=client)
    output = Output(str(out))
    rows = {str(r["url"]): r for r in output.read("files", [night.run_id]).to_pylist()}
    listed = {u: ListedFile(u, r["size"], r["etag"], r["version_id"], r["mtime"], r["sha256"]) for u, r in rows.items()}
    packed = stored_tables(output, night.run_id, listed)
    assert set(packed) == set(listed)
    for url, data in packed.items():
        table = KnownTable.unpacked(data)
        parsed = _header(Path(url.removeprefix("file://")))
        assert [(t.name, t.shape, t.type_id, t.data_offset, t.n_bytes) for t in table.header.tensors] == [
            (t.name, t.shape, t.type_id, t.data_offset, t.n_bytes) for t in parsed.tensors
        ]
        assert (table.header.byte_order, table.header.data_offset, table.file_size) == (
            parsed.byte_order,
            parsed.data_offset,
            rows[url]["size"],
        )
    # A file listed with another size or modification time than its row: its stored table is not served.
    changed = (family / SIBLINGS[0]).as_uri()
    was = listed[changed]
    for now in (
        ListedFile(changed, was.size + 1 if was.size is not None else 1, was.etag, was.version_id, was.mtime, None),
        ListedFile(changed, was.size, was.etag, was.version_id, None, "0" * 64),
    ):
        assert changed not in stored_tables(output, night.run_id, {**listed, changed: now})


def test_a_stored_table_refuses_rows_that_are_not_the_header_s(client: Any, family: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    night = run_scan(ScanConfig().replace(roots=(str(family),), out=str(out)), client=client)
    output = Output(str(out))
    url = (family / SIBLINGS[0]).as_uri()
    [row] = output.read("files", [night.run_id], urls=[url]).to_pylist()
    tensors = output.read("tensors", [night.run_id], urls=[url], columns=list(STORED_TENSOR_COLUMNS))
    assert known_table(row, tensors, row["size"]) is not None

    def with_column(name: str, values: list[Any]) -> pa.Table:
        i = tensors.schema.get_field_index(name)
        return tensors.set_column(i, tensors.schema.field(i), pa.array(values, tensors.schema.field(i).type))

    names = tensors.column("name").to_pylist()
    offsets = tensors.column("data_offset").to_pylist()
    refused = {
        "a column an older output lacks": (
            {**row, "made_with_imatrix": None},
            tensors,
        ),
        "an unknown byte order": ({**row, "byte_order": "middle"}, tensors),
        "no rows": (row, tensors.slice(0, 0)),
        "a skipped index": (row, tensors.slice(1)),
        "an escaped name": (row, with_column("name", ["bad\\udcff", *names[1:]])),
        "a cut name": (row, with_column("name", ["x" * 300, *names[1:]])),
        "a data offset off the file's": (row, with_column("data_offset", [offsets[0] + 32, *offsets[1:]])),
    }
    for what, (file_row, rows) in refused.items():
        assert known_table(file_row, rows, row["size"]) is None, what
    assert all(column in row for column in STORED_FILE_COLUMNS)


def test_an_unchanged_reference_is_read_for_its_windows_alone_and_two_nights_rows_are_read_together(
    client: Any, family: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    config = ScanConfig().replace(roots=(str(family),), out=str(out), incremental=True, compare_tensors=4)
    full = run_scan(config, client=client)
    sibling = SIBLINGS[0]
    _touch(family / sibling)
    night = run_scan(config, client=client)
    assert (night.n_read, night.n_reused) == (1, 3)

    rows = _compare_rows(out, night.run_id)
    assert rows and rows == [r for r in _compare_rows(out, full.run_id) if r["url"] == sibling]
    # The reference was not read this night: its table came from its stored rows, only the windows from it.
    opened = open_reference(
        str(family / REFERENCE), read_config=config.io.read, table=KnownTable(_header(family / REFERENCE), False)
    )
    sample = sample_quantized(
        str(family / sibling),
        opened,
        budget=config.checks.compare_budget,
        read_config=config.io.read,
        table=KnownTable(_header(family / sibling), imatrix=False),
    )
    read_reference_ranges(opened, [sample])
    files = _files(out, night.run_id)
    assert (files[REFERENCE]["compare_requests"], files[REFERENCE]["compare_bytes"]) == (
        opened.source.stats.requests,
        opened.source.stats.bytes_read,
    )
    # Reading its header again would have cost more.
    whole = open_reference(str(family / REFERENCE), read_config=config.io.read)
    read_reference_ranges(whole, [sample])
    assert files[REFERENCE]["compare_bytes"] < whole.source.stats.bytes_read

    # Then only the reference changes: the siblings' rows are in two nights' partitions, read together.
    _touch(family / REFERENCE)
    third = run_scan(config, client=client)
    files = _files(out, third.run_id)
    assert {files[s]["source_run_id"] for s in SIBLINGS} == {full.run_id, night.run_id}
    for name in SIBLINGS:
        requests, bytes_read, _ = _sibling_cost(config, family / name, family / REFERENCE, header=False)
        assert (files[name]["compare_requests"], files[name]["compare_bytes"]) == (requests, bytes_read)
    assert _compare_rows(out, third.run_id) == _compare_rows(out, full.run_id)


def _stores_string_view(out: Path, table: str) -> bool:
    dt = DeltaTable(table_uri(str(out), table))
    return any(
        pa.types.is_string_view(pq.read_schema(uri.removeprefix("file://")).field("url").type) for uri in dt.file_uris()
    )


def _lineage(out: Path, run_id: str) -> list[dict[str, str]]:
    """The night's models rows as lineage judged them, paths relative to the output's own folder."""
    columns = ["model_id", "status", "loadable", "codes", "family_key", "family_anchor", "reference_url"]
    rows = Output(str(out)).read("models", [run_id], columns=columns).sort_by("model_id").to_pylist()
    return [{k: str(v).replace(str(out.parent), "") for k, v in row.items()} for row in rows]


def test_rows_rewritten_by_deltalake_s_own_update_serve_the_night_as_before(
    client: Any, family: Path, tmp_path: Path, caplog: Any
) -> None:
    """deltalake's UPDATE (and DELETE of some rows) rewrites data files with ``string_view`` columns, which
    pyarrow cannot compare with a filter's strings: the night reads them through the same paths and gets
    what an untouched output gives (lineage, the siblings' stored tables, the same requests and bytes)."""
    outs = {name: tmp_path / name for name in ("untouched", "updated")}
    configs = {
        name: ScanConfig().replace(roots=(str(family),), out=str(out), incremental=True, compare_tensors=4)
        for name, out in outs.items()
    }
    for config in configs.values():
        run_scan(config, client=client)
    q8 = (family / SIBLINGS[0]).as_uri()
    for table in ("files", "tensors"):
        DeltaTable(table_uri(str(outs["updated"]), table)).update(updates={"url": "url"}, predicate=f"url = '{q8}'")
        assert _stores_string_view(outs["updated"], table)
    stored = Output(str(outs["updated"])).read("tensors", None, urls=[q8], columns=["url", "index"])
    assert stored.num_rows == len(_header(family / SIBLINGS[0]).tensors)
    assert set(stored.column("url").to_pylist()) == {q8}

    _touch(family / REFERENCE)
    nights = {name: run_scan(config, client=client) for name, config in configs.items()}
    assert "failed" not in caplog.text
    untouched, updated = nights["untouched"], nights["updated"]
    assert (updated.requests, updated.bytes_read) == (untouched.requests, untouched.bytes_read)
    assert _compare_rows(outs["updated"], updated.run_id) == _compare_rows(outs["untouched"], untouched.run_id)
    assert _lineage(outs["updated"], updated.run_id) == _lineage(outs["untouched"], untouched.run_id)


def test_the_compare_phase_makes_and_holds_a_window_of_its_tasks(
    client: Any, family: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pairs, their tensor tables and their tasks are made as tasks are submitted, a window in flight: with a
    pair a task and two in flight, the driver never has more than two tasks out, and the night's ``compare``
    rows and compare costs are a night's with the defaults (all the tasks made at once, before)."""
    for i in range(10):  # twelve quantized files of one family, all against the F16
        shutil.copy(family / "tiny-llama-Q8_0.gguf", family / f"tiny-llama-copy{i:02d}-Q8_0.gguf")
    config = ScanConfig().replace(roots=(str(family),), compare_tensors=2)
    whole = run_scan(config.replace(out=str(tmp_path / "whole")), client=client)

    made: list[str] = []
    taken: list[int] = []
    in_flight: list[int] = []
    stream = lineage_module.compare_batches

    def counted(*args: Any, **kwargs: Any) -> Iterator[Any]:
        for batch in stream(*args, **kwargs):
            made.append(batch.batch_id)
            yield batch

    class Watch(ScanObserver):
        def comparing(self, requests: int, bytes_read: int) -> None:
            taken.append(requests)
            in_flight.append(len(made) - len(taken))

    monkeypatch.setattr(lineage_module, "PAIRS_PER_TASK", 1)
    monkeypatch.setattr(lineage_module, "COMPARE_TASKS_IN_FLIGHT", 2)
    monkeypatch.setattr(lineage_module, "TASKS_PER_LOOKUP", 3)
    monkeypatch.setattr(lineage_module, "compare_batches", counted)
    windowed = run_scan(config.replace(out=str(tmp_path / "windowed")), client=client, observer=Watch())

    assert len(made) == len(taken) == 13  # a task for each quantized file (the cut one too)
    assert max(in_flight) <= 2 and in_flight[-1] == 0
    assert _compare_rows(tmp_path / "windowed", windowed.run_id) == _compare_rows(tmp_path / "whole", whole.run_id)
    costs = {
        name: {n: (r["compare_requests"], r["compare_bytes"]) for n, r in _files(tmp_path / name, night.run_id).items()}
        for name, night in (("whole", whole), ("windowed", windowed))
    }
    assert costs["windowed"]["tiny-llama-copy09-Q8_0.gguf"][0]  # the last copy was compared, its cost recorded
    # each file's own cost is the same; the reference is read once a task, so thirteen times now
    reference = costs["windowed"].pop(REFERENCE), costs["whole"].pop(REFERENCE)
    assert costs["windowed"] == costs["whole"]
    assert reference[0][0] > reference[1][0]
