"""The per-record rules gguf.cpp applies while it reads the tensor infos.

``gguf_init_from_file_impl`` (``ggml/src/gguf.cpp``, b11312) reads the tensor
infos one by one and stops at the first it refuses: a name read before
(compared byte for byte), more than ``GGML_MAX_DIMS`` dimensions, a negative
one, an element count past int64, a type id it does not know or whose block
size is 0 (a removed type), rows that are not whole blocks, or a byte size past
``SIZE_MAX``. Nothing after that record is read. The parser stops there too
(a corrupt tensor count over a data section of zeros would otherwise read
tens of thousands of nameless infos); the structural checks report the record.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from gguf_audit.format.ggml_types import TypeStatus, ggml_type_info
from gguf_audit.format.wire import GGML_MAX_DIMS

__all__ = ["gguf_elements_fit", "gguf_refuses_info"]

_INT64_MAX: Final = (1 << 63) - 1
_SIZE_MAX: Final = (1 << 64) - 1


def gguf_elements_fit(ne: Sequence[int]) -> bool:
    """gguf.cpp's element-count test (b11312): the running product over the dims, each one > 1 checked."""
    current = ne[0]
    for d in ne[1:]:
        if d > 1 and _INT64_MAX // d < current:
            return False
        current *= d
    return True


def gguf_refuses_info(shape: Sequence[int], type_id: int) -> bool:
    """Whether gguf.cpp refuses a tensor info of ``shape`` and ``type_id`` (its name aside) and stops reading.

    The tests are those of the tensor-info loop, in its order; each has a
    finding of :mod:`gguf_audit.checks.structure` that refuses the file.
    """
    if len(shape) > GGML_MAX_DIMS or any(d < 0 for d in shape):
        return True
    ne = (*shape, *(1,) * (GGML_MAX_DIMS - len(shape)))
    if not gguf_elements_fit(ne):
        return True
    info = ggml_type_info(type_id)
    if info.status is not TypeStatus.SUPPORTED or info.block_elems == 0:
        return True
    if ne[0] % info.block_elems:
        return True
    n_elements = 1
    for d in ne:
        n_elements *= d
    return n_elements // info.block_elems > _SIZE_MAX // info.block_bytes
