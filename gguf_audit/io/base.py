"""What every range source shares, whatever carries its requests: the size rules and the retry decision.

:class:`RangeSource` holds the bookkeeping of a file's size (told by the
listing, learnt from the first answer, checked against every later one), the
one decision on retrying a failed request, the retry loop of a blocking
request and the CPU gate's release around it. The fsspec sources
(:mod:`gguf_audit.io.source`) and the standard-library ones
(:mod:`gguf_audit.io.plain`) build on it, so a header reads the same way, and
fails with the same codes, over either.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import ClassVar, TypeVar

from gguf_audit.codes import Code
from gguf_audit.errors import SourceError
from gguf_audit.io.errors import SizeMismatchError, classify_error, describe_io_error
from gguf_audit.io.gate import CpuGate
from gguf_audit.io.limits import HostPauses, parse_rate_limit
from gguf_audit.io.ranged import parse_content_range
from gguf_audit.io.read_config import IOStats, ReadConfig

__all__ = ["RangeSource"]

_T = TypeVar("_T")


class RangeSource:
    """The shared part of a byte source (see :class:`~gguf_audit.io.read_config.ByteSource`).

    Subclasses are dataclasses declaring the attributes below as fields, and
    define :meth:`read`, :meth:`read_ranges` and :meth:`ensure_size`.
    """

    url: str
    known_size: int | None
    config: ReadConfig
    stats: IOStats
    gate: CpuGate | None
    pauses: HostPauses
    range_ignored: bool
    """Set once the server answered a Range request with the whole body."""
    size_from: str | None
    """Who told :attr:`known_size`: ``"the listing"`` or ``"the first answer"`` (None while unknown)."""
    size_conflict: tuple[int, int] | None
    """The sizes (learnt, then told) of a disagreement that outlasted the retries; None when none did."""

    sizes_from_response: ClassVar[bool] = False
    """Whether a read's response tells the file size (so no look-up is needed first)."""

    def _note_listed_size(self) -> None:
        if self.known_size is not None and self.size_from is None:
            self.size_from = "the listing"

    @property
    def size(self) -> int | None:
        return self.known_size

    def read(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)``; fewer at the end of the file. Raises SourceError."""
        raise NotImplementedError

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes | SourceError]:
        """Several ranges in one round; failures come back as values."""
        raise NotImplementedError

    def ensure_size(self) -> int | None:
        """The file size, asked of the store when nobody told it yet."""
        raise NotImplementedError

    def close(self) -> None:
        """Let go of what the source holds open for its next read (a kept-alive connection); reads may follow."""

    def _each_range(self, ranges: Sequence[tuple[int, int]]) -> list[bytes | SourceError]:
        """:meth:`read_ranges` one range after another, a failure as its value."""
        out: list[bytes | SourceError] = []
        for start, end in ranges:
            try:
                out.append(self.read(start, end))
            except SourceError as exc:
                out.append(exc)
        return out

    def _note_rate_limit(self, headers: Mapping[str, str], status: int, host: str) -> None:
        """Count a 429 (or an answer with no requests left) and pause ``host`` for the reset it names, or back
        off, doubling with each 429 this file met (at most 2**8 times the first delay)."""
        limit = parse_rate_limit(headers)
        if status == 429:
            self.stats.rate_limited += 1
            self.stats.requests += 1  # the caller counts the request that answers; this one did not
            backoff = self.config.backoff_s * 2 ** min(self.stats.rate_limited - 1, 8)
            self.pauses.pause(host, limit.reset_s if limit.reset_s is not None else backoff)
        elif limit.remaining == 0 and limit.reset_s:
            self.stats.rate_limited += 1
            self.pauses.pause(host, limit.reset_s)

    def _wait_budget(self, host: str) -> float:
        """Seconds this file may still wait for a rate-limited ``host`` (``max_rate_limit_wait_s`` less what it
        waited). Raises SourceError (``io.rate_limited``) when the host's pause outlasts them."""
        budget = self.config.max_rate_limit_wait_s - self.stats.rate_limit_wait_s
        paused = self.pauses.remaining(host)
        if paused > budget:
            raise SourceError(
                Code.IO_RATE_LIMITED,
                f"{host} rate-limits reads for {paused:.0f} s more; this file already waited "
                f"{self.stats.rate_limit_wait_s:.0f} s of max_rate_limit_wait_s "
                f"({self.config.max_rate_limit_wait_s:.0f} s)",
            )
        return budget

    def _learn_size(self, content_range: str | None) -> None:
        """Take the total size from a ``Content-Range`` (``bytes a-b/N`` or ``bytes */N``), or check it.

        Raises SizeMismatchError when it is not the size learnt before (from the listing or an earlier answer).
        """
        parsed = parse_content_range(content_range)
        if parsed is not None and parsed.total is not None:
            self._agree(parsed.total, content_range)

    def _agree(self, told: int, content_range: str | None) -> None:
        if self.known_size is None:
            self.known_size = told
            self.size_from = self.size_from or "the first answer"
        elif told != self.known_size:
            raise SizeMismatchError(self.known_size, self.size_from or "an earlier answer", told, content_range)

    def confirm_size(self) -> None:
        """Ask again for the last byte when the size rests on one answer; raises SourceError when they disagree.

        Called before a verdict that rests on the size (truncated, trailing
        bytes): a second answer stating another total shows the first lied,
        one stating the same (or a listing that agreed) lets the verdict stand.
        """
        if not self.sizes_from_response or self.size_from != "the first answer" or not self.known_size:
            return
        self.read(self.known_size - 1, self.known_size)

    def _waiting(self) -> AbstractContextManager[None]:
        """The block a request waits in: the CPU gate's slot given back, if there is a gate."""
        return self.gate.released() if self.gate is not None else nullcontext()

    def _clip(self, start: int, end: int) -> int:
        return end if self.known_size is None else min(end, self.known_size)

    def _retry_delay(self, exc: Exception, attempt: int) -> float:
        """Seconds to wait before retrying after ``exc`` failed attempt ``attempt`` (0 first).

        Raises the final SourceError when ``exc`` is not transient or the
        retries are spent: the one decision every read's retries follow.
        """
        if isinstance(exc, SourceError):
            raise exc
        code, transient = classify_error(exc)
        if not transient or attempt >= self.config.retries:
            if isinstance(exc, SizeMismatchError):
                self.size_conflict = (exc.known, exc.told)
            suffix = f" (after {attempt + 1} attempts)" if attempt else ""
            raise SourceError(code, f"{describe_io_error(exc)}{suffix}") from exc
        return float(self.config.backoff_s * 2**attempt)

    def _call(self, fn: Callable[[], _T], *, count_bytes: bool = True) -> _T:
        """Run one blocking request with retries on transient failures; raise SourceError."""
        for attempt in itertools.count():
            begun = time.perf_counter()
            try:
                result = fn()
            except Exception as exc:  # noqa: BLE001 - classified: retried, or raised as a SourceError
                self.stats.add(0, time.perf_counter() - begun)
                time.sleep(self._retry_delay(exc, attempt))
                continue
            nbytes = len(result) if count_bytes and isinstance(result, bytes | bytearray) else 0
            self.stats.add(nbytes, time.perf_counter() - begun)
            return result
        raise AssertionError("unreachable")  # pragma: no cover
