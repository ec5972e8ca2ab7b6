"""The worker side: a batch's task never raises, whatever breaks inside it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gguf_audit.audit import AuditConfig
from gguf_audit.pipelines import execute as execute_module
from gguf_audit.pipelines.batches import make_batches
from gguf_audit.pipelines.execute import WORKER_POOLS, TaskOptions, audit_batch
from gguf_audit.tables.listed import ListedFile
from gguf_audit.tables.per_file import audits_to_tables


def test_audit_batch_never_raises(monkeypatch: pytest.MonkeyPatch, local_collection: Path) -> None:
    names = ["tiny-llama-Q4_K_M.gguf", "mirror/tiny-llama-Q4_K_M.gguf", "sharded/complete-00001-of-00002.gguf"]
    listed = [ListedFile("file://" + str(local_collection / n)) for n in names]
    batch = make_batches(listed, {f.url: "m" for f in listed}, 10)[0]
    options = TaskOptions("r1", {}, AuditConfig(), 2)

    def boom(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("audit_file broke")

    monkeypatch.setattr(execute_module, "audit_file", boom)
    result = audit_batch(batch, options)
    assert [r["codes"] for r in result.tables.files.to_pylist()] == [["internal.unexpected"]] * 3
    monkeypatch.undo()

    real = audits_to_tables

    def fragile(items: Any, *, run_id: str) -> Any:
        if any(i.audit.url == listed[1].url and i.audit.header is not None for i in items):
            raise ValueError("cannot build rows")
        return real(items, run_id=run_id)

    monkeypatch.setattr(execute_module, "audits_to_tables", fragile)
    result = audit_batch(batch, options)
    codes = {r["url"]: r["codes"] for r in result.tables.files.to_pylist()}
    assert codes == {listed[0].url: [], listed[1].url: ["internal.unexpected"], listed[2].url: []}
    monkeypatch.undo()

    monkeypatch.setattr(WORKER_POOLS, "pool", boom)
    result = audit_batch(batch, options)
    messages = result.tables.problems.column("message").to_pylist()
    assert len(messages) == 3 and all(m.startswith("batch failed: RuntimeError") for m in messages)
