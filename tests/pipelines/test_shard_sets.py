"""The checks across a shard set (pure); the shard-name tests are in tests/format/test_shard_names.py."""

from __future__ import annotations

import fsspec

from gguf_audit.audit import AuditConfig, FileAudit, audit_file
from gguf_audit.checks.shards import ShardFacts, check_shard_set, judge_shard_set, shard_facts
from gguf_audit.findings import CODES
from gguf_audit.format.model import ValueType
from gguf_audit.testing.builder import KV, Tensor, build_gguf, kv_i32, kv_str, kv_u16, kv_u32


def _facts(index: int, count: int = 3, **kw: object) -> ShardFacts:
    defaults: dict[str, object] = {
        "readable": True,
        "loadable": True,
        "version": 3,
        "byte_order": "little",
        "split_no": index - 1,
        "split_no_type": "uint16",
        "split_count": count,
        "split_tensors_count": 3 * count,
        "n_tensors": 3,
        "tensor_names": tuple(f"blk.{index}.t{i}" for i in range(3)),
    }
    defaults.update(kw)
    return ShardFacts(f"s3://b/m-{index:05d}-of-{count:05d}.gguf", index, count, **defaults)  # type: ignore[arg-type]


def _codes(shards: list[ShardFacts]) -> list[str]:
    return sorted(f.code for f in check_shard_set(shards))


def test_a_complete_set_has_no_findings() -> None:
    verdict = judge_shard_set("s3://b/m", [_facts(3), _facts(1), _facts(2)])
    assert verdict.findings == ()
    assert (verdict.count, verdict.present, verdict.missing, verdict.complete, verdict.loadable) == (
        3,
        (1, 2, 3),
        (),
        True,
        True,
    )


def test_missing_shards_are_named() -> None:
    verdict = judge_shard_set("s3://b/m", [_facts(1, 5, split_tensors_count=15), _facts(4, 5, split_tensors_count=15)])
    [f] = verdict.findings
    assert f.code == "shard.missing"
    assert f.message == "3 of 5 shards missing: 00002, 00003, 00005 of 00005"
    assert verdict.missing == (2, 3, 5) and verdict.loadable is False


def test_bad_index() -> None:
    findings = list(check_shard_set([_facts(1), _facts(2, split_no=0), _facts(3)]))
    assert [f.code for f in findings] == ["shard.bad_index"]
    assert findings[0].message == "m-00002-of-00003.gguf has split.no 0, but its name numbers it 00002 (split.no 1)"
    assert _codes([_facts(1), _facts(2, split_no=None, split_no_type=None), _facts(3)]) == ["shard.bad_index"]
    assert _codes([_facts(1), _facts(2, split_no_type="int32"), _facts(3)]) == ["shard.bad_index"]
    # A name that numbers a shard 0 (or past the count) is a bad index too.
    bad_name = ShardFacts("s3://b/m-00000-of-00002.gguf", 0, 2, readable=False, loadable=None)
    assert "shard.bad_index" in _codes([_facts(1, 2), _facts(2, 2), bad_name])


def test_count_mismatch() -> None:
    assert _codes([_facts(1, split_count=4), _facts(2), _facts(3)]) == ["shard.count_mismatch"]
    assert _codes([_facts(1, split_count=None), _facts(2), _facts(3)]) == ["shard.count_mismatch"]
    # The names disagree: one file says of-00004. The set follows the majority and misses nothing.
    odd = _facts(2, 4, split_count=3, split_tensors_count=9)
    findings = list(check_shard_set([_facts(1), _facts(2), _facts(3), odd]))
    assert [f.code for f in findings] == ["shard.count_mismatch"]
    assert "named as one of 00004 shards, but the set has 00003" in findings[0].message


def test_tensor_count_mismatch() -> None:
    assert _codes(
        [_facts(1, split_tensors_count=10), _facts(2, split_tensors_count=10), _facts(3, split_tensors_count=10)]
    ) == ["shard.tensor_count_mismatch"]
    assert _codes([_facts(1), _facts(2, split_tensors_count=8), _facts(3)]) == ["shard.tensor_count_mismatch"]
    # Not reported when shards are missing: the count cannot add up then, and shard.missing says why.
    assert _codes([_facts(1), _facts(3)]) == ["shard.missing"]


