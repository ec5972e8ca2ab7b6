"""The tensors as the pinned llama.cpp's ``load_tensors`` creates them, for the architectures it was translated for.

:func:`loader_outcome` runs the architecture's program (``<build>-tensors.json``,
:mod:`gguf_audit.llama.loader_sim`) with the file's hyperparameters, derived as
``load_hparams`` derives them (:mod:`gguf_audit.llama.hparams_env`). :func:`check_loader`
turns what it found into the refusals llama.cpp makes:

- a required tensor absent: "tensor 'X' not found" (``tensor.missing``);
- a tensor of another shape, required or not: ``check_tensor_dims``'s "tensor 'X' has
  wrong shape; expected ..., got ..." (``tensor.wrong_shape``);
- a tensor the loader does not create for this file: ``done_getting_tensors``'s "wrong
  number of tensors; expected N, got M" (``tensor.unexpected``).

Where the loader stops on its own (a ``throw``: ``hparams.loader_throws``; a failed
assert: ``hparams.loader_asserts``) before any tensor is missing, that stop is the
finding, and no tensor after it is judged. Nothing is judged when the architecture is
unmodelled, a value the program needs cannot be derived (a key of the wrong type, a
per-layer array of the wrong length), or the file is a shard or vocabulary-only.
Problems other checks report are left to them: a block past the block count, a name
no model of the architecture has, a vocabulary row count.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from gguf_audit.bounded import quote
from gguf_audit.checks.arch import block_index, is_known_tensor_name
from gguf_audit.checks.facts import HeaderFacts
from gguf_audit.codes import Code
from gguf_audit.findings import Finding, finding
from gguf_audit.llama import llama_tables, tensor_programs
from gguf_audit.llama.hparams_env import HeaderEnv
from gguf_audit.llama.loader_sim import Outcome, Unmodelled, simulate

__all__ = ["LoaderView", "check_loader", "loader_outcome"]

_MAX_NAMED = 10


@dataclass(frozen=True, slots=True)
class LoaderView:
    """What the translated loader made of one file."""

    outcome: Outcome
    n_layer: int
    """``hparams.n_layer()``: the blocks the loader creates (the MTP ones aside)."""


def loader_outcome(f: HeaderFacts) -> LoaderView | None:
    """The loader's outcome on ``f``'s tensors; None when it is not to be judged (see the module)."""
    programs = tensor_programs()
    spec = programs.architectures.get(f.arch or "")
    if spec is None or f.arch is None or f.shard or f.vocab_only or f.continuation:
        return None
    if f.n_layer is None or not 0 < f.n_layer <= llama_tables().max_layers:
        return None
    env = HeaderEnv(f.header, f.arch, spec["fields"], spec["computed"], programs.defaults)
    present = {t.name: tuple(t.shape) for t in f.header.tensors}
    if len(present) != len(f.header.tensors):
        return None  # duplicate names: tensor.duplicate_name refuses first
    try:
        n_layer = env("n_layer", ())
        outcome = simulate(spec["program"], programs.helpers, env, present)
    except (Unmodelled, RecursionError):
        return None
    return LoaderView(outcome, n_layer)


def check_loader(f: HeaderFacts, view: LoaderView, *, empty_blocks_reported: bool) -> Iterator[Finding]:
    """Missing, misshapen and uncreated tensors, as ``view`` found them in ``f``; a block with no tensor at
    all is left out of the missing ones when ``empty_blocks_reported`` (meta.block_count_mismatch names it)."""
    arch = f.arch or ""
    names = [t.name for t in f.header.tensors]
    blocks = {b for b in (block_index(n) for n in names) if b is not None}
    yield from _missing(arch, view.outcome.missing, blocks if empty_blocks_reported else None)
    yield from _wrong_shapes(f, view.outcome.wrong_shape)
    if view.outcome.stopped is None:
        yield from _uncreated(f, view, names)
    elif not (view.outcome.missing or view.outcome.wrong_shape):  # no tensor stopped the loader before
        yield _stop(arch, view.outcome.stopped)


def _stop(arch: str, said: str) -> Finding:
    """The loader's own ``throw`` (refuses) or failed assert (aborts), as the translation kept its words."""
    if said.startswith("throw: "):
        message = said.removeprefix("throw: ").replace("{arch}", arch)
        return finding(
            Code.HPARAMS_LOADER_THROWS,
            f"llama.cpp's {quote(arch)} loader throws for this file's hyperparameters: {quote(message)}",
        )
    return finding(
        Code.HPARAMS_LOADER_ASSERTS,
        f"llama.cpp's {quote(arch)} loader asserts on this file's hyperparameters and aborts: {quote(said)}",
    )


