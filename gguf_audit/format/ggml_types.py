"""The ggml tensor type table: block geometry per type id, and which ids are gone.

Names and sizes come from the gguf package (``GGMLQuantizationType`` and
``GGML_QUANT_SIZES``), corrected where it disagrees with ggml's own
``type_traits`` table in ``ggml/src/ggml.c``:

- Q8_1 blocks are 36 bytes (two fp16 fields, d and s, then 32 int8), not 40;
- id 42 is Q2_0, 64 elements in 18 bytes (an fp16 scale and 2-bit quants),
  which the package does not know yet.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from gguf_audit.gguf_constants import GGML_QUANT_SIZES, GGMLQuantizationType

__all__ = [
    "GGML_TYPE_COUNT",
    "REMOVED_TYPE_IDS",
    "GGMLTypeInfo",
    "TypeStatus",
    "ggml_type_info",
    "ggml_type_name",
]

# One past the highest type id current ggml knows (GGML_TYPE_COUNT in ggml.h).
GGML_TYPE_COUNT = 43

# Ids whose support ggml removed; the loader finds a zero block size for them.
REMOVED_TYPE_IDS: dict[int, str] = {
    4: "Q4_2",
    5: "Q4_3",
    31: "Q4_0_4_4",
    32: "Q4_0_4_8",
    33: "Q4_0_8_8",
    36: "IQ4_NL_4_4",
    37: "IQ4_NL_4_8",
    38: "IQ4_NL_8_8",
}

_CORRECTIONS: dict[int, tuple[str, int, int]] = {
    9: ("Q8_1", 32, 36),
    42: ("Q2_0", 64, 18),
}


class TypeStatus(StrEnum):
    SUPPORTED = "supported"
    REMOVED = "removed"
    UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class GGMLTypeInfo:
    """Block geometry of one ggml type id."""

    type_id: int
    name: str
    block_elems: int
    block_bytes: int
    status: TypeStatus

    @property
    def quantized(self) -> bool:
        return self.block_elems > 1

    def n_bytes(self, n_elements: int) -> int:
        """Bytes of ``n_elements`` stored in this type (a whole number of blocks)."""
        return n_elements // self.block_elems * self.block_bytes


def _build_table() -> dict[int, GGMLTypeInfo]:
    table: dict[int, GGMLTypeInfo] = {}
    for qtype in GGMLQuantizationType:
        block_elems, block_bytes = GGML_QUANT_SIZES[qtype]
        table[int(qtype)] = GGMLTypeInfo(int(qtype), qtype.name, block_elems, block_bytes, TypeStatus.SUPPORTED)
    for type_id, (name, block_elems, block_bytes) in _CORRECTIONS.items():
        table[type_id] = GGMLTypeInfo(type_id, name, block_elems, block_bytes, TypeStatus.SUPPORTED)
    for type_id, name in REMOVED_TYPE_IDS.items():
        table[type_id] = GGMLTypeInfo(type_id, name, 0, 0, TypeStatus.REMOVED)
    return table


_TABLE = _build_table()


def ggml_type_info(type_id: int) -> GGMLTypeInfo:
    """The geometry of ``type_id``; unknown ids get status UNKNOWN and zero sizes."""
    info = _TABLE.get(type_id)
    if info is not None and (info.status is not TypeStatus.SUPPORTED or type_id < GGML_TYPE_COUNT):
        return info
    return GGMLTypeInfo(type_id, f"type{type_id}", 0, 0, TypeStatus.UNKNOWN)


def ggml_type_name(type_id: int) -> str:
    return ggml_type_info(type_id).name