def test_duplicate_tensors() -> None:
    shards = [_facts(1), _facts(2, tensor_names=("blk.1.t0", "x", "y")), _facts(3)]
    [f] = check_shard_set(shards)
    assert (f.code, f.tensor) == ("shard.duplicate_tensor", "blk.1.t0")
    assert f.message == "tensor 'blk.1.t0' is in both m-00001-of-00003.gguf and m-00002-of-00003.gguf"
    many = [_facts(1, 2, n_tensors=30, split_tensors_count=60, tensor_names=tuple(f"t{i}" for i in range(30)))]
    many.append(_facts(2, 2, n_tensors=30, split_tensors_count=60, tensor_names=tuple(f"t{i}" for i in range(30))))
    findings = list(check_shard_set(many))
    assert len(findings) == 11 and findings[-1].message == "20 more tensor names are duplicated across shards"


def test_inconsistent() -> None:
    shards = [
        _facts(1, declared=(("general.alignment", "64"), ("general.architecture", '"llama"'))),
        _facts(2, version=2, declared=(("general.architecture", '"qwen2"'),)),
        _facts(3),  # declaring nothing is normal for later shards
    ]
    findings = list(check_shard_set(shards))
    assert [f.code for f in findings] == ["shard.inconsistent", "shard.inconsistent"]
    assert findings[0].message.startswith("the shards disagree on version: 3 in m-00001-of-00003.gguf")
    assert "general.architecture" in findings[1].message
    verdict = judge_shard_set("s3://b/m", shards)
    assert verdict.loadable is True  # llama.cpp loads each split on its own: a warning, not a refusal
    assert CODES["shard.inconsistent"].refused is False


def test_unreadable_shard_makes_the_set_unloadable() -> None:
    broken = ShardFacts("s3://b/m-00002-of-00003.gguf", 2, 3, readable=False, loadable=False)
    verdict = judge_shard_set("s3://b/m", [_facts(1), broken, _facts(3)])
    assert verdict.findings == () and verdict.complete and verdict.loadable is False
    unknown = ShardFacts("s3://b/m-00002-of-00003.gguf", 2, 3, readable=False, loadable=None)
    assert judge_shard_set("s3://b/m", [_facts(1), unknown, _facts(3)]).loadable is None


def _shard_bytes(no: int, count: int, names: list[str], total: int, *, key_type: ValueType = ValueType.UINT16) -> bytes:
    kvs: list[KV] = [kv_str("general.architecture", "llama")] if no == 0 else []
    kvs += [
        KV("split.no", key_type, no),
        kv_u16("split.count", count),
        kv_i32("split.tensors.count", total),
    ]
    return build_gguf(kvs, [Tensor(n, (32,), 0) for n in names])


def _audit(fs: fsspec.AbstractFileSystem, path: str, data: bytes) -> FileAudit:
    fs.pipe_file(path, data)
    return audit_file(f"memory://{path}", config=AuditConfig())


def test_checks_take_real_audits() -> None:
    fs = fsspec.filesystem("memory")
    a = _audit(fs, "/shards/m-00001-of-00002.gguf", _shard_bytes(0, 2, ["a", "b"], 4))
    b = _audit(fs, "/shards/m-00002-of-00002.gguf", _shard_bytes(1, 2, ["b", "c"], 4, key_type=ValueType.UINT32))
    facts = shard_facts(b)
    assert facts is not None
    assert (facts.index, facts.split_no, facts.split_no_type, facts.tensor_names) == (2, 1, "uint32", ("b", "c"))
    assert shard_facts(_audit(fs, "/shards/single.gguf", build_gguf([kv_u32("x.y", 1)]))) is None
    codes = sorted(f.code for f in check_shard_set([a, b]))
    assert codes == ["shard.bad_index", "shard.duplicate_tensor"]