def _missing(arch: str, missing: Sequence[str], blocks: set[int] | None) -> Iterator[Finding]:
    groups: dict[str, list[str]] = {}
    for name in missing:
        b = block_index(name)
        if b is not None and blocks is not None and b not in blocks:
            continue  # a block with no tensor at all: meta.block_count_mismatch says so
        kind = name if b is None else name[len(f"blk.{b}.") :]
        groups.setdefault(kind, []).append(name)
    for members in groups.values():
        first = members[0]
        rest = [str(block_index(n)) for n in members[1:]]
        shown = ", ".join(rest[:8]) + (f" and {len(rest) - 8} more" if len(rest) > 8 else "")
        more = f" (and in blocks {shown})" if rest else ""
        yield finding(
            Code.TENSOR_MISSING,
            f"tensor {quote(first)} is missing{more}; llama.cpp's {quote(arch)} loader requires it and stops on "
            "'not found'",
            tensor=first,
        )


def _wrong_shapes(f: HeaderFacts, wrong: Sequence[tuple[str, tuple[int, ...], str]]) -> Iterator[Finding]:
    by_name = {t.name: t for t in f.header.tensors}
    groups: dict[tuple[str, tuple[int, ...], tuple[int, ...]], list[str]] = {}
    reasons: dict[str, str] = {}
    for name, expected, why in wrong:
        reasons[name] = why
        t = by_name[name]
        if _vocab_rows_only(f, name, tuple(t.shape), expected):
            continue
        b = block_index(name)
        kind = name if b is None else name[len(f"blk.{b}.") :]
        groups.setdefault((kind, tuple(t.shape), expected), []).append(name)
    for (_, got, expected), members in groups.items():
        first = by_name[members[0]]
        more = f" (the same in {len(members) - 1} more blocks)" if len(members) > 1 else ""
        yield finding(
            Code.TENSOR_WRONG_SHAPE,
            f"tensor {quote(first.name)} has shape {list(got)}; llama.cpp's {quote(f.arch)} loader expects "
            f"{list(expected)} ({reasons[first.name]}){more}",
            tensor=first.name,
            offset=first.info_offset,
        )


def _vocab_rows_only(f: HeaderFacts, name: str, got: tuple[int, ...], expected: tuple[int, ...]) -> bool:
    """An embedding or output matrix whose rows differ from the token count: tokenizer.vocab_mismatch says so."""
    rows_checked = ("token_embd.weight", "output.weight") if f.spec is not None and f.spec.curated else ()
    if name not in (*rows_checked, "token_embd.weight") or f.n_tokens is None:
        return False
    return len(got) == 2 and len(expected) == 2 and got[0] == expected[0] and got[1] != f.n_tokens


def _uncreated(f: HeaderFacts, view: LoaderView, names: Sequence[str]) -> Iterator[Finding]:
    arch = f.arch or ""
    mtp = arch in llama_tables().mtp_architectures
    n_layer_all = f.n_layer or 0
    extra = []
    for name in names:
        if name in view.outcome.created or not is_known_tensor_name(arch, name):
            continue  # never created, or a name no such model has (tensor.unexpected already)
        b = block_index(name)
        if b is not None and (b >= n_layer_all or (b >= view.n_layer and not mtp)):
            continue  # meta.block_count_mismatch, hparams.nextn_blocks_not_loaded
        extra.append(name)
    if not extra:
        return
    expected, got = len(names), len(view.outcome.created)
    for name in extra[:_MAX_NAMED]:
        yield finding(
            Code.TENSOR_UNEXPECTED,
            f"tensor {quote(name)} is not one llama.cpp's {quote(arch)} loader creates for this file's "
            f"hyperparameters ('wrong number of tensors; expected {expected}, got {got}')",
            tensor=name,
        )
    if len(extra) > _MAX_NAMED:
        yield finding(
            Code.TENSOR_UNEXPECTED,
            f"{len(extra) - _MAX_NAMED} more tensors are not ones the loader creates, from {quote(extra[_MAX_NAMED])}",
            tensor=extra[_MAX_NAMED],
        )
