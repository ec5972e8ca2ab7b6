"""The conversion of audits to the per-file table rows (pure)."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime

import fsspec
import pytest
from corpus import corpus_dir

from gguf_audit.audit import AuditConfig, FileAudit, audit_file
from gguf_audit.checks.provenance import provenance_of
from gguf_audit.format.model import ValueType
from gguf_audit.tables.cells import MAX_ARRAY_ITEMS, MAX_VALUE_CHARS
from gguf_audit.tables.listed import ListedFile
from gguf_audit.tables.per_file import AuditedFile, audits_to_tables
from gguf_audit.testing.builder import (
    KV,
    Tensor,
    build_gguf,
    kv_array,
    kv_f32,
    kv_str,
    tiny_llama_like,
)


def _audit(path: str, data: bytes) -> FileAudit:
    fs = fsspec.filesystem("memory")
    fs.pipe_file(path, data)
    return audit_file(f"memory://{path}", config=AuditConfig())


def _tables(
    audit: FileAudit, listed: ListedFile | None = None, model_id: str = "m"
) -> dict[str, list[dict[str, object]]]:
    t = audits_to_tables([AuditedFile(audit, listed or ListedFile(audit.url), model_id)], run_id="r1")
    return {name: getattr(t, name).to_pylist() for name in ("files", "problems", "tensors", "metadata")}


def test_rows_of_a_valid_file() -> None:
    kvs, tensors = tiny_llama_like()
    kvs.append(kv_str("tokenizer.chat_template", "{{ messages }}"))
    audit = _audit("/t/tiny.gguf", build_gguf(kvs, tensors))
    mtime = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    rows = _tables(audit, ListedFile(audit.url, audit.size, '"etag"', None, mtime, "ab" * 32))
    [f] = rows["files"]
    # (template checks may warn about the toy template: only errors would be wrong here)
    assert f["status"] in ("ok", "warning") and f["loadable"] is True and f["n_errors"] == 0
    assert (f["architecture"], f["name"], f["file_type"], f["file_type_name"]) == (
        "llama",
        "Tiny Llama Like",
        15,
        "Q4_K_M",
    )
    assert (f["context_length"], f["vocab_size"], f["quantization_version"]) == (256, 32, 2)
    assert f["chat_template_sha256"] == hashlib.sha256(b"{{ messages }}").hexdigest()
    assert (f["etag"], f["mtime"], f["sha256"]) == ('"etag"', mtime, "ab" * 32)
    assert f["source_run_id"] == "r1" and f["reused"] is False and f["fingerprint"] is None
    assert len(rows["tensors"]) == len(tensors)
    t0 = rows["tensors"][0]
    assert (t0["name"], t0["type"], t0["shape"], t0["index"]) == ("token_embd.weight", "F16", [256, 32], 0)
    meta = {m["key"]: m for m in rows["metadata"]}
    assert meta["general.architecture"]["value"] == '"llama"'
    assert meta["general.architecture"]["value_text"] == "llama"
    assert meta["llama.context_length"]["value"] == "256" and meta["llama.context_length"]["type"] == "uint32"
    assert meta["tokenizer.ggml.add_bos_token"]["value_text"] == "true"
    tokens = meta["tokenizer.ggml.tokens"]
    assert (tokens["type"], tokens["length"], tokens["truncated"]) == ("array[string]", 32, False)
    assert json.loads(str(tokens["value"]))[:3] == ["<unk>", "<s>", "</s>"]
    assert sorted(str(p["code"]) for p in rows["problems"]) == f["codes"]


def test_huge_values_are_cut_but_counted_and_digested() -> None:
    vocab = [f"tok{i}" for i in range(5000)]
    template = "x" * (MAX_VALUE_CHARS + 10)
    kvs = [
        kv_str("general.architecture", "llama"),
        kv_array("tokenizer.ggml.tokens", ValueType.STRING, vocab),
        kv_array("tokenizer.ggml.scores", ValueType.FLOAT32, [float("nan"), float("inf"), 1.5] * 100),
        kv_str("tokenizer.chat_template", template),
        kv_f32("x.nan", float("nan")),
        KV("x.bad_utf8", ValueType.STRING, b"caf\xe9"),
    ]
    rows = _tables(_audit("/t/big.gguf", build_gguf(kvs, [Tensor("a", (32,), 0)])))
    meta = {m["key"]: m for m in rows["metadata"]}
    tokens = meta["tokenizer.ggml.tokens"]
    assert tokens["length"] == 5000 and tokens["truncated"] is True
    assert json.loads(str(tokens["value"])) == vocab[:MAX_ARRAY_ITEMS]
    assert tokens["value_sha256"] and len(str(tokens["value_sha256"])) == 64
    scores = meta["tokenizer.ggml.scores"]
    assert json.loads(str(scores["value"]))[:3] == ["NaN", "Infinity", 1.5]
    chat = meta["tokenizer.chat_template"]
    assert chat["truncated"] is True and chat["length"] == len(template)
    assert len(json.loads(str(chat["value"]))) == MAX_VALUE_CHARS
    assert chat["value_sha256"] == hashlib.sha256(template.encode()).hexdigest()
    assert rows["files"][0]["chat_template_sha256"] == chat["value_sha256"]
    assert meta["x.nan"]["value"] == '"NaN"'
    assert "caf" in str(meta["x.bad_utf8"]["value_text"])
    assert rows["files"][0]["vocab_size"] == 5000


def test_rows_of_an_unreadable_file() -> None:
    audit = audit_file("memory:///t/does-not-exist.gguf", config=AuditConfig())
    rows = _tables(audit, ListedFile(audit.url, 123))
    [f] = rows["files"]
    assert (f["status"], f["codes"], f["size"], f["version"]) == ("unreadable", ["io.not_found"], 123, None)
    [p] = rows["problems"]
    assert (p["scope"], p["code"], p["severity"], p["refused"], p["url"]) == (
        "file",
        "io.not_found",
        "error",
        None,  # the store's answer: llama.cpp's verdict on the file is unknown
        audit.url,
    )
    assert rows["tensors"] == rows["metadata"] == []


def test_forged_sizes_fit_the_columns() -> None:
    # A forged dimension (negative as int64, as llama.cpp reads it) is stored as the parser saw it,
    # and element counts past int64 become nulls instead of overflow errors.
    dims = (1 << 62, 1 << 63)
    data = build_gguf([kv_str("general.architecture", "llama")], [Tensor("a", dims, 0, data=b"")])
    rows = _tables(_audit("/t/forged.gguf", data))
    [t] = rows["tensors"]
    assert t["shape"] == [1 << 62, -(1 << 63)]
    assert t["n_elements"] is None or -(1 << 63) <= int(t["n_elements"]) < (1 << 63)  # type: ignore[call-overload]
    assert "tensor.bad_dims" in rows["files"][0]["codes"]  # type: ignore[operator]


@pytest.mark.parametrize(
    ("name", "imatrix", "keys"),
    [
        (
            "tiny-llama-IQ2_XXS.gguf",
            True,
            [
                "quantize.imatrix.file=imatrix.dat",
                "quantize.imatrix.dataset=calib.txt",
                "quantize.imatrix.entries_count=14",
                "quantize.imatrix.chunks_count=40",
            ],
        ),
        ("tiny-llama-Q8_0.gguf", False, []),
    ],
)
def test_provenance_of_real_llama_quantize_files(name: str, imatrix: bool, keys: list[str]) -> None:
    """llama-quantize's own keys (tools/quantize/quantize.cpp), read from the corpus as it wrote them."""
    path = corpus_dir() / "models" / name
    if not path.exists():
        pytest.skip(f"the corpus is not here: {path}")
    audit = audit_file(str(path), config=AuditConfig())
    [row] = _tables(audit)["files"]
    assert row["made_with_imatrix"] is imatrix and row["quantize_keys"] == keys
    assert (row["imatrix_dataset"], row["imatrix_chunks_count"]) == (("calib.txt", 40) if imatrix else (None, None))
    assert row["quantized_by"] is None  # llama-quantize does not sign its work; no tool records its build
    made = provenance_of(audit.header) if audit.header else None
    assert made is not None
    phrases = made.phrases("derived", "f32.gguf")
    assert phrases[-1] == "derivation from f32.gguf: derived"
    assert ("importance matrix: file imatrix.dat, dataset calib.txt, 14 entries, 40 chunks" in phrases) is imatrix


