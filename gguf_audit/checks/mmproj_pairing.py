"""Pairing multimodal projectors (mmproj) with the language models beside them in a collection.

A projector is published in the directory of its language model (``org/repo/
mmproj-F16.gguf`` beside ``org/repo/model-Q4_K_M.gguf``), and mtmd refuses a
pair whose widths disagree: the projector's output (``clip.vision.projection_dim``,
which llama.cpp's converter sets to the text model's hidden size) must be the
model's ``{arch}.embedding_length``. A projector made for another family of
models (a ``gemma3`` projector beside a ``qwen2`` model) loads, but feeds the
model embeddings it was never trained on.

Pure: facts in (see :func:`pairing_facts`, kept as ``files`` columns), findings
out, each filed under the projector's URL.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from gguf_audit.checks.clip import is_projector, projector_type
from gguf_audit.codes import Code
from gguf_audit.findings import Finding, finding
from gguf_audit.format.model import Header

__all__ = ["PROJECTOR_ARCHITECTURES", "PairingFacts", "pair_projectors", "pair_rows", "pairing_facts"]

PROJECTOR_ARCHITECTURES: Final[Mapping[str, frozenset[str]]] = {
    "gemma3": frozenset({"gemma3"}),
    "gemma3nv": frozenset({"gemma3n"}),
    "gemma4v": frozenset({"gemma4"}),
    "gemma4uv": frozenset({"gemma4"}),
    "qwen2vl_merger": frozenset({"qwen2vl"}),
    "qwen2.5vl_merger": frozenset({"qwen2vl"}),
    "qwen3vl_merger": frozenset({"qwen3vl", "qwen3vlmoe"}),
    "llama4": frozenset({"llama4"}),
    "glm4v": frozenset({"glm4", "glm4moe"}),
    "kimivl": frozenset({"deepseek2"}),
    "lfm2": frozenset({"lfm2", "lfm2moe"}),
    "cogvlm": frozenset({"cogvlm"}),
}
"""The text architectures each well-known projector type is converted with (llama.cpp's convert_hf_to_gguf);
projector types missing here (mlp, ldp, pixtral, idefics3, internvl, ...) go with many and are not judged."""


@dataclass(frozen=True, slots=True)
class PairingFacts:
    """What pairing needs of one file: its place, and its widths."""

    url: str
    architecture: str | None
    projector_type: str | None
    """The vision projector type of a projector file; None for every other file."""
    projection_dim: int | None
    embedding_length: int | None
    """``{arch}.embedding_length`` of a language model."""

    @property
    def directory(self) -> str:
        return self.url.rsplit("/", 1)[0] if "/" in self.url else ""

    @property
    def is_projector(self) -> bool:
        return self.projector_type is not None or self.architecture == "clip"


def pairing_facts(header: Header) -> dict[str, Any]:
    """The ``files`` cells pairing reads: ``projector_type``, ``projection_dim``, ``embedding_length``."""
    if is_projector(header):
        return {
            "projector_type": projector_type(header, "vision") or projector_type(header, "audio") or "",
            "projection_dim": header.get_int("clip.vision.projection_dim")
            or header.get_int("clip.audio.projection_dim"),
            "embedding_length": None,
        }
    arch = header.get_str("general.architecture")
    n_embd = header.get_int(f"{arch}.embedding_length") if arch else None
    return {"projector_type": None, "projection_dim": None, "embedding_length": n_embd}


def pair_projectors(files: Iterable[PairingFacts]) -> list[tuple[str, Finding]]:
    """``(projector url, finding)`` for each projector that disagrees with the language models of its directory.

    A directory without a language model (or without a projector) gives nothing; the widths are compared
    when both are known, the projector type with the models' architectures when it is one of
    :data:`PROJECTOR_ARCHITECTURES`.
    """
    by_dir: dict[str, list[PairingFacts]] = {}
    for f in files:
        by_dir.setdefault(f.directory, []).append(f)
    out: list[tuple[str, Finding]] = []
    for members in by_dir.values():
        models = [m for m in members if not m.is_projector and m.architecture and m.embedding_length]
        if not models:
            continue
        for proj in (m for m in members if m.is_projector):
            out.extend((proj.url, f) for f in _judge(proj, models))
    return out


_LEGACY_WIDTH: Final = frozenset({"mlp", "ldp", "ldpv2", "resampler", "adapter"})
"""Projector types of the legacy conversion scripts (llava surgery, MiniCPM-V, GLM-Edge), which wrote the
vision tower's own projection_dim (768 for CLIP ViT-L), not the text model's width: not compared."""


def pair_rows(rows: Iterable[Mapping[str, Any]]) -> list[tuple[str, Finding]]:
    """:func:`pair_projectors` over ``files`` rows (``url``, ``architecture`` and :func:`pairing_facts`' cells)."""
    return pair_projectors(
        PairingFacts(
            str(r["url"]),
            r.get("architecture"),
            r.get("projector_type"),
            r.get("projection_dim"),
            r.get("embedding_length"),
        )
        for r in rows
    )


def _judge(proj: PairingFacts, models: list[PairingFacts]) -> Iterable[Finding]:
    widths = {m.embedding_length for m in models}
    legacy = proj.projector_type in _LEGACY_WIDTH
    if proj.projection_dim and not legacy and proj.projection_dim not in widths:
        model = models[0]
        yield finding(
            Code.CLIP_EMBD_MISMATCH,
            f"projects to {proj.projection_dim} wide embeddings, but {_name(model.url)} ({model.architecture}) "
            f"has embedding_length {model.embedding_length}",
        )
    archs = PROJECTOR_ARCHITECTURES.get(proj.projector_type or "")
    if archs is not None and not any(m.architecture in archs for m in models):
        found = sorted({str(m.architecture) for m in models})
        yield finding(
            Code.CLIP_ARCH_MISMATCH,
            f"a {proj.projector_type!r} projector (made for {', '.join(sorted(archs))}) beside "
            f"{', '.join(found)} models",
        )


def _name(url: str) -> str:
    return url.rsplit("/", 1)[-1]
