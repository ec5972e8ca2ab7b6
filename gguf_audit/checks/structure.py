"""Structural checks: the rules llama.cpp's loader applies to a decoded header.

Mirrors ``gguf_init_from_file_impl`` in ``ggml/src/gguf.cpp`` (version, keys,
alignment, tensor names, dimensions, types, packed offsets) and the bounds
check of ``llama_model_loader`` (every tensor inside the file), plus what
neither looks at (overlaps, trailing bytes). Only the header and the listed
file size are used: no tensor data is read.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from dataclasses import replace

from gguf_audit.bounded import quote
from gguf_audit.codes import Code, endangers
from gguf_audit.findings import Finding, finding
from gguf_audit.format.ggml_types import GGML_TYPE_COUNT, TypeStatus
from gguf_audit.format.model import Header, TensorInfo, ValueType
from gguf_audit.format.tensor_rules import gguf_elements_fit
from gguf_audit.format.wire import GGML_MAX_DIMS, GGML_MAX_NAME

__all__ = ["GGML_MAX_NAME", "TENSOR_ALIGNMENT", "check_mapped_buffer", "check_structure", "ggml_ne"]

MAX_DUPLICATE_FINDINGS = 10
"""Duplicate tensor names reported one by one; the rest are counted in one more finding."""

TENSOR_ALIGNMENT = 32
"""ggml-backend's TENSOR_ALIGNMENT: a buffer made over mapped file bytes must start on it."""

#: ggml_tensor_overhead(): a ggml_object and a ggml_tensor, per tensor of a ggml context.
GGML_TENSOR_OVERHEAD = 368

_INT64_MAX = (1 << 63) - 1
_SIZE_MAX = (1 << 64) - 1
_KEY_RULE = re.compile(r"[a-z0-9_]+(?:\.[a-z0-9_]+)*\Z")


def check_structure(header: Header, file_size: int | None) -> Iterator[Finding]:
    """Yield every structural finding of ``header`` in a file of ``file_size`` bytes."""
    parsed = [
        *_check_preamble(header),
        *_check_keys(header),
        *_check_tensor_infos(header),
        *_check_layout(header),
    ]
    yield from parsed
    if not any(f.refused for f in parsed):
        # gguf.cpp accepted the header; creating the tensors comes next, before the loader's checks.
        yield from _check_ggml_new_tensor(header)
    yield from _check_file_size(header, file_size)


def check_mapped_buffer(header: Header) -> Iterator[Finding]:
    """The loader's mmap step: the CPU buffer starts at the first tensor's byte in the file, and
    ``ggml_backend_cpu_buffer_from_ptr`` asserts it is 32-byte aligned (a ``general.alignment`` below 32
    can break that). Only meaningful for a file nothing else refuses: llama.cpp gets here last."""
    if not header.tensors:
        return
    first = min(header.tensors, key=lambda t: t.data_offset)
    if first.data_offset % TENSOR_ALIGNMENT:
        yield finding(
            Code.TENSOR_UNALIGNED_BUFFER,
            f"the first tensor's data, {first.name!r}, starts at byte {first.data_offset}, not a multiple of "
            f"ggml's {TENSOR_ALIGNMENT}-byte tensor alignment (general.alignment {header.alignment}): mapping "
            "the weights fails a GGML_ASSERT and the loading process aborts",
            tensor=first.name,
            offset=first.data_offset,
        )


def _check_ggml_new_tensor(header: Header) -> Iterator[Finding]:
    for t in header.tensors:
        if len(t.shape) <= GGML_MAX_DIMS and not _ggml_elements_fit(ggml_ne(t.shape)):
            yield finding(
                Code.TENSOR_SHAPE_ABORTS,
                f"tensor {t.name!r} with shape {list(t.shape)} passes gguf.cpp's element-count test but fails "
                "ggml_new_tensor's GGML_ASSERT (INT64_MAX / ne[i] > elements): the loading process aborts",
                tensor=t.name,
                offset=t.info_offset,
            )


def _check_preamble(header: Header) -> Iterator[Finding]:
    if header.version == 1:
        yield finding(
            Code.HEADER_OBSOLETE_VERSION,
            "version 1 (32-bit counts and lengths) is no longer read by llama.cpp",
            offset=4,
        )
    if header.byte_order == "big":
        yield finding(
            Code.HEADER_BIG_ENDIAN,
            f"the file is big-endian (version word {header.version} byte-swapped); "
            "llama.cpp refuses it on little-endian hosts",
            offset=4,
        )
    yield from header.findings


