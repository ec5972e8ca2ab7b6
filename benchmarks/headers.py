"""Realistic GGUF headers for the header benchmark, with sparse tensor data.

Three model shapes stand for the vocabularies that make headers big:

- ``32k``: Llama-2-7B-like, a SentencePiece (``llama``) vocabulary of 32,000
  tokens with scores and token types, 32 blocks.
- ``152k``: Qwen2-72B-like, a byte-level BPE (``gpt2``) vocabulary of 152,064
  tokens with token types and about one merge per token, 80 blocks.
- ``256k``: Gemma-7B-like, a SentencePiece vocabulary of 256,000 tokens with
  scores and token types, 28 blocks, tied embeddings.

The header is written by :func:`gguf_audit.testing.builder.build_gguf_layout`
(header and padding only); the file is then extended to its full size with
``truncate``, so the tensor data is a sparse hole: a 40 GB model costs its
header's bytes on disk. Everything is deterministic from the spec's seed.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from gguf_audit.format.ggml_types import ggml_type_info
from gguf_audit.format.model import ValueType
from gguf_audit.testing.builder import (
    KV,
    Tensor,
    build_gguf_layout,
    kv_array,
    kv_bool,
    kv_f32,
    kv_str,
    kv_u32,
)

__all__ = ["SPECS", "GeneratedFile", "ModelSpec", "build_header", "make_vocab", "write_model"]

ALIGNMENT: Final = 32

# ggml type ids (GGMLQuantizationType).
F32, Q8_0, Q4_K, Q6_K = 0, 8, 12, 14

# llama.cpp's llama_token_type.
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, BYTE = 1, 2, 3, 4, 6


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """The shape of one generated model."""

    label: str
    name: str
    arch: str
    tokenizer: str
    """``llama`` (SentencePiece: tokens, scores, token types) or ``gpt2`` (byte-level BPE with merges)."""
    vocab_size: int
    n_layer: int
    n_embd: int
    n_ff: int
    n_head: int
    n_head_kv: int
    head_dim: int
    context_length: int
    rope_freq_base: float
    qkv_bias: bool = False
    tied_embeddings: bool = False
    ffn_down_type: int = Q6_K
    """Q4_K_M keeps ffn_down in Q6_K; rows that are not whole 256-blocks fall back to Q8_0."""
    cjk_fraction: float = 0.05
    n_regular: int | None = None
    """gpt2 vocabularies: regular tokens before the specials; the rest up to vocab_size are padding."""
    seed: int = 0


SPECS: Final = {
    "32k": ModelSpec(
        label="32k",
        name="Llama-2-7B-like",
        arch="llama",
        tokenizer="llama",
        vocab_size=32000,
        n_layer=32,
        n_embd=4096,
        n_ff=11008,
        n_head=32,
        n_head_kv=32,
        head_dim=128,
        context_length=4096,
        rope_freq_base=10000.0,
        cjk_fraction=0.03,
        seed=32,
    ),
    "152k": ModelSpec(
        label="152k",
        name="Qwen2-72B-like",
        arch="qwen2",
        tokenizer="gpt2",
        vocab_size=152064,
        n_layer=80,
        n_embd=8192,
        n_ff=29568,
        n_head=64,
        n_head_kv=8,
        head_dim=128,
        context_length=32768,
        rope_freq_base=1000000.0,
        qkv_bias=True,
        ffn_down_type=Q8_0,  # 29568 is not a multiple of 256
        cjk_fraction=0.12,
        n_regular=151643,
        seed=152,
    ),
    "256k": ModelSpec(
        label="256k",
        name="Gemma-7B-like",
        arch="gemma",
        tokenizer="llama",
        vocab_size=256000,
        n_layer=28,
        n_embd=3072,
        n_ff=24576,
        n_head=16,
        n_head_kv=16,
        head_dim=256,
        context_length=8192,
        rope_freq_base=10000.0,
        tied_embeddings=True,
        cjk_fraction=0.12,
        seed=256,
    ),
}


@dataclass(frozen=True, slots=True)
class GeneratedFile:
    """A generated file on disk and the sizes a benchmark compares against."""

    label: str
    path: Path
    spec: ModelSpec
    header_bytes: int
    """End of the last tensor info: the exact header size."""
    data_offset: int
    """Start of the data section (the header padded to the alignment)."""
    file_size: int
    n_kv: int
    n_tensors: int
    on_disk_bytes: int
    """Blocks actually allocated (the data is a sparse hole)."""


# --------------------------------------------------------------- vocabulary

# Mean piece length in characters at rank fraction f: MU_A + MU_B * (1 - exp(-MU_K * f)).
# Real vocabularies rise fast over the first tenth of their ranks, then level off
# (llama.cpp's ggml-vocab-llama-spm: mean bytes per decile 5.0, 5.9, 6.5 ... 7.8;
# gpt-2: 5.4, 6.7, 7.1 ... 7.5); this gives 5.0, 6.1, 6.8 ... 8.0 for the 32k vocabulary.
MU_A, MU_B, MU_K = 2.0, 4.0, 6.0

_LETTERS: Final = "etaoinshrdlcumwfgypbvkjxqz"
# English letter frequencies, in percent, in the order of _LETTERS.
_LETTER_WEIGHTS: Final = (12.7, 9.1, 8.2, 7.5, 7.0, 6.7, 6.3, 6.1, 6.0, 4.3, 4.0, 2.8, 2.8, 2.4, 2.4, 2.2, 2.0, 2.0)
_LETTER_WEIGHTS_RARE: Final = (1.9, 1.5, 1.0, 0.8, 0.2, 0.2, 0.1, 0.1)
_WEIGHTS: Final = _LETTER_WEIGHTS + _LETTER_WEIGHTS_RARE
_OTHER: Final = "0123456789_.,;:!?-'\"()[]{}<>/\\=+*#@$%&"
_ACCENTED: Final = "éèàüöäçñßøåíóúâêô"
_CYRILLIC: Final = "абвгдежзийклмнопрстуфхцчшщыэюя"


def _gpt2_byte_map() -> list[str]:
    """GPT-2's bytes_to_unicode: every byte as a printable character (space is 'Ġ')."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = [""] * 256
    for b in printable:
        table[b] = chr(b)
    extra = 0
    for b in range(256):
        if not table[b]:
            table[b] = chr(256 + extra)
            extra += 1
    return table


