"""The streaming GGUF header parser: bytes in, a :class:`Header` or :class:`NeedMore` out.

Pure: no I/O. ``parse_header(buf, file_size=...)`` reads from the start of a
file. When ``buf`` ends before the header does (and the file goes on), it
returns :class:`NeedMore` with the end it must reach and an estimate of the
whole header, plus a checkpoint to resume from with a longer buffer.

Every count and length read from the file is checked against a named limit
and against the bytes that can remain in the file before anything is
allocated, so a forged header costs no more memory than its own bytes.
Problems that stop decoding raise :class:`FormatError`; problems that do not
(invalid UTF-8, odd bools) are returned as findings on the header, and the
structural rules llama.cpp applies to a decoded header live in
:mod:`gguf_audit.checks.structure`.
"""

from __future__ import annotations

import struct
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import numpy as np
import numpy.typing as npt

from gguf_audit.errors import FormatError
from gguf_audit.findings import Finding, finding
from gguf_audit.format.ggml_types import TypeStatus, ggml_type_info
from gguf_audit.format.model import KV, ByteOrder, Header, NeedMore, StringArray, TensorInfo, Value, ValueType

__all__ = [
    "DEFAULT_ALIGNMENT",
    "Limits",
    "parse_header",
]

GGUF_MAGIC: Final = b"GGUF"
DEFAULT_ALIGNMENT: Final = 32
GGML_MAX_DIMS: Final = 4


@dataclass(frozen=True, slots=True)
class Limits:
    """Hard limits on what a header may claim. Each stops one way a forged
    header could make the parser allocate or loop far beyond its own size."""

    max_kv_count: int = 1 << 20
    """Keys per file. Real files have under a few hundred; a forged count of
    2**63 must be refused before a loop or a list is sized by it."""
    max_tensor_count: int = 1 << 20
    """Tensor infos per file (the largest real models have tens of thousands)."""
    max_string_bytes: int = 1 << 30
    """One string: llama.cpp's GGUF_MAX_STRING_LENGTH (1 GiB)."""
    max_array_items: int = 1 << 30
    """Items of one array: llama.cpp's GGUF_MAX_ARRAY_ELEMENTS."""
    max_depth: int = 4
    """Arrays nested in arrays: bounds recursion on a forged file."""
    max_dims: int = 64
    """Dimensions of a tensor read before giving up (ggml itself allows 4)."""


_DEFAULT_LIMITS: Final = Limits()

# Smallest bytes one record can take, per version family: used to refuse
# counts that the rest of the file cannot hold.
_MIN_KV_BYTES = {1: 4 + 4 + 1, 2: 8 + 4 + 1}
_MIN_TENSOR_BYTES = {1: 4 + 4 + 4 + 8, 2: 8 + 4 + 4 + 8}

_SCALAR_SIZE: Final = {
    ValueType.UINT8: 1,
    ValueType.INT8: 1,
    ValueType.UINT16: 2,
    ValueType.INT16: 2,
    ValueType.UINT32: 4,
    ValueType.INT32: 4,
    ValueType.FLOAT32: 4,
    ValueType.BOOL: 1,
    ValueType.UINT64: 8,
    ValueType.INT64: 8,
    ValueType.FLOAT64: 8,
}
_SCALAR_CODE: Final = {
    ValueType.UINT8: "B",
    ValueType.INT8: "b",
    ValueType.UINT16: "H",
    ValueType.INT16: "h",
    ValueType.UINT32: "I",
    ValueType.INT32: "i",
    ValueType.FLOAT32: "f",
    ValueType.BOOL: "B",
    ValueType.UINT64: "Q",
    ValueType.INT64: "q",
    ValueType.FLOAT64: "d",
}
_VALUE_TYPES: Final = {int(t): t for t in ValueType}


class _Short(Exception):
    """The buffer ends before ``needed``; the file (as far as known) goes on."""

    def __init__(self, needed: int) -> None:
        self.needed = needed


