"""Sampled blocks end to end: ggml-exact values, data findings, fingerprints, and what the reads cost."""

from __future__ import annotations

import json
import struct
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from corpus import corpus_dir, gguf_files, truth

from gguf_audit.audit import AuditConfig, AuditTarget, audit_file
from gguf_audit.cli import main
from gguf_audit.format.model import Header
from gguf_audit.format.parser import parse_header
from gguf_audit.io.header import read_header
from gguf_audit.io.source import open_source
from gguf_audit.plan import SampleConfig, plan_fetch, plan_samples
from gguf_audit.samples import read_file_samples, read_samples
from gguf_audit.testing.builder import Tensor, build_gguf, build_gguf_layout, kv_str, tiny_llama_like
from gguf_audit.testing.http import RangeHTTPServer
from gguf_audit.testing.s3 import MotoS3Server

F32, F16, Q8_0, Q4_K, MXFP4 = 0, 1, 8, 12, 39
SAMPLING = AuditConfig(samples=SampleConfig())

SAMPLED_FILES = [p for p in gguf_files() if truth(p)["samples"]]


def _rel(path: Path) -> str:
    return str(path.relative_to(corpus_dir()))


def _bits(values: Any) -> np.ndarray:
    return np.asarray(values, dtype=np.float32).view(np.uint32)


# --- the corpus: ggml's own values --------------------------------------------------