def _check_keys(header: Header) -> Iterator[Finding]:
    # gguf.cpp refuses a key written twice byte for byte; keys equal only up to
    # a NUL are distinct there, though lookups (strcmp) see the first of them.
    seen: dict[bytes, int] = {}
    for kv in header.kvs:
        raw = kv.raw_key or kv.key.encode("utf-8", "surrogateescape")
        if not raw:
            yield finding(Code.HEADER_EMPTY_KEY, "a metadata key is the empty string", offset=kv.offset)
            continue
        if b"\0" in raw:
            yield finding(
                Code.HEADER_NUL_IN_KEY,
                f"key {quote(raw)} holds a NUL byte at {raw.index(0)}; llama.cpp sees it as {quote(kv.key)}",
                offset=kv.offset,
            )
        if raw in seen:
            yield finding(
                Code.HEADER_DUPLICATE_KEY,
                f"key {quote(kv.key)} appears again (first at offset {seen[raw]})",
                offset=kv.offset,
            )
        else:
            seen[raw] = kv.offset
            if kv.key and not _KEY_RULE.match(kv.key):
                yield finding(
                    Code.HEADER_NONCANONICAL_KEY,
                    f"key {quote(kv.key)} is not dot-separated lower_snake_case",
                    offset=kv.offset,
                )
        if kv.type is ValueType.ARRAY and kv.item_type is ValueType.ARRAY:
            yield finding(
                Code.HEADER_NESTED_ARRAY,
                f"key {quote(kv.key)} is an array of arrays, which llama.cpp's reader rejects",
                offset=kv.offset,
            )
    alignment = header.metadata.get("general.alignment")
    if alignment is not None:
        if alignment.type is not ValueType.UINT32:
            yield finding(
                Code.HEADER_BAD_ALIGNMENT,
                f"general.alignment is stored as {alignment.type_name}, not uint32",
                offset=alignment.offset,
            )
        elif isinstance(alignment.value, int) and (alignment.value == 0 or alignment.value & (alignment.value - 1)):
            yield finding(
                Code.HEADER_BAD_ALIGNMENT,
                f"general.alignment is {alignment.value}, not a power of two",
                offset=alignment.offset,
            )


def _check_tensor_infos(header: Header) -> Iterator[Finding]:
    seen: set[str] = set()
    duplicates = 0
    # The parser stops where gguf.cpp does, at the first info it refuses; its findings say what was left unread.
    unread = header.n_tensors - len(header.tensors)
    for index, t in enumerate(header.tensors):
        found = _check_name(t)
        if t.name in seen:
            duplicates += 1
            if duplicates <= MAX_DUPLICATE_FINDINGS:
                found.append(
                    finding(
                        Code.TENSOR_DUPLICATE_NAME,
                        f"tensor {quote(t.name)} appears twice",
                        tensor=t.name,
                        offset=t.info_offset,
                    )
                )
        seen.add(t.name)
        found += _check_dims(t)
        found += _check_type(t)
        if unread > 0 and index == len(header.tensors) - 1:
            note = f"; gguf.cpp stops reading there, as the parser did: {unread} of {header.n_tensors} infos unread"
            found = [replace(f, message=f.message + note) for f in found]
        yield from found
    if duplicates > MAX_DUPLICATE_FINDINGS:
        yield finding(
            Code.TENSOR_DUPLICATE_NAME,
            f"{duplicates - MAX_DUPLICATE_FINDINGS} more tensors repeat a name up to a NUL byte",
        )


# The per-tensor checks return lists rather than yield: they run for every tensor of every file, and
# nearly always find nothing.


def _check_name(t: TensorInfo) -> list[Finding]:
    found = []
    if b"\0" in t.raw_name:
        found.append(
            finding(
                Code.TENSOR_NUL_IN_NAME,
                f"tensor name {quote(t.raw_name)} holds a NUL byte at {t.raw_name.index(0)}; ggml names it {t.name!r}",
                tensor=t.name,
                offset=t.info_offset,
            )
        )
    name_bytes = len(t.raw_name) if t.raw_name else len(t.name.encode("utf-8", "surrogateescape"))
    if name_bytes >= GGML_MAX_NAME:
        found.append(
            finding(
                Code.TENSOR_NAME_TOO_LONG,
                f"tensor name {quote(t.name, 80)} is {name_bytes} bytes; ggml allows at most {GGML_MAX_NAME - 1}",
                tensor=t.name,
                offset=t.info_offset,
            )
        )
    return found