@dataclass(frozen=True, slots=True)
class _Checkpoint:
    """Where a parse stopped cleanly: after whole records only."""

    version: int
    byte_order: ByteOrder
    n_tensors: int
    n_kv: int
    pos: int
    kvs: tuple[KV, ...]
    tensors: tuple[_RawTensor, ...]
    findings: tuple[Finding, ...]


@dataclass(frozen=True, slots=True)
class _RawTensor:
    name: str
    raw_name: bytes
    shape: tuple[int, ...]
    type_id: int
    offset: int
    info_offset: int


class _Reader:
    """Cursor over the buffer with the version's integer widths and byte order."""

    def __init__(
        self, buf: bytes | memoryview, file_size: int | None, version: int, order: ByteOrder, limits: Limits
    ) -> None:
        self.buf = buf
        self.blen = len(buf)
        self.file_size = file_size
        # The end of what can exist: the file if its size is known, else what we hold
        # when we hold everything there is (caller passes file_size=len(buf) then).
        self.limit_end = file_size if file_size is not None else None
        self.limits = limits
        self.order = order
        self.bo = "<" if order == "little" else ">"
        self.v1 = version == 1
        self.u32 = struct.Struct(self.bo + "I")
        self.u64 = struct.Struct(self.bo + "Q")
        self.i64 = struct.Struct(self.bo + "q")
        self.count = self.u32 if self.v1 else self.u64
        self.count_bytes = 4 if self.v1 else 8
        self.scalars = {t: struct.Struct(self.bo + c) for t, c in _SCALAR_CODE.items()}
        self.pos = 0
        self.findings: list[Finding] = []

    # -- bounds -------------------------------------------------------------

    def remaining(self, pos: int) -> int | None:
        """Bytes that can exist after ``pos``; None when the file size is unknown."""
        return None if self.limit_end is None else max(self.limit_end - pos, 0)

    def need(self, end: int, what: str) -> None:
        """Make sure the buffer holds bytes up to ``end``, or say why not."""
        if end <= self.blen:
            return
        if self.limit_end is not None and end > self.limit_end:
            raise FormatError(
                "header.truncated",
                f"the file ends at {self.limit_end} bytes, inside {what} that needs bytes up to {end}",
                min(self.pos, self.limit_end),
            )
        raise _Short(end)

    def check_count(self, n: int, min_item_bytes: int, limit: int, what: str, at: int) -> None:
        """Refuse a count past its named limit, or that the rest of the file cannot hold.

        Past the limit the count is forged or corrupt (``header.count_too_large``);
        within it but past the end of the file, the file is cut short
        (``header.truncated``): a plausible count in a file that stops early.
        """
        if n > limit:
            raise FormatError(
                "header.count_too_large",
                f"{what} is {n}, past the limit of {limit}",
                at,
            )
        remaining = self.remaining(self.pos)
        if remaining is not None and n * min_item_bytes > remaining:
            raise FormatError(
                "header.truncated",
                f"{what} is {n}, but {n} items need at least {n * min_item_bytes} bytes "
                f"and the file ends {remaining} bytes later, at {self.limit_end}",
                at,
            )

    # -- primitives -----------------------------------------------------------

    def read_count(self, what: str) -> int:
        at = self.pos
        self.need(at + self.count_bytes, what)
        self.pos = at + self.count_bytes
        return int(self.count.unpack_from(self.buf, at)[0])

    def read_u32(self, what: str) -> int:
        at = self.pos
        self.need(at + 4, what)
        self.pos = at + 4
        return int(self.u32.unpack_from(self.buf, at)[0])

    def read_bytes_with_length(self, what: str) -> tuple[bytes, int]:
        """A GGUF string's raw bytes, and its absolute start."""
        at = self.pos
        n = self.read_count(f"the length of {what}")
        if n > self.limits.max_string_bytes:
            raise FormatError(
                "header.string_too_long",
                f"{what} claims {n} bytes, past the limit of {self.limits.max_string_bytes}",
                at,
            )
        remaining = self.remaining(self.pos)
        if remaining is not None and n > remaining:
            raise FormatError(
                "header.truncated",
                f"{what} claims {n} bytes, but the file ends {remaining} bytes later, at {self.limit_end}",
                at,
            )
        start = self.pos
        self.need(start + n, what)
        self.pos = start + n
        return bytes(self.buf[start : start + n]), start

    def read_text(self, what: str, where: str) -> tuple[str, bytes]:
        raw, start = self.read_bytes_with_length(what)
        try:
            return raw.decode("utf-8"), raw
        except UnicodeDecodeError as exc:
            self.findings.append(
                finding(
                    "header.invalid_utf8",
                    f"{where} is not valid UTF-8 (byte {exc.start}: {raw[exc.start : exc.start + 4]!r})",
                    offset=start + exc.start,
                )
            )
            return raw.decode("utf-8", "backslashreplace"), raw

    # -- values ---------------------------------------------------------------

    def read_value_type(self, key: str) -> ValueType:
        at = self.pos
        raw = self.read_u32(f"the value type of {key!r}")
        vtype = _VALUE_TYPES.get(raw)
        if vtype is None:
            raise FormatError(
                "header.bad_value_type",
                f"key {key!r} has value type {raw}, outside the GGUF types 0 to 12",
                at,
            )
        return vtype

    def read_scalar(self, vtype: ValueType, key: str) -> Value:
        if vtype is ValueType.STRING:
            text, _ = self.read_text(f"the string value of {key!r}", f"the value of {key!r}")
            return text
        size = _SCALAR_SIZE[vtype]
        at = self.pos
        self.need(at + size, f"the value of {key!r}")
        self.pos = at + size
        value = self.scalars[vtype].unpack_from(self.buf, at)[0]
        if vtype is ValueType.BOOL:
            if value > 1:
                self.findings.append(
                    finding("header.invalid_bool", f"bool {key!r} is stored as byte {value}, not 0 or 1", offset=at)
                )
            return bool(value)
        return value  # type: ignore[no-any-return]

    def read_array(self, key: str, depth: int) -> tuple[ValueType, Value]:
        if depth > self.limits.max_depth:
            raise FormatError(
                "header.too_deep",
                f"key {key!r} nests arrays {depth} deep, past the limit of {self.limits.max_depth}",
                self.pos,
            )
        at = self.pos
        item_type = self.read_value_type(key)
        n = self.read_count(f"the length of array {key!r}")
        if item_type is ValueType.STRING:
            return item_type, self.read_string_array(n, key, at)
        if item_type is ValueType.ARRAY:
            self.check_count(n, 4 + self.count_bytes, self.limits.max_array_items, f"array {key!r} length", at)
            items: list[Value] = []
            for _ in range(n):
                _, inner = self.read_array(key, depth + 1)
                items.append(inner)
            return item_type, items
        size = _SCALAR_SIZE[item_type]
        self.check_count(n, size, self.limits.max_array_items, f"array {key!r} length", at)
        start = self.pos
        self.need(start + n * size, f"array {key!r}")
        self.pos = start + n * size
        code = _SCALAR_CODE[item_type]
        dtype = np.dtype(("<" if self.order == "little" else ">") + code) if size > 1 else np.dtype(code)
        values = np.frombuffer(self.buf, dtype=dtype, count=n, offset=start)
        if item_type is ValueType.BOOL:
            bad = np.flatnonzero(values > 1)
            if bad.size:
                first = int(bad[0])
                self.findings.append(
                    finding(
                        "header.invalid_bool",
                        f"bool array {key!r} stores {bad.size} items as bytes other than 0 or 1 "
                        f"(item {first} is {int(values[first])})",
                        offset=start + first,
                    )
                )
            return item_type, values.astype(bool)
        return item_type, values

    def read_string_array(self, n: int, key: str, at: int) -> StringArray:
        prefix = self.count_bytes
        self.check_count(n, prefix, self.limits.max_array_items, f"array {key!r} length", at)
        if self.pos + n * prefix > self.blen:
            # Not even the length prefixes are here yet: ask for them before
            # sizing anything by n (with the file size unknown, check_count
            # could only apply the named limit).
            self.need(self.pos + n * prefix, f"array {key!r}")
        buf = self.buf
        unpack = self.count.unpack_from
        # At most one int64 per length prefix held in the buffer.
        starts = array("q", bytes(8 * n))
        first = pos = self.pos
        i = 0
        # The hot loop of any vocabulary: only the lengths are read here. The
        # text is validated in bulk below and decoded on access. A short
        # buffer shows up as struct.error on the next length, or as an end
        # past the buffer after the last one.
        try:
            for i in range(n):
                start = pos + prefix
                pos = start + unpack(buf, pos)[0]
                starts[i] = start
        except (struct.error, OverflowError):
            # struct.error: the next prefix is cut off; OverflowError: a forged
            # length sent the position past any index.
            self._string_array_short(key, i, starts, pos)
        if pos > self.blen:
            self._string_array_short(key, n, starts, pos)
        self.pos = pos
        starts_np = np.frombuffer(starts, dtype=np.int64)
        ends = np.empty(n, dtype=np.int64)
        if n:
            ends[:-1] = starts_np[1:] - prefix
            ends[-1] = pos
            longest = int((ends - starts_np).max())
            if longest > self.limits.max_string_bytes:
                item = int(np.argmax(ends - starts_np))
                raise FormatError(
                    "header.string_too_long",
                    f"item {item} of array {key!r} claims {longest} bytes, "
                    f"past the limit of {self.limits.max_string_bytes}",
                    int(starts_np[item]) - prefix,
                )
        self._validate_utf8(key, first, starts_np, ends)
        return StringArray(buf, starts_np, ends)

    def _string_array_short(self, key: str, i: int, starts: array[int], pos: int) -> None:
        """The loop over array items ran off the buffer: find out why and raise."""
        prefix = self.count_bytes
        if i > 0 and pos > self.blen:
            # Item i - 1's text ends past the buffer.
            start = starts[i - 1]
            length = pos - start
            self.pos = start - prefix
            what = f"item {i - 1} of array {key!r}"
            if length > self.limits.max_string_bytes:
                raise FormatError(
                    "header.string_too_long",
                    f"{what} claims {length} bytes, past the limit of {self.limits.max_string_bytes}",
                    start - prefix,
                )
            remaining = self.remaining(start)
            if remaining is not None and length > remaining:
                raise FormatError(
                    "header.truncated",
                    f"{what} claims {length} bytes, but the file ends {remaining} bytes later, at {self.limit_end}",
                    start - prefix,
                )
            raise _Short(pos)
        self.pos = pos
        self.need(pos + prefix, f"item {i} of array {key!r}")
        raise _Short(pos + prefix)  # need() raises; this keeps type checkers informed

    def _validate_utf8(
        self,
        key: str,
        first: int,
        starts: npt.NDArray[np.int64],
        ends: npt.NDArray[np.int64],
    ) -> None:
        """Check every item is UTF-8 with few decodes of whole runs of items.

        Between items stand their length prefixes. Where every byte of a
        prefix is ASCII, a multi-byte sequence cannot span it, so a run of
        items decodes as one region exactly when each item does. Items whose
        prefix has a byte >= 0x80 (long strings) start a new run.
        """
        n = len(starts)
        if n == 0:
            return
        lengths = (ends - starts).astype(np.uint64)
        # "Every byte of the prefix below 0x80" does not depend on byte order.
        breaks = np.flatnonzero(lengths & np.uint64(0x8080808080808080))
        buf = self.buf
        run_start = 0
        bad_runs: list[tuple[int, int]] = []
        for b in [*breaks.tolist(), n]:
            # The run [run_start, b) excludes item b's prefix; item b starts the next run.
            if b > run_start and not _decodes(buf, int(starts[run_start]), int(ends[b - 1])):
                bad_runs.append((run_start, b))
            run_start = b
        if not bad_runs:
            return
        bad: list[int] = []
        for lo, hi in bad_runs:
            for i in range(lo, hi):
                if not _decodes(buf, int(starts[i]), int(ends[i])):
                    bad.append(i)
        if bad:
            i = bad[0]
            raw = bytes(buf[int(starts[i]) : int(ends[i])])
            self.findings.append(
                finding(
                    "header.invalid_utf8",
                    f"{len(bad)} items of array {key!r} are not valid UTF-8 (first: item {i}, {raw[:16]!r})",
                    offset=int(starts[i]),
                )
            )