_BYTE_MAP: Final = _gpt2_byte_map()


def _to_byte_level(text: str) -> str:
    return "".join(_BYTE_MAP[b] for b in text.encode("utf-8"))


def _piece(rng: random.Random, frac: float, cjk_fraction: float) -> str:
    """One token's text: longer the later it ranks (``frac`` in [0, 1))."""
    roll = rng.random()
    if roll < cjk_fraction:
        return "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(rng.choice((1, 1, 2, 2, 3))))
    n = min(16, max(1, round(rng.gauss(MU_A + MU_B * (1.0 - math.exp(-MU_K * frac)), 1.0 + 1.5 * frac))))
    if roll < cjk_fraction + 0.02:
        return "".join(rng.choices(_CYRILLIC, k=n))
    word = rng.choices(_LETTERS, _WEIGHTS, k=n)
    if rng.random() < 0.08:
        word[rng.randrange(n)] = rng.choice(_OTHER)
    if rng.random() < 0.03:
        word[rng.randrange(n)] = rng.choice(_ACCENTED)
    if rng.random() < 0.12:
        word[0] = word[0].upper()
    return "".join(word)


@dataclass(frozen=True, slots=True)
class Vocab:
    tokens: list[str]
    token_types: list[int]
    scores: list[float] | None
    merges: list[str] | None
    bos_id: int
    eos_id: int
    unk_id: int | None
    pad_id: int


