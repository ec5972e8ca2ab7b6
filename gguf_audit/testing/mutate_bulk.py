"""Header mutants of another kind than :mod:`gguf_audit.testing.mutate`'s field edits: whole-header shapes.

- ``tiny_entries``: 10^5 or 10^6 tiny key-value records added (empty keys, or short distinct ones), the
  shape that once gave a finding per record;
- ``splice``: the header cut at one field's start and continued from another's, so a region is skipped or
  read twice with the counts unchanged;
- ``duplicate_section``: the key-value section or the tensor-info section written twice (its count doubled);
- ``length_left``: a length word (a key's, a name's, a string's, an array's) set to exactly the bytes left
  after it, in the header or in the whole file: a length that fits, just, where one more byte would not.

Same interface as :func:`gguf_audit.testing.mutate.mutants`; the same seed always gives the same files.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Iterator, Sequence
from typing import Final

from gguf_audit.testing.mutate import Mutant, RawKV, Seed, encode

__all__ = ["BULK_KINDS", "bulk_mutants"]

_U8: Final = 0
_LENGTHS: Final = ("key_len", "name_len", "str_len", "array_len")

_Edit = Callable[[Seed, random.Random], tuple[bytes, int]]


def _tiny_entries(seed: Seed, rng: random.Random) -> tuple[bytes, int]:
    n = rng.choice([100_000, 1_000_000])
    if rng.random() < 0.5:
        extra = [RawKV(b"", _U8, b"\0")] * n
    else:
        extra = [RawKV(b"k%x" % i, _U8, b"\1") for i in range(n)]
    content, _, size = encode(seed, [*seed.kvs, *extra])
    return content, size


def _splice(seed: Seed, rng: random.Random) -> tuple[bytes, int]:
    content, spans, size = encode(seed)
    a, b = rng.sample([s.start for s in spans[3:]], 2)
    return content[:a] + content[b:], size


def _duplicate_section(seed: Seed, rng: random.Random) -> tuple[bytes, int]:
    if rng.random() < 0.5:
        content, _, size = encode(seed, [*seed.kvs, *seed.kvs])
    else:
        content, _, size = encode(seed, tensors=[*seed.tensors, *seed.tensors])
    return content, size


def _length_left(seed: Seed, rng: random.Random) -> tuple[bytes, int]:
    content, spans, size = encode(seed)
    s = rng.choice([s for s in spans if s.kind in _LENGTHS])
    left = rng.choice([len(content), size]) - s.end
    if s.kind == "array_len":
        left //= rng.choice([1, 4, 8])  # items left, for items of one, four or eight bytes
    return content[: s.start] + struct.pack("<Q", max(left, 0)) + content[s.end :], size


BULK_KINDS: Final[dict[str, tuple[int, _Edit]]] = {
    # kind: (weight, edit). Few tiny_entries: each is a header of up to 15 MB.
    "tiny_entries": (1, _tiny_entries),
    "splice": (8, _splice),
    "duplicate_section": (4, _duplicate_section),
    "length_left": (8, _length_left),
}


def bulk_mutants(seeds: Sequence[Seed], count: int, *, seed: int = 0) -> Iterator[Mutant]:
    """``count`` mutants of ``seeds`` from :data:`BULK_KINDS`, drawn from ``random.Random(seed)``."""
    rng = random.Random(seed)
    names = list(BULK_KINDS)
    weights = [BULK_KINDS[k][0] for k in names]
    for n in range(count):
        kind = rng.choices(names, weights)[0]
        base = seeds[n % len(seeds)]
        content, size = BULK_KINDS[kind][1](base, random.Random(rng.getrandbits(64)))
        yield Mutant(f"{base.name.removesuffix('.gguf')}-{n:06d}-{kind}", kind, base.name, content, size)
