"""Where an architecture's ``load_arch_hparams`` stops on a file's key values, as the pinned llama.cpp wrote it.

The stops are generated (:mod:`gguf_audit.llama.gen_stops`, shipped in ``<build>-tensors.json``
under ``hparams_stops``) and run here in their order, each a small program for
:func:`~gguf_audit.llama.loader_sim.simulate`. A field the programs read is read as
``GGUFMeta`` reads it: its key of exactly the field's type, else the field's initial
value when the key is absent; anything else (a wrong type, a computed field, a stop the
generator could not translate) ends the run with no answer, since llama.cpp may have
stopped there first.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from gguf_audit.format.model import Header, ValueType
from gguf_audit.llama.hparams_env import DERIVED, HeaderEnv
from gguf_audit.llama.loader_sim import Unmodelled, simulate
from gguf_audit.llama.tables import tensor_programs

__all__ = ["FLOAT", "PRESENT", "ArchStop", "first_arch_stop"]

FLOAT: Final = "float:"
"""A float literal in a stop's program is the name ``float:<value>``, answered here: the tensor programs'
runner computes on integers and knows no float literal."""

PRESENT: Final = "present:"
"""``present:<key template>:<type>``: 1 when the file has the key, 0 when it has not (an optional read's
result, ``const bool found = ml.get_key(KEY, hparams.x, false)``); of another type, the read throws first."""

_VALUE_TYPES: Final = {
    "uint32": ValueType.UINT32,
    "int32": ValueType.INT32,
    "float32": ValueType.FLOAT32,
    "bool": ValueType.BOOL,
}


@dataclass(frozen=True, slots=True)
class ArchStop:
    """One stop reached: a ``throw`` (llama.cpp refuses the file) or a failed assert (it aborts)."""

    throws: bool
    said: str
    """The throw's message, or the assert as written (``GGML_ASSERT(hparams.x > 0) failed``)."""
    after: tuple[str, ...]
    """The keys (``{arch}`` templates) ``load_arch_hparams`` requires before reaching it."""


class _TypedEnv:
    """``env``, with the fields in ``types`` read from their keys by type (floats and bools too)."""

    def __init__(self, env: HeaderEnv, types: Mapping[str, Sequence[Any]]) -> None:
        self.env = env
        self.types = types

    def __call__(self, name: str, args: Sequence[int]) -> Any:
        if name.startswith(FLOAT):
            return float(name.removeprefix(FLOAT))
        if name.startswith(PRESENT):
            template, type_name = name.removeprefix(PRESENT).rsplit(":", 1)
            kv = self.env.h.metadata.get(self.env.key(template))
            if kv is not None and kv.type is not _VALUE_TYPES[type_name]:
                raise Unmodelled(f"{kv.key} is not {type_name}")
            return int(kv is not None)
        field = name.removeprefix("hparams.")
        if field == name or field not in self.types or self.env.fields.get(field, DERIVED).startswith(DERIVED):
            return self.env(name, args)
        type_name, default = self.types[field]
        kv = self.env.h.metadata.get(self.env.key(self.env.fields[field]))
        if kv is None:
            if default is None:
                raise Unmodelled(f"hparams.{field} has no initial value")
            return default
        if kv.type is not _VALUE_TYPES[type_name] or isinstance(kv.value, str | bytes):
            raise Unmodelled(f"{kv.key} is not {type_name}")
        return kv.value


def first_arch_stop(
    header: Header, arch: str, reached: Callable[[Sequence[str], Sequence[str]], bool]
) -> ArchStop | None:
    """The first stop of ``arch``'s ``load_arch_hparams`` that ``header``'s keys reach; None when none is,
    or the answer is not known. ``reached(after, optional)`` says whether the loader reads the keys
    ``after`` (templates, required) and ``optional`` (not required) without throwing: a stop after one it
    cannot read is never reached."""
    spec = tensor_programs().hparams_stops.get(arch)
    if spec is None:
        return None
    base = HeaderEnv(header, arch, spec["fields"], spec["computed"], tensor_programs().defaults)
    env = _TypedEnv(base, spec["types"])
    for stop in spec["stops"]:
        if "program" not in stop:
            return None
        after = tuple(stop["after"])
        if not reached(after, tuple(stop.get("after_optional", ()))):
            return None  # llama.cpp throws on that key first
        try:
            said = simulate(stop["program"], {}, env, {}).stopped
        except (Unmodelled, RecursionError, TypeError):
            return None
        if said is not None:
            throws = said.startswith("throw: ")
            return ArchStop(throws, said.removeprefix("throw: "), after)
    return None
