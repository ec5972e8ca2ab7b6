"""The header checks in the order a file's audit reports them: structure, then semantics, then the mapping.

:func:`gguf_audit.audit.audit_file` runs the steps itself, the chat-template
audit between the first two (it renders in a child process, so it is not part
of this layer): :func:`check_structural`, the templates, :func:`check_semantics`
with their renders, then :func:`check_mapping`. :func:`check_header` is the
same without the templates, for callers that have none. :func:`check_semantics`
alone is what a header says about its model, against what llama.cpp expects of it:

- ``general.*`` strings free of control and invisible characters (every file);
- for a multimodal projector (mmproj, ``clip``), clip.cpp's header checks
  (:mod:`~gguf_audit.checks.clip`); a language model holding encoder tensors is named;
- for a language model (not an adapter, imatrix, projector or control vector),
  and not a shard after the first (llama.cpp reads no metadata from those):
  architecture, tokenizer and key-type keys, the required hyperparameters and
  their invariants (``hparams``),
  the tensors (for a known architecture, not vocab-only), the tokenizer, the
  tokens the rendered templates end turns with, and the declared file type.

For a language model, the split keys come first, as the loader reads them from a file
given alone (:func:`~gguf_audit.checks.shards.check_split_file`); cross-shard checks are
in :mod:`~gguf_audit.checks.shards`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping

from gguf_audit.checks.clip import check_clip, check_packed_multimodal, is_projector
from gguf_audit.checks.facts import HeaderFacts, header_facts
from gguf_audit.checks.filetype import check_file_type
from gguf_audit.checks.hparams import check_hparams
from gguf_audit.checks.metadata import check_architecture, check_key_types, check_required_keys
from gguf_audit.checks.shards import ALONE_ONLY_CODES, check_split_file
from gguf_audit.checks.structure import check_mapped_buffer, check_structure
from gguf_audit.checks.tensors import check_tensors
from gguf_audit.checks.text import check_control_characters
from gguf_audit.checks.tokenizer import check_template_tokens, check_tokenizer, check_tokenizer_keys
from gguf_audit.checks.vocab import check_vocab
from gguf_audit.codes import Code
from gguf_audit.errors import describe_exception
from gguf_audit.findings import Finding, LlamaCpp, cap_findings, finding
from gguf_audit.format.model import Header

__all__ = ["check_header", "check_mapping", "check_semantics", "check_structural", "isolated"]


def check_header(
    header: Header,
    *,
    file_size: int | None,
    url: str | None = None,
    semantics: bool = True,
    template_renders: Mapping[str, str] | None = None,
) -> Iterator[Finding]:
    """Yield every finding of ``header`` in a file of ``file_size`` bytes but the chat templates'.

    The structural findings first, then, unless ``semantics`` is false, the
    semantic ones (see :func:`check_semantics` for ``url`` and ``template_renders``),
    then the mapping's. Each step runs on its own (:func:`isolated`): one that
    fails gives ``internal.unexpected`` naming it, and the others still run.
    """
    structural = check_structural(header, file_size)
    yield from structural
    refused = any(f.refused for f in structural)
    semantic = (
        list(check_semantics(header, url=url, template_renders=template_renders, structure_refused=refused))
        if semantics
        else []
    )
    yield from semantic
    yield from check_mapping(header, [*structural, *semantic])


def check_structural(header: Header, file_size: int | None) -> list[Finding]:
    """The structural findings of ``header`` in a file of ``file_size`` bytes (on its own: :func:`isolated`)."""
    return isolated("structure", lambda: check_structure(header, file_size))


def check_mapping(header: Header, earlier: Iterable[Finding]) -> list[Finding]:
    """Mapping the weights, the loader's last step: checked only when none of the ``earlier``
    structural and semantic findings refused the file before it."""
    # A later shard refused only alone is still mapped when its set loads (ALONE_ONLY_CODES).
    if any(f.refused and f.code not in ALONE_ONLY_CODES for f in earlier):
        return []
    return isolated("mapping", lambda: check_mapped_buffer(header))


def check_semantics(
    header: Header,
    *,
    url: str | None = None,
    template_renders: Mapping[str, str] | Callable[[], Mapping[str, str] | None] | None = None,
    structure_refused: bool = False,
) -> Iterator[Finding]:
    """Yield the semantic findings of ``header``, each check on its own (:func:`isolated`).

    ``url`` gives the file name (its quantization label, and whether it is a shard);
    ``template_renders`` maps each chat template's key to its render of the standard
    conversation (from :func:`gguf_audit.templates.audit.audit_templates`), or is a
    function giving that map, called only when the checks reach the template tokens
    (the renders may still be under way in a child meanwhile); the template-based
    tokenizer checks are skipped without it. ``structure_refused`` says the structural
    checks already refuse the file: llama.cpp then stops in its loader's constructor,
    before the hyperparameters, the vocabulary and the tensors, so an abort of those
    later steps is never reached and is not reported (asked: a header whose empty key
    llama.cpp refuses, its duplicate tokens unread).
    """
    refused = structure_refused
    for found in _semantics(header, url, template_renders):
        if not (refused and found.llama_cpp is LlamaCpp.ABORTS):
            yield found
        # The split checks come first and refuse in the loader's constructor, as the structural ones do.
        refused = refused or found.code == Code.SHARD_INVALID_FILE_NAME


def _semantics(
    header: Header,
    url: str | None,
    template_renders: Mapping[str, str] | Callable[[], Mapping[str, str] | None] | None,
) -> Iterator[Finding]:
    facts: list[HeaderFacts] = []

    def gather() -> Iterable[Finding]:
        facts.append(header_facts(header, url))
        return ()

    yield from isolated("header facts", gather)
    yield from isolated("control characters", lambda: check_control_characters(header))
    if is_projector(header):
        yield from isolated("projector", lambda: check_clip(header))
        return
    if not facts:
        return
    f = facts[0]
    if f.model:
        yield from isolated("split keys", lambda: check_split_file(header, url))
        yield from isolated("packed multimodal tensors", lambda: check_packed_multimodal(header))
    if f.continuation or not f.model:
        return
    yield from _loader_steps(f)
    renders = template_renders() if callable(template_renders) else template_renders
    if renders:
        yield from isolated("template tokens", lambda: check_template_tokens(f, renders))
    yield from isolated("file type", lambda: check_file_type(f, url))


def _loader_steps(f: HeaderFacts) -> Iterator[Finding]:
    """The checks of what ``llama_model_load`` reads after the header: keys, hyperparameters, tensors and the
    vocabulary. llama.cpp loads the vocabulary before the tensors, so an assert of an architecture's
    ``load_tensors`` (``hparams.loader_asserts``) is reached only when nothing before it refused: it waits for
    the vocabulary's findings. (A required tensor missing before the assert is the loader's own refusal, and
    ``check_loader`` then reports no stop.)"""
    refused = False
    held: list[Finding] = []
    steps: list[tuple[str, Callable[[], Iterable[Finding]]]] = [
        ("architecture", lambda: check_architecture(f)),
        ("tokenizer keys", lambda: check_tokenizer_keys(f)),
        ("key types", lambda: check_key_types(f)),
        ("required keys", lambda: check_required_keys(f)),
        ("hyperparameters", lambda: check_hparams(f)),
    ]
    if f.spec is not None and not f.vocab_only:
        steps.append(("tensors", lambda: check_tensors(f)))
    steps += [("tokenizer", lambda: check_tokenizer(f)), ("vocabulary", lambda: check_vocab(f))]
    for step, run in steps:
        for found in isolated(step, run):
            if found.code == Code.HPARAMS_LOADER_ASSERTS:
                held.append(found)
                continue
            # The tensors' own refusals (after load_tensors: "wrong number of tensors") do not come first: the
            # loader orders those before its stop (checks/loader.py).
            refused = refused or (step != "tensors" and bool(found.refused))
            yield found
    if not refused:
        yield from held


def isolated(step: str, run: Callable[[], Iterable[Finding]]) -> list[Finding]:
    """The findings of one check, or its findings so far and one ``internal.unexpected`` naming it.

    A value no check foresaw (a forged type, a count past every limit) must cost
    that one check, never the findings of the others: the security findings of a
    hostile chat template stay reported when a token id beside it is ill-typed.
    """
    # Capped as it streams (cap_findings): a forged header can make one check yield a finding per entry.
    return cap_findings(_guarded(step, run))


def _guarded(step: str, run: Callable[[], Iterable[Finding]]) -> Iterator[Finding]:
    try:
        yield from run()
    except Exception as exc:  # noqa: BLE001 - one check's bug must not hide every other check's findings
        yield finding(Code.INTERNAL_UNEXPECTED, f"the {step} check failed: {describe_exception(exc)}")
