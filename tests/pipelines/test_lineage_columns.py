"""Lineage from columns (:mod:`gguf_audit.pipelines.scan.families`) gives the answers of lineage from one object
per model (:mod:`gguf_audit.checks.lineage`), and keeps two numbers a model, not an object."""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from pipeline_helpers import file_row

from gguf_audit.checks.lineage import (
    ModelLineage,
    Pair,
    carried_lineage,
    families,
    family_key,
    judge_family,
    model_lineage,
)
from gguf_audit.format.shard_names import group_models
from gguf_audit.pipelines.config import ScanConfig
from gguf_audit.pipelines.scan import families as families_module
from gguf_audit.pipelines.scan import lineage as lineage_module
from gguf_audit.pipelines.scan.collect import Collector
from gguf_audit.pipelines.scan.groups import ModelGroups
from gguf_audit.pipelines.scan.lineage import lineage_of, safetensors_dirs
from gguf_audit.pipelines.work.tally import facts_of
from gguf_audit.tables.lineage import ModelLineageCells, model_lineage_cells
from gguf_audit.tables.schema import rows_to_table

STORED = ("model_id", "architecture", "file_type_name", *ModelLineageCells().columns())
TYPES = ("Q4_0", "Q8_0", "IQ2_XXS", None, "F16", "BF16", "F32")


def _old_lineage(
    groups: Mapping[str, Sequence[str]],
    facts: Sequence[dict[str, Any]],
    carried: Sequence[dict[str, Any]],
    read: set[str],
    storage_options: Mapping[str, Any],
) -> tuple[dict[str, ModelLineageCells], list[Pair], set[str]]:
    """Lineage as it was computed before, one ``ModelLineage`` per model: cells, pairs, models judged again."""
    rows_of: dict[str, list[dict[str, Any]]] = {}
    members: dict[str, ModelLineage] = {}
    for row in facts:
        urls = groups.get(row["model_id"], ())
        if len(urls) > 1:
            rows_of.setdefault(row["model_id"], []).append(row)
        else:
            members[row["model_id"]] = model_lineage(row["model_id"], [row])
    members.update((m, model_lineage(m, rows)) for m, rows in rows_of.items())
    stored = {str(r["model_id"]): r for r in carried}
    models = [
        members[m] if m in members else model_lineage(m, []) if m not in stored else carried_lineage(m, u, stored[m])
        for m, u in groups.items()
    ]
    grouped = families(models)
    known: set[str] = set()
    to_list: set[str] = set()
    for f in grouped:
        if f.quantized and not f.full:
            directories = {m.directory for m in f.models}
            if all(m.model_id in stored for m in f.models):
                if any(stored[m.model_id].get("family_source") == "safetensors" for m in f.models):
                    known.update(directories)
            else:
                to_list.update(directories)
    dirs = known | safetensors_dirs(to_list, storage_options)
    verdicts = [judge_family(f, dirs) for f in grouped]
    cells = model_lineage_cells(verdicts)
    rejudge = set()
    for model_id, row in stored.items():
        now = cells.get(model_id, ModelLineageCells())
        if not now.same_columns(row) or (now.reference_url is not None and now.reference_url in read):
            rejudge.add(model_id)
    carried_ids = set(stored) - rejudge
    pairs = [p for v in verdicts for p in v.pairs if p.model_id not in carried_ids]
    return cells, pairs, rejudge


def _facts_tables(rows: Sequence[dict[str, Any]], size: int) -> list[pa.Table]:
    full = [{**file_row(str(r["url"]), "r1"), **r} for r in rows]
    return [facts_of(rows_to_table("files", full[i : i + size])) for i in range(0, len(full), size)]


def _carried_table(rows: Iterable[dict[str, Any]]) -> pa.Table:
    types = {"full_precision": pa.bool_()}
    listed = list(rows)
    return pa.table({c: pa.array([r.get(c) for r in listed], types.get(c, pa.string())) for c in STORED})


