"""gguf_audit.io.blocks: planned ranges read in one round, and bytes looked up across segments."""

from __future__ import annotations

from collections.abc import Sequence

from gguf_audit.errors import SourceError
from gguf_audit.io.blocks import ByteStore, read_ranges_into
from gguf_audit.io.source import IOStats
from gguf_audit.plan import ByteRange

DATA = bytes(range(256)) * 4


class _Source:
    """Serves DATA, failing every range that starts at ``fail_at``."""

    url = "memory://data"

    def __init__(self, fail_at: int | None = None) -> None:
        self.stats = IOStats()
        self.fail_at = fail_at
        self.rounds: list[list[tuple[int, int]]] = []

    @property
    def size(self) -> int | None:
        return len(DATA)

    def read(self, start: int, end: int) -> bytes:
        return DATA[start:end]

    def read_ranges(self, ranges: Sequence[tuple[int, int]]) -> list[bytes | SourceError]:
        self.rounds.append([(s, e) for s, e in ranges])
        return [SourceError("io.error", "boom") if s == self.fail_at else DATA[s:e] for s, e in ranges]


def test_store_answers_only_ranges_it_covers() -> None:
    store = ByteStore()
    store.add(10, DATA[10:20])
    store.add(0, DATA[0:10])
    store.add(30, DATA[30:40])
    store.add(50, b"")
    assert store.get(5, 15) == DATA[5:15]  # across two segments
    assert store.get(30, 40) == DATA[30:40]
    assert store.get(15, 35) is None  # a gap at 20..30
    assert store.get(45, 46) is None


def test_ranges_go_out_in_one_round_and_failures_are_values() -> None:
    source = _Source(fail_at=500)
    fetch = [ByteRange(100, 200), ByteRange(500, 600), ByteRange(700, 710)]
    got = read_ranges_into(source, fetch, held=DATA[:64])
    assert source.rounds == [[(100, 200), (500, 600), (700, 710)]]
    assert got.fetched == tuple(fetch)
    assert [(r, e.code) for r, e in got.errors] == [(ByteRange(500, 600), "io.error")]
    assert got.store.get(0, 64) == DATA[:64]  # what the header read held
    assert got.store.get(150, 200) == DATA[150:200]
    assert got.store.get(500, 510) is None


def test_nothing_to_fetch_costs_no_round() -> None:
    source = _Source()
    got = read_ranges_into(source, [], held=DATA[:16])
    assert source.rounds == [] and got.errors == () and got.store.get(0, 16) == DATA[:16]