def _check_dims(t: TensorInfo) -> list[Finding]:
    if len(t.shape) > GGML_MAX_DIMS:
        why = f"has {len(t.shape)} dimensions; ggml allows at most {GGML_MAX_DIMS}"
    elif t.shape and min(t.shape) < 0:
        negative = [d for d in t.shape if d < 0]
        why = f"has a negative dimension {negative[0]} in shape {list(t.shape)}"
    elif not gguf_elements_fit(ggml_ne(t.shape)):
        why = f"with shape {list(t.shape)} has {t.n_elements} elements, past int64"
    else:
        return []
    return [finding(Code.TENSOR_BAD_DIMS, f"tensor {quote(t.name)} {why}", tensor=t.name, offset=t.info_offset)]


def _ggml_elements_fit(ne: Sequence[int]) -> bool:
    """ggml_new_tensor_impl's test, a GGML_ASSERT: stricter by one, and blind to zero dims
    (it multiplies only the dims > 1), so shapes gguf.cpp accepts can abort here."""
    current = ne[0]
    for d in ne[1:]:
        if d > 1:
            if not _INT64_MAX // d > current:
                return False
            current *= d
    return True


def ggml_ne(shape: Sequence[int]) -> tuple[int, ...]:
    """``shape`` as ggml's ``ne``: padded with 1 to :data:`GGML_MAX_DIMS` dimensions (a longer one kept whole)."""
    return tuple(shape) + (1,) * (GGML_MAX_DIMS - len(shape))


def _check_type(t: TensorInfo) -> list[Finding]:
    info = t.type_info
    if info.status is TypeStatus.REMOVED:
        hint = " (ids 34 to 37 mean other types in forks such as ik_llama.cpp)" if 34 <= t.type_id <= 37 else ""
        return [
            finding(
                Code.TENSOR_REMOVED_TYPE,
                f"tensor {quote(t.name)} has type {info.name} (id {t.type_id}), whose support was removed{hint}",
                tensor=t.name,
                offset=t.info_offset,
            )
        ]
    if info.status is TypeStatus.UNKNOWN:
        hint = (
            "a fork's own type (ik_llama.cpp numbers its quantizations past 100, e.g. 142 and 143)"
            if t.type_id >= 100
            else "forks such as ik_llama.cpp number their own types (there ids 34 to 37 mean other things too)"
        )
        return [
            finding(
                Code.TENSOR_UNKNOWN_TYPE,
                f"tensor {quote(t.name)} has ggml type id {t.type_id}, outside llama.cpp's 0 to "
                f"{GGML_TYPE_COUNT - 1}: {hint}; llama.cpp refuses it",
                tensor=t.name,
                offset=t.info_offset,
            )
        ]
    if t.shape and min(t.shape) < 0:
        return []
    # ggml pads a shape with 1s: a tensor of no dimensions has rows of one element, which
    # no block-quantized type divides (gguf.cpp refuses it).
    row = t.shape[0] if t.shape else 1
    if row % info.block_elems:
        return [
            finding(
                Code.TENSOR_ROW_NOT_BLOCK_MULTIPLE,
                f"tensor {quote(t.name)} of type {info.name} has rows of {row} elements, "
                f"not a multiple of the block size {info.block_elems}",
                tensor=t.name,
                offset=t.info_offset,
            )
        ]
    if t.n_elements // info.block_elems > _SIZE_MAX // info.block_bytes:
        nbytes = t.n_elements // info.block_elems * info.block_bytes
        return [
            finding(
                Code.TENSOR_SIZE_OVERFLOW,
                f"tensor {quote(t.name)} with shape {list(t.shape)} ({t.n_elements} elements, within int64) "
                f"needs {nbytes} bytes of {info.name}, past SIZE_MAX {endangers('byte_size')}",
                tensor=t.name,
                offset=t.info_offset,
            )
        ]
    return []


