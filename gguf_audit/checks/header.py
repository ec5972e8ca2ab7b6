"""The one composer of the header checks: structure, then semantics, in the order a file's audit reports them.

:func:`check_header` is what :func:`gguf_audit.audit.audit_file` calls on a decoded
header: the structural checks (:mod:`~gguf_audit.checks.structure`), then the
chat-template audit the caller brings (it renders in a child process, so it is
not part of this layer), then the semantic checks. :func:`check_semantics` alone is what a
header says about its model, against what llama.cpp expects of it:

- ``general.*`` strings free of control and invisible characters (every file);
- for a multimodal projector (mmproj, ``clip``), clip.cpp's header checks
  (:mod:`~gguf_audit.checks.clip`); a language model holding encoder tensors is named;
- for a language model (not an adapter, imatrix, projector or control vector),
  and not a shard after the first (llama.cpp reads no metadata from those):
  architecture, tokenizer and key-type keys, the required hyperparameters,
  the tensors (for a known architecture, not vocab-only), the tokenizer, the
  tokens the rendered templates end turns with, and the declared file type.

Cross-shard checks are in :mod:`gguf_audit.checks.shards`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TypeAlias

from gguf_audit.checks.clip import check_clip, check_packed_multimodal, is_projector
from gguf_audit.checks.facts import header_facts
from gguf_audit.checks.filetype import check_file_type
from gguf_audit.checks.metadata import check_architecture, check_key_types, check_required_keys
from gguf_audit.checks.structure import check_structure
from gguf_audit.checks.tensors import check_tensors
from gguf_audit.checks.text import check_control_characters
from gguf_audit.checks.tokenizer import check_template_tokens, check_tokenizer, check_tokenizer_keys
from gguf_audit.findings import Finding
from gguf_audit.format.model import Header

__all__ = ["TemplateStep", "check_header", "check_semantics"]

TemplateStep: TypeAlias = Callable[[], tuple[Iterable[Finding], Mapping[str, str] | None]]
"""The caller's chat-template audit: its findings, and each template's render of the
standard conversation (None when nothing was rendered)."""


def check_header(
    header: Header,
    *,
    file_size: int | None,
    url: str | None = None,
    semantics: bool = True,
    templates: TemplateStep | None = None,
) -> Iterator[Finding]:
    """Yield every finding of ``header`` in a file of ``file_size`` bytes.

    The structural findings first; then ``templates`` is run (the chat-template
    audit renders in a child process, so the caller brings it) and its findings
    follow; then, unless ``semantics`` is false, the semantic ones, with its renders
    (see :func:`check_semantics` for ``url`` and ``template_renders``).
    """
    yield from check_structure(header, file_size)
    renders: Mapping[str, str] | None = None
    if templates is not None:
        template_findings, renders = templates()
        yield from template_findings
    if semantics:
        yield from check_semantics(header, url=url, template_renders=renders)


def check_semantics(
    header: Header,
    *,
    url: str | None = None,
    template_renders: Mapping[str, str] | None = None,
) -> Iterator[Finding]:
    """Yield the semantic findings of ``header``.

    ``url`` gives the file name (its quantization label, and whether it is a shard);
    ``template_renders`` maps each chat template's key to its render of the standard
    conversation (from :func:`gguf_audit.templates.audit.audit_templates`); the
    template-based tokenizer checks are skipped without it.
    """
    facts = header_facts(header, url)
    yield from check_control_characters(header)
    if is_projector(header):
        yield from check_clip(header)
        return
    if facts.model:
        yield from check_packed_multimodal(header)
    if facts.continuation or not facts.model:
        return
    yield from check_architecture(facts)
    yield from check_tokenizer_keys(facts)
    yield from check_key_types(facts)
    yield from check_required_keys(facts)
    if facts.spec is not None and not facts.vocab_only:
        yield from check_tensors(facts)
    yield from check_tokenizer(facts)
    if template_renders:
        yield from check_template_tokens(facts, template_renders)
    yield from check_file_type(facts, url)
