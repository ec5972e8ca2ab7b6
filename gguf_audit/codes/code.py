"""Every registered finding code as a :class:`Code` member, so a misspelt code is an error mypy reports.

The members are declared, not generated, so the type checker sees them; a member's name is its code in
capitals with the dot made an underscore (``data.truncated`` is ``Code.DATA_TRUNCATED``).
``tests/codes/test_registry.py`` fails unless these members and the registry's entries are the same set.
A member is a ``str``: it compares equal to its code's text, the way stored rows hold it.
"""

from __future__ import annotations

from enum import StrEnum, unique

__all__ = ["Code"]


@unique
class Code(StrEnum):
    """A finding code, ``area.problem``; its severity, llama.cpp verdict and doc are in its area's module."""

    # header
    HEADER_BAD_MAGIC = "header.bad_magic"
    HEADER_LFS_POINTER = "header.lfs_pointer"
    HEADER_UNSUPPORTED_VERSION = "header.unsupported_version"
    HEADER_OBSOLETE_VERSION = "header.obsolete_version"
    HEADER_BIG_ENDIAN = "header.big_endian"
    HEADER_TRUNCATED = "header.truncated"
    HEADER_COUNT_TOO_LARGE = "header.count_too_large"
    HEADER_STRING_TOO_LONG = "header.string_too_long"
    HEADER_BAD_VALUE_TYPE = "header.bad_value_type"
    HEADER_NESTED_ARRAY = "header.nested_array"
    HEADER_TOO_DEEP = "header.too_deep"
    HEADER_EMPTY_KEY = "header.empty_key"
    HEADER_DUPLICATE_KEY = "header.duplicate_key"
    HEADER_BAD_ALIGNMENT = "header.bad_alignment"
    HEADER_NUL_IN_KEY = "header.nul_in_key"
    HEADER_INVALID_UTF8 = "header.invalid_utf8"
    HEADER_INVALID_BOOL = "header.invalid_bool"
    HEADER_NONCANONICAL_KEY = "header.noncanonical_key"
    HEADER_TOO_LARGE = "header.too_large"
    HEADER_TOO_MANY_ENTRIES = "header.too_many_entries"
    # tensor
    TENSOR_NAME_TOO_LONG = "tensor.name_too_long"
    TENSOR_DUPLICATE_NAME = "tensor.duplicate_name"
    TENSOR_NUL_IN_NAME = "tensor.nul_in_name"
    TENSOR_SHAPE_ABORTS = "tensor.shape_aborts"
    TENSOR_UNALIGNED_BUFFER = "tensor.unaligned_buffer"
    TENSOR_BAD_DIMS = "tensor.bad_dims"
    TENSOR_UNKNOWN_TYPE = "tensor.unknown_type"
    TENSOR_REMOVED_TYPE = "tensor.removed_type"
    TENSOR_ROW_NOT_BLOCK_MULTIPLE = "tensor.row_not_block_multiple"
    TENSOR_MISALIGNED_OFFSET = "tensor.misaligned_offset"
    TENSOR_OFFSET_NOT_PACKED = "tensor.offset_not_packed"
    TENSOR_OVERLAP = "tensor.overlap"
    TENSOR_UNDERSIZED_REGION = "tensor.undersized_region"
    TENSOR_MISSING = "tensor.missing"
    TENSOR_UNEXPECTED = "tensor.unexpected"
    TENSOR_WRONG_SHAPE = "tensor.wrong_shape"
    TENSOR_PACKED_MULTIMODAL = "tensor.packed_multimodal"
    TENSOR_SIZE_OVERFLOW = "tensor.size_overflow"
    # data
    DATA_TRUNCATED = "data.truncated"
    DATA_TRAILING_BYTES = "data.trailing_bytes"
    DATA_NONFINITE = "data.nonfinite"
    DATA_ZERO_FILLED = "data.zero_filled"
    DATA_BAD_SCALE = "data.bad_scale"
    DATA_NO_DECODER = "data.no_decoder"
    DATA_SAMPLE_UNREAD = "data.sample_unread"
    # meta
    META_MISSING_KEY = "meta.missing_key"
    META_WRONG_TYPE = "meta.wrong_type"
    META_UNKNOWN_ARCHITECTURE = "meta.unknown_architecture"
    META_BLOCK_COUNT_MISMATCH = "meta.block_count_mismatch"
    META_FILE_TYPE_MISMATCH = "meta.file_type_mismatch"
    META_MISSING_QUANTIZATION_VERSION = "meta.missing_quantization_version"
    META_CONTROL_CHARACTERS = "meta.control_characters"
    # hparams
    HPARAMS_BLOCK_COUNT_OUT_OF_RANGE = "hparams.block_count_out_of_range"
    HPARAMS_NEXTN_PAST_BLOCK_COUNT = "hparams.nextn_past_block_count"
    HPARAMS_TOO_MANY_EXPERTS = "hparams.too_many_experts"
    HPARAMS_EXPERT_USED_COUNT = "hparams.expert_used_count"
    HPARAMS_EXPERT_GROUPS = "hparams.expert_groups"
    HPARAMS_UNKNOWN_ROPE_SCALING = "hparams.unknown_rope_scaling"
    HPARAMS_BAD_N_ROT = "hparams.bad_n_rot"
    HPARAMS_TENSOR_EXTRA = "hparams.tensor_extra"
    HPARAMS_NEXTN_BLOCKS_NOT_LOADED = "hparams.nextn_blocks_not_loaded"
    HPARAMS_LOADER_THROWS = "hparams.loader_throws"
    HPARAMS_LOADER_ASSERTS = "hparams.loader_asserts"
    HPARAMS_ARCH_THROWS = "hparams.arch_throws"
    HPARAMS_ARCH_ASSERTS = "hparams.arch_asserts"
    # tokenizer
    TOKENIZER_VOCAB_MISMATCH = "tokenizer.vocab_mismatch"
    TOKENIZER_ARRAY_LENGTH_MISMATCH = "tokenizer.array_length_mismatch"
    TOKENIZER_WRONG_ARRAY_TYPE = "tokenizer.wrong_array_type"
    TOKENIZER_SPECIAL_ID_OUT_OF_RANGE = "tokenizer.special_id_out_of_range"
    TOKENIZER_BAD_TOKEN_TYPE = "tokenizer.bad_token_type"
    TOKENIZER_UNKNOWN_MODEL = "tokenizer.unknown_model"
    TOKENIZER_UNKNOWN_PRE = "tokenizer.unknown_pre"
    TOKENIZER_MISSING_PRE = "tokenizer.missing_pre"
    TOKENIZER_EOS_NOT_IN_TEMPLATE = "tokenizer.eos_not_in_template"
    TOKENIZER_DOUBLE_BOS = "tokenizer.double_bos"
    TOKENIZER_BAD_BYTE_TOKEN = "tokenizer.bad_byte_token"
    TOKENIZER_WPM_BYTE_TOKEN = "tokenizer.wpm_byte_token"
    TOKENIZER_SHORT_BYTE_TOKEN = "tokenizer.short_byte_token"
    TOKENIZER_MISSING_BYTE_TOKENS = "tokenizer.missing_byte_tokens"
    TOKENIZER_BAD_CHARSMAP = "tokenizer.bad_charsmap"
    TOKENIZER_DUPLICATE_TOKEN = "tokenizer.duplicate_token"
    # template
    TEMPLATE_SYNTAX_ERROR = "template.syntax_error"
    TEMPLATE_UNSAFE = "template.unsafe"
    TEMPLATE_RESOURCE_LIMIT = "template.resource_limit"
    TEMPLATE_RENDER_ERROR = "template.render_error"
    TEMPLATE_MISSING = "template.missing"
    TEMPLATE_TOO_MANY = "template.too_many"
    # clip
    MIRROR_MISSING = "mirror.missing"
    MIRROR_EXTRA = "mirror.extra"
    MIRROR_SIZE_DIFFERS = "mirror.size_differs"
    MIRROR_CONTENT_DIFFERS = "mirror.content_differs"
    MIRROR_STALE = "mirror.stale"
    MIRROR_UNDECIDED = "mirror.undecided"
    CLIP_PROJECTOR_FILE = "clip.projector_file"
    CLIP_NO_ENCODER = "clip.no_encoder"
    CLIP_UNKNOWN_PROJECTOR = "clip.unknown_projector"
    CLIP_MISSING_KEY = "clip.missing_key"
    CLIP_WRONG_TYPE = "clip.wrong_type"
    CLIP_BAD_HPARAM = "clip.bad_hparam"
    CLIP_HPARAM_ABORT = "clip.hparam_abort"
    CLIP_MISSING_TENSOR = "clip.missing_tensor"
    CLIP_EMBD_MISMATCH = "clip.embd_mismatch"
    CLIP_ARCH_MISMATCH = "clip.arch_mismatch"
    # hub
    HUB_GGUF_MISMATCH = "hub.gguf_mismatch"
    # upstream
    UPSTREAM_UNREADABLE = "upstream.unreadable"
    UPSTREAM_TEMPLATE_DIFFERS = "upstream.template_differs"
    UPSTREAM_TEMPLATE_WHITESPACE = "upstream.template_whitespace"
    UPSTREAM_TEMPLATE_MISSING = "upstream.template_missing"
    UPSTREAM_EOS_NOT_STOP = "upstream.eos_not_stop"
    UPSTREAM_STOP_NOT_EOG = "upstream.stop_not_eog"
    UPSTREAM_BOS_MISMATCH = "upstream.bos_mismatch"
    UPSTREAM_PAD_MISMATCH = "upstream.pad_mismatch"
    UPSTREAM_SPECIAL_TEXT = "upstream.special_text"
    UPSTREAM_HPARAM_MISMATCH = "upstream.hparam_mismatch"
    UPSTREAM_CONTEXT_LENGTH = "upstream.context_length"
    UPSTREAM_ROPE_FREQ_BASE = "upstream.rope_freq_base"
    UPSTREAM_ROPE_SCALING = "upstream.rope_scaling"
    UPSTREAM_VOCAB_SIZE = "upstream.vocab_size"
    # shard
    SHARD_MISSING = "shard.missing"
    SHARD_BAD_INDEX = "shard.bad_index"
    SHARD_COUNT_MISMATCH = "shard.count_mismatch"
    SHARD_TENSOR_COUNT_MISMATCH = "shard.tensor_count_mismatch"
    SHARD_DUPLICATE_TENSOR = "shard.duplicate_tensor"
    SHARD_INCONSISTENT = "shard.inconsistent"
    SHARD_LATER_SHARD = "shard.later_shard"
    SHARD_INVALID_FILE_NAME = "shard.invalid_file_name"
    # compare
    COMPARE_LAYOUT_SUSPECT = "compare.layout_suspect"
    COMPARE_NO_COMMON_TENSORS = "compare.no_common_tensors"
    # lineage
    LINEAGE_NO_FULL_PRECISION = "lineage.no_full_precision"
    # io
    IO_NOT_FOUND = "io.not_found"
    IO_PERMISSION_DENIED = "io.permission_denied"
    IO_TIMEOUT = "io.timeout"
    IO_ERROR = "io.error"
    IO_RANGE_IGNORED = "io.range_ignored"
    IO_RATE_LIMITED = "io.rate_limited"
    IO_SIZE_MISMATCH = "io.size_mismatch"
    IO_SIZE_UNKNOWN = "io.size_unknown"
    IO_NAME_NOT_UTF8 = "io.name_not_utf8"
    IO_BROKEN_LINK = "io.broken_link"
    IO_NOT_LISTABLE = "io.not_listable"
    # run
    RUN_WORKER_LOST = "run.worker_lost"
    RUN_FILE_DEADLINE = "run.file_deadline"
    # internal
    INTERNAL_UNEXPECTED = "internal.unexpected"

    @property
    def area(self) -> str:
        """The code's area, the part before the dot (``header``, ``tensor``, ``io``, ...)."""
        return self.value.partition(".")[0]