def _decodes(buf: bytes | memoryview, start: int, end: int) -> bool:
    try:
        bytes(buf[start:end]).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _detect(buf: bytes | memoryview, file_size: int | None) -> tuple[int, ByteOrder]:
    """Magic and version; the byte order follows from the version word."""
    have = len(buf)
    head = bytes(buf[:4])
    if not GGUF_MAGIC.startswith(head[:4]):
        raise FormatError("header.bad_magic", f"the file starts with {head!r}, not b'GGUF'", 0)
    if file_size is not None and file_size < 8 and have >= file_size:
        raise FormatError("header.truncated", f"the file is only {file_size} bytes, too short for a GGUF header", 0)
    if have < 8:
        raise _Short(8)
    little = struct.unpack_from("<I", buf, 4)[0]
    big = struct.unpack_from(">I", buf, 4)[0]
    # A big-endian file's version reads as a huge number in little-endian
    # order; llama.cpp tests the low 16 bits the same way.
    if little & 0xFFFF == 0 and 0 < big <= 0xFFFF:
        version, order = big, "big"
    else:
        version, order = little, "little"
    if version == 0 or version > 3:
        raise FormatError(
            "header.unsupported_version",
            f"version {version} is not one of the GGUF versions 1 to 3",
            4,
        )
    return version, order  # type: ignore[return-value]


