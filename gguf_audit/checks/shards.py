"""Shard sets: files named ``<base>-NNNNN-of-MMMMM.gguf`` that together hold one model.

Pure: the checks here take what each shard's own audit already found (its
header, or the facts a previous run stored) and never read a file.

The rules mirror ``llama_model_loader`` in llama.cpp (``src/llama-model-loader.cpp``)
and the files ``gguf-split`` and gguf-py's ``GGUFWriter`` write:

- the name numbers shards from 1 (``LLAMA_SPLIT_PATH`` is ``%s-%05d-of-%05d.gguf``
  with ``i_split + 1``), while ``split.no`` inside counts from 0;
- the loader reads ``split.count`` from the first shard and opens
  ``<prefix>-00002-of-<count>.gguf`` and onwards by building those names, so a
  missing shard, or a count that disagrees with the names, stops the load;
- every later shard must hold ``split.no`` as a uint16 equal to its position
  ("invalid split file idx"), a tensor may appear in one shard only ("tensor
  '%s' is duplicated"), and the tensors of all shards must add up to the first
  shard's ``split.tensors.count`` ("%d tensors expected but %d found").
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from gguf_audit.codes import Code
from gguf_audit.findings import CODES, Finding, finding
from gguf_audit.format.model import Header, ValueType, json_scalar
from gguf_audit.format.shard_names import file_name, parse_shard_name

__all__ = [
    "AGREEING_KEYS",
    "ShardFacts",
    "ShardSetVerdict",
    "canonical_value",
    "check_shard_set",
    "judge_shard_set",
    "shard_facts",
]


SPLIT_NO: Final = "split.no"
SPLIT_COUNT: Final = "split.count"
SPLIT_TENSORS_COUNT: Final = "split.tensors.count"

AGREEING_KEYS: Final = (
    "general.alignment",
    "general.architecture",
    "general.file_type",
    "general.quantization_version",
)
"""Keys every shard that declares them must declare alike. gguf-split and
GGUFWriter copy the general metadata into the first shard only, so a key absent
from a later shard is normal; only two shards declaring different values are a finding."""

MAX_DUPLICATE_FINDINGS: Final = 10
"""Duplicated tensor names reported one by one; the rest are counted in one more finding.
A set built from two copies of a model would otherwise yield thousands of rows."""


class _Audited(Protocol):
    """What :func:`shard_facts` needs from a file's audit (a ``FileAudit`` has it)."""

    @property
    def url(self) -> str: ...
    @property
    def header(self) -> Header | None: ...
    @property
    def loadable(self) -> bool | None: ...


@dataclass(frozen=True, slots=True)
class ShardFacts:
    """What one shard's audit found that the set checks compare.

    Built from a fresh audit (:func:`shard_facts`) or from the rows a previous
    run stored, so an incremental run checks a set without re-reading its
    unchanged shards.
    """

    url: str
    index: int
    """The 1-based number in the file name."""
    count: int
    """The ``-of-MMMMM`` in the file name."""
    readable: bool
    """A header was decoded; every field below is None or empty when not."""
    loadable: bool | None
    version: int | None = None
    byte_order: str | None = None
    split_no: int | None = None
    split_no_type: str | None = None
    split_count: int | None = None
    split_tensors_count: int | None = None
    n_tensors: int | None = None
    tensor_names: tuple[str, ...] = ()
    declared: tuple[tuple[str, str], ...] = ()
    """``(key, canonical JSON value)`` for the :data:`AGREEING_KEYS` the shard declares."""


def canonical_value(value: object) -> str | None:
    """The JSON text a scalar metadata value is compared (and stored) as; None for arrays."""
    if isinstance(value, bool | int | str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, float):
        return json.dumps(json_scalar(value))
    return None


def _int_value(header: Header, key: str) -> tuple[int | None, str | None]:
    kv = header.metadata.get(key)
    return (None, None) if kv is None else (header.get_int(key), kv.type_name)


