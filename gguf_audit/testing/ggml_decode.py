"""ggml's own ``to_float`` of each type, from the oracle's ``libggml-base`` through ctypes.

The ground truth of block decoding for tests and ``benchmarks/bench_decode.py``:
``ggml_get_type_traits(type)->to_float``, the function llama.cpp runs to turn a
block into floats. Only types ggml gives a ``to_float`` have one here.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np
import numpy.typing as npt

from gguf_audit.format.ggml_types import ggml_type_info
from gguf_audit.testing.oracle import find_oracle

__all__ = ["GgmlDecode", "ggml_to_float"]

GgmlDecode = Callable[[bytes], npt.NDArray[np.float32]]

_TO_FLOAT = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64)


class _TypeTraits(ctypes.Structure):
    # struct ggml_type_traits in ggml.h (b11312).
    _fields_ = [
        ("type_name", ctypes.c_char_p),
        ("blck_size", ctypes.c_int64),
        ("blck_size_interleave", ctypes.c_int64),
        ("type_size", ctypes.c_size_t),
        ("is_quantized", ctypes.c_bool),
        ("to_float", ctypes.c_void_p),
        ("from_float_ref", ctypes.c_void_p),
    ]


@cache
def _library() -> ctypes.CDLL | None:
    oracle = find_oracle()  # its runnable copy: the shared folder's links may be text stubs
    if oracle is None:
        return None
    lib = ctypes.CDLL(str(Path(oracle.binary).parent.parent / "lib" / "libggml-base.so"))
    lib.ggml_get_type_traits.restype = ctypes.POINTER(_TypeTraits)
    lib.ggml_get_type_traits.argtypes = [ctypes.c_int]
    return lib


def ggml_to_float(type_id: int) -> GgmlDecode | None:
    """ggml's decoder of whole ``type_id`` blocks; None without the library or a ``to_float``."""
    lib = _library()
    if lib is None:
        return None
    traits = lib.ggml_get_type_traits(type_id).contents
    if not traits.to_float:
        return None
    to_float = _TO_FLOAT(traits.to_float)
    info = ggml_type_info(type_id)

    def decode(raw: bytes) -> npt.NDArray[np.float32]:
        if len(raw) % info.block_bytes:
            raise ValueError(f"{info.name} data must be whole {info.block_bytes}-byte blocks. Got {len(raw)} bytes.")
        out = np.empty(len(raw) // info.block_bytes * info.block_elems, dtype=np.float32)
        src = ctypes.create_string_buffer(raw, len(raw))
        to_float(ctypes.addressof(src), out.ctypes.data, out.size)
        return out

    return decode