def make_vocab(spec: ModelSpec) -> Vocab:
    """A vocabulary of ``spec.vocab_size`` unique tokens, specials and bytes first as real ones have."""
    rng = random.Random(spec.seed)
    n = spec.vocab_size
    if spec.tokenizer == "gpt2":
        return _gpt2_vocab(spec, rng, n)
    return _sentencepiece_vocab(spec, rng, n)


def _unique_pieces(rng: random.Random, count: int, total: int, cjk: float, mark: str, seen: set[str]) -> list[str]:
    """``count`` distinct token strings; ``mark`` starts about half of them (a word boundary)."""
    out: list[str] = []
    while len(out) < count:
        frac = len(out) / max(total, 1)
        text = _piece(rng, frac, cjk)
        token = mark + text if rng.random() < 0.5 else text
        if token not in seen:
            seen.add(token)
            out.append(token)
    return out


def _sentencepiece_vocab(spec: ModelSpec, rng: random.Random, n: int) -> Vocab:
    if spec.arch == "gemma":
        specials = ["<pad>", "<eos>", "<bos>", "<unk>", "<mask>"]
        types = [CONTROL, CONTROL, CONTROL, UNKNOWN, USER_DEFINED]
        unused = [f"<unused{i}>" for i in range(min(99, max(n - 256 - 5, 0)))]
        specials += unused
        types += [USER_DEFINED] * len(unused)
        pad_id, eos_id, bos_id, unk_id = 0, 1, 2, 3
    else:
        specials = ["<unk>", "<s>", "</s>"]
        types = [UNKNOWN, CONTROL, CONTROL]
        unk_id, bos_id, eos_id, pad_id = 0, 1, 2, 0
    byte_tokens = [f"<0x{b:02X}>" for b in range(256)]
    head = specials + byte_tokens
    types += [BYTE] * len(byte_tokens)
    pieces = _unique_pieces(rng, n - len(head), n, spec.cjk_fraction, "▁", set(head))
    tokens = (head + pieces)[:n]
    types = (types + [NORMAL] * len(pieces))[:n]
    scores = [0.0] * len(head) + [-float(i) for i in range(len(pieces))]
    return Vocab(tokens, types, scores[:n], None, bos_id, eos_id, unk_id, pad_id)


def _gpt2_vocab(spec: ModelSpec, rng: random.Random, n: int) -> Vocab:
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    regular = n - len(specials) if spec.n_regular is None else min(spec.n_regular, n - len(specials))
    byte_tokens = list(_BYTE_MAP)
    texts = _unique_pieces(rng, regular - len(byte_tokens), regular, spec.cjk_fraction, " ", set())
    pieces: list[str] = []
    seen = set(byte_tokens)
    for text in texts:
        token = _to_byte_level(text)
        if token not in seen:  # distinct texts stay distinct through the byte map
            seen.add(token)
            pieces.append(token)
    tokens = byte_tokens + pieces
    types = [NORMAL] * len(tokens)
    # Every regular token past the bytes is made by one merge of two parts: "left right".
    merges: list[str] = []
    for token in pieces:
        if len(token) >= 2:
            cut = rng.randrange(1, len(token))
            merges.append(f"{token[:cut]} {token[cut:]}")
    eos_id = len(tokens)
    tokens += specials
    types += [CONTROL] * len(specials)
    pads = [f"[PAD{i}]" for i in range(len(tokens), n)]
    tokens += pads
    types += [USER_DEFINED] * len(pads)
    return Vocab(tokens, types, None, merges, eos_id, eos_id, None, eos_id)


# ------------------------------------------------------------ chat template