def shard_facts(audit: _Audited) -> ShardFacts | None:
    """The facts of one shard's audit, or None when its URL is not named like a shard."""
    name = parse_shard_name(audit.url)
    if name is None:
        return None
    header = audit.header
    if header is None:
        return ShardFacts(audit.url, name.shard_index, name.shard_count, readable=False, loadable=audit.loadable)
    split_no, split_no_type = _int_value(header, SPLIT_NO)
    if split_no is None and split_no_type is not None:
        split_no = -1  # present, but not an integer: reported as a bad index
    declared = []
    for key in AGREEING_KEYS:
        kv = header.metadata.get(key)
        text = canonical_value(kv.value) if kv is not None else None
        if text is not None:
            declared.append((key, text))
    return ShardFacts(
        url=audit.url,
        index=name.shard_index,
        count=name.shard_count,
        readable=True,
        loadable=audit.loadable,
        version=header.version,
        byte_order=header.byte_order,
        split_no=split_no,
        split_no_type=split_no_type,
        split_count=_int_value(header, SPLIT_COUNT)[0],
        split_tensors_count=_int_value(header, SPLIT_TENSORS_COUNT)[0],
        n_tensors=header.n_tensors,
        tensor_names=tuple(t.name for t in header.tensors),
        declared=tuple(declared),
    )


def _expected_count(shards: Sequence[ShardFacts]) -> int:
    """The set's shard count: the one most names carry (ties: the first shard's, then the largest)."""
    counts = Counter(s.count for s in shards)
    best = max(counts.values())
    tied = {c for c, n in counts.items() if n == best}
    first = min(shards, key=lambda s: s.index)
    return first.count if first.count in tied else max(tied)


def _fmt_numbers(numbers: Sequence[int], count: int) -> str:
    shown = [f"{n:05d}" for n in numbers[:20]]
    more = f" and {len(numbers) - 20} more" if len(numbers) > 20 else ""
    return f"{', '.join(shown)}{more} of {count:05d}"


def check_shard_set(shards: Iterable[ShardFacts | _Audited]) -> Iterator[Finding]:
    """Yield every finding about a shard set as a whole.

    ``shards`` are the set's members (facts, or audits with ``url``, ``header``
    and ``loadable``); each member's own problems are its audit's, not repeated here.
    """
    members = _as_facts(shards)
    if not members:
        return
    count = _expected_count(members)
    yield from _check_names(members, count)
    in_set = {s.index: s for s in members if s.count == count and 1 <= s.index <= count}
    missing = [i for i in range(1, count + 1) if i not in in_set]
    if missing:
        yield finding(
            Code.SHARD_MISSING,
            f"{len(missing)} of {count} shards missing: {_fmt_numbers(missing, count)}",
        )
    readable = [in_set[i] for i in sorted(in_set) if in_set[i].readable]
    yield from _check_split_keys(readable, count)
    if not missing and len(readable) == len(in_set):
        yield from _check_tensor_count(readable)
    yield from _check_duplicates(readable)
    yield from _check_agreement(readable)


def _as_facts(shards: Iterable[ShardFacts | _Audited]) -> list[ShardFacts]:
    out: list[ShardFacts] = []
    for s in shards:
        facts = s if isinstance(s, ShardFacts) else shard_facts(s)
        if facts is not None:
            out.append(facts)
    return sorted(out, key=lambda f: (f.index, f.count, f.url))


def _check_names(members: Sequence[ShardFacts], count: int) -> Iterator[Finding]:
    for s in members:
        if s.count != count:
            yield finding(
                Code.SHARD_COUNT_MISMATCH,
                f"{file_name(s.url)} is named as one of {s.count:05d} shards, but the set has {count:05d}",
            )
        elif not 1 <= s.index <= count:
            yield finding(
                Code.SHARD_BAD_INDEX,
                f"{file_name(s.url)} is numbered {s.index:05d}, outside 00001..{count:05d} (shards count from 1)",
            )


def _check_split_keys(readable: Sequence[ShardFacts], count: int) -> Iterator[Finding]:
    for s in readable:
        name = file_name(s.url)
        expected_no = s.index - 1
        if s.split_no is None:
            yield finding(
                Code.SHARD_BAD_INDEX,
                f"{name} has no split.no; llama.cpp needs it to be {expected_no} (the name's {s.index:05d} minus 1)",
            )
        elif s.split_no_type not in (None, ValueType.UINT16.spelling):
            yield finding(
                Code.SHARD_BAD_INDEX,
                f"{name} stores split.no as {s.split_no_type}; llama.cpp reads it as uint16",
            )
        elif s.split_no != expected_no:
            yield finding(
                Code.SHARD_BAD_INDEX,
                f"{name} has split.no {s.split_no}, but its name numbers it {s.index:05d} (split.no {expected_no})",
            )
        if s.split_count is None:
            if s.index == 1 and count > 1:
                yield finding(
                    Code.SHARD_COUNT_MISMATCH,
                    f"{name} has no split.count; llama.cpp would load it as a whole model "
                    f"and miss the other {count - 1} shards",
                )
        elif s.split_count != count:
            yield finding(
                Code.SHARD_COUNT_MISMATCH,
                f"{name} has split.count {s.split_count}, but the file names say {count}",
            )


