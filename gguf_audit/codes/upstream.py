"""The ``upstream.*`` codes: a file against its upstream ``config.json``, ``tokenizer_config.json`` and
``generation_config.json`` (``checks/upstream.py``). llama.cpp never reads those files, so it loads every
such file; the severity says what the difference does.
"""

from __future__ import annotations

from typing import Final

from gguf_audit.codes.code import Code
from gguf_audit.codes.model import CodeInfo, LlamaCpp, Severity

__all__ = ["ENTRIES"]

ENTRIES: Final[tuple[CodeInfo, ...]] = (
    CodeInfo(
        Code.UPSTREAM_UNREADABLE,
        Severity.WARNING,
        LlamaCpp.LOADS,
        (
            "An upstream file (config.json, tokenizer_config.json, generation_config.json, chat_template.jinja, "
            "tokenizer.json) exists but is not valid JSON, not an object, larger than the read limit, or failed to "
            "read."
        ),
    ),
    CodeInfo(
        Code.UPSTREAM_TEMPLATE_DIFFERS,
        Severity.WARNING,
        LlamaCpp.LOADS,
        (
            "The chat template differs in substance from the upstream's (tokenizer_config.json or "
            "chat_template.jinja): prompts are not formatted the way the model was trained."
        ),
    ),
    CodeInfo(
        Code.UPSTREAM_TEMPLATE_WHITESPACE,
        Severity.INFO,
        LlamaCpp.LOADS,
        (
            "The chat template differs from the upstream's in whitespace only (after normalising line ends and "
            "trimming)."
        ),
    ),
    CodeInfo(
        Code.UPSTREAM_TEMPLATE_MISSING,
        Severity.WARNING,
        LlamaCpp.LOADS,
        "The upstream has a chat template the GGUF lacks (info for a named template): runtimes guess the format.",
    ),
    CodeInfo(
        Code.UPSTREAM_EOS_NOT_STOP,
        Severity.ERROR,
        LlamaCpp.LOADS,
        (
            "The GGUF's EOS token is none of the upstream's stop tokens (config.json and generation_config.json "
            "eos_token_id, tokenizer_config.json eos_token): generation runs on past the end of the turn or stops "
            "early."
        ),
    ),
    CodeInfo(
        Code.UPSTREAM_STOP_NOT_EOG,
        Severity.WARNING,
        LlamaCpp.LOADS,
        (
            "A stop token of the upstream is not an end-of-generation token in the GGUF (not its EOS, EOT or EOM, "
            "nor a text llama.cpp adds to that set): generation may run on past it."
        ),
    ),
    CodeInfo(
        Code.UPSTREAM_BOS_MISMATCH,
        Severity.WARNING,
        LlamaCpp.LOADS,
        "The GGUF's BOS token id differs from the upstream's.",
    ),
    CodeInfo(
        Code.UPSTREAM_PAD_MISMATCH,
        Severity.INFO,
        LlamaCpp.LOADS,
        "The GGUF's padding token id differs from the upstream's (batching only).",
    ),
    CodeInfo(
        Code.UPSTREAM_SPECIAL_TEXT,
        Severity.WARNING,
        LlamaCpp.LOADS,
        "A special token id's text in the GGUF differs from the upstream's token of that id.",
    ),
    CodeInfo(
        Code.UPSTREAM_HPARAM_MISMATCH,
        Severity.ERROR,
        LlamaCpp.LOADS,
        (
            "Head count, KV head count, block count or embedding length differs from config.json: the file is not a "
            "conversion of this upstream, or its metadata gives garbage output."
        ),
    ),
    CodeInfo(
        Code.UPSTREAM_CONTEXT_LENGTH,
        Severity.WARNING,
        LlamaCpp.LOADS,
        (
            "{arch}.context_length differs from config.json max_position_embeddings: too short wastes the model's "
            "context, too long degrades output past the trained length."
        ),
    ),
    CodeInfo(
        Code.UPSTREAM_ROPE_FREQ_BASE,
        Severity.ERROR,
        LlamaCpp.LOADS,
        "{arch}.rope.freq_base differs from config.json rope_theta: every position is wrong.",
    ),
    CodeInfo(
        Code.UPSTREAM_ROPE_SCALING,
        Severity.WARNING,
        LlamaCpp.LOADS,
        (
            "Rope scaling (type, factor, original context length, YaRN betas, llama3 frequency factors) differs from "
            "config.json rope_scaling: long contexts degrade."
        ),
    ),
    CodeInfo(
        Code.UPSTREAM_VOCAB_SIZE,
        Severity.WARNING,
        LlamaCpp.LOADS,
        (
            "The token count differs from config.json vocab_size: a warning when the GGUF has more tokens, or fewer "
            "than the upstream tokenizer's; info when it lacks only the padding rows checkpoints commonly add."
        ),
    ),
)
