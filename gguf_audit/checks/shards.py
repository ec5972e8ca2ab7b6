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

:func:`check_split_file` is the same loader on one file given alone: a later shard
(``split.no`` above 0) is refused ("illegal split file idx"), and a first shard
must be named ``<prefix>-00001-of-<split.count>.gguf`` ("invalid split file name").
The first refusal is the file's alone (:data:`ALONE_ONLY_CODES`): its set loads it
through the first shard, so the set's verdict and a scan's rows of a set's members leave
it out (:func:`member_findings`).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Final, Protocol

from gguf_audit.bounded import quote
from gguf_audit.codes import Code
from gguf_audit.findings import CODES, Finding, LlamaCpp, finding, is_loadable, llama_cpp_verdict
from gguf_audit.format.model import Header, ValueType, json_scalar
from gguf_audit.format.shard_names import file_name, first_shard_name, parse_shard_name, url_path

__all__ = [
    "AGREEING_KEYS",
    "ALONE_ONLY_CODES",
    "ShardFacts",
    "ShardSetVerdict",
    "canonical_value",
    "check_shard_set",
    "check_split_file",
    "judge_shard_set",
    "member_findings",
    "member_verdict",
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

ALONE_ONLY_CODES: Final = frozenset({str(Code.SHARD_LATER_SHARD)})
"""Codes that refuse a file given alone but not its shard set: llama.cpp reads a later shard through
the first one, so a set's verdict and a file's own other checks leave them out."""

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
    @property
    def llama_cpp(self) -> LlamaCpp | None: ...
    @property
    def findings(self) -> Sequence[Finding]: ...


def member_findings(url: str, findings: Iterable[Finding]) -> list[Finding]:
    """A file's findings as a member of its shard set, as a scan's rows hold them: a file named as a
    shard loses the refusals of being given alone (:data:`ALONE_ONLY_CODES`), its set judged as a whole;
    any other file keeps them all."""
    if parse_shard_name(url) is None:
        return list(findings)
    return [f for f in findings if f.code not in ALONE_ONLY_CODES]


def member_verdict(audit: _Audited) -> tuple[bool | None, LlamaCpp | None]:
    """A file's ``loadable`` and llama.cpp verdict from its :func:`member_findings`."""
    kept = member_findings(audit.url, audit.findings)
    if len(kept) == len(audit.findings):
        return audit.loadable, audit.llama_cpp
    return is_loadable(kept), llama_cpp_verdict(kept)


def check_split_file(header: Header, url: str | None) -> Iterator[Finding]:
    """What ``llama_model_loader`` does with this file given alone when ``split.count`` is above 1.

    It reads ``split.no`` and refuses any but the first shard ("illegal split file idx"); from the first
    it builds the other shards' names, so a path that does not end with ``-00001-of-<split.count>.gguf``
    is refused ("invalid split file name"). Both keys are read as uint16 (another type is
    ``meta.wrong_type``); ``url`` gives the name (None: not checked).
    """
    count_kv = header.metadata.get(SPLIT_COUNT)
    if count_kv is None or count_kv.type is not ValueType.UINT16:
        return
    count = header.get_int(SPLIT_COUNT) or 0
    no_kv = header.metadata.get(SPLIT_NO)
    if count <= 1 or no_kv is None or no_kv.type is not ValueType.UINT16:
        return
    no = header.get_int(SPLIT_NO) or 0
    name = file_name(url) if url else None
    if no != 0:
        first = first_shard_name(url, count) if url else None
        load = f"load {quote(first)} instead" if first else "load the set's first shard (split.no 0) instead"
        yield finding(
            Code.SHARD_LATER_SHARD,
            f"split.no is {no} of split.count {count}: a later shard, which llama.cpp refuses given alone "
            f"('illegal split file idx'); it loads a split model from its first shard: {load}",
            offset=no_kv.offset,
        )
        return
    postfix = f"-00001-of-{count:05d}.gguf"
    path = url_path(url) if url else None
    if path is not None and not (path.endswith(postfix) and len(path) > len(postfix)):
        yield finding(
            Code.SHARD_INVALID_FILE_NAME,
            f"split.count is {count} but the file is named {quote(name)}, not '<name>{postfix}': llama.cpp "
            "finds the other shards by that name and refuses ('invalid split file name')",
            offset=count_kv.offset,
        )


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
    loadable = member_verdict(audit)[0]
    if header is None:
        return ShardFacts(audit.url, name.shard_index, name.shard_count, readable=False, loadable=loadable)
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
        loadable=loadable,
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
