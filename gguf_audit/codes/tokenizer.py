"""The ``tokenizer.*`` codes: ``llama_vocab::load`` (``src/llama-vocab.cpp``) and the chat template
against the special tokens.

The verdicts of its invariants beyond names and arrays (byte tokens, charsmap, duplicates) were asked of the
oracle with a file built to have each (``tests/checks/test_vocab_load.py`` asks again).
"""

from __future__ import annotations

from typing import Final

from gguf_audit.codes.code import Code
from gguf_audit.codes.model import CodeInfo, LlamaCpp, Severity

__all__ = ["ENTRIES"]

ENTRIES: Final[tuple[CodeInfo, ...]] = (
    CodeInfo(
        Code.TOKENIZER_VOCAB_MISMATCH,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "The number of tokens is not the row count of token_embd (or of output, for the curated architectures); "
            "llama.cpp's shape check for those tensors uses the token count and throws 'wrong shape'."
        ),
    ),
    CodeInfo(
        Code.TOKENIZER_ARRAY_LENGTH_MISMATCH,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "tokenizer.ggml.scores or token_type is shorter than tokenizer.ggml.tokens; llama.cpp throws 'Index out "
            "of array bounds' since PR #27075 (src/llama-vocab.cpp); older builds read one entry per token, past the "
            "end."
        ),
    ),
    CodeInfo(
        Code.TOKENIZER_WRONG_ARRAY_TYPE,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "tokenizer.ggml.scores is not an array of float32 or int32, or token_type not an array of int32 (uint32 "
            "no longer passes); llama.cpp throws 'invalid gguf type' since PR #27075 (src/llama-vocab.cpp); older "
            "builds took the array's bytes as float or int32 whatever their type. Also suppress_tokens not an array "
            "of int32, and a t5 vocabulary's precompiled_charsmap not an array of int8 or uint8 (both refused by "
            "b11312)."
        ),
    ),
    CodeInfo(
        Code.TOKENIZER_SPECIAL_ID_OUT_OF_RANGE,
        Severity.WARNING,
        LlamaCpp.LOADS,
        (
            "A special token id (bos, eos, eot, eom, unk, sep, pad, mask, fim) is not below the token count; "
            "llama.cpp warns 'bad special token', keeps its default id for that role and loads."
        ),
    ),
    CodeInfo(
        Code.TOKENIZER_BAD_TOKEN_TYPE,
        Severity.WARNING,
        LlamaCpp.LOADS,
        (
            "tokenizer.ggml.token_type holds values outside 1 to 6 (normal, unknown, control, user-defined, unused, "
            "byte); llama.cpp gives such tokens the undefined attribute."
        ),
    ),
    CodeInfo(
        Code.TOKENIZER_UNKNOWN_MODEL,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "tokenizer.ggml.model names a tokenizer the pinned llama.cpp does not know (it throws 'unknown "
            "tokenizer'); a newer build may have added it."
        ),
    ),
    CodeInfo(
        Code.TOKENIZER_UNKNOWN_PRE,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "A BPE tokenizer's tokenizer.ggml.pre is not one the pinned llama.cpp accepts (its generated tables): it "
            "throws 'unknown pre-tokenizer type'; the list grows often, so a newer build may know it."
        ),
    ),
    CodeInfo(
        Code.TOKENIZER_MISSING_PRE,
        Severity.WARNING,
        LlamaCpp.LOADS,
        (
            "A BPE tokenizer (gpt2, hybriddna, whitespace) without tokenizer.ggml.pre; llama.cpp warns 'missing "
            "pre-tokenizer type, using: default' and 'GENERATION QUALITY WILL BE DEGRADED'."
        ),
    ),
    CodeInfo(
        Code.TOKENIZER_EOS_NOT_IN_TEMPLATE,
        Severity.WARNING,
        LlamaCpp.LOADS,
        (
            "The chat template does not close the assistant turn with the EOS/EOT/EOM token nor any token llama.cpp "
            "stops on by its text, or closes it with a token that is not a control token (llama.cpp warns and "
            "overrides the type for the texts it knows). Info when the turn ends with such a known text that is not "
            "the EOS/EOT."
        ),
    ),
    CodeInfo(
        Code.TOKENIZER_DOUBLE_BOS,
        Severity.INFO,
        LlamaCpp.LOADS,
        (
            "add_bos_token is true (SPM's default when absent) and the rendered chat template already starts with "
            "the BOS text; tokenizing the render with special tokens added gives two BOS (llama.cpp warns; its chat "
            "code strips one)."
        ),
    ),
    CodeInfo(
        Code.TOKENIZER_BAD_BYTE_TOKEN,
        Severity.WARNING,
        LlamaCpp.LOADS,
        (
            "A token of type BYTE whose text is not '<0xNN>' with NN two hex digits. llama.cpp before commit "
            "cf06ad7d parsed any BYTE token of a PLaMo-2 vocabulary as a byte index and wrote past a 256-entry table "
            "(out-of-bounds write); current builds skip such tokens (and refuse a PLaMo-2 vocabulary left without "
            "all 256 bytes). An error for PLaMo-2 vocabularies, a warning for the others (SPM reads two hex digits "
            "from it)."
        ),
    ),
    CodeInfo(
        Code.TOKENIZER_WPM_BYTE_TOKEN,
        Severity.ERROR,
        LlamaCpp.ABORTS,
        (
            "A WordPiece (bert) vocabulary has a token of type BYTE: building the token-to-piece cache at load calls "
            "token_to_byte, which has no WPM case and calls GGML_ABORT; the loading process dies."
        ),
    ),
    CodeInfo(
        Code.TOKENIZER_SHORT_BYTE_TOKEN,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "A BYTE token of one or two bytes in an SPM, UGM or BPE vocabulary (llama, t5, gpt2, hybriddna, "
            "whitespace, gemma4): token_to_byte takes its text from the fourth byte on and std::string::substr "
            "throws out_of_range while the load builds its piece cache."
        ),
    ),
    CodeInfo(
        Code.TOKENIZER_MISSING_BYTE_TOKENS,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "A PLaMo-2 vocabulary lacks a BYTE token '<0xNN>' for some of the 256 bytes (tokens such as '<0x-1>' are "
            "skipped, not counted): its tokenizer throws 'Byte token for <0xN> is not set'."
        ),
    ),
    CodeInfo(
        Code.TOKENIZER_BAD_CHARSMAP,
        Severity.ERROR,
        LlamaCpp.REFUSES,
        (
            "A t5 (UGM) vocabulary's tokenizer.ggml.precompiled_charsmap is shorter than its 4-byte size field, or "
            "the XCDA blob size it declares does not leave room for the replacement strings after it: "
            "llama_vocab::load throws ('too small', 'Index out of array bounds in precompiled charsmap'). The blob's "
            "contents are not checked."
        ),
    ),
    CodeInfo(
        Code.TOKENIZER_DUPLICATE_TOKEN,
        Severity.ERROR,
        LlamaCpp.ABORTS,
        (
            "Two tokens of the vocabulary have the same text (empty ones excepted: llama.cpp renames them): its "
            "token-to-id map ends up smaller than the token list and GGML_ASSERT(id_to_token.size() == "
            "token_to_id.size()) kills the loading process."
        ),
    ),
)
