"""Chat templates and special tokens of several model families, as their upstream repositories publish them.

Each :class:`Family` is the upstream side (template, config.json, generation_config.json and
tokenizer_config.json ids and texts) of a tiny model whose special tokens sit at the end of a
64-token vocabulary; :func:`family_model` writes the GGUF side that matches it, as
llama.cpp's converter would. The template texts are those the families ship (short facts of
their formats); the ids are remapped into the tiny vocabulary.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Any

from tiny_model import Model, V, tiny

N_VOCAB = 64

LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
    "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | trim + "
    "'<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}"
)

CHATML_QWEN = (
    "{%- for message in messages %}\n"
    "    {{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}\n"
    "{%- endfor %}\n"
    "{%- if add_generation_prompt %}\n"
    "    {{- '<|im_start|>assistant\\n' }}\n"
    "{%- endif %}\n"
)

GEMMA = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'assistant') %}{% set role = 'model' %}"
    "{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + role + '\\n' + "
    "message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}"
    "{{'<start_of_turn>model\\n'}}{% endif %}"
)

MISTRAL = (
    "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ message['content'] + eos_token}}"
    "{% else %}{{ raise_exception('Only user and assistant roles are supported!') }}{% endif %}{% endfor %}"
)

PHI3 = (
    "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\\n' + message['content'] + "
    "'<|end|>\\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\\n' + message['content'] + '<|end|>\\n'}}"
    "{% elif message['role'] == 'assistant' %}{{'<|assistant|>\\n' + message['content'] + '<|end|>\\n'}}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\\n' }}{% else %}{{ eos_token }}{% endif %}"
)


@dataclass(frozen=True)
class Family:
    name: str
    template: str
    specials: dict[str, int]
    """Special token text to id (in the tiny vocabulary)."""
    gguf: dict[str, str]
    """GGUF key suffix (bos_token_id, eos_token_id, eot_token_id, padding_token_id) to token text."""
    config: dict[str, Any]
    generation: dict[str, Any] = field(default_factory=dict)
    tokenizer_config: dict[str, Any] = field(default_factory=dict)
    template_as_list: bool = False

    def upstream_documents(self) -> dict[str, Any]:
        tc = dict(self.tokenizer_config)
        tc["chat_template"] = (
            [{"name": "default", "template": self.template}] if self.template_as_list else self.template
        )
        tc["added_tokens_decoder"] = {str(i): {"content": t, "special": True} for t, i in self.specials.items()}
        docs: dict[str, Any] = {"config.json": self.config, "tokenizer_config.json": tc}
        if self.generation:
            docs["generation_config.json"] = self.generation
        return copy.deepcopy(docs)  # tests edit them


def _ids(*texts: str) -> dict[str, int]:
    return {t: N_VOCAB - len(texts) + i for i, t in enumerate(texts)}


def _shape(**extra: Any) -> dict[str, Any]:
    """config.json keys of the tiny model's shapes (tiny_model.tiny's defaults)."""
    base = {
        "hidden_size": 32,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_hidden_layers": 2,
        "max_position_embeddings": 128,
        "vocab_size": N_VOCAB,
    }
    return {**base, **extra}


L3 = _ids(
    "<|begin_of_text|>", "<|end_of_text|>", "<|eom_id|>", "<|eot_id|>", "<|start_header_id|>", "<|end_header_id|>"
)
QW = _ids("<|endoftext|>", "<|im_start|>", "<|im_end|>")
GM = {"<pad>": 0, "<eos>": 1, "<bos>": 2, **_ids("<start_of_turn>", "<end_of_turn>")}
MS = {"<unk>": 0, "<s>": 1, "</s>": 2}
PH = {"<unk>": 0, "<s>": 1, "</s>": 2, **_ids("<|endoftext|>", "<|assistant|>", "<|system|>", "<|end|>", "<|user|>")}

FAMILIES = [
    Family(
        "llama-3.1",
        LLAMA3,
        L3,
        {"bos_token_id": "<|begin_of_text|>", "eos_token_id": "<|eot_id|>"},
        _shape(
            bos_token_id=L3["<|begin_of_text|>"],
            eos_token_id=[L3["<|end_of_text|>"], L3["<|eom_id|>"], L3["<|eot_id|>"]],
            rope_theta=500000.0,
            rope_scaling={"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192},
        ),
        {"bos_token_id": L3["<|begin_of_text|>"], "eos_token_id": [L3["<|end_of_text|>"], L3["<|eot_id|>"]]},
        {"bos_token": "<|begin_of_text|>", "eos_token": "<|eot_id|>"},
    ),
    Family(
        "qwen2.5",
        CHATML_QWEN,
        QW,
        {"bos_token_id": "<|endoftext|>", "eos_token_id": "<|im_end|>", "padding_token_id": "<|endoftext|>"},
        _shape(
            bos_token_id=QW["<|endoftext|>"],
            eos_token_id=QW["<|im_end|>"],
            rope_theta=1000000.0,
            rope_scaling={"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32},
        ),
        {"eos_token_id": [QW["<|im_end|>"], QW["<|endoftext|>"]], "pad_token_id": QW["<|endoftext|>"]},
        {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
        template_as_list=True,
    ),
    Family(
        "gemma-2",
        GEMMA,
        GM,
        {
            "bos_token_id": "<bos>",
            "eos_token_id": "<eos>",
            "eot_token_id": "<end_of_turn>",
            "padding_token_id": "<pad>",
        },
        _shape(bos_token_id=2, eos_token_id=1, pad_token_id=0),
        {"bos_token_id": 2, "eos_token_id": [1, GM["<end_of_turn>"]], "pad_token_id": 0},
        {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>"},
    ),
    Family(
        "mistral",
        MISTRAL,
        MS,
        {"bos_token_id": "<s>", "eos_token_id": "</s>"},
        _shape(bos_token_id=1, eos_token_id=2, rope_theta=1000000.0),
        {},
        {"bos_token": "<s>", "eos_token": "</s>"},
    ),
    Family(
        "phi-3",
        PHI3,
        PH,
        {"bos_token_id": "<s>", "eos_token_id": "<|endoftext|>", "eot_token_id": "<|end|>"},
        _shape(bos_token_id=1, eos_token_id=PH["<|endoftext|>"], rope_scaling=None),
        {"bos_token_id": 1, "eos_token_id": [PH["<|endoftext|>"], PH["<|end|>"]]},
        {"bos_token": "<s>", "eos_token": "<|endoftext|>"},
    ),
]


def family_model(family: Family) -> Model:
    """The tiny GGUF a converter makes of ``family``'s upstream: its vocabulary, ids, template and rope keys."""
    m = tiny()
    tokens = [f"t{i}" for i in range(N_VOCAB)]
    types = [1] * N_VOCAB
    for text, tid in family.specials.items():
        tokens[tid] = text
        types[tid] = 3
    m.set("tokenizer.ggml.tokens", tokens, V.ARRAY, V.STRING)
    m.set("tokenizer.ggml.token_type", types, V.ARRAY, V.INT32)
    m.drop("tokenizer.ggml.unknown_token_id")
    for key, text in family.gguf.items():
        m.set(f"tokenizer.ggml.{key}", family.specials[text], V.UINT32)
    m.set("tokenizer.chat_template", family.template, V.STRING)
    theta = family.config.get("rope_theta")
    if theta is not None:
        m.set("llama.rope.freq_base", float(theta), V.FLOAT32)
    scaling = family.config.get("rope_scaling") or {}
    kind = scaling.get("rope_type", scaling.get("type"))
    if kind == "yarn":
        m.set("llama.rope.scaling.type", "yarn", V.STRING)
        m.set("llama.rope.scaling.factor", float(scaling["factor"]), V.FLOAT32)
        m.set("llama.rope.scaling.original_context_length", scaling["original_max_position_embeddings"], V.UINT32)
    if kind == "llama3":
        m.tensors["rope_freqs.weight"] = ((4,), m.tensors["output_norm.weight"][1])
    return m