def test_a_hostile_quantize_key_is_cut_and_counted_once() -> None:
    kvs, tensors = tiny_llama_like()
    kvs += [kv_str("general.quantized_by", "q" * 5000), kv_str("quantize.tool", "x" * 5000)]
    kvs += [kv_str(f"quantize.k{i}", "v") for i in range(40)]
    [row] = _tables(_audit("/t/hostile.gguf", build_gguf(kvs, tensors)))["files"]
    assert len(row["quantize_keys"]) == 32 and len(row["quantize_keys"][0]) < 260
    assert len(row["quantized_by"]) <= 1100 and row["made_with_imatrix"] is False


def test_a_metadata_value_holding_a_credential_is_stored_redacted() -> None:
    """A file's own text (a source URL with its token, a token pasted into a description) reaches the
    ``metadata`` table redacted, as ``inspect`` shows it; its digest stays the raw value's."""
    token = "hf_" + "Ab1Cd2Ef3Gh4Ij5Kl6Mn7Op8Qr9St0Uv"
    source = f"https://user:hunter22@example.org/m.gguf?token={token}"
    kvs = [
        kv_str("general.architecture", "llama"),
        kv_str("general.source.url", source),
        kv_str("general.description", f"made with {token}"),
    ]
    rows = _tables(_audit("/t/secret.gguf", build_gguf(kvs, [Tensor("a", (32,), 0)])))
    meta = {m["key"]: m for m in rows["metadata"]}
    stored = json.dumps(rows["metadata"], default=str)
    assert token not in stored and "hunter22" not in stored
    assert "***" in str(meta["general.source.url"]["value"]) and "***" in str(meta["general.description"]["value"])
    assert meta["general.source.url"]["value_sha256"] == hashlib.sha256(source.encode()).hexdigest()