@pytest.mark.parametrize("path", SAMPLED_FILES, ids=_rel)
def test_sample_command_gives_ggml_values_bit_for_bit(path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    by_tensor: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for s in truth(path)["samples"]:
        by_tensor[s["tensor"]].append(s)
    for name, samples in by_tensor.items():
        blocks = ",".join(str(s["block_index"]) for s in samples)
        assert main(["sample", str(path), "--tensor", name, "--blocks", blocks, "--json"]) == 0
        out = json.loads(capsys.readouterr().out)
        (tensor,) = out["tensors"]
        assert tensor["name"] == name
        got = {b["index"]: b for b in tensor["blocks"]}
        for s in samples:
            block = got[s["block_index"]]
            assert (block["offset"], block["n_bytes"]) == (s["abs_offset"], s["block_bytes"])
            assert len(block["values"]) == s["elems_per_block"]
            assert np.array_equal(_bits(block["values"]), _bits(s["values"])), (name, s["block_index"])


def test_sample_json_shape_and_default_plan(capsys: pytest.CaptureFixture[str]) -> None:
    path = corpus_dir() / "models/tiny-llama-Q4_K_M.gguf"
    assert main(["sample", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"url", "tensors", "io"}
    assert len(out["tensors"]) == 21
    block = out["tensors"][0]["blocks"][0]
    assert set(block) >= {"index", "offset", "n_bytes", "values", "stats"}
    assert set(block["stats"]) == {
        "count", "min", "max", "mean", "std", "max_abs", "n_nan", "n_inf", "zero_fraction",
    }  # fmt: skip
    assert out["io"]["requests"] >= 1 and out["io"]["sampled_bytes"] > 0
    assert main(["sample", str(path), "--json", "--sample-requests", "2"]) == 0
    few = json.loads(capsys.readouterr().out)
    assert few["io"]["fetched_ranges"] <= 2 < out["io"]["fetched_ranges"]


def test_sample_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(corpus_dir() / "models/tiny-llama-Q8_0.gguf")
    assert main(["sample", path, "--tensor", "nope"]) == 2
    assert main(["sample", path, "--tensor", "output.weight", "--blocks", "0,x"]) == 2
    assert main(["sample", path, "--tensor", "output.weight", "--blocks", "16384"]) == 2
    err = capsys.readouterr().err
    assert "no tensor named 'nope'" in err and "Got '0,x'" in err and "Got 16384." in err
    assert main(["sample", path, "--tensor", "output.weight", "--blocks", "-1"]) == 0
    assert "block 16383" in capsys.readouterr().out


@pytest.mark.parametrize("path", gguf_files(), ids=_rel)
def test_corpus_files_have_no_data_problem(path: Path) -> None:
    audit = audit_file(str(path), config=SAMPLING)
    data_codes = [f.code for f in audit.findings if f.code.startswith("data.")]
    assert data_codes == [], audit.findings
    n_tensors = len(audit.header.tensors) if audit.header else 0
    assert len({r.tensor for r in audit.samples}) == n_tensors
    assert (audit.fingerprint is None) == (n_tensors == 0)


def test_sampling_off_keeps_the_header_only_audit() -> None:
    path = str(corpus_dir() / "models/tiny-llama-Q4_K_M.gguf")
    plain = audit_file(path, config=AuditConfig())
    sampled = audit_file(path, config=SAMPLING)
    assert plain.samples == [] and plain.fingerprint is None
    assert plain.findings == sampled.findings
    assert sampled.io.requests > plain.io.requests


def test_inspect_samples_adds_rows_and_fingerprint(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(corpus_dir() / "models/tiny-llama-Q6_K.gguf")
    assert main(["inspect", path, "--json"]) == 0
    plain = json.loads(capsys.readouterr().out)
    assert "samples" not in plain and "fingerprint" not in plain
    assert main(["inspect", path, "--json", "--samples"]) == 0
    out = json.loads(capsys.readouterr().out)
    data = Path(path).read_bytes()
    header = parse_header(data, len(data))
    assert isinstance(header, Header)
    plan = plan_samples(header)
    assert len(out["fingerprint"]) == 64 and len(out["samples"]) == len(plan.blocks)
    assert {(s["tensor"], s["block_index"]) for s in out["samples"]} == {(b.tensor, b.block_index) for b in plan.blocks}
    assert (out["sampled_tensors"], out["sampled_strata"]) == (21, 0xFFFF)
    assert set(out["samples"][0]) == {
        "tensor", "block_index", "offset", "n_bytes", "type", "count", "min", "max",
        "mean", "std", "max_abs", "n_nan", "n_inf", "zero_fraction",
    }  # fmt: skip
    assert main(["inspect", path, "--samples"]) == 0
    text = capsys.readouterr().out
    assert (
        f"samples ({len(plan.blocks)} blocks of 21 tensors, 16 of 16 strata" in text and "blk.0.attn_q.weight" in text
    )
    # Fewer requests, the same checks: the flag reaches the plan.
    assert main(["inspect", path, "--json", "--samples", "--sample-requests", "4"]) == 0
    few = json.loads(capsys.readouterr().out)
    assert 0 < len(few["samples"]) < len(plan.blocks)
    assert main(["inspect", path, "--samples", "--sample-requests", "0"]) == 2
    assert "--sample-requests must be at least 1. Got 0." in capsys.readouterr().err


# --- fingerprints -----------------------------------------------------------------


def test_fingerprint_matches_for_copies_and_mirrors_only(tmp_path: Path, http: RangeHTTPServer) -> None:
    rel = "models/tiny-llama-Q4_K_M.gguf"
    local = audit_file(str(corpus_dir() / rel), config=SAMPLING)
    copy = tmp_path / "copy.gguf"
    copy.write_bytes((corpus_dir() / rel).read_bytes())
    remote = audit_file(http.url_for(rel), config=SAMPLING)
    assert local.fingerprint is not None
    assert audit_file(str(copy), config=SAMPLING).fingerprint == local.fingerprint
    assert remote.fingerprint == local.fingerprint
    other = audit_file(str(corpus_dir() / "models/tiny-llama-Q8_0.gguf"), config=SAMPLING)
    be = audit_file(str(corpus_dir() / "bigendian/tiny-llama-Q8_0-BE.gguf"), config=SAMPLING)
    assert len({local.fingerprint, other.fingerprint, be.fingerprint}) == 3
    # One flipped byte inside a sampled block changes it.
    block = local.samples[len(local.samples) // 2]
    data = bytearray(copy.read_bytes())
    data[block.offset] ^= 1
    copy.write_bytes(bytes(data))
    assert audit_file(str(copy), config=SAMPLING).fingerprint != local.fingerprint


def test_sampling_over_s3_reads_the_same_bytes(s3_corpus: MotoS3Server) -> None:
    rel = "models/tiny-llama-Q4_K_M.gguf"
    local = audit_file(str(corpus_dir() / rel), config=SAMPLING)
    s3_corpus.reset_stats()
    size = (corpus_dir() / rel).stat().st_size
    remote = audit_file(
        AuditTarget(f"s3://corpus/{rel}", storage_options=s3_corpus.storage_options(), size=size), config=SAMPLING
    )
    assert remote.fingerprint == local.fingerprint and remote.samples == local.samples
    gets = [r for r in s3_corpus.requests if r.method == "GET"]
    assert len(gets) == remote.io.requests and all(r.range for r in gets)


# --- defects built on purpose ---------------------------------------------------------


def _q8_0(rng: np.random.Generator, n_blocks: int, scale_bits: dict[int, int] | None = None) -> bytes:
    blocks = []
    for i in range(n_blocks):
        d = struct.pack("<H", scale_bits[i]) if scale_bits and i in scale_bits else struct.pack("<e", 0.01)
        blocks.append(d + rng.integers(-127, 128, 32, dtype=np.int8).tobytes())
    return b"".join(blocks)


def test_built_defects_give_their_codes_and_llama_cpp_still_loads(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    n = 64  # blocks per tensor: more than the plan samples, so the plan picks
    mxfp4 = bytearray(rng.integers(0, 256, (n, 17), dtype=np.uint8).tobytes())
    for i in range(n):
        mxfp4[i * 17] = 120
    mxfp4[0] = 0xFF  # block 0 is always sampled
    f16_with_inf = np.r_[np.full(32 * n - 1, 0.5), np.inf].astype("<f2").tobytes()  # in the last block
    tensors = [
        Tensor("token_embd.weight", (32, n), Q8_0, data=_q8_0(rng, n)),
        Tensor("blk.0.attn_q.weight", (32, n), Q8_0, data=_q8_0(rng, n, {n - 1: 0x7E00})),  # NaN scale, last block
        Tensor("blk.0.attn_k.weight", (32, n), Q8_0, data=_q8_0(rng, n, {0: 0x7C00})),  # Inf scale, first block
        Tensor("blk.0.attn_v.weight", (32, n), Q8_0),  # zeros
        Tensor("blk.0.attn_norm.weight", (32,), F32),  # zeros, and fine
        Tensor("blk.0.ffn_up_exps.weight", (32, n), MXFP4, data=bytes(mxfp4)),
        Tensor("blk.0.ffn_down.weight", (32, n), F16, data=f16_with_inf),
    ]
    path = tmp_path / "defects.gguf"
    path.write_bytes(build_gguf([kv_str("general.architecture", "llama")], tensors))
    audit = audit_file(str(path), config=SAMPLING)
    found = sorted((f.code, f.tensor) for f in audit.findings if f.code.startswith("data."))
    assert found == [
        ("data.bad_scale", "blk.0.ffn_up_exps.weight"),
        ("data.nonfinite", "blk.0.attn_k.weight"),
        ("data.nonfinite", "blk.0.attn_q.weight"),
        ("data.nonfinite", "blk.0.ffn_down.weight"),
        ("data.zero_filled", "blk.0.attn_v.weight"),
    ]
    # llama.cpp loads such files: none of the data codes is one it refuses.
    assert all(f.refused is False for f in audit.findings if f.code.startswith("data."))
    assert str(audit.status) == "error"
    nan_rows = [r for r in audit.samples if r.tensor == "blk.0.attn_q.weight" and r.n_nan]
    assert [r.block_index for r in nan_rows] == [n - 1] and nan_rows[0].n_nan == 32


def test_a_zero_model_is_zero_filled_except_its_norms(tmp_path: Path) -> None:
    kvs, tensors = tiny_llama_like()
    path = tmp_path / "zeros.gguf"
    path.write_bytes(build_gguf(kvs, tensors))
    audit = audit_file(str(path), config=SAMPLING)
    flagged = {f.tensor for f in audit.findings if f.code == "data.zero_filled"}
    assert flagged == {t.name for t in tensors if "norm" not in t.name}
    assert audit.loadable is True


def test_a_truncated_file_samples_what_is_there(tmp_path: Path) -> None:
    kvs, tensors = tiny_llama_like()
    data = build_gguf(kvs, tensors)
    path = tmp_path / "cut.gguf"
    path.write_bytes(data[: len(data) * 2 // 3])
    audit = audit_file(str(path), config=SAMPLING)
    codes = {f.code for f in audit.findings}
    assert "data.truncated" in codes and "data.sample_unread" not in codes
    assert audit.samples and all(r.offset + r.n_bytes <= len(data) * 2 // 3 for r in audit.samples)


def test_failed_ranges_cost_only_their_blocks(http: RangeHTTPServer) -> None:
    url = http.url_for("models/tiny-llama-Q8_0.gguf")
    source = open_source(url)
    head = read_header(source)
    plan = plan_samples(head.header, file_size=source.size)
    http.fail_status = 404
    http.fail_next = 2
    result = read_samples(source, head.header, plan, held=head.buffer)
    unread = [f for f in result.findings if f.code == "data.sample_unread"]
    assert len(unread) == 1 and "2 of" in unread[0].message and "io.not_found" in unread[0].message
    assert result.fingerprint is None
    assert 0 < len(result.rows) < len(plan.blocks)
    assert result.findings == tuple(unread)


# --- what sampling costs over HTTP --------------------------------------------------------


def test_a_big_file_costs_its_header_and_the_merged_ranges_in_one_round(tmp_path: Path) -> None:
    # 32 Q4_K matrices of 4096 x 4096: 302 MB, written sparse (header, then a hole).
    n_tensors, dims = 32, (4096, 4096)
    size_each = dims[0] * dims[1] // 256 * 144
    tensors = [Tensor(f"blk.{i}.ffn_up.weight", dims, Q4_K, offset=i * size_each, data=b"") for i in range(n_tensors)]
    layout = build_gguf_layout([kv_str("general.architecture", "llama")], tensors, include_data=False)
    file_size = layout.data_section_offset + n_tensors * size_each
    path = tmp_path / "big.gguf"
    with open(path, "wb") as f:
        f.write(layout.content)
        f.truncate(file_size)
    assert file_size > 300_000_000

    with RangeHTTPServer(root=tmp_path, latency_s=0.05) as server:
        audit = audit_file(server.url_for("big.gguf"), config=SAMPLING)
        requests = list(server.requests)
        sent = server.bytes_sent
        peak = server.max_in_flight

    assert audit.header is not None and audit.size == file_size
    header_get, *sample_gets = requests
    initial = SAMPLING.read.initial_bytes
    assert header_get.range == f"bytes=0-{initial - 1}"
    plan = plan_samples(audit.header, config=SampleConfig(), file_size=file_size)
    fetch = plan_fetch(plan, held_bytes=initial, max_gap_bytes=SampleConfig().max_gap_bytes)
    # At most 32 windows, on tensor boundaries: the end of one matrix and the start of the next.
    assert len(fetch) <= 32 and plan.strata == 0xFFFF
    assert plan.n_tensors == audit.sampled_tensors and audit.sampled_strata == 0xFFFF
    assert sorted(r.range or "" for r in sample_gets) == sorted(f"bytes={r.start}-{r.end - 1}" for r in fetch)
    assert all(r.method == "GET" for r in requests)
    assert sent == initial + sum(r.n_bytes for r in fetch)
    assert audit.io.requests == 1 + len(fetch) and audit.io.bytes_read == sent
    # The ranges went out together, but never more than the per-host cap at once.
    assert 1 < peak <= SAMPLING.read.max_per_host
    # A sparse file is zeros: every sampled matrix is zero-filled (and that is all the data says).
    data_findings = [f for f in audit.findings if f.code.startswith("data.")]
    assert {f.code for f in data_findings} == {"data.zero_filled"}
    assert {f.tensor for f in data_findings} == {b.tensor for b in plan.blocks}
    assert len(data_findings) == audit.sampled_tensors <= n_tensors


def test_read_file_samples_chooses_tensors_and_blocks() -> None:
    path = str(corpus_dir() / "split/tiny-llama-Q4_K_M-00002-of-00004.gguf")
    chosen = read_file_samples(path, tensors=["blk.0.ffn_gate.weight"], blocks=[0, -1])
    assert [(d.block.tensor, d.block.block_index) for d in chosen.read.decoded] == [
        ("blk.0.ffn_gate.weight", 0),
        ("blk.0.ffn_gate.weight", 767),
    ]
    planned = read_file_samples(path, tensors=["blk.0.ffn_gate.weight"])
    indices = [d.block.block_index for d in planned.read.decoded if d.block.tensor == "blk.0.ffn_gate.weight"]
    assert len(indices) == len(planned.read.decoded) and indices[0] == 0 and indices[-1] == 767
    assert len(planned.read.fetched) <= 32 and planned.read.plan.fetch_bytes <= 1 << 20