def parse_header(
    buf: bytes | memoryview,
    file_size: int | None = None,
    *,
    resume: object | None = None,
    limits: Limits = _DEFAULT_LIMITS,
) -> Header | NeedMore:
    """Parse the header at the start of ``buf``.

    ``file_size`` is the listed size of the whole file; None means unknown
    (then only the named limits bound the counts, and a short buffer always
    asks for more). Pass ``file_size=len(buf)`` when ``buf`` is the whole file.
    ``resume`` is the checkpoint of an earlier :class:`NeedMore` for the same
    file, which lets a longer buffer carry on where the last one stopped.

    Raises :class:`FormatError` for a header that cannot be decoded further.
    """
    try:
        if isinstance(resume, _Checkpoint):
            cp = resume
        else:
            version, order = _detect(buf, file_size)
            cp = _Checkpoint(version, order, -1, -1, 8, (), (), ())
        return _parse_from(buf, file_size, cp, limits)
    except _Short as short:
        return NeedMore(short.needed, max(short.needed, 8), None)


def _parse_from(buf: bytes | memoryview, file_size: int | None, cp: _Checkpoint, limits: Limits) -> Header | NeedMore:
    r = _Reader(buf, file_size, cp.version, cp.byte_order, limits)
    r.pos = cp.pos
    r.findings.extend(cp.findings)
    kvs = list(cp.kvs)
    tensors = list(cp.tensors)
    n_tensors, n_kv = cp.n_tensors, cp.n_kv
    # Where the last whole record ended. The checkpoint itself is built only
    # when the buffer runs out: building it per record would cost time
    # quadratic in the record count.
    clean_pos, clean_findings = cp.pos, len(r.findings)
    try:
        if n_tensors < 0:
            at = r.pos
            n_tensors = r.read_count("the tensor count")
            n_kv_at = r.pos
            n_kv = r.read_count("the key-value count")
            family = 1 if r.v1 else 2
            # The counts are int64 to llama.cpp: one with the top bit set is
            # negative there, and far past what any file holds here.
            r.check_count(n_tensors, _MIN_TENSOR_BYTES[family], limits.max_tensor_count, "the tensor count", at)
            r.check_count(n_kv, _MIN_KV_BYTES[family], limits.max_kv_count, "the key-value count", n_kv_at)
            clean_pos, clean_findings = r.pos, len(r.findings)
        while len(kvs) < n_kv:
            kvs.append(_read_kv(r, len(kvs)))
            clean_pos, clean_findings = r.pos, len(r.findings)
        family = 1 if r.v1 else 2
        if len(tensors) == 0 and n_tensors:
            r.check_count(n_tensors, _MIN_TENSOR_BYTES[family], limits.max_tensor_count, "the tensor count", 8)
        while len(tensors) < n_tensors:
            tensors.append(_read_tensor_info(r, len(tensors)))
            clean_pos = r.pos
    except _Short as short:
        if n_kv < 0:
            checkpoint = cp
        else:
            checkpoint = _Checkpoint(
                cp.version,
                cp.byte_order,
                n_tensors,
                n_kv,
                clean_pos,
                tuple(kvs),
                tuple(tensors),
                tuple(r.findings[:clean_findings]),
            )
        estimate = _estimate(r, short.needed, kvs, tensors, n_kv, n_tensors, checkpoint)
        return NeedMore(short.needed, estimate, checkpoint)
    return _finish(r, cp, kvs, tensors, n_kv, n_tensors, file_size)


