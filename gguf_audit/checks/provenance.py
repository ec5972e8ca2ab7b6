"""What a file says of its own making: who quantized it, with which importance matrix, from which source.

The key names are the writers' own: ``general.quantized_by`` and
``general.source.*`` (gguf-py's ``Keys.General``, written by
``convert_hf_to_gguf.py`` from a model card or ``--metadata``), and the four
``quantize.imatrix.*`` keys ``llama-quantize`` adds when given ``--imatrix``
(``tools/quantize/quantize.cpp``: the matrix's file name, its first dataset,
how many tensors it covers and how many chunks it was computed over). No tool
of llama.cpp b11312 records its own build in the file, so a file cannot say
which llama.cpp made it; ``quantize_keys`` keeps every ``quantize.*`` key as
it stands, for quantizers that write more than these.

A claim, not a proof: what the night proved (``compare.file_derivation``:
``derived``, ``contradicted``, ``unprovable``) is shown next to it. Pure.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from gguf_audit.bounded import ITEM_LIMIT, clip
from gguf_audit.format.model import Header, ValueType
from gguf_audit.redact import redact_value

__all__ = ["IMATRIX_PREFIX", "QUANTIZE_PREFIX", "Provenance", "provenance_of"]

QUANTIZE_PREFIX: Final = "quantize."
IMATRIX_PREFIX: Final = "quantize.imatrix."
MAX_QUANTIZE_KEYS: Final = 32
"""``quantize.*`` keys kept per file: a hostile header may hold millions."""
VALUE_SHOWN: Final = 200


@dataclass(frozen=True, slots=True)
class Provenance:
    """A file's own account of its making (each None when the key is absent or of another type)."""

    quantized_by: str | None = None
    imatrix_file: str | None = None
    imatrix_dataset: str | None = None
    imatrix_entries_count: int | None = None
    imatrix_chunks_count: int | None = None
    source_url: str | None = None
    source_repo_url: str | None = None
    source_hf_repository: str | None = None
    quantize_keys: tuple[str, ...] = ()
    """``key=value`` of every ``quantize.*`` key, in file order (values cut to 200 characters)."""
    made_with_imatrix: bool | None = None
    """Whether a ``quantize.imatrix.*`` key is there (what makes a derivation ``unprovable``); None: unknown."""

    def phrases(self, derivation: str | None = None, reference: str | None = None) -> tuple[str, ...]:
        """One short phrase per fact for a person, with the night's ``derivation`` verdict (against ``reference``)."""
        out: list[str] = []
        if self.quantized_by:
            out.append(f"quantized by {self.quantized_by}")
        if self.made_with_imatrix or self.imatrix_file or self.imatrix_dataset:
            counts = [
                f"{n} {what}"
                for n, what in ((self.imatrix_entries_count, "entries"), (self.imatrix_chunks_count, "chunks"))
                if n is not None
            ]
            said = ", ".join(
                [
                    *([f"file {self.imatrix_file}"] if self.imatrix_file else []),
                    *([f"dataset {self.imatrix_dataset}"] if self.imatrix_dataset else []),
                    *counts,
                ]
            )
            out.append(f"importance matrix: {said or 'used (no details)'}")
        source = self.source_hf_repository or self.source_repo_url or self.source_url
        if source:
            out.append(f"source: {source}")
        if derivation is not None:
            against = f" from {reference}" if reference else ""
            out.append(f"derivation{against}: {derivation}")
        return tuple(out)


def _shown(kv_value: object, vtype: ValueType) -> str:
    if vtype is ValueType.ARRAY:
        return "[array]"
    return clip(str(kv_value), VALUE_SHOWN)


def provenance_of(header: Header) -> Provenance:
    """The file's :class:`Provenance`, from its first KV of each key (as llama.cpp reads them)."""

    def string(key: str) -> str | None:
        value = header.get_str(key)
        return None if value is None else clip(redact_value(value), ITEM_LIMIT)  # a source URL may hold a password

    quantize = [kv for key, kv in header.metadata.items() if key.startswith(QUANTIZE_PREFIX)]
    keys = tuple(redact_value(f"{kv.key}={_shown(kv.value, kv.type)}") for kv in quantize[:MAX_QUANTIZE_KEYS])
    return Provenance(
        quantized_by=string("general.quantized_by"),
        imatrix_file=string("quantize.imatrix.file"),
        imatrix_dataset=string("quantize.imatrix.dataset"),
        imatrix_entries_count=header.get_int("quantize.imatrix.entries_count"),
        imatrix_chunks_count=header.get_int("quantize.imatrix.chunks_count"),
        source_url=string("general.source.url"),
        source_repo_url=string("general.source.repo_url"),
        source_hf_repository=string("general.source.huggingface.repository"),
        quantize_keys=keys,
        made_with_imatrix=any(kv.key.startswith(IMATRIX_PREFIX) for kv in header.kvs),
    )