def _check_tensor_count(readable: Sequence[ShardFacts]) -> Iterator[Finding]:
    declared = {s.split_tensors_count for s in readable if s.split_tensors_count is not None}
    found = sum(s.n_tensors or 0 for s in readable)
    if len(declared) > 1:
        values = ", ".join(
            f"{file_name(s.url)}={s.split_tensors_count}" for s in readable if s.split_tensors_count is not None
        )
        yield finding(Code.SHARD_TENSOR_COUNT_MISMATCH, f"the shards disagree on split.tensors.count: {values}")
        return
    if not declared:
        yield finding(
            Code.SHARD_TENSOR_COUNT_MISMATCH,
            f"no shard has split.tensors.count; the {len(readable)} shards hold {found} tensors",
        )
        return
    expected = declared.pop()
    if expected != found:
        yield finding(
            Code.SHARD_TENSOR_COUNT_MISMATCH,
            f"split.tensors.count is {expected}, but the {len(readable)} shards hold {found} tensors",
        )


def _check_duplicates(readable: Sequence[ShardFacts]) -> Iterator[Finding]:
    first_seen: dict[str, str] = {}
    reported = 0
    extra = 0
    for s in readable:
        for name in dict.fromkeys(s.tensor_names):  # a name twice in one file is the file's own finding
            where = first_seen.get(name)
            if where is None:
                first_seen[name] = s.url
                continue
            if reported < MAX_DUPLICATE_FINDINGS:
                reported += 1
                yield finding(
                    Code.SHARD_DUPLICATE_TENSOR,
                    f"tensor {name!r} is in both {file_name(where)} and {file_name(s.url)}",
                    tensor=name,
                )
            else:
                extra += 1
    if extra:
        yield finding(Code.SHARD_DUPLICATE_TENSOR, f"{extra} more tensor names are duplicated across shards")


def _check_agreement(readable: Sequence[ShardFacts]) -> Iterator[Finding]:
    facts: list[tuple[str, dict[str, str]]] = []
    for s in readable:
        values = {"version": str(s.version), "byte order": str(s.byte_order)}
        values.update(dict(s.declared))
        facts.append((s.url, values))
    keys = ["version", "byte order", *AGREEING_KEYS]
    for key in keys:
        seen: dict[str, list[str]] = {}
        for url, values in facts:
            if key in values:
                seen.setdefault(values[key], []).append(file_name(url))
        if len(seen) > 1:
            parts = "; ".join(f"{value} in {', '.join(names[:3])}" for value, names in seen.items())
            yield finding(Code.SHARD_INCONSISTENT, f"the shards disagree on {key}: {parts}")


@dataclass(frozen=True, slots=True)
class ShardSetVerdict:
    """A shard set judged as a whole."""

    model_id: str
    count: int
    """How many shards the set should have."""
    present: tuple[int, ...]
    """The numbers (1-based) of the shards found under the set's own name pattern."""
    missing: tuple[int, ...]
    findings: tuple[Finding, ...]
    loadable: bool | None
    """True only when every shard is loadable, the set is complete and no set finding is refused."""

    @property
    def complete(self) -> bool:
        return not self.missing


def judge_shard_set(model_id: str, shards: Iterable[ShardFacts | _Audited]) -> ShardSetVerdict:
    """Check a shard set and say whether llama.cpp would load it."""
    members = _as_facts(shards)
    if not members:
        return ShardSetVerdict(model_id, 0, (), (), (), None)
    findings = tuple(check_shard_set(members))
    count = _expected_count(members)
    present = tuple(sorted({s.index for s in members if s.count == count and 1 <= s.index <= count}))
    missing = tuple(i for i in range(1, count + 1) if i not in present)
    verdict: bool | None = True
    for value in [s.loadable for s in members] + [_loads(f) for f in findings]:
        if value is False:
            verdict = False
            break
        if value is None:
            verdict = None
    if missing:
        verdict = False
    return ShardSetVerdict(model_id, count, present, missing, findings, verdict)


def _loads(f: Finding) -> bool | None:
    """What one set finding says about loading: False when llama.cpp refuses, None when unknown."""
    refused = CODES[f.code].refused
    return None if refused is None else not refused