def _read_kv(r: _Reader, index: int) -> KV:
    at = r.pos
    key, _raw = r.read_text(f"the key of key-value {index}", f"key {index}")
    vtype = r.read_value_type(key)
    if vtype is ValueType.ARRAY:
        item_type, value = r.read_array(key, 1)
        return KV(key, vtype, value, at, item_type)
    return KV(key, vtype, r.read_scalar(vtype, key), at)


def _read_tensor_info(r: _Reader, index: int) -> _RawTensor:
    at = r.pos
    name, raw = r.read_text(f"the name of tensor {index}", f"the name of tensor {index}")
    dims_at = r.pos
    n_dims = r.read_u32(f"the dimension count of tensor {name!r}")
    if n_dims > r.limits.max_dims:
        raise FormatError(
            "tensor.bad_dims",
            f"tensor {name!r} claims {n_dims} dimensions, past the limit of {r.limits.max_dims}",
            dims_at,
        )
    dim_bytes = 4 if r.v1 else 8
    start = r.pos
    r.need(start + n_dims * dim_bytes + 4 + 8, f"the tensor info of {name!r}")
    if r.v1:
        shape = struct.unpack_from(f"{r.bo}{n_dims}I", r.buf, start)
    else:
        shape = struct.unpack_from(f"{r.bo}{n_dims}q", r.buf, start)
    pos = start + n_dims * dim_bytes
    type_id = struct.unpack_from(f"{r.bo}i", r.buf, pos)[0]
    offset = r.u64.unpack_from(r.buf, pos + 4)[0]
    r.pos = pos + 12
    return _RawTensor(name, raw, tuple(shape), type_id, offset, at)


