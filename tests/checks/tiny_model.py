"""Tiny models written by gguf-py's GGUFWriter, one defect each, for the header-check tests.

:func:`tiny` is a llama-like model with the shapes llama.cpp's llama case creates;
tests edit its keys and tensors, :func:`write` writes it (or its shards) and
:func:`parse` reads the header back. The ``audit`` fixture (conftest.py) does both
and runs :func:`gguf_audit.checks.header.check_semantics`.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType
from typing import Any

import gguf
import numpy as np
from corpus import corpus_dir
from gguf.constants import GGML_QUANT_SIZES, GGMLQuantizationType, GGUFValueType

from gguf_audit.findings import Finding
from gguf_audit.format.model import Header
from gguf_audit.format.parser import parse_header

Q = GGMLQuantizationType
V = GGUFValueType

# The standard conversation as the template audit renders a Llama-2 template (add_generation_prompt=False).
LLAMA2_RENDER = (
    "<s>[INST] <<SYS>>\nYou are a helpful assistant.\n<</SYS>>\n\nHello! Who are you? [/INST] "
    "I am an assistant. How can I help? </s><s>[INST] What is the weather in Paris? [/INST] "
    "Let me check: it is sunny in Paris. </s>"
)


CHATML_RENDER = (
    "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\nHello! Who are you?<|im_end|>\n"
    "<|im_start|>assistant\nI am an assistant. How can I help?<|im_end|>\n"
)


@dataclass
class Model:
    """Keys and tensor infos to hand to GGUFWriter; tests edit them before writing."""

    arch: str
    kv: dict[str, tuple[Any, V, V | None]] = field(default_factory=dict)
    tensors: dict[str, tuple[tuple[int, ...], Q]] = field(default_factory=dict)
    drop_arch: bool = False

    def set(self, key: str, value: Any, vtype: V, sub: V | None = None) -> Model:
        self.kv[key] = (value, vtype, sub)
        return self

    def drop(self, *keys: str) -> Model:
        for key in keys:
            self.kv.pop(key.format(arch=self.arch), None)
            self.tensors.pop(key, None)
        return self


def tokenizer_kvs(model: Model, n_vocab: int, kind: str = "llama") -> None:
    tokens = ["<unk>", "<s>", "</s>"] + [f"t{i}" for i in range(3, n_vocab)]
    model.set("tokenizer.ggml.model", kind, V.STRING)
    model.set("tokenizer.ggml.pre", "default", V.STRING)
    model.set("tokenizer.ggml.tokens", tokens, V.ARRAY, V.STRING)
    model.set("tokenizer.ggml.scores", [0.0] * n_vocab, V.ARRAY, V.FLOAT32)
    model.set("tokenizer.ggml.token_type", [2, 3, 3] + [1] * (n_vocab - 3), V.ARRAY, V.INT32)
    model.set("tokenizer.ggml.bos_token_id", 1, V.UINT32)
    model.set("tokenizer.ggml.eos_token_id", 2, V.UINT32)
    model.set("tokenizer.ggml.unknown_token_id", 0, V.UINT32)
    if kind == "gpt2":
        model.set("tokenizer.ggml.merges", ["t 3", "t 4"], V.ARRAY, V.STRING)


def tiny(
    arch: str = "llama",
    *,
    n_embd: int = 32,
    n_head: int = 4,
    n_head_kv: int = 2,
    n_ff: int = 64,
    n_layer: int = 2,
    n_vocab: int = 64,
    wtype: Q = Q.F32,
    tied: bool = False,
) -> Model:
    """A llama-like model: the shapes llama.cpp's llama case creates (head_dim = n_embd / n_head)."""
    m = Model(arch)
    hd = n_embd // n_head
    m.set(f"{arch}.context_length", 128, V.UINT32)
    m.set(f"{arch}.embedding_length", n_embd, V.UINT32)
    m.set(f"{arch}.feed_forward_length", n_ff, V.UINT32)
    m.set(f"{arch}.block_count", n_layer, V.UINT32)
    m.set(f"{arch}.attention.head_count", n_head, V.UINT32)
    m.set(f"{arch}.attention.head_count_kv", n_head_kv, V.UINT32)
    m.set(f"{arch}.attention.layer_norm_rms_epsilon", 1e-5, V.FLOAT32)
    m.set("general.file_type", 0 if wtype == Q.F32 else {Q.Q8_0: 7, Q.F16: 1, Q.Q4_0: 2}[wtype], V.UINT32)
    if wtype != Q.F32:
        m.set("general.quantization_version", 2, V.UINT32)
    tokenizer_kvs(m, n_vocab)
    m.tensors["token_embd.weight"] = ((n_embd, n_vocab), wtype)
    m.tensors["output_norm.weight"] = ((n_embd,), Q.F32)
    if not tied:
        m.tensors["output.weight"] = ((n_embd, n_vocab), wtype)
    for i in range(n_layer):
        b = f"blk.{i}."
        m.tensors[b + "attn_norm.weight"] = ((n_embd,), Q.F32)
        m.tensors[b + "attn_q.weight"] = ((n_embd, n_head * hd), wtype)
        m.tensors[b + "attn_k.weight"] = ((n_embd, n_head_kv * hd), wtype)
        m.tensors[b + "attn_v.weight"] = ((n_embd, n_head_kv * hd), wtype)
        m.tensors[b + "attn_output.weight"] = ((n_head * hd, n_embd), wtype)
        m.tensors[b + "ffn_norm.weight"] = ((n_embd,), Q.F32)
        m.tensors[b + "ffn_gate.weight"] = ((n_embd, n_ff), wtype)
        m.tensors[b + "ffn_up.weight"] = ((n_embd, n_ff), wtype)
        m.tensors[b + "ffn_down.weight"] = ((n_ff, n_embd), wtype)
    return m


