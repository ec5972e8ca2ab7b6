"""What a header says about its model, gathered once for every semantic check.

The semantic checks (:mod:`~gguf_audit.checks.metadata`, :mod:`~gguf_audit.checks.tensors`,
:mod:`~gguf_audit.checks.tokenizer`, :mod:`~gguf_audit.checks.filetype`) all ask the
same questions first: which architecture, whether the file is a language model at
all, whether it is vocab-only or one shard of a split model, its token list and
token types. :func:`header_facts` answers them once per header.

Vocab-only files (no tensors, as llama.cpp's ``ggml-vocab-*.gguf``) are loaded by
llama.cpp with ``vocab_only``: ``load_hparams`` returns before the hyperparameters,
and no tensor is created, so neither is required of them. A shard of a split
model holds part of the tensors, so nothing is missing from it alone; shards
after the first hold no metadata (llama.cpp reads it from the first).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from gguf_audit.checks.arch import NON_MODEL_ARCHITECTURES, ArchSpec, arch_key, arch_spec
from gguf_audit.format.model import Header, StringArray, ValueType
from gguf_audit.format.shard_names import parse_shard_name
from gguf_audit.gguf_constants import Keys

__all__ = ["LAYER_ARRAY_TYPES", "NO_VOCAB", "SPECIAL_ID_KEYS", "HeaderFacts", "c_string", "header_facts"]

LAYER_ARRAY_TYPES: Final = frozenset({ValueType.INT32, ValueType.UINT32})
"""The item types llama.cpp reads per-layer arrays (and ``token_type``) as."""

NO_VOCAB: Final = frozenset({"none", "no_vocab"})
"""``tokenizer.ggml.model`` values of a file without a vocabulary."""

SPECIAL_ID_KEYS: Final = (
    ("bos", Keys.Tokenizer.BOS_ID),
    ("eos", Keys.Tokenizer.EOS_ID),
    ("eot", Keys.Tokenizer.EOT_ID),
    ("eom", Keys.Tokenizer.EOM_ID),
    ("unk", Keys.Tokenizer.UNK_ID),
    ("sep", Keys.Tokenizer.SEP_ID),
    ("pad", Keys.Tokenizer.PAD_ID),
    ("mask", Keys.Tokenizer.MASK_ID),
    ("fim_pre", Keys.Tokenizer.FIM_PRE_ID),
    ("fim_suf", Keys.Tokenizer.FIM_SUF_ID),
    ("fim_mid", Keys.Tokenizer.FIM_MID_ID),
    ("fim_pad", Keys.Tokenizer.FIM_PAD_ID),
    ("fim_rep", Keys.Tokenizer.FIM_REP_ID),
    ("fim_sep", Keys.Tokenizer.FIM_SEP_ID),
)
"""Each special token's role and the key holding its id."""


def c_string(text: str | None) -> str | None:
    """``text`` as a C reader sees it: up to its first NUL (``'linear\\0x'`` is ``'linear'``).

    llama.cpp reads names (``general.architecture``, ``tokenizer.ggml.model`` and ``pre``, the rope
    scaling type) with ``gguf_get_val_str``, a ``const char *``, into a ``std::string`` and compares that.
    """
    return text if text is None or "\0" not in text else text.split("\0", 1)[0]


@dataclass(frozen=True, slots=True)
class HeaderFacts:
    """What the semantic checks know of a header before they judge it."""

    header: Header
    arch: str | None
    """``general.architecture`` when it is a string, up to its first NUL (:func:`c_string`)."""
    spec: ArchSpec | None
    model: bool
    """A language model file (not an adapter, imatrix, projector or control vector)."""
    vocab_only: bool
    shard: bool
    """One file of a split model (split.count > 1 or a -NNNNN-of-MMMMM name)."""
    continuation: bool
    """A shard after the first: llama.cpp reads no metadata from it."""
    tokenizer_model: str | None
    """``tokenizer.ggml.model`` when it is a string, up to its first NUL (as :attr:`arch`)."""
    tokens: StringArray | None
    token_types: npt.NDArray[np.generic] | None
    n_layer: int | None

    @property
    def n_tokens(self) -> int | None:
        return None if self.tokens is None else len(self.tokens)

    def c_str(self, key: str) -> str | None:
        """The string value of ``key`` as llama.cpp compares it (:func:`c_string`); None when absent or
        of another type."""
        return c_string(self.header.get_str(key))

    def key(self, template: str) -> str:
        """``template`` for this file's architecture: ``{arch}.block_count`` -> ``llama.block_count``."""
        return arch_key(template, self.arch or "")

    @property
    def is_moe(self) -> bool:
        """Mixture-of-experts: always for its architecture, or ``{arch}.expert_count`` above 0."""
        if self.spec is not None and self.spec.always_moe:
            return True
        n_expert = self.header.get_int(self.key(Keys.LLM.EXPERT_COUNT))
        return n_expert is not None and n_expert > 0


def header_facts(header: Header, url: str | None) -> HeaderFacts:
    """The facts of ``header``; ``url`` tells from the file name whether it is a shard."""
    arch = c_string(header.get_str(Keys.General.ARCHITECTURE))
    gtype = c_string(header.get_str(Keys.General.TYPE))
    model = gtype in (None, "model", "vocab") and arch not in NON_MODEL_ARCHITECTURES
    split_count = header.get_int(Keys.Split.LLM_KV_SPLIT_COUNT)
    split_no = header.get_int(Keys.Split.LLM_KV_SPLIT_NO)
    name = parse_shard_name(url) if url else None
    # (index, count) as the file name says; ShardName's fields shadow tuple methods for mypy.
    named = (name[1], name[2]) if name is not None else (1, 1)
    shard = (split_count is not None and split_count > 1) or named[1] > 1
    # split.no counts from 0; when it is absent, the name's index (from 1) tells.
    continuation = split_no > 0 if split_no is not None else named[0] > 1
    tokens_kv = header.metadata.get(Keys.Tokenizer.LIST)
    tokens = tokens_kv.value if tokens_kv is not None and isinstance(tokens_kv.value, StringArray) else None
    tt_kv = header.metadata.get(Keys.Tokenizer.TOKEN_TYPE)
    token_types = (
        tt_kv.value
        if tt_kv is not None and tt_kv.item_type in LAYER_ARRAY_TYPES and isinstance(tt_kv.value, np.ndarray)
        else None
    )
    n_layer = header.get_int(arch_key(Keys.LLM.BLOCK_COUNT, arch)) if arch else None
    return HeaderFacts(
        header=header,
        arch=arch,
        spec=arch_spec(arch) if arch else None,
        model=model,
        vocab_only=gtype == "vocab" or (header.n_tensors == 0 and not shard),
        shard=shard,
        continuation=continuation,
        tokenizer_model=c_string(header.get_str(Keys.Tokenizer.MODEL)),
        tokens=tokens,
        token_types=token_types,
        n_layer=n_layer,
    )
