"""The bounds-checked cursor the GGUF parser reads with, and the checkpoint it resumes from.

:class:`Reader` walks a buffer with one version's integer widths and byte
order. Every read checks the buffer first: past the end of the file it raises
:class:`FormatError` (``header.truncated``), past the end of the buffer while
the file goes on it raises :class:`Short` with the end it needs. Counts and
lengths are checked against :class:`Limits` and against the bytes left in the
file before anything is sized by them. Internal to :mod:`gguf_audit.format`:
:func:`gguf_audit.format.parser.parse_header` is the public way in.
"""

from __future__ import annotations

import struct
from array import array
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from gguf_audit.bounded import quote
from gguf_audit.codes import Code
from gguf_audit.errors import FormatError
from gguf_audit.findings import Finding, finding
from gguf_audit.format.model import KV, ByteOrder, StringArray, Value, ValueType, decode_utf8, escape_invalid
from gguf_audit.format.walk import walk_short_items
from gguf_audit.format.wire import SCALAR_CODE, SCALAR_SIZE, VALUE_TYPES, Limits

__all__ = ["Checkpoint", "RawTensor", "Reader", "Short"]

_WALK_MIN_ITEMS = 32
"""String arrays this long or longer are walked in bulk (:mod:`gguf_audit.format.walk`); shorter ones item by item."""

_NAME_SHOWN_BYTES = 48
"""Bytes of an over-long tensor name quoted in its finding: the name itself is never read."""


