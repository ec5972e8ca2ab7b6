"""gguf_audit.compare: quantization error against a reference, and a wrong layout caught."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
from corpus import corpus_dir

from gguf_audit.cli import main
from gguf_audit.compare import Comparison, compare_files
from gguf_audit.decode.kernels import decode_blocks
from gguf_audit.format.model import Header
from gguf_audit.format.safetensors import parse_safetensors_header
from gguf_audit.io.header import read_header
from gguf_audit.io.source import open_source
from gguf_audit.testing.http import RangeHTTPServer

MODELS = corpus_dir() / "models"
F32_REF = MODELS / "tiny-llama-F32.gguf"
Q4_0 = 2


def _compare(quant: str | Path, reference: str | Path = F32_REF) -> Comparison:
    return compare_files(str(quant), str(reference))


def _header(path: Path) -> Header:
    return read_header(open_source(str(path))).header


def _by_type(c: Comparison) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {}
    for t in c.tensors:
        out.setdefault(t.quant_type, []).append(t.relative_rmse)
    return out


# --- the corpus quantizations against their F32 source ---------------------------


def test_q8_0_and_q4_k_m_errors_have_the_size_their_bits_imply() -> None:
    q8 = _compare(MODELS / "tiny-llama-Q8_0.gguf")
    q4 = _compare(MODELS / "tiny-llama-Q4_K_M.gguf")
    for c in (q8, q4):
        assert c.n_suspect == 0 and c.findings == () and c.skipped == ()
        assert len(c.tensors) == 21
    by8, by4 = _by_type(q8), _by_type(q4)
    # A b-bit grid over a block's range: RMS error about step / sqrt(12), with
    # step = max|x| / 2**(b-1); for these near-Gaussian weights that is a few
    # tenths of a percent at 8 bits, several percent at 4, and in between at 6.
    assert all(0.002 < e < 0.012 for e in by8["Q8_0"])
    assert all(0.03 < e < 0.15 for e in by4["Q4_K"])
    assert all(0.008 < e < 0.04 for e in by4["Q6_K"])
    assert by8["F32"] == by4["F32"] == [0.0] * 5  # the norms are copied as they are
    assert 8 < q4.relative_rmse / q8.relative_rmse < 32  # about 2**4 apart
    for t in (*q8.tensors, *q4.tensors):
        if t.quant_type != "F32":
            # Rounding to the nearest level: about 0.29 steps RMS, never a whole step.
            assert 0.1 < t.rmse_steps < 0.4 and t.over_step_fraction == 0.0
            assert t.significant_sign_flips == 0


@pytest.mark.parametrize("quant", ["Q4_0", "Q6_K", "IQ4_NL", "IQ2_XXS", "F16", "BF16"])
def test_other_corpus_quantizations_are_not_suspect(quant: str) -> None:
    c = _compare(MODELS / f"tiny-llama-{quant}.gguf")
    assert c.n_suspect == 0 and len(c.tensors) == 21, [t for t in c.tensors if t.layout_suspect]


@pytest.mark.parametrize("reference", ["F16", "BF16"])
def test_f16_and_bf16_references(reference: str) -> None:
    c = _compare(MODELS / "tiny-llama-Q8_0.gguf", MODELS / f"tiny-llama-{reference}.gguf")
    assert c.n_suspect == 0 and len(c.tensors) == 21
    # The reference's own rounding adds a little to Q8_0's error against F32.
    assert 0.004 < c.relative_rmse < 0.008


def _swap_q4_0_nibbles(src: Path, dst: Path) -> None:
    """The Q4_0 file with each block's quants written high nibble first (a layout bug)."""
    data = bytearray(src.read_bytes())
    for t in _header(src).tensors:
        if t.type_id != Q4_0:
            continue
        blocks = np.frombuffer(data, np.uint8, t.n_bytes, t.data_offset).reshape(-1, 18).copy()
        qs = blocks[:, 2:]
        blocks[:, 2:] = (qs << 4) | (qs >> 4)
        data[t.data_offset : t.data_offset + t.n_bytes] = blocks.tobytes()
    dst.write_bytes(bytes(data))


def test_swapped_nibbles_are_flagged_layout_suspect(tmp_path: Path) -> None:
    bad = tmp_path / "swapped.gguf"
    _swap_q4_0_nibbles(MODELS / "tiny-llama-Q4_0.gguf", bad)
    c = _compare(bad)
    suspect = {t.name for t in c.tensors if t.layout_suspect}
    q4_0 = {t.name for t in c.tensors if t.quant_type == "Q4_0"}
    assert suspect == q4_0 and len(q4_0) == 15
    for t in c.tensors:
        if t.layout_suspect:
            assert t.over_step_fraction > 0.3 and t.sign_flip_fraction > 0.2 and t.relative_rmse > 0.5
    flagged = {f.tensor for f in c.findings if f.code == "compare.layout_suspect"}
    assert flagged == q4_0
    assert all("\n" not in f.message and "quantization step" in f.message for f in c.findings)


