"""Finding codes of a collection rather than a file: upstream configs, shard sets, compare, lineage.

Data only, as ``(code, severity, refused, doc)`` rows: :mod:`gguf_audit.codes` builds the one registry from
them and from its own rows (nothing registers a code on import). ``refused`` is whether current llama.cpp
(little-endian host) refuses a file with the finding, None when gguf-audit cannot tell.
"""

from __future__ import annotations

from typing import Final

__all__ = ["COLLECTION_CODES"]

COLLECTION_CODES: Final[tuple[tuple[str, str, bool | None, str], ...]] = (
    # --- the Hub's gguf card of the repository (checks/hub_gguf.py): llama.cpp never reads it, so the file loads.
    (
        "hub.gguf_mismatch",
        "warning",
        False,
        "The Hub's gguf card of the repository (parameter count, architecture, context length or chat template, "
        "from the listing's expand=gguf) disagrees with the file's header: another model under the card, a stale "
        "card, or a template changed in one file only.",
    ),
    # --- upstream: against config.json, tokenizer_config.json, generation_config.json (checks/upstream.py).
    # llama.cpp never reads those files, so it loads every such file; the severity says what the difference does.
    (
        "upstream.unreadable",
        "warning",
        False,
        "An upstream file (config.json, tokenizer_config.json, generation_config.json, chat_template.jinja, "
        "tokenizer.json) exists but is not valid JSON, not an object, larger than the read limit, or failed to read.",
    ),
    (
        "upstream.template_differs",
        "warning",
        False,
        "The chat template differs in substance from the upstream's (tokenizer_config.json or "
        "chat_template.jinja): prompts are not formatted the way the model was trained.",
    ),
    (
        "upstream.template_whitespace",
        "info",
        False,
        "The chat template differs from the upstream's in whitespace only (after normalising line ends and trimming).",
    ),
    (
        "upstream.template_missing",
        "warning",
        False,
        "The upstream has a chat template the GGUF lacks (info for a named template): runtimes guess the format.",
    ),
    (
        "upstream.eos_not_stop",
        "error",
        False,
        "The GGUF's EOS token is none of the upstream's stop tokens (config.json and "
        "generation_config.json eos_token_id, tokenizer_config.json eos_token): generation runs on past the end of "
        "the turn or stops early.",
    ),
    (
        "upstream.stop_not_eog",
        "warning",
        False,
        "A stop token of the upstream is not an end-of-generation token in the GGUF (not its EOS, EOT "
        "or EOM, nor a text llama.cpp adds to that set): generation may run on past it.",
    ),
    ("upstream.bos_mismatch", "warning", False, "The GGUF's BOS token id differs from the upstream's."),
    (
        "upstream.pad_mismatch",
        "info",
        False,
        "The GGUF's padding token id differs from the upstream's (batching only).",
    ),
    (
        "upstream.special_text",
        "warning",
        False,
        "A special token id's text in the GGUF differs from the upstream's token of that id.",
    ),
    (
        "upstream.hparam_mismatch",
        "error",
        False,
        "Head count, KV head count, block count or embedding length differs from config.json: the "
        "file is not a conversion of this upstream, or its metadata gives garbage output.",
    ),
    (
        "upstream.context_length",
        "warning",
        False,
        "{arch}.context_length differs from config.json max_position_embeddings: too short wastes "
        "the model's context, too long degrades output past the trained length.",
    ),
    (
        "upstream.rope_freq_base",
        "error",
        False,
        "{arch}.rope.freq_base differs from config.json rope_theta: every position is wrong.",
    ),
    (
        "upstream.rope_scaling",
        "warning",
        False,
        "Rope scaling (type, factor, original context length, YaRN betas, llama3 frequency factors) "
        "differs from config.json rope_scaling: long contexts degrade.",
    ),
    (
        "upstream.vocab_size",
        "warning",
        False,
        "The token count differs from config.json vocab_size: a warning when the GGUF has more tokens, "
        "or fewer than the upstream tokenizer's; info when it lacks only the padding rows checkpoints commonly add.",
    ),
    # --- shard sets (llama_model_loader over split files) ---
    (
        "shard.missing",
        "error",
        True,
        "A shard set lacks one or more of its numbered files; llama.cpp cannot open the model.",
    ),
    (
        "shard.bad_index",
        "error",
        True,
        "A shard's split.no (counted from 0) disagrees with the number in its file name, or is absent or not a uint16.",
    ),
    (
        "shard.count_mismatch",
        "error",
        True,
        "split.count disagrees with the -of-MMMMM in the file names, or the shards disagree with each other.",
    ),
    (
        "shard.tensor_count_mismatch",
        "error",
        True,
        "The shards' tensors do not add up to split.tensors.count ('N tensors expected but M found').",
    ),
    (
        "shard.duplicate_tensor",
        "error",
        True,
        "The same tensor name appears in two shards of one set ('tensor is duplicated').",
    ),
    (
        "shard.inconsistent",
        "warning",
        False,
        "The shards disagree on the GGUF version, byte order, or a declared general.alignment, "
        "architecture or file type: likely assembled from different conversions.",
    ),
    # --- quantization error against a reference (gguf-audit compare) ---
    (
        "compare.layout_suspect",
        "error",
        False,
        "Against its reference, a tensor's errors reach whole quantization steps or its signs flip "
        "systematically: the symptom of a wrong block layout, not of rounding.",
    ),
    (
        "compare.no_common_tensors",
        "warning",
        False,
        "The quantized file and the reference share no tensor with the same name and shape.",
    ),
    # --- lineage: families of files across a collection (scans) ---
    (
        "lineage.no_full_precision",
        "info",
        False,
        "A family of quantized files (same architecture, tensor names and shapes, base model or name) has no "
        "full-precision (F32, F16 or BF16) GGUF in the collection, nor a safetensors file beside it: nothing to "
        "re-quantize from or to compare against.",
    ),
)
