"""Lineage: which files of a collection are versions of one model, which of them is full precision, what to compare.

A *family* is the files made from one set of weights: the same architecture
and the same set of (tensor name, shape), refined by the base model
(``general.base_model.0.*``) or, without one, ``general.name`` when the
files declare them. The shards of one model count as one member: a model's
tensor set is the union of its shards'.

Workers see one file at a time, so each file's tensor set is summarised as
an *additive* digest (:func:`tensor_set_digest`): the sum, modulo 2**128, of
a hash of each distinct (name, shape). The sum over a model's shards is the
digest of the model's whole tensor set, whichever way it was split, so a
sharded quantization and a single full-precision file of the same weights
land in one family. :func:`family_key` digests the architecture, the
refinement and that sum.

A model is *full precision* when every weight matrix (a tensor of two or
more dimensions) of every file is F32, F16, BF16 or F64; *quantized* when one
is of another type; neither (left out of families) when it has no weight
matrix or no readable header.

:func:`families` groups models, :func:`judge_family` gives a family's
``lineage.no_full_precision`` finding and its compare pairs (each quantized
file against the family's best full-precision single-file model).

Pure: values in, values out.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gguf_audit.codes import Code
from gguf_audit.findings import Finding, finding
from gguf_audit.format.model import Header

__all__ = [
    "FULL_PRECISION_TYPES",
    "Family",
    "FamilyVerdict",
    "ModelLineage",
    "Pair",
    "carried_lineage",
    "combine_digests",
    "families",
    "family_key",
    "is_full_precision",
    "judge_family",
    "model_lineage",
    "no_full_precision",
    "reference_rank",
    "tensor_set_digest",
]

FULL_PRECISION_TYPES: Final = frozenset({"F32", "F16", "BF16", "F64"})
"""Types a reference may hold: its values are the weights themselves, not a quantization of them."""

_MOD: Final = 1 << 128
_REFERENCE_ORDER: Final = {"F32": 0, "F64": 1, "BF16": 2, "F16": 3}
"""Which full-precision model a family compares against first: the most precise."""


def reference_rank(file_type_name: str | None) -> int:
    """How early a full-precision model of this file type is chosen as its family's reference (lowest first)."""
    return _REFERENCE_ORDER.get(file_type_name or "", 9)


def _tensor_hash(name: str, shape: Sequence[int]) -> int:
    text = f"{name}\x00{'x'.join(map(str, shape))}".encode("utf-8", "surrogatepass")
    return int.from_bytes(hashlib.sha256(text).digest()[:16], "little")


def tensor_set_digest(header: Header) -> str | None:
    """The additive digest of the header's distinct (tensor name, shape) pairs (32 hex digits); None without tensors."""
    seen = {(t.name, t.shape) for t in header.tensors}
    if not seen:
        return None
    return f"{sum(_tensor_hash(n, s) for n, s in seen) % _MOD:032x}"


def combine_digests(digests: Iterable[str]) -> str:
    """The digest of the union of disjoint tensor sets (a model's shards)."""
    return f"{sum(int(d, 16) for d in digests) % _MOD:032x}"


def is_full_precision(header: Header) -> bool | None:
    """True when every weight matrix (two or more dimensions) is F32/F16/BF16/F64, False when one is
    of another type, None when the file has no weight matrix."""
    matrices = [t for t in header.tensors if len(t.shape) >= 2 and t.n_elements > 0]
    if not matrices:
        return None
    return all(t.type_name in FULL_PRECISION_TYPES for t in matrices)


def family_key(architecture: str | None, refinement: str | None, tensors: str) -> str:
    """The family of a model: architecture, base model or name, and the digest of its whole tensor set."""
    text = "\x1f".join([architecture or "", refinement or "", tensors])
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class ModelLineage:
    """What lineage knows of one model (from its files' facts)."""

    model_id: str
    urls: tuple[str, ...]
    architecture: str | None
    refinement: str | None
    """The base model (``repo_url``, else ``organization/name``) or, without one, ``general.name``."""
    tensors: str | None
    """The combined tensor-set digest; None when a file's is unknown."""
    full_precision: bool | None
    file_type_name: str | None
    directory: str
    """Where its files live (the parent of the first URL), for safetensors beside it."""
    stored_key: str | None = None
    """The family key an earlier night computed, for a model carried without its files' facts."""

    @property
    def key(self) -> str | None:
        if self.stored_key is not None:
            return self.stored_key
        if self.tensors is None or self.full_precision is None:
            return None
        return family_key(self.architecture, self.refinement, self.tensors)


def carried_lineage(model_id: str, urls: Sequence[str], row: Mapping[str, Any]) -> ModelLineage:
    """A model whose files did not change, from its stored ``models`` row (``family_key``,
    ``full_precision``, ``architecture``, ``file_type_name``): the driver keeps no facts rows for it."""
    first = str(urls[0]) if urls else model_id
    return ModelLineage(
        model_id=model_id,
        urls=tuple(str(u) for u in urls),
        architecture=row.get("architecture"),
        refinement=None,
        tensors=None,
        full_precision=row.get("full_precision"),
        file_type_name=row.get("file_type_name"),
        directory=first.rsplit("/", 1)[0] if "/" in first else "",
        stored_key=row.get("family_key") if row.get("full_precision") is not None else None,
    )