def _collection(seed: int, tmp: Path) -> tuple[list[str], list[dict[str, Any]], list[dict[str, Any]], set[str]]:
    """A random collection: URLs, facts rows of the models read, stored rows of the carried ones, read URLs."""
    rng = random.Random(seed)
    (tmp / "d1").mkdir(exist_ok=True)
    (tmp / "d1" / "model.safetensors").write_bytes(b"{}")
    urls: list[str] = []
    digests = [f"{rng.getrandbits(100):032x}" for _ in range(4)]
    for i in range(rng.randrange(20, 80)):
        folder = f"{tmp}/d{rng.randrange(4)}"
        if rng.random() < 0.15:
            n = rng.randrange(2, 4)
            urls += [f"{folder}/s{i}-{k:05d}-of-{n:05d}.gguf" for k in range(1, n + 1) if rng.random() < 0.9]
        else:
            urls.append(f"{folder}/m{i}-{rng.choice(['Q4_0', 'F16', 'x'])}.gguf")
    rng.shuffle(urls)
    groups = ModelGroups(urls)
    facts: list[dict[str, Any]] = []
    carried: list[dict[str, Any]] = []
    for model_id, members in groups.items():
        digest = rng.choice(digests)
        kind = rng.choice(TYPES)
        full = kind in ("F16", "BF16", "F32") if rng.random() < 0.9 else None
        if rng.random() < 0.3:  # carried, with stored columns right or stale
            carried.append(
                {
                    "model_id": model_id,
                    "architecture": "llama",
                    "file_type_name": kind,
                    "family_key": rng.choice([f"{1:032x}", family_key("llama", "name:Tiny", digest), None]),
                    "full_precision": full,
                    "family_anchor": rng.choice([model_id, None]),
                    "family_source": rng.choice(["gguf", "safetensors", None]),
                    "reference_url": rng.choice([None, members[0]]),
                }
            )
            continue
        for k, url in enumerate(members):
            if len(members) > 1 and rng.random() < 0.2:
                continue  # a shard without facts: lineage counts the others
            facts.append(
                {
                    "url": url,
                    "model_id": model_id,
                    "architecture": rng.choice(["llama", "llama", None]),
                    "name": rng.choice(["Tiny", None]),
                    "file_type_name": kind,
                    "shard_index": k + 1 if len(members) > 1 else None,
                    "tensor_set_digest": None if rng.random() < 0.05 else digest,
                    "full_precision": full,
                }
            )
    rng.shuffle(facts)
    read = {u for u in urls if rng.random() < 0.3}
    cells, _, _ = _old_lineage(groups, facts, carried, set(), {})
    for row in carried:  # most stored rows say what lineage says now: those models stay carried
        if rng.random() < 0.7:
            row.update((cells.get(row["model_id"]) or ModelLineageCells()).columns())
    return urls, facts, carried, read


@pytest.mark.parametrize("seed", range(12))
def test_lineage_from_columns_equals_lineage_from_one_object_per_model(seed: int, tmp_path: Path) -> None:
    urls, facts, carried, read = _collection(seed, tmp_path)
    groups = ModelGroups(urls)
    collector = Collector(urls)
    collector.facts.extend(_facts_tables(facts, 7))
    config = ScanConfig()

    lineage = lineage_of(config, groups, collector, _carried_table(carried), read)

    cells, pairs, rejudge = _old_lineage(group_models(urls), facts, carried, read, {})
    assert lineage.cells.of(list(groups)) == [cells.get(m) for m in groups]
    assert lineage.pairs == pairs
    assert lineage.rejudge == rejudge
    assert any(c is not None for c in cells.values())  # the collection has families to compare