def _raw(shape: tuple[int, ...], qtype: Q) -> np.ndarray[Any, Any]:
    """Zero bytes for a tensor of ``shape`` (ggml order) and ``qtype``, in GGUFWriter's byte shape."""
    block, size = GGML_QUANT_SIZES[qtype]
    np_shape = tuple(reversed(shape))
    return np.zeros((*np_shape[:-1], np_shape[-1] // block * size), dtype=np.uint8)


def write(model: Model, path: Path, *, split_max_tensors: int = 0) -> list[Path]:
    writer = gguf.GGUFWriter(path, model.arch, split_max_tensors=split_max_tensors)
    if model.drop_arch:
        del writer.kv_data[0]["general.architecture"]
    for key, (value, vtype, sub) in model.kv.items():
        writer.add_key_value(key, value, vtype, sub)
    for name, (shape, qtype) in model.tensors.items():
        writer.add_tensor(name, _raw(shape, qtype), raw_dtype=qtype)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return writer.format_shard_names(path)


def parse(path: Path) -> Header:
    data = path.read_bytes()
    header = parse_header(data, len(data))
    assert isinstance(header, Header)
    return header


def codes(findings: list[Finding]) -> list[str]:
    return [f.code for f in findings]


def only(findings: list[Finding], code: str) -> list[Finding]:
    return [f for f in findings if f.code == code]


def corpus_files() -> list[Path]:
    files = sorted(corpus_dir().rglob("*.gguf"))
    if not files:
        raise FileNotFoundError(f"no GGUF corpus at {corpus_dir()}; set GGUF_AUDIT_CORPUS")
    return files


def python_lines(fn: Callable[[], object]) -> int:
    """How many lines of Python ``fn`` runs (``sys.settrace`` line events, in every frame it enters).

    Work done a Python step per token or tensor shows as that many lines,
    whatever the machine's speed or load: a count to assert, where a time
    would fail on a busy machine and pass a slow algorithm on a fast one.
    """
    count = 0

    def local(frame: FrameType, event: str, arg: object) -> Callable[..., object]:
        nonlocal count
        if event == "line":
            count += 1
        return local

    def entered(frame: FrameType, event: str, arg: object) -> Callable[..., object]:
        return local

    previous = sys.gettrace()
    sys.settrace(entered)
    try:
        fn()
    finally:
        sys.settrace(previous)
    return count