def _refinement(row: Mapping[str, Any]) -> str | None:
    repo = row.get("base_model_repo_url")
    if repo:
        return f"base:{repo}"
    name = row.get("base_model_name")
    if name:
        return f"base:{row.get('base_model_organization') or ''}/{name}"
    return f"name:{row['name']}" if row.get("name") else None


def model_lineage(model_id: str, rows: Sequence[Mapping[str, Any]]) -> ModelLineage:
    """A model's lineage from its files' fact rows (``url``, ``architecture``, ``name``, ``file_type_name``,
    ``tensor_set_digest``, ``full_precision`` and the ``base_model_*`` columns)."""
    members = sorted(rows, key=lambda r: (r.get("shard_index") or 0, str(r["url"])))
    first = next((r for r in members if r.get("tensor_set_digest")), members[0] if members else {})
    digests = [r.get("tensor_set_digest") for r in members]
    flags = [r.get("full_precision") for r in members]
    known = [f for f in flags if f is not None]
    unknown = not members or any(d is None for d in digests) or not known
    full = None if unknown else all(known)
    url = str(first.get("url") or model_id)
    return ModelLineage(
        model_id=model_id,
        urls=tuple(str(r["url"]) for r in members),
        architecture=first.get("architecture"),
        refinement=_refinement(first),
        tensors=combine_digests(d for d in digests if d is not None) if full is not None else None,
        full_precision=full,
        file_type_name=first.get("file_type_name"),
        directory=url.rsplit("/", 1)[0] if "/" in url else "",
    )


@dataclass(frozen=True, slots=True)
class Family:
    """Models that are versions of one set of weights."""

    key: str
    models: tuple[ModelLineage, ...]

    @property
    def full(self) -> tuple[ModelLineage, ...]:
        return tuple(m for m in self.models if m.full_precision)

    @property
    def quantized(self) -> tuple[ModelLineage, ...]:
        return tuple(m for m in self.models if m.full_precision is False)

    @property
    def anchor(self) -> str:
        """The model the family's own findings are filed under: its first quantized model (or first model)."""
        return (self.quantized or self.models)[0].model_id

    def reference(self) -> ModelLineage | None:
        """The full-precision model quantized members are compared against: a single file, the most precise."""
        singles = [m for m in self.full if len(m.urls) == 1]
        return min(singles, key=lambda m: (reference_rank(m.file_type_name), m.model_id), default=None)


def families(models: Iterable[ModelLineage]) -> list[Family]:
    """The families of ``models`` (models without a key are left out), each with its models sorted by id."""
    groups: dict[str, list[ModelLineage]] = {}
    for m in models:
        key = m.key
        if key is not None:
            groups.setdefault(key, []).append(m)
    return [Family(k, tuple(sorted(v, key=lambda m: m.model_id))) for k, v in sorted(groups.items())]


@dataclass(frozen=True, slots=True)
class Pair:
    """A quantized file and the full-precision file it is compared against."""

    quant_url: str
    reference_url: str
    model_id: str
    """The quantized file's model."""
    family: str


@dataclass(frozen=True, slots=True)
class FamilyVerdict:
    """What lineage says of one family."""

    family: Family
    source: str | None
    """``gguf`` (a full-precision GGUF in the collection), ``safetensors`` (a safetensors file beside a
    member) or None."""
    findings: tuple[Finding, ...]
    """Filed under :attr:`Family.anchor`."""
    pairs: tuple[Pair, ...]


def no_full_precision(
    n_quantized: int, file_type_names: Iterable[str | None], architecture: str | None, first_url: str
) -> Finding:
    """The ``lineage.no_full_precision`` finding of a family of ``n_quantized`` quantized models, of these
    file types, whose first quantized model's architecture and first file are given."""
    names = ", ".join(sorted({n or "?" for n in file_type_names}))
    arch = architecture or "unknown architecture"
    return finding(
        Code.LINEAGE_NO_FULL_PRECISION,
        f"{n_quantized} quantized model(s) ({names}) of one {arch} family, no F32/F16/BF16 GGUF "
        f"or safetensors source in the collection: {first_url}",
    )


def judge_family(family: Family, safetensors_dirs: Collection[str] = ()) -> FamilyVerdict:
    """``lineage.no_full_precision`` for a quantized family without a source; the compare pairs of one with.

    ``safetensors_dirs`` are the directories known to hold ``*.safetensors``
    files: a family with a member there has a source (not compared: safetensors
    names its tensors otherwise).
    """
    quantized = family.quantized
    reference = family.reference()
    beside = any(m.directory in safetensors_dirs for m in family.models)
    source = "gguf" if family.full else ("safetensors" if beside else None)
    findings: list[Finding] = []
    if quantized and source is None:
        names = {m.file_type_name for m in quantized}
        findings.append(no_full_precision(len(quantized), names, quantized[0].architecture, quantized[0].urls[0]))
    pairs: list[Pair] = []
    if reference is not None:
        ref_url = reference.urls[0]
        for m in quantized:
            pairs.extend(Pair(url, ref_url, m.model_id, family.key) for url in m.urls)
    return FamilyVerdict(family, source, tuple(findings), tuple(pairs))