class Short(Exception):
    """The buffer ends before ``needed``; the file (as far as known) goes on."""

    def __init__(self, needed: int) -> None:
        self.needed = needed


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Where a parse stopped cleanly: after whole records only."""

    version: int
    byte_order: ByteOrder
    n_tensors: int
    n_kv: int
    pos: int
    kvs: tuple[KV, ...]
    tensors: tuple[RawTensor, ...]
    findings: tuple[Finding, ...]


@dataclass(frozen=True, slots=True)
class RawTensor:
    """A tensor-info record as read: the sizes and the absolute data offset follow at the end."""

    name: str
    raw_name: bytes
    shape: tuple[int, ...]
    type_id: int
    offset: int
    info_offset: int


class Reader:
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
        # Where reads can neither run short nor pass the end of the file.
        self.safe_end = self.blen if file_size is None else min(self.blen, file_size)
        self.limits = limits
        self.order = order
        self.bo = "<" if order == "little" else ">"
        self.v1 = version == 1
        self.u32 = struct.Struct(self.bo + "I")
        self.u64 = struct.Struct(self.bo + "Q")
        self.i64 = struct.Struct(self.bo + "q")
        self.count = self.u32 if self.v1 else self.u64
        self.count_bytes = 4 if self.v1 else 8
        self.scalars = {t: struct.Struct(self.bo + c) for t, c in SCALAR_CODE.items()}
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
                Code.HEADER_TRUNCATED,
                f"the file ends at {self.limit_end} bytes, inside {what} that needs bytes up to {end}",
                min(self.pos, self.limit_end),
            )
        raise Short(end)

    def check_count(self, n: int, min_item_bytes: int, limit: int, what: str, at: int) -> None:
        """Refuse a count past its named limit, or that the rest of the file cannot hold.

        Past the limit the count is forged or corrupt (``header.count_too_large``);
        within it but past the end of the file, the file is cut short
        (``header.truncated``): a plausible count in a file that stops early.
        """
        if n > limit:
            raise FormatError(
                Code.HEADER_COUNT_TOO_LARGE,
                f"{what} is {n}, past the limit of {limit}{_huge(n)}",
                at,
            )
        remaining = self.remaining(self.pos)
        if remaining is not None and n * min_item_bytes > remaining:
            raise FormatError(
                Code.HEADER_TRUNCATED,
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
                Code.HEADER_STRING_TOO_LONG,
                f"{what} claims {n} bytes, past the limit of {self.limits.max_string_bytes}{_huge(n)}",
                at,
            )
        remaining = self.remaining(self.pos)
        if remaining is not None and n > remaining:
            raise FormatError(
                Code.HEADER_TRUNCATED,
                f"{what} claims {n} bytes, but the file ends {remaining} bytes later, at {self.limit_end}",
                at,
            )
        start = self.pos
        self.need(start + n, what)
        self.pos = start + n
        return bytes(self.buf[start : start + n]), start

    def read_text(self, what: str, where: str) -> tuple[str, bytes]:
        raw, start = self.read_bytes_with_length(what)
        bad = decode_utf8(raw)
        if isinstance(bad, str):
            return bad, raw
        self.findings.append(
            finding(
                Code.HEADER_INVALID_UTF8,
                f"{where} is not valid UTF-8 (byte {bad}: {raw[bad : bad + 4]!r})",
                offset=start + bad,
            )
        )
        return escape_invalid(raw), raw

    def read_name(self, what: str, max_bytes: int) -> tuple[str, bytes]:
        """A tensor name: refused, unread, once its length reaches ``max_bytes`` (ggml's GGML_MAX_NAME).

        gguf.cpp refuses such a name after reading it; reading megabytes of a
        name the file cannot have costs time and memory for nothing, so the
        parser stops at the length, after the same string checks llama.cpp makes first.
        """
        at = self.pos
        n = self.read_count(f"the length of {what}")
        if n < max_bytes:
            self.pos = at
            return self.read_text(what, what)
        if n > self.limits.max_string_bytes:
            raise FormatError(
                Code.HEADER_STRING_TOO_LONG,
                f"{what} claims {n} bytes, past the limit of {self.limits.max_string_bytes}{_huge(n)}",
                at,
            )
        remaining = self.remaining(self.pos)
        if remaining is not None and n > remaining:
            raise FormatError(
                Code.HEADER_TRUNCATED,
                f"{what} claims {n} bytes, but the file ends {remaining} bytes later, at {self.limit_end}",
                at,
            )
        shown = min(n, _NAME_SHOWN_BYTES)
        self.need(self.pos + shown, what)
        head = bytes(self.buf[self.pos : self.pos + shown])
        raise FormatError(
            Code.TENSOR_NAME_TOO_LONG,
            f"{what} is {n} bytes (starting {head!r}); ggml allows at most {max_bytes - 1}",
            at,
        )

    # -- values ---------------------------------------------------------------

    def read_value_type(self, key: str) -> ValueType:
        at = self.pos
        raw = self.read_u32(f"the value type of {quote(key)}")
        vtype = VALUE_TYPES.get(raw)
        if vtype is None:
            raise FormatError(
                Code.HEADER_BAD_VALUE_TYPE,
                f"key {quote(key)} has value type {raw}, outside the GGUF types 0 to 12",
                at,
            )
        return vtype

    def read_scalar(self, vtype: ValueType, key: str) -> Value:
        if vtype is ValueType.STRING:
            text, _ = self.read_text(f"the string value of {quote(key)}", f"the value of {quote(key)}")
            return text
        size = SCALAR_SIZE[vtype]
        at = self.pos
        self.need(at + size, f"the value of {quote(key)}")
        self.pos = at + size
        value = self.scalars[vtype].unpack_from(self.buf, at)[0]
        if vtype is ValueType.BOOL:
            if value > 1:
                self.findings.append(
                    finding(
                        Code.HEADER_INVALID_BOOL, f"bool {quote(key)} is stored as byte {value}, not 0 or 1", offset=at
                    )
                )
            return bool(value)
        return value  # type: ignore[no-any-return]

    def read_array(self, key: str, depth: int) -> tuple[ValueType, Value]:
        if depth > self.limits.max_depth:
            raise FormatError(
                Code.HEADER_TOO_DEEP,
                f"key {quote(key)} nests arrays {depth} deep, past the limit of {self.limits.max_depth}",
                self.pos,
            )
        at = self.pos
        item_type = self.read_value_type(key)
        n = self.read_count(f"the length of array {quote(key)}")
        if item_type is ValueType.STRING:
            return item_type, self.read_string_array(n, key, at)
        if item_type is ValueType.ARRAY:
            self.check_count(n, 4 + self.count_bytes, self.limits.max_array_items, f"array {quote(key)} length", at)
            items: list[Value] = []
            for _ in range(n):
                _, inner = self.read_array(key, depth + 1)
                items.append(inner)
            return item_type, items
        size = SCALAR_SIZE[item_type]
        self.check_count(n, size, self.limits.max_array_items, f"array {quote(key)} length", at)
        start = self.pos
        self.need(start + n * size, f"array {quote(key)}")
        self.pos = start + n * size
        code = SCALAR_CODE[item_type]
        dtype = np.dtype(("<" if self.order == "little" else ">") + code) if size > 1 else np.dtype(code)
        values = np.frombuffer(self.buf, dtype=dtype, count=n, offset=start)
        if item_type is ValueType.BOOL:
            bad = np.flatnonzero(values > 1)
            if bad.size:
                first = int(bad[0])
                self.findings.append(
                    finding(
                        Code.HEADER_INVALID_BOOL,
                        f"bool array {quote(key)} stores {bad.size} items as bytes other than 0 or 1 "
                        f"(item {first} is {int(values[first])})",
                        offset=start + first,
                    )
                )
            return item_type, values.astype(bool)
        return item_type, values

    def read_string_array(self, n: int, key: str, at: int) -> StringArray:
        prefix = self.count_bytes
        self.check_count(n, prefix, self.limits.max_array_items, f"array {quote(key)} length", at)
        if self.pos + n * prefix > self.blen:
            # Not even the length prefixes are here yet: ask for them before
            # sizing anything by n (with the file size unknown, check_count
            # could only apply the named limit).
            self.need(self.pos + n * prefix, f"array {quote(key)}")
        buf = self.buf
        unpack = self.count.unpack_from
        # At most one int64 per length prefix held in the buffer.
        starts = array("q", bytes(8 * n))
        first = pos = self.pos
        done = 0
        if not self.v1 and self.order == "little" and n >= _WALK_MIN_ITEMS:
            # Most items found in bulk; the loop below reads on from where the walk stopped.
            prefixes, pos = walk_short_items(buf, first, n)
            done = len(prefixes)
            np.frombuffer(starts, dtype=np.int64)[:done] = prefixes + prefix
        i = done
        # The hot loop of any vocabulary: only the lengths are read here. The
        # text is validated in bulk below and decoded on access. A short
        # buffer shows up as struct.error on the next length, or as an end
        # past the buffer after the last one.
        try:
            for i in range(done, n):
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
                    Code.HEADER_STRING_TOO_LONG,
                    f"item {item} of array {quote(key)} claims {longest} bytes, "
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
            what = f"item {i - 1} of array {quote(key)}"
            if length > self.limits.max_string_bytes:
                raise FormatError(
                    Code.HEADER_STRING_TOO_LONG,
                    f"{what} claims {length} bytes, past the limit of {self.limits.max_string_bytes}",
                    start - prefix,
                )
            remaining = self.remaining(start)
            if remaining is not None and length > remaining:
                raise FormatError(
                    Code.HEADER_TRUNCATED,
                    f"{what} claims {length} bytes, but the file ends {remaining} bytes later, at {self.limit_end}",
                    start - prefix,
                )
            raise Short(pos)
        self.pos = pos
        self.need(pos + prefix, f"item {i} of array {quote(key)}")
        raise Short(pos + prefix)  # need() raises; this keeps type checkers informed

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
                    Code.HEADER_INVALID_UTF8,
                    f"{len(bad)} items of array {quote(key)} are not valid UTF-8 (first: item {i}, {raw[:16]!r})",
                    offset=int(starts[i]),
                )
            )


def _decodes(buf: bytes | memoryview, start: int, end: int) -> bool:
    try:
        bytes(buf[start:end]).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _huge(n: int) -> str:
    """The advisory for a length or count of 2^62 or more: readers that trust it hang or exhaust memory."""
    if n < 1 << 62:
        return ""
    return " (the 43-byte-file advisory: gguf-py 0.19 hangs on such a length; llama.cpp refuses it)"