def chat_template(spec: ModelSpec) -> str:
    """A tool-calling chat template of a few KB, in the model family's markers."""
    if spec.arch == "gemma":
        start, end, system_role, assistant = "<start_of_turn>", "<end_of_turn>", "user", "model"
    elif spec.arch == "llama":
        start, end, system_role, assistant = "[INST] ", " [/INST]", "system", "assistant"
    else:
        start, end, system_role, assistant = "<|im_start|>", "<|im_end|>", "system", "assistant"
    return (
        "{%- if tools %}\n"
        f"    {{{{- '{start}{system_role}\\n' }}}}\n"
        "    {%- if messages[0]['role'] == 'system' %}\n"
        "        {{- messages[0]['content'] }}\n"
        "    {%- else %}\n"
        "        {{- 'You are a helpful assistant.' }}\n"
        "    {%- endif %}\n"
        '    {{- "\\n\\n# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n'
        'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}\n'
        "    {%- for tool in tools %}\n"
        '        {{- "\\n" }}\n'
        "        {{- tool | tojson }}\n"
        "    {%- endfor %}\n"
        '    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and '
        "arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n"
        '{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call>' + end + '\\n" }}\n'
        "{%- else %}\n"
        "    {%- if messages[0]['role'] == 'system' %}\n"
        f"        {{{{- '{start}{system_role}\\n' + messages[0]['content'] + '{end}\\n' }}}}\n"
        "    {%- else %}\n"
        f"        {{{{- '{start}{system_role}\\nYou are a helpful assistant.{end}\\n' }}}}\n"
        "    {%- endif %}\n"
        "{%- endif %}\n"
        "{%- for message in messages %}\n"
        "    {%- if (message.role == 'user') or (message.role == 'system' and not loop.first) or "
        "(message.role == 'assistant' and not message.tool_calls) %}\n"
        f"        {{{{- '{start}' + message.role + '\\n' + message.content + '{end}' + '\\n' }}}}\n"
        "    {%- elif message.role == 'assistant' %}\n"
        f"        {{{{- '{start}{assistant}' }}}}\n"
        "        {%- if message.content %}\n"
        "            {{- '\\n' + message.content }}\n"
        "        {%- endif %}\n"
        "        {%- for tool_call in message.tool_calls %}\n"
        "            {%- if tool_call.function is defined %}\n"
        "                {%- set tool_call = tool_call.function %}\n"
        "            {%- endif %}\n"
        '            {{- \'\\n<tool_call>\\n{"name": "\' }}\n'
        "            {{- tool_call.name }}\n"
        '            {{- \'", "arguments": \' }}\n'
        "            {{- tool_call.arguments | tojson }}\n"
        "            {{- '}\\n</tool_call>' }}\n"
        "        {%- endfor %}\n"
        f"        {{{{- '{end}\\n' }}}}\n"
        "    {%- elif message.role == 'tool' %}\n"
        "        {%- if (loop.index0 == 0) or (messages[loop.index0 - 1].role != 'tool') %}\n"
        f"            {{{{- '{start}user' }}}}\n"
        "        {%- endif %}\n"
        "        {{- '\\n<tool_response>\\n' }}\n"
        "        {{- message.content }}\n"
        "        {{- '\\n</tool_response>' }}\n"
        "        {%- if loop.last or (messages[loop.index0 + 1].role != 'tool') %}\n"
        f"            {{{{- '{end}\\n' }}}}\n"
        "        {%- endif %}\n"
        "    {%- elif message.role == 'developer' %}\n"
        "        {{- raise_exception('developer messages are not supported by this template') }}\n"
        "    {%- else %}\n"
        "        {{- raise_exception('Conversation roles must be user, assistant, system or tool. Got ' "
        "+ message.role) }}\n"
        "    {%- endif %}\n"
        "{%- endfor %}\n"
        "{%- if add_generation_prompt %}\n"
        f"    {{{{- '{start}{assistant}\\n' }}}}\n"
        "    {%- if enable_thinking is defined and enable_thinking is false %}\n"
        "        {{- '<think>\\n\\n</think>\\n\\n' }}\n"
        "    {%- endif %}\n"
        "{%- endif %}\n"
        "{#- Multimodal content parts: only text is rendered; images and audio are placeholders. #}\n"
        "{%- macro render_content(content) %}\n"
        "    {%- if content is string %}\n"
        "        {{- content }}\n"
        "    {%- else %}\n"
        "        {%- for part in content %}\n"
        "            {%- if part.type == 'text' %}{{- part.text }}\n"
        "            {%- elif part.type == 'image' or 'image' in part %}{{- '<image>' }}\n"
        "            {%- elif part.type == 'audio' %}{{- '<audio>' }}\n"
        "            {%- endif %}\n"
        "        {%- endfor %}\n"
        "    {%- endif %}\n"
        "{%- endmacro %}\n"
    )


