"""Model files of realistic size made on demand: llama tensor tables, their data invented as it is read.

:func:`llama_table` is the tensor table of a llama model quantized Q4_K_M
(:data:`LLAMA_7B_LIKE`: 291 tensors, 4.3 GB; :data:`LLAMA_70B_LIKE`: 723
tensors, 44 GB). A :class:`SyntheticGGUF` is a file with that table whose
tensor data is never stored: :meth:`SyntheticGGUF.read` makes any byte range
on demand, the same bytes every time, the way trained weights look to the
data checks (pseudo-random quants, small finite scales, F32 values in
``[-0.5, 0.5)``), with defects planted on purpose first: zeroed byte ranges,
NaN scales, a cut. Serve one with
:meth:`~gguf_audit.testing.http.RangeHTTPServer.put_virtual`, or write its
header to a sparse file with :meth:`SyntheticGGUF.write_sparse` (all data zero).
"""

from __future__ import annotations

import bisect
import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import numpy as np

from gguf_audit.format.ggml_types import ggml_type_info
from gguf_audit.format.model import Header
from gguf_audit.testing.builder import KV, Tensor, build_gguf_layout, kv_str

__all__ = ["LLAMA_7B_LIKE", "LLAMA_70B_LIKE", "SyntheticGGUF", "TensorRegion", "llama_table"]

F32, Q4_K, Q6_K = 0, 12, 14

LLAMA_7B_LIKE: Final = (32, 4096, 11008, 32000, 4096)
"""``(n_layer, n_embd, n_ff, n_vocab, n_embd_kv)`` of Llama-2-7B."""
LLAMA_70B_LIKE: Final = (80, 8192, 28672, 32000, 1024)
"""``(n_layer, n_embd, n_ff, n_vocab, n_embd_kv)`` of Llama-2-70B (grouped-query attention)."""

_PAGE_BYTES: Final = 4096

# Where each block's f16 scale(s) sit, and the value written there: small and
# finite, as trained weights' are (0x2400 is 2**-6, 0x2000 is 2**-7).
_SCALES: Final[dict[int, tuple[tuple[int, int], ...]]] = {
    Q4_K: ((0, 0x2400), (2, 0x2000)),  # d, dmin
    Q6_K: ((208, 0x2400),),  # d, after ql, qh and the int8 scales
}
_NAN16: Final = 0x7E00


def llama_table(
    n_layer: int, n_embd: int, n_ff: int, n_vocab: int, n_embd_kv: int
) -> list[tuple[str, tuple[int, ...], int]]:
    """The tensor table of a llama model quantized Q4_K_M (Q6_K for attn_v, ffn_down and output), in file order."""
    out: list[tuple[str, tuple[int, ...], int]] = [("token_embd.weight", (n_embd, n_vocab), Q4_K)]
    for i in range(n_layer):
        b = f"blk.{i}."
        out += [
            (b + "attn_norm.weight", (n_embd,), F32),
            (b + "attn_q.weight", (n_embd, n_embd), Q4_K),
            (b + "attn_k.weight", (n_embd, n_embd_kv), Q4_K),
            (b + "attn_v.weight", (n_embd, n_embd_kv), Q6_K),
            (b + "attn_output.weight", (n_embd, n_embd), Q4_K),
            (b + "ffn_norm.weight", (n_embd,), F32),
            (b + "ffn_gate.weight", (n_embd, n_ff), Q4_K),
            (b + "ffn_up.weight", (n_embd, n_ff), Q4_K),
            (b + "ffn_down.weight", (n_ff, n_embd), Q6_K),
        ]
    out += [("output_norm.weight", (n_embd,), F32), ("output.weight", (n_embd, n_vocab), Q6_K)]
    return out


@dataclass(frozen=True, slots=True)
class TensorRegion:
    """Where one tensor's data sits in a synthetic file."""

    name: str
    type_id: int
    start: int
    """Absolute offset of its first byte."""
    n_bytes: int
    block_bytes: int

    @property
    def end(self) -> int:
        return self.start + self.n_bytes


