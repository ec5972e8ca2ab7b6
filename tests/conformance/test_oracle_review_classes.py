"""The last classes of issue 33's review, each file asked of llama.cpp b11312 and audited by gguf-audit:
special ids past the vocabulary, split keys on a file given alone, names holding a NUL byte."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pytest

from gguf_audit.audit import FileAudit, Status, audit_file
from gguf_audit.findings import Finding, Severity
from gguf_audit.format.model import ValueType
from gguf_audit.report.text import render_text
from gguf_audit.testing.builder import KV, Tensor, build_gguf, kv_array, kv_i32, kv_str, kv_u16, kv_u32, tiny_llama_like
from gguf_audit.testing.conformance import CONFORMANCE_AUDIT, Outcome, compare
from gguf_audit.testing.oracle import Oracle

pytestmark = [pytest.mark.conformance]


def _with(kvs: Sequence[KV], *changed: KV) -> list[KV]:
    """``kvs`` with each of ``changed`` in place of the KV of its key (appended when there is none)."""
    by_key = {kv.key: kv for kv in changed}
    out = [by_key.pop(kv.key, kv) for kv in kvs]
    return [*out, *by_key.values()]


def _agreeing(oracle: Oracle, files: dict[str, bytes], folder: Path) -> dict[str, Outcome]:
    """Write ``files``, ask both sides, and check that every verdict (three-way and loadable) agrees."""
    paths = []
    for name, data in files.items():
        paths.append(folder / name)
        paths[-1].write_bytes(data)
    outcomes = compare(oracle, paths)
    assert [(Path(o.path).name, o.klass, o.message[-120:]) for o in outcomes if not o.agrees] == []
    return {Path(o.path).name: o for o in outcomes}


def _audit(path: Path) -> FileAudit:
    return audit_file(str(path), config=CONFORMANCE_AUDIT)


def _only(audit: FileAudit, code: str) -> Finding:
    [found] = [f for f in audit.findings if f.code == code]
    return found


@pytest.mark.parametrize("key", ["bos_token_id", "eos_token_id", "eot_token_id"])
def test_a_special_id_past_the_vocabulary_loads_with_a_warning(oracle: Oracle, tmp_path: Path, key: str) -> None:
    kvs, tensors = tiny_llama_like()
    name = f"tokenizer.ggml.{key}"
    outcomes = _agreeing(oracle, {"m.gguf": build_gguf(_with(kvs, kv_u32(name, 40)), tensors)}, tmp_path)
    assert outcomes["m.gguf"].theirs == "loaded" and "bad special token" in outcomes["m.gguf"].message
    audit = _audit(tmp_path / "m.gguf")
    found = _only(audit, "tokenizer.special_id_out_of_range")
    assert found.severity is Severity.WARNING and f"{name} is 40" in found.message
    assert audit.status is Status.WARNING


def _split(no: int, count: int, n_tensors: int) -> list[KV]:
    return [kv_u16("split.no", no), kv_u16("split.count", count), kv_i32("split.tensors.count", n_tensors)]


def _shard_set(stem: str, count: int = 3) -> dict[str, bytes]:
    """A healthy set of ``count`` shards of the tiny llama, written as gguf-split does: the metadata in
    the first shard, each shard a run of the tensors, ``split.*`` in every one."""
    kvs, tensors = tiny_llama_like()
    runs: list[list[Tensor]] = [tensors[i::count] for i in range(count)]
    files = {}
    for i, run in enumerate(runs):
        head = kvs if i == 0 else []
        files[f"{stem}-{i + 1:05d}-of-{count:05d}.gguf"] = build_gguf([*head, *_split(i, count, len(tensors))], run)
    return files


def test_split_count_on_a_name_that_is_not_a_first_shards_is_refused(oracle: Oracle, tmp_path: Path) -> None:
    kvs, tensors = tiny_llama_like()
    data = build_gguf([*kvs, *_split(0, 2, len(tensors))], tensors)
    files = {"model.gguf": data, "model-00001-of-00003.gguf": data, "model-00002-of-00002.gguf": data}
    outcomes = _agreeing(oracle, files, tmp_path)
    for name, outcome in outcomes.items():
        assert outcome.theirs == "refused" and "invalid split file name" in outcome.message, name
        found = _only(_audit(tmp_path / name), "shard.invalid_file_name")
        assert found.severity is Severity.ERROR
        assert f"split.count is 2 but the file is named '{name}'" in found.message
        assert "'<name>-00001-of-00002.gguf'" in found.message


def test_a_later_shard_alone_is_refused_and_names_the_first(oracle: Oracle, tmp_path: Path) -> None:
    outcomes = _agreeing(oracle, _shard_set("healthy"), tmp_path)
    first, *later = sorted(outcomes)
    assert outcomes[first].theirs == "loaded"
    assert not [f for f in _audit(tmp_path / first).findings if f.code.startswith("shard.")]
    for name in later:
        assert outcomes[name].theirs == "refused" and "illegal split file idx" in outcomes[name].message
        audit = _audit(tmp_path / name)
        found = _only(audit, "shard.later_shard")
        # Informational: the file is refused alone, yet nothing in it is wrong.
        assert found.severity is Severity.INFO and audit.status is Status.OK
        assert "load 'healthy-00001-of-00003.gguf' instead" in found.message
        text = render_text(audit)
        assert "loadable by llama.cpp: NO" in text and "llama.cpp b11312: refuses" in text


def test_a_later_shard_whose_name_is_no_shards_still_says_to_load_the_first(oracle: Oracle, tmp_path: Path) -> None:
    _, tensors = tiny_llama_like()
    files = {"renamed.gguf": build_gguf(_split(1, 3, len(tensors)), tensors[:4])}
    assert _agreeing(oracle, files, tmp_path)["renamed.gguf"].theirs == "refused"
    found = _only(_audit(tmp_path / "renamed.gguf"), "shard.later_shard")
    assert "load the set's first shard (split.no 0) instead" in found.message


def _bpe_vocab(pre: bytes) -> list[KV]:
    """A small BPE ('gpt2') vocabulary whose pre-tokenizer is ``pre``."""
    tokens = ["<s>", "</s>", "\u010a", "\u0120", "a", "b", "ab", "\u0120a", *(f"t{i}" for i in range(24))]
    return [
        kv_str("tokenizer.ggml.model", "gpt2"),
        kv_str("tokenizer.ggml.pre", pre),
        kv_array("tokenizer.ggml.tokens", ValueType.STRING, tokens),
        kv_array("tokenizer.ggml.token_type", ValueType.INT32, [3, 3] + [1] * 30),
        kv_array("tokenizer.ggml.merges", ValueType.STRING, ["a b", "\u0120 a"]),
        kv_u32("tokenizer.ggml.bos_token_id", 0),
        kv_u32("tokenizer.ggml.eos_token_id", 1),
    ]


def _nul_files() -> dict[str, bytes]:
    kvs, tensors = tiny_llama_like()
    spm = [kv for kv in kvs if kv.key != "tokenizer.ggml.unknown_token_id"]

    def file(*changed: KV, base: Sequence[KV] = kvs) -> bytes:
        return build_gguf(_with(base, *changed), tensors)

    return {
        "arch-cut.gguf": file(kv_str("general.architecture", b"llama\0x")),
        "arch-empty.gguf": file(kv_str("general.architecture", b"\0llama")),
        "tokenizer-cut.gguf": file(kv_str("tokenizer.ggml.model", b"llama\0x")),
        "tokenizer-empty.gguf": file(kv_str("tokenizer.ggml.model", b"\0llama")),
        "pre-cut.gguf": file(*_bpe_vocab(b"llama-bpe\0x"), base=spm),
        "pre-unknown.gguf": file(*_bpe_vocab(b"llama-bpex"), base=spm),
        "rope-cut.gguf": file(kv_str("llama.rope.scaling.type", b"linear\0x")),
        "rope-empty.gguf": file(kv_str("llama.rope.scaling.type", b"\0linear")),
    }


def test_names_are_read_up_to_their_first_nul(oracle: Oracle, tmp_path: Path) -> None:
    outcomes = _agreeing(oracle, _nul_files(), tmp_path)
    theirs = {name: o.theirs for name, o in outcomes.items()}
    assert theirs == {
        "arch-cut.gguf": "loaded",
        "arch-empty.gguf": "refused",
        "tokenizer-cut.gguf": "loaded",
        "tokenizer-empty.gguf": "refused",
        "pre-cut.gguf": "loaded",
        "pre-unknown.gguf": "refused",
        "rope-cut.gguf": "loaded",
        "rope-empty.gguf": "aborted",
    }
    ours = {name: set(o.codes) for name, o in outcomes.items()}
    assert "meta.unknown_architecture" in ours["arch-empty.gguf"]
    assert "tokenizer.unknown_model" in ours["tokenizer-empty.gguf"]
    assert "tokenizer.unknown_pre" in ours["pre-unknown.gguf"]
    rope = _only(_audit(tmp_path / "rope-empty.gguf"), "hparams.unknown_rope_scaling")
    assert "'\\x00linear' (read up to its NUL as '')" in rope.message