def _padded(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


def _check_layout(header: Header) -> Iterator[Finding]:
    alignment = header.alignment
    expected = 0
    not_packed: list[TensorInfo] = []
    wrapped = False
    for t in header.tensors:
        if not wrapped and expected + _padded(t.n_bytes, alignment) > _SIZE_MAX and t.n_bytes <= _SIZE_MAX:
            wrapped = True
            yield finding(
                Code.TENSOR_SIZE_OVERFLOW,
                f"the padded sizes of the tensors up to {quote(t.name)} add up to "
                f"{expected + _padded(t.n_bytes, alignment)} bytes, past 64 bits {endangers('padded_sum')}",
                tensor=t.name,
                offset=t.info_offset,
            )
        if t.offset % alignment:
            yield finding(
                Code.TENSOR_MISALIGNED_OFFSET,
                f"tensor {quote(t.name)} starts at data offset {t.offset}, not a multiple of the alignment {alignment}",
                tensor=t.name,
                offset=t.data_offset,
            )
        if t.offset != expected:
            not_packed.append(t)
            if len(not_packed) == 1:
                first_expected = expected
        expected += _padded(t.n_bytes, alignment)
    context = expected + (len(header.tensors) + 1) * GGML_TENSOR_OVERHEAD
    if not wrapped and expected <= _SIZE_MAX < context:
        yield finding(
            Code.TENSOR_SIZE_OVERFLOW,
            f"the data section's {expected} bytes and the {len(header.tensors)} tensors' overhead make a ggml "
            f"context of {context} bytes, past 64 bits {endangers('context_wrap')}",
        )
    if not_packed:
        t = not_packed[0]
        more = f" ({len(not_packed) - 1} later tensors are off as well)" if len(not_packed) > 1 else ""
        yield finding(
            Code.TENSOR_OFFSET_NOT_PACKED,
            f"tensor {quote(t.name)} has data offset {t.offset}, but llama.cpp expects {first_expected}, "
            f"the sum of the padded sizes before it{more}",
            tensor=t.name,
            offset=t.data_offset,
        )
    yield from _check_overlaps(header)


def _check_overlaps(header: Header) -> Iterator[Finding]:
    regions = sorted((t for t in header.tensors if t.n_bytes > 0), key=lambda t: (t.offset, -t.n_bytes))
    reported: set[str] = set()
    furthest: TensorInfo | None = None
    for t in regions:
        if furthest is not None and t.offset < furthest.offset + furthest.n_bytes:
            if t.name in reported:
                continue
            reported.add(t.name)
            inside = t.offset == furthest.offset or t.offset + t.n_bytes <= furthest.offset + furthest.n_bytes
            if inside:
                yield finding(
                    Code.TENSOR_OVERLAP,
                    f"tensor {quote(t.name)} (data offset {t.offset}, {t.n_bytes} bytes) lies inside "
                    f"tensor {quote(furthest.name)} (data offset {furthest.offset}, {furthest.n_bytes} bytes)",
                    tensor=t.name,
                    offset=t.data_offset,
                )
            else:
                yield finding(
                    Code.TENSOR_UNDERSIZED_REGION,
                    f"tensor {quote(furthest.name)} needs {furthest.n_bytes} bytes from data offset {furthest.offset}, "
                    f"but tensor {quote(t.name)} starts {t.offset - furthest.offset} bytes in",
                    tensor=furthest.name,
                    offset=furthest.data_offset,
                )
        if furthest is None or t.offset + t.n_bytes > furthest.offset + furthest.n_bytes:
            furthest = t


def _packed_and_aligned(header: Header) -> bool:
    expected = 0
    for t in header.tensors:
        if t.offset != expected or t.offset % header.alignment:
            return False
        expected += _padded(t.n_bytes, header.alignment)
    return True


def _check_file_size(header: Header, file_size: int | None) -> Iterator[Finding]:
    if file_size is None:
        yield finding(Code.IO_SIZE_UNKNOWN, "the file's size is unknown, so tensor bounds were not checked")
        return
    if header.n_tensors and header.data_offset > file_size:
        yield finding(
            Code.DATA_TRUNCATED,
            f"the data section starts at {header.data_offset}, past the file's {file_size} bytes",
            offset=file_size,
        )
        return
    past = [t for t in header.tensors if t.end_offset > file_size]
    if past:
        first = min(past, key=lambda t: t.data_offset)
        missing = header.min_file_size - file_size
        # Packed, aligned offsets pass every header check: only the file size
        # tells, and a loader that trusts the header reads past its buffer.
        advisory = f" {endangers('region_past_eof')}" if _packed_and_aligned(header) else ""
        yield finding(
            Code.DATA_TRUNCATED,
            f"tensor {quote(first.name)} ends at {first.end_offset}, past the file's {file_size} bytes; "
            f"{len(past)} of {header.n_tensors} tensors reach past the end and {missing} bytes are missing"
            f"{advisory}",
            tensor=first.name,
            offset=file_size,
        )
        return
    end = header.header_bytes
    if header.tensors:
        end = max(header.data_offset, max(_padded(t.data_offset + t.n_bytes, header.alignment) for t in header.tensors))
    end = _padded(end, header.alignment)
    if file_size > end:
        yield finding(
            Code.DATA_TRAILING_BYTES,
            f"the file has {file_size - end} bytes after the end of its last tensor at {end}",
            offset=end,
        )