# -------------------------------------------------------------- the header


def _kvs(spec: ModelSpec, vocab: Vocab) -> list[KV]:
    a = spec.arch
    kvs = [
        kv_str("general.architecture", a),
        kv_str("general.type", "model"),
        kv_str("general.name", spec.name),
        kv_str("general.basename", spec.name.split("-")[0]),
        kv_str("general.size_label", spec.name.split("-")[-2] if "-" in spec.name else "7B"),
        kv_str("general.license", "other"),
        kv_str("general.license.link", "https://example.invalid/LICENSE"),
        kv_array("general.tags", ValueType.STRING, ["text-generation", "chat", "benchmark"]),
        kv_array("general.languages", ValueType.STRING, ["en", "zh", "fr", "de", "es", "ru", "ja", "ko"]),
        kv_u32(f"{a}.context_length", spec.context_length),
        kv_u32(f"{a}.embedding_length", spec.n_embd),
        kv_u32(f"{a}.block_count", spec.n_layer),
        kv_u32(f"{a}.feed_forward_length", spec.n_ff),
        kv_u32(f"{a}.attention.head_count", spec.n_head),
        kv_u32(f"{a}.attention.head_count_kv", spec.n_head_kv),
        kv_f32(f"{a}.rope.freq_base", spec.rope_freq_base),
        kv_f32(f"{a}.attention.layer_norm_rms_epsilon", 1e-6 if a != "llama" else 1e-5),
    ]
    if a == "gemma":
        kvs += [
            kv_u32(f"{a}.attention.key_length", spec.head_dim),
            kv_u32(f"{a}.attention.value_length", spec.head_dim),
        ]
    else:
        kvs += [kv_u32(f"{a}.rope.dimension_count", spec.head_dim)]
    kvs += [
        kv_u32("general.file_type", 15),  # MOSTLY_Q4_K_M
        kv_str("tokenizer.ggml.model", spec.tokenizer),
        kv_str("tokenizer.ggml.pre", "qwen2" if spec.tokenizer == "gpt2" else "default"),
        kv_array("tokenizer.ggml.tokens", ValueType.STRING, vocab.tokens),
    ]
    if vocab.scores is not None:
        kvs.append(kv_array("tokenizer.ggml.scores", ValueType.FLOAT32, vocab.scores))
    kvs.append(kv_array("tokenizer.ggml.token_type", ValueType.INT32, vocab.token_types))
    if vocab.merges is not None:
        kvs.append(kv_array("tokenizer.ggml.merges", ValueType.STRING, vocab.merges))
    kvs += [
        kv_u32("tokenizer.ggml.bos_token_id", vocab.bos_id),
        kv_u32("tokenizer.ggml.eos_token_id", vocab.eos_id),
        kv_u32("tokenizer.ggml.padding_token_id", vocab.pad_id),
    ]
    if vocab.unk_id is not None:
        kvs.append(kv_u32("tokenizer.ggml.unknown_token_id", vocab.unk_id))
    kvs += [
        kv_bool("tokenizer.ggml.add_bos_token", spec.tokenizer == "llama"),
        kv_bool("tokenizer.ggml.add_eos_token", False),
        kv_str("tokenizer.chat_template", chat_template(spec)),
        kv_u32("general.quantization_version", 2),
    ]
    return kvs


