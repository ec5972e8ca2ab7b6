"""Reading a file's GGUF header with an adaptive read-ahead.

A first request sized so typical headers fit (:attr:`ReadConfig.initial_bytes`),
then exactly the bytes the parser's estimate says are missing, within
:attr:`ReadConfig.max_header_bytes`. No tensor data is read on purpose.
"""

from __future__ import annotations

from dataclasses import dataclass

from gguf_audit.codes import Code
from gguf_audit.errors import FormatError
from gguf_audit.format.model import Header
from gguf_audit.format.parser import parse_header
from gguf_audit.format.tensor_table import KnownTable, TableRef, parse_tensor_table
from gguf_audit.format.wire import Limits
from gguf_audit.io.base import RangeSource
from gguf_audit.io.read_config import ReadConfig

__all__ = ["HeaderRead", "read_header", "read_tensor_table"]


@dataclass(frozen=True, slots=True)
class HeaderRead:
    """A header and what reading it cost."""

    header: Header
    buffer: bytes
    """Every byte read from the start of the file."""


def read_header(
    source: RangeSource,
    *,
    config: ReadConfig | None = None,
    limits: Limits | None = None,
) -> HeaderRead:
    """Fetch and parse the header of ``source``'s file.

    Raises FormatError for a header that cannot be decoded and SourceError
    when reads fail for good.
    """
    config = config or source.config
    limits = limits or Limits()
    size = source.size
    if size is None and not source.sizes_from_response:
        size = source.ensure_size()
    first = max(8, config.initial_bytes if size is None else min(config.initial_bytes, size))
    buf = source.read(0, first)
    if source.size is not None:
        size = source.size
    if len(buf) < first:
        # A short read is the end of the file, whatever the listing said
        # (the object changed, or was cut mid-upload).
        size = len(buf)
    resume: object | None = None
    while True:
        result = parse_header(buf, size, resume=resume, limits=limits)
        if isinstance(result, Header):
            return HeaderRead(result, buf)
        target = max(result.needed_bytes, result.estimated_bytes)
        if size is not None:
            target = min(target, size)
        if target > config.max_header_bytes:
            if result.needed_bytes > config.max_header_bytes:
                raise FormatError(
                    Code.HEADER_TOO_LARGE,
                    f"the header needs more than {config.max_header_bytes} bytes "
                    f"(at least {result.needed_bytes}); raise max_header_bytes to read it",
                    len(buf),
                )
            target = config.max_header_bytes
        more = source.read(len(buf), target)
        if len(more) < target - len(buf):
            size = len(buf) + len(more)
        buf = buf + more
        resume = result.resume


def read_tensor_table(source: RangeSource, table: TableRef) -> Header:
    """The tensor infos of a GGUF whose audit said where they lie: one read of just those bytes (none for
    a :class:`KnownTable`, whose header is at hand).

    Raises FormatError when they are not where ``table`` says, SourceError when the read fails.
    """
    if isinstance(table, KnownTable):
        return table.header
    return parse_tensor_table(source.read(table.info_offset, table.header_bytes), table)