def test_compare_command_json_and_exit_status(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compare", str(MODELS / "tiny-llama-Q8_0.gguf"), str(F32_REF), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert set(out) >= {"quant", "reference", "summary", "tensors", "skipped", "problems", "io"}
    assert set(out["summary"]) >= {"n_compared", "n_layout_suspect", "relative_rmse", "worst_tensor"}
    row = out["tensors"][0]
    assert set(row) >= {"name", "rmse", "max_abs_error", "relative_rmse", "sign_flips", "layout_suspect"}
    bad = tmp_path / "swapped.gguf"
    _swap_q4_0_nibbles(MODELS / "tiny-llama-Q4_0.gguf", bad)
    assert main(["compare", str(bad), str(F32_REF)]) == 1
    text = capsys.readouterr().out
    assert "LAYOUT SUSPECT" in text and "compare.layout_suspect" in text
    assert (
        main(["compare", str(bad), str(tmp_path / "missing.safetensors")]) == 2
    )  # a missing file: not the quant's fault
    assert "missing.safetensors" in capsys.readouterr().err


# --- safetensors ---------------------------------------------------------------------


def _write_safetensors(path: Path, tensors: dict[str, np.ndarray], metadata: dict[str, str] | None = None) -> None:
    """safetensors by hand: u64 LE header length, the JSON header, then the data."""
    header: dict[str, object] = {"__metadata__": metadata or {"format": "pt"}}
    blobs = []
    offset = 0
    for name, array in tensors.items():
        blob = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape), "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)  # the format pads the header with spaces
    path.write_bytes(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def _f32_gguf_as_torch_arrays() -> dict[str, np.ndarray]:
    data = F32_REF.read_bytes()
    out = {}
    for t in _header(F32_REF).tensors:
        values = decode_blocks(data[t.data_offset : t.end_offset], t.type_id)
        out[t.name] = values.reshape(tuple(reversed(t.shape)))  # PyTorch order: ne[0] last
    return out


def test_a_safetensors_reference_gives_the_gguf_reference_figures(tmp_path: Path) -> None:
    ref = tmp_path / "model.safetensors"
    _write_safetensors(ref, _f32_gguf_as_torch_arrays())
    header = parse_safetensors_header(ref.read_bytes())
    assert not isinstance(header, int)
    emb = next(t for t in header.tensors if t.name == "token_embd.weight")
    assert emb.shape == (256, 2048) and emb.dtype == "F32"  # ggml order, from PyTorch's [2048, 256]
    quant = MODELS / "tiny-llama-Q4_K_M.gguf"
    via_st = _compare(quant, ref)
    via_gguf = _compare(quant)
    assert via_st.reference_kind == "safetensors"
    assert [t.as_dict() | {"reference_type": None} for t in via_st.tensors] == [
        t.as_dict() | {"reference_type": None} for t in via_gguf.tensors
    ]


def test_safetensors_in_ggml_order_mismatches_and_is_skipped(tmp_path: Path) -> None:
    ref = tmp_path / "wrong-order.safetensors"
    arrays = _f32_gguf_as_torch_arrays()
    # Written with ggml's order: non-square matrices no longer match, square ones and vectors do.
    _write_safetensors(ref, {name: a.reshape(tuple(reversed(a.shape))) for name, a in arrays.items()})
    c = _compare(MODELS / "tiny-llama-Q8_0.gguf", ref)
    skipped = {s.name: s.reason for s in c.skipped}
    assert skipped["token_embd.weight"] == "shape 256x2048 here, 2048x256 in the reference"
    assert "blk.0.attn_q.weight" not in skipped  # 256 x 256


def test_reference_read_by_range_over_http(tmp_path: Path) -> None:
    ref = tmp_path / "model.safetensors"
    _write_safetensors(ref, _f32_gguf_as_torch_arrays())
    with RangeHTTPServer(root=tmp_path, files={"q.gguf": (MODELS / "tiny-llama-Q8_0.gguf").read_bytes()}) as srv:
        c = compare_files(srv.url_for("q.gguf"), srv.url_for("model.safetensors"))
        requests = list(srv.requests)
    assert c.n_suspect == 0 and len(c.tensors) == 21
    st_requests = [r for r in requests if r.path == "/model.safetensors"]
    assert all(r.range is not None for r in requests)
    assert sum(1 for r in st_requests if (r.range or "").startswith("bytes=0-")) == 1  # the header, once
    assert c.reference_io.bytes_read < ref.stat().st_size / 4


def test_no_common_tensor_is_a_warning(tmp_path: Path) -> None:
    ref = tmp_path / "other.safetensors"
    _write_safetensors(ref, {"model.embed_tokens.weight": np.zeros((4, 32), np.float32)})
    c = _compare(MODELS / "tiny-llama-Q8_0.gguf", ref)
    assert c.tensors == () and [f.code for f in c.findings] == ["compare.no_common_tensors"]
    assert {s.reason for s in c.skipped} == {"not in the reference"}
