"""The ``data.*`` findings of sampled tensor blocks: non-finite values and scales, zero-filled tensors.

Pure: :class:`~gguf_audit.decode.sampled.DecodedBlock` s in (read by
:mod:`gguf_audit.samples`, decoded by :mod:`gguf_audit.decode`), findings out.
Only tensors with blocks read are judged, on the blocks read: an audit's
plan reads runs of blocks at a few places in a file
(:mod:`gguf_audit.plan.windows`), so most tensors of a big model are not
judged at all, and a zero-filled verdict says how many of the tensor's
blocks it rests on.

llama.cpp loads a file whatever its tensors hold: ``ggml_validate_row_data``
(``ggml/src/ggml-quants.c``), which rejects NaN and Inf values and scales, runs
at load time only with ``--check-tensors``. So none of these codes marks a
file as refused; they say the weights are broken.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Final

from gguf_audit.bounded import quote
from gguf_audit.codes import Code
from gguf_audit.decode.sampled import DecodedBlock, SampleStatus
from gguf_audit.findings import Finding, finding
from gguf_audit.format.model import Header, TensorInfo
from gguf_audit.plan import tensor_geometry

__all__ = [
    "check_samples",
    "zero_check_exempt",
]


# Sampled blocks, all zero, before a tensor is called zero-filled: a single
# zero block may be a padding row of an otherwise written matrix.
_MIN_ZERO_BLOCKS: Final = 2

# Tensors that may legitimately be all zero (or that gguf-audit cannot tell
# about): norms, biases, LoRA adapters (lora_b starts at zero), rope factors,
# attention sinks, scales, and the state-space and RWKV mixing parameters.
_ZERO_OK: Final = re.compile(
    r"norm|\.bias$|_bias\b|exp_probs_b|lora|rope|sinks|scale|ssm_|time_mix|channel_mix|conv|_shift|token_types"
)

# Integer tensors (I8 to I64) hold indices and masks, not weights.
_INTEGER_TYPE_IDS: Final = frozenset({24, 25, 26, 27})


def zero_check_exempt(tensor: TensorInfo) -> bool:
    """Whether an all-zero ``tensor`` may be legitimate (so it is never flagged).

    Only matrices are judged: vectors are norms, biases and scales, and a
    name that marks one of those, or an adapter, a rope factor or a
    state-space parameter, is exempt whatever its shape.
    """
    if tensor.type_id in _INTEGER_TYPE_IDS:
        return True
    if sum(1 for d in tensor.shape if d > 1) < 2:
        return True
    return _ZERO_OK.search(tensor.name) is not None


def check_samples(header: Header, decoded: Sequence[DecodedBlock]) -> Iterator[Finding]:
    """Yield the ``data.*`` findings of the sampled blocks of ``header``'s tensors."""
    by_tensor: Mapping[int, list[DecodedBlock]] = _group(decoded)
    for index, blocks in by_tensor.items():
        tensor = header.tensors[index]
        yield from _check_tensor(tensor, blocks)


def _group(decoded: Iterable[DecodedBlock]) -> dict[int, list[DecodedBlock]]:
    groups: dict[int, list[DecodedBlock]] = defaultdict(list)
    for d in decoded:
        groups[d.block.tensor_index].append(d)
    return dict(sorted(groups.items()))


def _check_tensor(tensor: TensorInfo, blocks: list[DecodedBlock]) -> Iterator[Finding]:
    name = tensor.name
    undecoded = [d for d in blocks if d.status is SampleStatus.NO_DECODER]
    if undecoded:
        yield finding(
            Code.DATA_NO_DECODER,
            f"tensor {quote(name)}: {undecoded[0].note}; {len(undecoded)} sampled blocks not checked",
            tensor=name,
            offset=undecoded[0].block.offset,
        )
    ok = [d for d in blocks if d.status is SampleStatus.OK and d.stats is not None]
    if not ok:
        return

    # An MXFP4 exponent of 0xFF decodes as 2**127 and overflows to Inf: that
    # block is reported once, as a bad scale.
    nonfinite = [
        d
        for d in ok
        if d.stats is not None and (d.stats.n_nan or d.stats.n_inf or _bad_scales(d)) and not _bad_exponent(d)
    ]
    if nonfinite:
        n_nan = sum(d.stats.n_nan for d in nonfinite if d.stats is not None)
        n_inf = sum(d.stats.n_inf for d in nonfinite if d.stats is not None)
        n_scales = sum(1 for d in nonfinite if _bad_scales(d))
        first = nonfinite[0].block
        scales = f", {n_scales} with a NaN or Inf scale" if n_scales else ""
        if n_scales and tensor.type_name == "NVFP4":
            scales += (
                " (a UE4M3 scale byte 0x7F, NaN in the NVFP4 spec: ggml reads it as zero and "
                "ggml_validate_row_data never checks NVFP4 scales; runtimes decoding FP8 scales natively get NaN)"
            )
        yield finding(
            Code.DATA_NONFINITE,
            f"tensor {quote(name)} ({tensor.type_name}): {len(nonfinite)} of {len(ok)} sampled blocks hold "
            f"NaN or Inf ({n_nan} NaN and {n_inf} Inf values{scales}); first at block {first.block_index}",
            tensor=name,
            offset=first.offset,
        )

    bad_exponent = [d for d in ok if _bad_exponent(d)]
    if bad_exponent:
        first = bad_exponent[0].block
        yield finding(
            Code.DATA_BAD_SCALE,
            f"tensor {quote(name)} ({tensor.type_name}): {len(bad_exponent)} of {len(ok)} sampled blocks have "
            f"the exponent byte 0xFF (NaN in OCP MX); first at block {first.block_index}",
            tensor=name,
            offset=first.offset,
        )

    zero = [d for d in ok if d.stats is not None and d.stats.n_zero == d.stats.count]
    if len(zero) == len(ok) and len(ok) >= _MIN_ZERO_BLOCKS and not zero_check_exempt(tensor):
        # Only the blocks read are judged: the message says how much of the tensor that was.
        geo = tensor_geometry(tensor)
        of = f" (of its {geo.n_blocks})" if geo is not None else ""
        indices = sorted(d.block.block_index for d in ok)
        yield finding(
            Code.DATA_ZERO_FILLED,
            f"tensor {quote(name)} ({tensor.type_name}, {'x'.join(map(str, tensor.shape))}): all {len(ok)} sampled "
            f"blocks{of} are zero, blocks {indices[0]} to {indices[-1]}",
            tensor=name,
            offset=ok[0].block.offset,
        )


def _bad_scales(d: DecodedBlock) -> bool:
    return d.scales is not None and d.scales.nonfinite_scale_blocks > 0


def _bad_exponent(d: DecodedBlock) -> bool:
    return d.scales is not None and d.scales.bad_exponent_blocks > 0