def _finish(
    r: _Reader,
    cp: _Checkpoint,
    kvs: list[KV],
    raw_tensors: list[_RawTensor],
    n_kv: int,
    n_tensors: int,
    file_size: int | None,
) -> Header:
    metadata: dict[str, KV] = {}
    for kv in kvs:
        metadata.setdefault(kv.key, kv)
    alignment = _effective_alignment(metadata.get("general.alignment"))
    header_bytes = r.pos
    data_offset = _pad(header_bytes, alignment)
    tensors = tuple(_tensor_info(t, data_offset) for t in raw_tensors)
    # llama.cpp seeks to the padded start of the data only when there are
    # tensors, so a vocab-only file may end right after its header.
    min_size = data_offset if n_tensors else header_bytes
    for t in tensors:
        min_size = max(min_size, t.end_offset)
    return Header(
        version=cp.version,
        byte_order=cp.byte_order,
        alignment=alignment,
        kvs=tuple(kvs),
        tensors=tensors,
        header_bytes=header_bytes,
        data_offset=data_offset,
        min_file_size=min_size,
        file_size=file_size,
        n_kv=n_kv,
        n_tensors=n_tensors,
        findings=tuple(r.findings),
        metadata=metadata,
    )


def _tensor_info(t: _RawTensor, data_offset: int) -> TensorInfo:
    n_elements = 1
    for d in t.shape:
        n_elements *= d
    info = ggml_type_info(t.type_id)
    if info.status is TypeStatus.SUPPORTED and n_elements >= 0 and all(d >= 0 for d in t.shape):
        n_bytes = -(-n_elements // info.block_elems) * info.block_bytes
    else:
        n_bytes = 0
    return TensorInfo(
        name=t.name,
        shape=t.shape,
        type_id=t.type_id,
        offset=t.offset,
        data_offset=data_offset + t.offset,
        n_elements=n_elements,
        n_bytes=n_bytes,
        info_offset=t.info_offset,
        raw_name=t.raw_name,
    )


def _effective_alignment(kv: KV | None) -> int:
    if kv is None or kv.type is not ValueType.UINT32 or not isinstance(kv.value, int):
        return DEFAULT_ALIGNMENT
    value = kv.value
    if value == 0 or value & (value - 1):
        return DEFAULT_ALIGNMENT
    return value


def _pad(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


# --- estimating the rest of a header -------------------------------------------

# A tensor-info record of a typical name (blk.12.ffn_down.weight), 2 dims.
_TYPICAL_TENSOR_INFO = 8 + 28 + 4 + 2 * 8 + 4 + 8
_TYPICAL_KV = 64


def _estimate(
    r: _Reader,
    needed: int,
    kvs: list[KV],
    tensors: list[_RawTensor],
    n_kv: int,
    n_tensors: int,
    cp: _Checkpoint,
) -> int:
    """Guess the header's full length from what has been parsed.

    The guess errs a few percent high: a second round trip costs far more than
    a few kilobytes of tensor data read with the header.
    """
    if n_kv < 0:
        return max(needed, 64 * 1024)
    # From the last whole record on: what is known is re-estimated, so the
    # requirement of the record in progress is not counted twice.
    pos = cp.pos
    rest = 0
    if len(kvs) < n_kv:
        rest += _estimate_rest_of_kvs(r, kvs, n_kv, cp.pos, needed)
        tensor_bytes = _TYPICAL_TENSOR_INFO
    else:
        tensor_bytes = (cp.pos - tensors[0].info_offset) // len(tensors) if tensors else _TYPICAL_TENSOR_INFO
    rest += (n_tensors - len(tensors)) * tensor_bytes
    estimate = pos + rest
    return max(needed, int(estimate * 1.03) + 4096)


def _estimate_rest_of_kvs(r: _Reader, kvs: list[KV], n_kv: int, kv_pos: int, needed: int) -> int:
    """Bytes of the key-value records not parsed yet, tokenizer-aware.

    Vocabulary arrays dominate big headers. Once the token list's length is
    known the arrays that usually follow it can be sized: scores and token
    types (4 bytes an item) and, for BPE tokenizers, merges (about one per
    token, each spelling the token it makes plus a space).
    """
    seen = {kv.key: kv for kv in kvs}
    partial = _partial_array(r, kv_pos, needed)
    rest = partial.record_bytes if partial is not None else 0
    partial_key = partial.key if partial is not None else None
    n_tokens = _vocab_size(seen, partial)
    remaining_keys = n_kv - len(kvs) - (1 if partial is not None else 0)
    expected: list[tuple[str, int]] = []
    if n_tokens:
        token_bytes = _mean_token_bytes(seen.get("tokenizer.ggml.tokens"), r, partial)
        model = seen.get("tokenizer.ggml.model")
        kind = model.value if model is not None else None
        expected.append(("tokenizer.ggml.token_type", 4 * n_tokens + 64))
        if kind == "gpt2":
            expected.append(("tokenizer.ggml.merges", n_tokens * (token_bytes + 1) + 64))
        elif kind in ("llama", "t5", None):
            expected.append(("tokenizer.ggml.scores", 4 * n_tokens + 64))
    for key, nbytes in expected:
        if key not in seen and key != partial_key and remaining_keys > 0:
            rest += nbytes
            remaining_keys -= 1
    rest += max(remaining_keys, 0) * _TYPICAL_KV
    return rest


@dataclass(frozen=True, slots=True)
class _PartialArray:
    key: str
    n_items: int
    record_bytes: int
    """Estimated bytes of the whole record, key to last item."""
    item_bytes: int
    """Estimated mean bytes per item still to come (prefix included)."""


def _partial_array(r: _Reader, kv_pos: int, needed: int) -> _PartialArray | None:
    """If the buffer stopped inside an array, estimate that array's record.

    String items are measured from those already held. Vocabularies are
    sorted by rank, so later tokens run longer: the mean of the second half
    of the held items stands for the ones still to come.
    """
    try:
        sub = _Reader(r.buf, r.file_size, 1 if r.v1 else 3, r.order, r.limits)
        sub.pos = kv_pos
        key, _ = sub.read_text("key", "key")
        if sub.read_value_type(key) is not ValueType.ARRAY:
            return None
        item_type = sub.read_value_type(key)
        n = sub.read_count("array length")
    except (_Short, FormatError):
        return None
    start = sub.pos
    head = start - kv_pos
    if item_type in _SCALAR_SIZE:
        size = _SCALAR_SIZE[item_type]
        return _PartialArray(key, n, head + n * size, size)
    if item_type is not ValueType.STRING:
        return _PartialArray(key, n, head + n * 16, 16)
    ends = _item_ends(r.buf, start, n, sub.count.unpack_from, sub.count_bytes)
    done = len(ends)
    if done < 2:
        mean = sub.count_bytes + 8
        return _PartialArray(key, n, head + n * mean, mean)
    half = done // 2
    recent = -(-(ends[-1] - ends[half - 1]) // (done - half))
    return _PartialArray(key, n, head + (ends[-1] - start) + (n - done) * recent, recent)


def _item_ends(
    buf: bytes | memoryview, start: int, n: int, unpack: Callable[..., tuple[int]], prefix: int
) -> list[int]:
    """End offsets of the whole string items held in ``buf`` from ``start``."""
    ends: list[int] = []
    pos, limit = start, len(buf)
    while len(ends) < n and pos + prefix <= limit:
        pos += prefix + unpack(buf, pos)[0]
        if pos > limit:
            break
        ends.append(pos)
    return ends


def _vocab_size(seen: dict[str, KV], partial: _PartialArray | None) -> int:
    tokens = seen.get("tokenizer.ggml.tokens")
    if tokens is not None and tokens.length:
        return tokens.length
    if partial is not None and partial.key == "tokenizer.ggml.tokens":
        return partial.n_items
    return 0


def _mean_token_bytes(tokens: KV | None, r: _Reader, partial: _PartialArray | None) -> int:
    """Mean bytes of a token item, prefix included."""
    if tokens is not None and isinstance(tokens.value, StringArray) and len(tokens.value):
        return int(tokens.value.lengths().mean()) + r.count_bytes
    if partial is not None and partial.key == "tokenizer.ggml.tokens":
        return partial.item_bytes
    return 8 + r.count_bytes
