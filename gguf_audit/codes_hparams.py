"""The codes of load_hparams' and llama_vocab::load's invariants, as data: :mod:`gguf_audit.codes` registers them.

Each entry is ``(code, severity, verdict, doc)``: the severity and llama.cpp's verdict as
their string values (``"error"``; ``"loads"``, ``"refuses"``, ``"aborts"``). Every verdict
was asked of the oracle (llama-verdict, b11312) with a file built to have the finding
(``tests/checks/test_hparams.py`` and ``test_vocab_load.py`` ask again). Most of the
``hparams.*`` ones are ``GGML_ASSERT``s in ``llama_model_base::load_hparams``
(``src/llama-model.cpp``): the loading process dies. The ``tokenizer.*`` ones are
``llama_vocab::load``'s (``src/llama-vocab.cpp``).
"""

from __future__ import annotations

from typing import Final

__all__ = ["HPARAMS_CODES"]

HparamsCode = tuple[str, str, str, str]

HPARAMS_CODES: Final[tuple[HparamsCode, ...]] = (
    (
        "hparams.block_count_out_of_range",
        "error",
        "aborts",
        "{arch}.block_count is 0 or above LLAMA_MAX_LAYERS (512 in b11312): GGML_ASSERT(n_layer_all > 0 && "
        "n_layer_all <= LLAMA_MAX_LAYERS) kills the loading process.",
    ),
    (
        "hparams.nextn_past_block_count",
        "error",
        "aborts",
        "{arch}.nextn_predict_layers (the multi-token-prediction layers) is larger than {arch}.block_count: "
        "GGML_ASSERT(n_layer_nextn <= n_layer_all) kills the loading process.",
    ),
    (
        "hparams.too_many_experts",
        "error",
        "aborts",
        "{arch}.expert_count is above LLAMA_MAX_EXPERTS (1024 in b11312): GGML_ASSERT(n_expert <= "
        "LLAMA_MAX_EXPERTS) kills the loading process.",
    ),
    (
        "hparams.expert_used_count",
        "error",
        "aborts",
        "{arch}.expert_used_count (its largest value, when per layer) is above {arch}.expert_count, or 0 "
        "(absent) in a model with experts: GGML_ASSERT(n_expert_used_max <= n_expert) or (n_expert_used_max > "
        "0) kills the loading process.",
    ),
    (
        "hparams.expert_groups",
        "error",
        "aborts",
        "{arch}.expert_group_count and expert_group_used_count break load_hparams' asserts: groups without "
        "experts, not fewer groups than experts, experts not divisible into the groups, or groups used 0 or "
        "not fewer than the groups; the loading process dies.",
    ),
    (
        "hparams.unknown_rope_scaling",
        "error",
        "aborts",
        "{arch}.rope.scaling.type is not one of b11312's rope scaling types (none, linear, yarn, longrope): "
        "llama_rope_scaling_type_from_string gives UNSPECIFIED and GGML_ASSERT kills the loading process.",
    ),
    (
        "hparams.bad_n_rot",
        "error",
        "refuses",
        "In a llama, deci, falcon or llama-embed model, {arch}.rope.dimension_count differs from the head "
        "size ({arch}.attention.key_length, else embedding_length / head_count): load_hparams throws 'invalid "
        "n_rot'.",
    ),
    (
        "hparams.tensor_extra",
        "error",
        "refuses",
        "general.tensor_extra.name is an array, but not of strings, or general.tensor_extra.prec_a4 beside it "
        "is missing, not an array of bool, or of another length: the loader's per-tensor precision policy "
        "throws after the tensors are created.",
    ),
    (
        "tokenizer.wpm_byte_token",
        "error",
        "aborts",
        "A WordPiece (bert) vocabulary has a token of type BYTE: building the token-to-piece cache at load "
        "calls token_to_byte, which has no WPM case and calls GGML_ABORT; the loading process dies.",
    ),
    (
        "tokenizer.short_byte_token",
        "error",
        "refuses",
        "A BYTE token of one or two bytes in an SPM, UGM or BPE vocabulary (llama, t5, gpt2, hybriddna, "
        "whitespace, gemma4): token_to_byte takes its text from the fourth byte on and std::string::substr "
        "throws out_of_range while the load builds its piece cache.",
    ),
    (
        "tokenizer.missing_byte_tokens",
        "error",
        "refuses",
        "A PLaMo-2 vocabulary lacks a BYTE token '<0xNN>' for some of the 256 bytes (tokens such as '<0x-1>' "
        "are skipped, not counted): its tokenizer throws 'Byte token for <0xN> is not set'.",
    ),
    (
        "tokenizer.bad_charsmap",
        "error",
        "refuses",
        "A t5 (UGM) vocabulary's tokenizer.ggml.precompiled_charsmap is shorter than its 4-byte size field, "
        "or the XCDA blob size it declares does not leave room for the replacement strings after it: "
        "llama_vocab::load throws ('too small', 'Index out of array bounds in precompiled charsmap'). The "
        "blob's contents are not checked.",
    ),
    (
        "hparams.nextn_blocks_not_loaded",
        "error",
        "refuses",
        "The architecture's loader does not read MTP layers, so the last {arch}.nextn_predict_layers blocks "
        "get no tensors, yet the file has tensors there: llama.cpp ends on 'wrong number of tensors'.",
    ),
    (
        "tokenizer.duplicate_token",
        "error",
        "aborts",
        "Two tokens of the vocabulary have the same text (empty ones excepted: llama.cpp renames them): its "
        "token-to-id map ends up smaller than the token list and GGML_ASSERT(id_to_token.size() == "
        "token_to_id.size()) kills the loading process.",
    ),
)
