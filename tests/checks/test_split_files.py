"""A split model's files one at a time and as a set: a later shard alone is refused (``shard.later_shard``,
informational), yet its healthy set loads, judged from fresh audits and from stored rows alike. The
verdicts here were asked of llama.cpp b11312 (tests/conformance/test_oracle_review_classes.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gguf_audit.audit import FileAudit, Status, audit_file
from gguf_audit.checks.shards import judge_shard_set, member_findings, member_verdict
from gguf_audit.findings import LlamaCpp
from gguf_audit.format.shard_names import first_shard_name
from gguf_audit.tables.listed import ListedFile
from gguf_audit.tables.models import summarise_model
from gguf_audit.tables.per_file import AuditedFile, audits_to_tables
from gguf_audit.tables.shard_facts import shard_facts_from_tables
from gguf_audit.testing.builder import KV, build_gguf, kv_i32, kv_u16, tiny_llama_like
from gguf_audit.testing.conformance import CONFORMANCE_AUDIT


def _split(no: int, count: int, n_tensors: int) -> list[KV]:
    return [kv_u16("split.no", no), kv_u16("split.count", count), kv_i32("split.tensors.count", n_tensors)]


def _healthy_set(folder: Path, stem: str = "m", count: int = 3) -> list[FileAudit]:
    kvs, tensors = tiny_llama_like()
    audits = []
    for i in range(count):
        path = folder / f"{stem}-{i + 1:05d}-of-{count:05d}.gguf"
        head = kvs if i == 0 else []
        path.write_bytes(build_gguf([*head, *_split(i, count, len(tensors))], tensors[i::count]))
        audits.append(audit_file(str(path), config=CONFORMANCE_AUDIT))
    return audits


def test_the_later_shards_of_a_healthy_set_are_refused_alone_and_the_set_loads(tmp_path: Path) -> None:
    audits = _healthy_set(tmp_path)
    assert [a.loadable for a in audits] == [True, False, False]
    assert [a.status for a in audits] == [Status.OK] * 3
    assert [[f.code for f in a.findings] for a in audits] == [[], ["shard.later_shard"], ["shard.later_shard"]]
    verdict = judge_shard_set(str(tmp_path / "m"), audits)
    assert (verdict.loadable, verdict.findings) == (True, ())
    # The rows a scan writes judge each shard as a member of its set: nothing refused, no problem; then the model.
    items = [AuditedFile(a, ListedFile(a.url, size=a.size), str(tmp_path / "m")) for a in audits]
    tables = audits_to_tables(items, run_id="r1")
    rows = tables.files.to_pylist()
    assert [(r["loadable"], r["llama_cpp"], r["status"], r["codes"]) for r in rows] == [(True, "loads", "ok", [])] * 3
    assert tables.problems.num_rows == 0
    row = summarise_model(str(tmp_path / "m"), rows, verdict).row
    assert (row["loadable"], row["llama_cpp"], row["status"]) == (True, "loads", "ok")
    # An incremental night judges the set from the stored rows of shards it did not read again.
    stored = shard_facts_from_tables(tables.files, tables.metadata, tables.tensors)
    assert [s.loadable for s in stored] == [True, True, True]
    assert judge_shard_set(str(tmp_path / "m"), stored).loadable is True


def test_a_later_shard_with_a_problem_of_its_own_still_fails_its_set(tmp_path: Path) -> None:
    audits = _healthy_set(tmp_path)
    # Its own refusal counts; only the refusal of being given alone is left to the set.
    later = Path(audits[1].url)
    later.write_bytes(later.read_bytes()[:-100])  # cut short: the set cannot load it
    audits[1] = audit_file(str(later), config=CONFORMANCE_AUDIT)
    assert [f.code for f in member_findings(audits[1].url, audits[1].findings)] == ["data.truncated"]
    assert member_verdict(audits[1]) == (False, LlamaCpp.REFUSES)
    assert member_verdict(audits[2]) == (True, LlamaCpp.LOADS)
    # A file not named as a shard is no member of a set: it keeps the refusal.
    assert [f.code for f in member_findings("renamed.gguf", audits[2].findings)] == ["shard.later_shard"]
    assert judge_shard_set(str(tmp_path / "m"), audits).loadable is False


@pytest.mark.parametrize(
    ("url", "count", "first"),
    [
        ("s3://b/m/llama-Q4_K_M-00003-of-00005.gguf?X-Amz-Signature=s", 5, "llama-Q4_K_M-00001-of-00005.gguf"),
        ("/models/x-00002-of-00002.gguf", 2, "x-00001-of-00002.gguf"),
        ("/models/renamed.gguf", 2, None),
    ],
)
def test_first_shard_name(url: str, count: int, first: str | None) -> None:
    assert first_shard_name(url, count) == first


def test_a_first_shard_named_for_its_count_is_not_a_bad_name(tmp_path: Path) -> None:
    kvs, tensors = tiny_llama_like()
    data = build_gguf([*kvs, *_split(0, 2, len(tensors))], tensors)
    # llama.cpp compares the whole path's end, case and all: a directory before a bare suffix is a prefix
    # (asked of b11312: '/dir/-00001-of-00002.gguf' loads with its second shard beside it).
    names = (("m-00001-of-00002.gguf", False), ("-00001-of-00002.gguf", False), ("M-00001-OF-00002.GGUF", True))
    for name, bad in (*names, ("m.gguf", True)):
        (tmp_path / name).write_bytes(data)
        codes = [f.code for f in audit_file(str(tmp_path / name), config=CONFORMANCE_AUDIT).findings]
        assert ("shard.invalid_file_name" in codes) is bad, name