class SyntheticGGUF:
    """A GGUF file of a given tensor table whose data is made as it is read (see the module docs).

    Not thread-safe to plant defects into while it is being read; plant first.
    """

    def __init__(
        self,
        table: Sequence[tuple[str, tuple[int, ...], int]],
        *,
        kvs: Sequence[KV] = (kv_str("general.architecture", "llama"),),
        seed: int = 0,
    ) -> None:
        tensors, offset = [], 0
        for name, dims, type_id in table:
            # Placed where packed data would go; the builder writes none of it.
            tensors.append(Tensor(name, dims, type_id, offset=offset, data=b""))
            offset += -(-_n_bytes(type_id, dims) // 32) * 32
        layout = build_gguf_layout(kvs, tensors, include_data=False)
        self.header = layout.content
        """The file's bytes up to the data section (header and padding)."""
        self.data_offset = layout.data_section_offset
        self.regions: tuple[TensorRegion, ...] = tuple(
            TensorRegion(name, type_id, self.data_offset + t.written_offset, _n_bytes(type_id, dims), _block(type_id))
            for (name, dims, type_id), t in zip(table, layout.tensors, strict=True)
        )
        self.full_size = max((r.end for r in self.regions), default=self.data_offset)
        self.size = self.full_size
        """The file's size: less than :attr:`full_size` once :meth:`cut`."""
        self._seed = seed
        self._starts = [r.start for r in self.regions]
        self._zeros: list[tuple[int, int]] = []
        self._nan_scales: list[tuple[int, int]] = []

    # --- defects

    def region(self, name: str) -> TensorRegion:
        return next(r for r in self.regions if r.name == name)

    def zero(self, start: int, end: int) -> None:
        """Make bytes ``[start, end)`` zero: data never written."""
        self._zeros.append((start, end))

    def nan_scales(self, start: int, end: int) -> None:
        """Give every quantized block whose scale lies in ``[start, end)`` a NaN scale."""
        self._nan_scales.append((start, end))

    def cut(self, size: int) -> None:
        """End the file after ``size`` bytes: an interrupted download."""
        self.size = min(size, self.full_size)

    # --- bytes

    def read(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)`` of the file (fewer at its end), the same on every call."""
        end = min(end, self.size)
        if end <= start:
            return b""
        out = np.zeros(end - start, dtype=np.uint8)
        first_page, last_page = start // _PAGE_BYTES, (end - 1) // _PAGE_BYTES
        pages = b"".join(self._page(p) for p in range(first_page, last_page + 1))
        skip = start - first_page * _PAGE_BYTES
        out[:] = np.frombuffer(pages, dtype=np.uint8, count=end - start, offset=skip)
        i = max(0, bisect.bisect_right(self._starts, start) - 1)
        while i < len(self.regions) and self.regions[i].start < end:
            self._shape(out, start, self.regions[i])
            i += 1
        for zs, ze in self._zeros:
            lo, hi = max(zs, start), min(ze, end)
            if hi > lo:
                out[lo - start : hi - start] = 0
        header_end = min(end, len(self.header))
        if start < header_end:
            out[: header_end - start] = np.frombuffer(self.header[start:header_end], dtype=np.uint8)
        return out.tobytes()

    def _page(self, page: int) -> bytes:
        key = self._seed.to_bytes(8, "little") + page.to_bytes(8, "little")
        return hashlib.shake_128(key).digest(_PAGE_BYTES)

    def _shape(self, out: np.ndarray, start: int, r: TensorRegion) -> None:
        """Make ``r``'s bytes inside ``out`` look like weights: F32 in [-0.5, 0.5), small scales."""
        lo, hi = max(r.start, start), min(r.end, start + len(out))
        if hi <= lo:
            return
        if r.type_id == F32:
            a, b = (lo - r.start + 3) // 4 * 4 + r.start, (hi - r.start) // 4 * 4 + r.start
            if b > a:
                words = out[a - start : b - start].view(np.uint32)
                values = ((words >> 9) | np.uint32(0x3F800000)).view(np.float32) - np.float32(1.5)
                words[:] = values.view(np.uint32)
            return
        for field, value in _SCALES.get(r.type_id, ()):
            self._set_scales(out, start, r, field, value, lo, hi)
            for a, b in self._nan_scales:
                if min(hi, b) > max(lo, a):
                    self._set_scales(out, start, r, field, _NAN16, max(lo, a), min(hi, b))

    @staticmethod
    def _set_scales(out: np.ndarray, start: int, r: TensorRegion, field: int, value: int, lo: int, hi: int) -> None:
        bb = r.block_bytes
        k0 = max(0, (lo - r.start - field - 1) // bb)
        k1 = (hi - r.start - field) // bb + 1
        pos = r.start + field + bb * np.arange(k0, k1, dtype=np.int64)
        for j, byte in enumerate(value.to_bytes(2, "little")):
            p = pos + j
            p = p[(p >= lo) & (p < hi) & (p < r.end)]
            out[p - start] = byte

    @classmethod
    def over_header(cls, header: Header, content: bytes, *, size: int, seed: int = 0) -> SyntheticGGUF:
        """A synthetic file with an existing header: ``content`` (its bytes) parsed as ``header``.

        Its tensors' data is made on demand as :meth:`read` makes any synthetic
        file's, ``seed`` choosing which pseudo-random weights.
        """
        synth = cls([], seed=seed)
        synth.header = bytes(content)
        synth.data_offset = header.data_offset
        synth.regions = tuple(
            TensorRegion(t.name, t.type_id, t.data_offset, t.n_bytes, _block(t.type_id)) for t in header.tensors
        )
        synth.full_size = synth.size = size
        synth._starts = [r.start for r in synth.regions]
        return synth

    def write_ranges(self, path: str | Path, ranges: Iterable[tuple[int, int]]) -> int:
        """Write the file to ``path`` sparsely: its header, and its bytes in ``ranges`` (the rest a hole).

        A file whose sampled ranges hold weight-like data at a fraction of its
        size on disk; returns its size.
        """
        with open(path, "wb") as f:
            f.write(self.header)
            for start, end in ranges:
                f.seek(start)
                f.write(self.read(start, end))
            f.truncate(self.size)
        return self.size

    def write_sparse(self, path: str | Path) -> int:
        """Write the file to ``path`` as its header and a sparse hole (all data zero); returns its size."""
        with open(path, "wb") as f:
            f.write(self.header)
            f.truncate(self.size)
        return self.size


def _n_bytes(type_id: int, dims: tuple[int, ...]) -> int:
    n = 1
    for d in dims:
        n *= d
    return ggml_type_info(type_id).n_bytes(n)


def _block(type_id: int) -> int:
    info = ggml_type_info(type_id)
    return info.block_bytes if info.block_elems > 1 else info.block_bytes * 32
