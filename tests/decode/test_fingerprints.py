"""Weights and metadata fingerprints, and the ``duplicates`` view over a small collection.

The collection: a tiny llama-like model with random weights, a re-templated
copy (same tensors, a new chat template, so a longer header and data section
at another offset), a renamed copy (``general.name``), and an unrelated model
(other weights). Each is audited with sampling, its ``files`` row built, and
the rows grouped by weights fingerprint.
"""

from __future__ import annotations

import dataclasses
import random
from pathlib import Path

from gguf_audit.audit import AuditConfig, FileAudit, audit_file
from gguf_audit.pipelines.nights.duplicates import duplicate_groups
from gguf_audit.plan import SampleConfig
from gguf_audit.tables.listed import ListedFile
from gguf_audit.tables.per_file import AuditedFile, files_to_table
from gguf_audit.testing.builder import KV, Tensor, build_gguf, kv_str, tensor_data_bytes, tiny_llama_like

CONFIG = AuditConfig(samples=SampleConfig(), semantics=False, templates=False)
TEMPLATE = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}"


def _model(seed: int) -> tuple[list[KV], list[Tensor]]:
    kvs, tensors = tiny_llama_like()
    rng = random.Random(seed)
    filled = [dataclasses.replace(t, data=rng.randbytes(tensor_data_bytes(t))) for t in tensors]
    return [*kvs, kv_str("tokenizer.chat_template", TEMPLATE)], filled


def _set(kvs: list[KV], key: str, value: str) -> list[KV]:
    return [kv_str(key, value) if kv.key == key else kv for kv in kvs]


def _audit(tmp_path: Path, name: str, kvs: list[KV], tensors: list[Tensor]) -> FileAudit:
    path = tmp_path / name
    path.write_bytes(build_gguf(kvs, tensors))
    return audit_file(str(path), config=CONFIG)


def _row(audit: FileAudit) -> dict[str, object]:
    item = AuditedFile(audit=audit, listed=ListedFile(url=audit.url), model_id=Path(audit.url).stem)
    row: dict[str, object] = files_to_table([item], run_id="r").to_pylist()[0]
    return row


def test_a_metadata_only_change_keeps_the_weights_fingerprint_and_a_byte_in_a_first_block_changes_it(
    tmp_path: Path,
) -> None:
    kvs, tensors = _model(1)
    base = _audit(tmp_path, "base.gguf", kvs, tensors)
    longer = _audit(tmp_path, "longer.gguf", _set(kvs, "tokenizer.chat_template", TEMPLATE + "x" * 500), tensors)
    assert base.weights_fingerprint is not None
    assert base.header is not None and longer.header is not None
    assert base.header.data_offset != longer.header.data_offset
    assert longer.weights_fingerprint == base.weights_fingerprint

    first = tensors[0]
    assert first.data is not None
    flipped = bytes([first.data[0] ^ 0x01]) + first.data[1:]
    changed = _audit(tmp_path, "changed.gguf", kvs, [dataclasses.replace(first, data=flipped), *tensors[1:]])
    assert changed.weights_fingerprint is not None
    assert changed.weights_fingerprint != base.weights_fingerprint


def test_general_name_keeps_the_metadata_fingerprint_and_the_template_changes_it(tmp_path: Path) -> None:
    kvs, tensors = _model(1)
    base = _row(_audit(tmp_path, "base.gguf", kvs, tensors))
    renamed = _row(_audit(tmp_path, "renamed.gguf", _set(kvs, "general.name", "Another Name"), tensors))
    retemplated = _row(_audit(tmp_path, "new.gguf", _set(kvs, "tokenizer.chat_template", "{{ x }}"), tensors))
    assert isinstance(base["metadata_fingerprint"], str)
    assert renamed["metadata_fingerprint"] == base["metadata_fingerprint"]
    assert retemplated["metadata_fingerprint"] != base["metadata_fingerprint"]


def test_duplicates_group_the_copies_name_the_template_and_leave_the_unrelated_model_alone(tmp_path: Path) -> None:
    kvs, tensors = _model(1)
    other_kvs, other_tensors = _model(2)
    rows = [
        _row(_audit(tmp_path, "a-original.gguf", kvs, tensors)),
        _row(_audit(tmp_path, "b-retemplated.gguf", _set(kvs, "tokenizer.chat_template", "{{ x }}"), tensors)),
        _row(_audit(tmp_path, "c-renamed.gguf", _set(kvs, "general.name", "Renamed"), tensors)),
        _row(_audit(tmp_path, "d-unrelated.gguf", other_kvs, other_tensors)),
    ]
    groups = duplicate_groups(rows)
    assert len(groups) == 1
    (group,) = groups
    by_name = {Path(f.url).name: f.differs for f in group.files}
    assert by_name == {"a-original.gguf": (), "b-retemplated.gguf": ("template",), "c-renamed.gguf": ()}
    assert group.differs == ("template",)