def _tensor_shapes(spec: ModelSpec) -> list[tuple[str, tuple[int, ...], int]]:
    """(name, dims in ggml order, type) of every tensor, in the order llama.cpp writes them."""
    e, f, v = spec.n_embd, spec.n_ff, spec.vocab_size
    q_out = spec.n_head * spec.head_dim
    kv_out = spec.n_head_kv * spec.head_dim
    out: list[tuple[str, tuple[int, ...], int]] = [
        ("token_embd.weight", (e, v), Q6_K if spec.tied_embeddings else Q4_K)
    ]
    for i in range(spec.n_layer):
        p = f"blk.{i}."
        out.append((p + "attn_norm.weight", (e,), F32))
        out.append((p + "attn_q.weight", (e, q_out), Q4_K))
        if spec.qkv_bias:
            out.append((p + "attn_q.bias", (q_out,), F32))
        out.append((p + "attn_k.weight", (e, kv_out), Q4_K))
        if spec.qkv_bias:
            out.append((p + "attn_k.bias", (kv_out,), F32))
        out.append((p + "attn_v.weight", (e, kv_out), Q6_K))
        if spec.qkv_bias:
            out.append((p + "attn_v.bias", (kv_out,), F32))
        out.append((p + "attn_output.weight", (q_out, e), Q4_K))
        out.append((p + "ffn_gate.weight", (e, f), Q4_K))
        out.append((p + "ffn_up.weight", (e, f), Q4_K))
        out.append((p + "ffn_down.weight", (f, e), spec.ffn_down_type))
        out.append((p + "ffn_norm.weight", (e,), F32))
    out.append(("output_norm.weight", (e,), F32))
    if not spec.tied_embeddings:
        out.append(("output.weight", (e, v), Q6_K))
    return out


def _padded(n: int) -> int:
    return -(-n // ALIGNMENT) * ALIGNMENT


def build_header(spec: ModelSpec) -> tuple[bytes, int, int, int, int, int]:
    """The header bytes (with padding) and (header_bytes, data_offset, file_size, n_kv, n_tensors).

    Tensor data is not built: each tensor carries its packed offset and ``data=b""``,
    and the file size is the data section's end computed from the types and shapes.
    """
    vocab = make_vocab(spec)
    kvs = _kvs(spec, vocab)
    tensors: list[Tensor] = []
    running = 0
    for name, dims, ggml_type in _tensor_shapes(spec):
        tensors.append(Tensor(name, dims, ggml_type, offset=running, data=b""))
        running += _padded(ggml_type_info(ggml_type).n_bytes(math.prod(dims)))
    layout = build_gguf_layout(kvs, tensors, alignment=ALIGNMENT, include_data=False)
    file_size = layout.data_section_offset + running
    return layout.content, layout.header_bytes, layout.data_section_offset, file_size, len(kvs), len(tensors)


def write_model(spec: ModelSpec, directory: Path, *, vocab_size: int | None = None) -> GeneratedFile:
    """Write ``spec``'s header into ``directory`` and extend the file sparsely to its full size."""
    if vocab_size is not None:
        spec = replace(spec, vocab_size=vocab_size, label=f"{spec.label}@{vocab_size}")
    content, header_bytes, data_offset, file_size, n_kv, n_tensors = build_header(spec)
    path = directory / f"{spec.name}-{spec.label.replace('@', '-')}-Q4_K_M.gguf"
    with path.open("wb") as f:
        f.write(content)
        f.truncate(file_size)  # a hole: no data blocks are allocated
    on_disk = path.stat().st_blocks * 512
    return GeneratedFile(spec.label, path, spec, header_bytes, data_offset, file_size, n_kv, n_tensors, on_disk)
