"""The header benchmark's peers read the same thing as our parser.

Generates small-vocabulary versions of the benchmark's headers (both
tokenizer kinds) with ``benchmarks/headers.py`` and checks that
``parse_header``, gguf-py's ``GGUFReader`` and ``benchmarks/naive_reader.py``
agree on keys, values, array lengths and the tensor table.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import gguf
import numpy as np
import pytest

from gguf_audit.checks.structure import check_structure
from gguf_audit.format.model import Header, StringArray, ValueType
from gguf_audit.format.parser import parse_header

pytestmark = pytest.mark.slow  # each benchmark run small in a subprocess: outside the fast loop

BENCHMARKS = Path(__file__).resolve().parent.parent / "benchmarks"


def _load(name: str) -> ModuleType:
    """Import a module of benchmarks/ (not a package) by its path."""
    spec = importlib.util.spec_from_file_location(f"_bench_{name}", BENCHMARKS / f"{name}.py")
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load benchmarks/{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


headers = _load("headers")
naive_reader = _load("naive_reader")


@pytest.mark.parametrize("label", ["32k", "152k", "256k"])
def test_generated_header_reads_the_same_in_all_three_readers(tmp_path: Path, label: str) -> None:
    g = headers.write_model(headers.SPECS[label], tmp_path, vocab_size=2000)
    assert g.file_size > 10**9  # the real tensor table: a GB-sized file...
    assert g.on_disk_bytes < 4 * g.data_offset + 65536  # ...that is a sparse hole on disk
    with g.path.open("rb") as f:
        buf = f.read(g.data_offset)

    ours = parse_header(buf, g.file_size)
    assert isinstance(ours, Header)
    assert ours.header_bytes == g.header_bytes
    assert ours.data_offset == g.data_offset
    assert list(check_structure(ours, g.file_size)) == []

    naive = naive_reader.read_naive(buf)
    reader = gguf.GGUFReader(g.path)
    fields = {k: v for k, v in reader.fields.items() if not k.startswith("GGUF.")}

    keys = [kv.key for kv in ours.kvs]
    assert len(keys) == g.n_kv
    assert keys == list(naive.kvs) == list(fields)
    assert naive.header_bytes == g.header_bytes
    assert reader.data_offset == g.data_offset

    for kv in ours.kvs:
        vtype, value, item_type = naive.kvs[kv.key]
        field = fields[kv.key]
        assert vtype == kv.type == field.types[0], kv.key
        if kv.type is ValueType.ARRAY:
            assert item_type == kv.item_type == field.types[1], kv.key
            assert kv.length == len(value) == len(field.data), kv.key
            if isinstance(kv.value, StringArray):
                assert kv.value.to_list() == value == field.contents(), kv.key
            else:
                assert np.array_equal(np.asarray(kv.value), np.asarray(value, dtype=kv.value.dtype)), kv.key
        elif kv.type is ValueType.FLOAT32:
            assert kv.value == value == pytest.approx(float(field.contents())), kv.key
        else:
            assert kv.value == value == field.contents(), kv.key

    tokens = ours.metadata["tokenizer.ggml.tokens"]
    assert tokens.length == 2000
    if g.spec.tokenizer == "gpt2":
        assert "tokenizer.ggml.merges" in ours.metadata and "tokenizer.ggml.scores" not in ours.metadata
    else:
        assert "tokenizer.ggml.scores" in ours.metadata and "tokenizer.ggml.merges" not in ours.metadata

    assert len(ours.tensors) == len(naive.tensors) == len(reader.tensors) == g.n_tensors
    for t, (name, dims, ggml_type, offset), rt in zip(ours.tensors, naive.tensors, reader.tensors, strict=True):
        assert t.name == name == rt.name
        assert t.shape == dims == tuple(int(d) for d in rt.shape)
        assert t.type_id == ggml_type == int(rt.tensor_type)
        assert t.offset == offset
        assert t.data_offset == rt.data_offset
        assert t.n_bytes == rt.n_bytes
    assert ours.min_file_size == g.file_size


def test_the_table_layouts_benchmark_runs_small(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """bench_tables.py on 20 files: the nights layout writes no detail rows on a quiet night, fewer on churn."""
    import json

    monkeypatch.syspath_prepend(str(BENCHMARKS))  # it imports headers.py beside it
    bench = _load("bench_tables")
    report = tmp_path / "r.json"
    assert bench.main(["--files", "20", "--samples", "16", "--json", str(report)]) == 0
    results = json.loads(report.read_text())["results"]
    nights = {r["night"]: r for r in results["nights"]}
    current = {r["night"]: r for r in results["current"]}
    assert nights["quiet"]["rows_written"] == {"files": 20, "models": 20, "tensors": 0, "metadata": 0,
                                               "problems": 0, "samples": 0}  # fmt: skip
    churn_files = nights["churn"]["rows_written"]["files"]  # 1 new, 1 rewritten, 1 truncated, 1 removed
    assert churn_files == 20
    assert nights["churn"]["rows_written"]["tensors"] == 3 * 291
    assert current["churn"]["rows_written"]["tensors"] > nights["churn"]["rows_written"]["tensors"]
    assert current["quiet"]["bytes_added"] == 0 < nights["quiet"]["bytes_added"] < nights["full"]["bytes_added"]


def test_the_fuzz_benchmark_runs_small(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """bench_fuzz.py on 40 mutants: nothing escapes the audit or a renderer, and it says so."""
    monkeypatch.syspath_prepend(str(BENCHMARKS))
    bench = _load("bench_fuzz")
    assert bench.main(["--mutants", "40", "--seed", "3"]) == 0
    out = capsys.readouterr().out
    assert "uncaught exceptions: 0" in out and "internal.* findings: 0" in out
    assert "slowest mutants against their seed (once in the stream; re-measured" in out and "peak RSS:" in out


def test_the_lineage_benchmark_runs_small(capsys: pytest.CaptureFixture[str]) -> None:
    """bench_lineage.py at two small family sizes: every member gets its columns, every quantized one a pair."""
    bench = _load("bench_lineage")
    assert bench.main(["--sizes", "50,500", "--objects-up-to", "50"]) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert [(r[0], r[3], r[4] != "-") for r in rows] == [("50", "49", True), ("500", "499", False)]
    lineage, made, _ = bench.judge_columns(bench.family_rows(5))
    _, cells = bench.judge(bench.family_models(5))
    ids = sorted(cells)
    assert made == 5 and lineage.cells.of(ids) == [cells[m] for m in ids]  # the path it replaced, same cells
    anchor = min(m for m in cells if not m.endswith("000000"))  # the first quantized model
    assert {c.family_anchor for c in cells.values()} == {anchor}
    assert [m for m, c in cells.items() if c.findings] == []  # a family with its reference has no finding
