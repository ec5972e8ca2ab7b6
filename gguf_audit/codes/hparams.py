"""The ``hparams.*`` codes: ``llama_model_base::load_hparams``' invariants (``src/llama-model.cpp``).

Every verdict was asked of the oracle (llama-verdict, b11312) with a file built to have the finding
(``tests/checks/test_hparams.py`` asks again). Most are failed ``GGML_ASSERT``: the loading process dies.
"""

from __future__ import annotations

from typing import Final

from gguf_audit.codes.code import Code
from gguf_audit.codes.model import CodeInfo, LlamaCpp, Severity

__all__ = ["ENTRIES"]

ENTRIES: Final[tuple[CodeInfo, ...]] = (
    CodeInfo(
        Code.HPARAMS_BLOCK_COUNT_OUT_OF_RANGE,
        Severity.ERROR,
        LlamaCpp.ABORTS,
        (
            "{arch}.block_count is 0 or above LLAMA_MAX_LAYERS (512 in b11312): GGML_ASSERT(n_layer_all > 0 && "
            "n_layer_all <= LLAMA_MAX_LAYERS) kills the loading process."
        ),
    ),
    CodeInfo(
        Code.HPARAMS_NEXTN_PAST_BLOCK_COUNT,
        Severity.ERROR,
        LlamaCpp.ABORTS,
        (
            "{arch}.nextn_predict_layers (the multi-token-prediction layers) is larger than {arch}.block_count: "
            "GGML_ASSERT(n_layer_nextn <= n_layer_all) kills the loading process."
        ),
    ),
    CodeInfo(
        Code.HPARAMS_TOO_MANY_EXPERTS,
        Severity.ERROR,
        LlamaCpp.ABORTS,
        (
            "{arch}.expert_count is above LLAMA_MAX_EXPERTS (1024 in b11312): GGML_ASSERT(n_expert <= "
            "LLAMA_MAX_EXPERTS) kills the loading process."
        ),
    ),
    CodeInfo(
        Code.HPARAMS_EXPERT_USED_COUNT,
        Severity.ERROR,
        LlamaCpp.ABORTS,
        (
            "{arch}.expert_used_count (its largest value, when per layer) is above {arch}.expert_count, or 0 "
            "(absent) in a model with experts: GGML_ASSERT(n_expert_used_max <= n_expert) or (n_expert_used_max > 0) "
            "kills the loading process."
        ),
    ),
    CodeInfo(
        Code.HPARAMS_EXPERT_GROUPS,
        Severity.ERROR,
        LlamaCpp.ABORTS,
        (
            "{arch}.expert_group_count and expert_group_used_count break load_hparams' asserts: groups without "
            "experts, not fewer groups than experts, experts not divisible into the groups, or groups used 0 or not "
            "fewer than the groups; the loading process dies."
        ),
    ),
    CodeInfo(
        Code.HPARAMS_UNKNOWN_ROPE_SCALING,
        Severity.ERROR,
        LlamaCpp.ABORTS,
        (
            "{arch}.rope.scaling.type is not one of b11312's rope scaling types (none, linear, yarn, longrope): "
            "llama_rope_scaling_type_from_string gives UNSPECIFIED and GGML_ASSERT kills the loading process."
        ),
    ),
    CodeInfo(
        Code.HPARAMS_BAD_N_ROT,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "In a llama, deci, falcon or llama-embed model, {arch}.rope.dimension_count differs from the head size "
            "({arch}.attention.key_length, else embedding_length / head_count): load_hparams throws 'invalid n_rot'."
        ),
    ),
    CodeInfo(
        Code.HPARAMS_TENSOR_EXTRA,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "general.tensor_extra.name is an array, but not of strings, or general.tensor_extra.prec_a4 beside it is "
            "missing, not an array of bool, or of another length: the loader's per-tensor precision policy throws "
            "after the tensors are created."
        ),
    ),
    CodeInfo(
        Code.HPARAMS_NEXTN_BLOCKS_NOT_LOADED,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "The architecture's loader does not read MTP layers, so the last {arch}.nextn_predict_layers blocks get "
            "no tensors, yet the file has tensors there: llama.cpp ends on 'wrong number of tensors'."
        ),
    ),
    CodeInfo(
        Code.HPARAMS_LOADER_THROWS,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "The architecture's load_tensors throws for this file's hyperparameters before any tensor is missing "
            "(grok or olmoe without experts): llama.cpp refuses it with the loader's own message."
        ),
    ),
    CodeInfo(
        Code.HPARAMS_LOADER_ASSERTS,
        Severity.ERROR,
        LlamaCpp.ABORTS,
        (
            "An assert of the architecture's load_tensors fails for this file's hyperparameters (smallthinker or "
            "llada-moe without experts): llama.cpp aborts the process that loads it."
        ),
    ),
    CodeInfo(
        Code.HPARAMS_ARCH_THROWS,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "The architecture's own load_arch_hparams throws on this file's key values (a check the pinned "
            "source makes, translated from it): llama.cpp refuses the file with that message."
        ),
    ),
    CodeInfo(
        Code.HPARAMS_ARCH_ASSERTS,
        Severity.ERROR,
        LlamaCpp.ABORTS,
        (
            "A GGML_ASSERT of the architecture's own load_arch_hparams fails on this file's key values (minimax-m3 "
            "with indexer.block_size 0, gemma-embedding's dense_2_feat_in not the embedding length): llama.cpp "
            "aborts the process that loads it."
        ),
    ),
)