def test_a_family_of_thousands_keeps_two_numbers_a_model_and_one_row(tmp_path: Path) -> None:
    n = 5_000
    urls = [f"file:///c/d{i // 1000}/m-{i:05d}.gguf" for i in range(n)]
    groups = ModelGroups(urls)
    row = {"architecture": "llama", "name": "Tiny", "tensor_set_digest": f"{7:032x}", "full_precision": False}
    facts = [{**row, "url": u, "model_id": groups.model_of(u), "file_type_name": "Q4_K_M"} for u in urls]
    facts[1234] = {**facts[1234], "full_precision": True, "file_type_name": "F16"}
    collector = Collector(urls)
    collector.facts.extend(_facts_tables(facts, 1024))

    lineage = lineage_of(ScanConfig(), groups, collector, _carried_table([]), set())

    kept = lineage.cells
    assert kept.families.num_rows == 1  # the family is a row, its members two arrays of numbers
    assert kept.family_of.dtype == np.int32 and kept.full.dtype == np.int8
    assert len(kept.family_of) == len(kept.full) == n and set(kept.family_of.tolist()) == {0}
    assert kept.nbytes < 8 * n + 4096  # 5 bytes a model and the family's row: no column of ids, keys or types
    assert len(lineage.pairs) == n - 1 and {p.reference_url for p in lineage.pairs} == {urls[1234]}
    cells, pairs, _ = _old_lineage(group_models(urls), facts, [], set(), {})
    assert lineage.pairs == pairs
    chunk = list(groups)[2000:2048]
    assert kept.of(chunk) == [cells[m] for m in chunk]


@pytest.mark.parametrize("seed", range(4))
def test_carried_models_read_a_slice_at_a_time_judge_as_all_at_once(
    seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Lineage reads the carried rows :data:`CARRIED_ROWS` at a time (a quiet night carries every model): slices
    of a few rows give the cells, pairs and models judged again that one slice of them gives."""
    urls, facts, carried, read = _collection(seed, tmp_path)
    assert len(carried) > 6  # several slices of 3

    def judged() -> tuple[list[ModelLineageCells | None], list[Any], set[str]]:
        groups = ModelGroups(urls)
        collector = Collector(urls)
        collector.facts.extend(_facts_tables(facts, 7))
        lineage = lineage_of(ScanConfig(), groups, collector, _carried_table(carried), read)
        return lineage.cells.of(list(groups)), lineage.pairs, lineage.rejudge

    whole = judged()
    for module in (families_module, lineage_module):
        monkeypatch.setattr(module, "CARRIED_ROWS", 3)
    assert judged() == whole
    assert whole[2]  # some carried models are judged again: the slices decide it too


def test_members_keep_each_model_s_last_row_in_the_order_rows_came() -> None:
    """A model's facts row wins over its carried row and a later facts row over an earlier one, as a dict of
    models keeps them; the rows kept stay in the order they came."""
    urls = [f"file:///c/m{i}/m{i}.gguf" for i in range(5)]
    view = ModelGroups(urls)
    ids = list(view)  # a single file's model id: its URL without the suffix

    def lineage(i: int, file_type: str) -> ModelLineage:
        row = {"url": urls[i], "architecture": "llama", "name": "Tiny", "tensor_set_digest": f"{7:032x}"}
        return model_lineage(ids[i], [{**row, "file_type_name": file_type, "full_precision": False}])

    members = families_module.Members(view)
    members.add_carried(
        _carried_table({"model_id": ids[i], "architecture": "llama", "file_type_name": "Q8_0"} for i in (1, 3))
    )
    for i, file_type in ((4, "Q4_0"), (3, "Q4_K_M"), (4, "IQ2_XXS"), (0, "Q5_0")):
        members.add_model(i, lineage(i, file_type))
    members.done()

    kept = members.table
    assert kept.column("pos").to_pylist() == [1, 3, 4, 0]
    assert kept.column("file_type_name").to_pylist() == ["Q8_0", "Q4_K_M", "IQ2_XXS", "Q5_0"]

    alone = families_module.Members(view)  # a row a model: the table as it came
    for i in (2, 0):
        alone.add_model(i, lineage(i, "Q4_0"))
    alone.done()
    assert alone.table.column("pos").to_pylist() == [2, 0]
